package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/pykernel"
)

func TestExecuteFreshProcessPerCall(t *testing.T) {
	ta := newTestAgent(t, nil)
	tests := []struct {
		language    string
		set, read   string
		first, then string
	}{
		{"javascript", "globalThis.x = 41; console.log(x + 1)", "console.log(typeof x)", "42\n", "undefined\n"},
		{"js", "var y = 'kept?'; console.log(y)", "console.log(typeof y)", "kept?\n", "undefined\n"},
		{"bash", "X=41; echo $((X + 1))", `echo "[$X]"`, "42\n", "[]\n"},
		{"sh", "export Y=yes; echo $Y", `echo "[$Y]"`, "yes\n", "[]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.language, func(t *testing.T) {
			first := ta.execute(t, api.ExecuteRequest{Language: tt.language, Code: tt.set})
			if first.stdout != tt.first || first.err != nil {
				t.Errorf("first call: stdout %q, error %+v; want %q, no error (stderr %q)", first.stdout, first.err, tt.first, first.stderr)
			}
			if len(first.results) != 0 {
				t.Errorf("first call: results %+v, want none", first.results)
			}
			then := ta.execute(t, api.ExecuteRequest{Language: tt.language, Code: tt.read})
			if then.stdout != tt.then || then.err != nil {
				t.Errorf("second call: stdout %q, error %+v; want %q (state must not carry over)", then.stdout, then.err, tt.then)
			}
		})
	}
}

func TestExecuteErrors(t *testing.T) {
	ta := newTestAgent(t, nil)
	tests := []struct {
		name, language, code string
		wantName, wantMsg    string
		tracebackHas         string
	}{
		{"js TypeError", "javascript", "null.x", "TypeError", "Cannot read properties of null (reading 'x')", "TypeError"},
		{"js thrown Error", "javascript", "console.log('before');\nthrow new Error('boom')", "Error", "boom", "Error: boom"},
		{"js subclass", "javascript", "class ParseError extends Error {}\nthrow new ParseError('bad input')", "ParseError", "bad input", "bad input"},
		{"js named error", "javascript", "const e = new RangeError('too far'); throw e", "RangeError", "too far", "RangeError"},
		{"js thrown string", "javascript", "throw 'just a string'", "Error", "just a string", "just a string"},
		{"js syntax error", "javascript", "let x = ;", "SyntaxError", "Unexpected token ';'", "SyntaxError"},
		{"js rejected promise", "javascript", "Promise.reject(new TypeError('async bad'))", "TypeError", "async bad", "async bad"},
		{"js top-level await", "javascript", "await new Promise(r => setTimeout(r, 10)); throw new URIError('late')", "URIError", "late", "late"},
		{"js exit code", "javascript", "process.exit(2)", ErrNameExit, "exit status 2", ""},
		{"bash exit code", "bash", "echo oops >&2; exit 3", ErrNameExit, "exit status 3", "oops"},
		{"bash last command fails", "bash", "ls /does/not/exist", ErrNameExit, "exit status 2", "No such file"},
		{"bash killed", "bash", "kill -9 $$", ErrNameExit, "killed by signal 9 (killed)", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex := ta.execute(t, api.ExecuteRequest{Language: tt.language, Code: tt.code})
			if ex.err == nil {
				t.Fatalf("no error event; stdout %q stderr %q", ex.stdout, ex.stderr)
			}
			if ex.err.Name != tt.wantName || ex.err.Message != tt.wantMsg {
				t.Errorf("error = %q: %q, want %q: %q", ex.err.Name, ex.err.Message, tt.wantName, tt.wantMsg)
			}
			if !strings.Contains(ex.err.Traceback, tt.tracebackHas) {
				t.Errorf("traceback %q does not contain %q", ex.err.Traceback, tt.tracebackHas)
			}
			if last := ex.events[len(ex.events)-2]; last.Type != api.EventError {
				t.Errorf("event before end is %q, want error", last.Type)
			}
		})
	}
	// The JS hook's plumbing stays invisible to user code.
	ex := ta.execute(t, api.ExecuteRequest{Language: "js", Code: "console.log(Object.keys(process.env).filter(k => k.startsWith('LIZARD')).join(','))"})
	if ex.stdout != "\n" {
		t.Errorf("LIZARD* variables visible to code: %q", ex.stdout)
	}
}

func TestExecuteTimeout(t *testing.T) {
	ta := newTestAgent(t, nil)
	tests := []struct{ language, code string }{
		{"bash", "echo started; sleep 30"},
		{"bash", "sleep 30 & sleep 30 & wait"}, // children in the group die too
		{"javascript", "console.log('started'); while (true) {}"},
	}
	for _, tt := range tests {
		t.Run(tt.language, func(t *testing.T) {
			start := time.Now()
			ex := ta.execute(t, api.ExecuteRequest{Language: tt.language, Code: tt.code, TimeoutMs: i64(500)})
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("timed-out call took %v", took)
			}
			if ex.err == nil || ex.err.Name != ErrNameTimeout {
				t.Fatalf("error = %+v, want %s", ex.err, ErrNameTimeout)
			}
			if want := "execution timed out after 500ms"; ex.err.Message != want {
				t.Errorf("message = %q, want %q", ex.err.Message, want)
			}
			next := ta.execute(t, api.ExecuteRequest{Language: tt.language, Code: map[string]string{"bash": "echo ok", "javascript": "console.log('ok')"}[tt.language]})
			if next.stdout != "ok\n" || next.err != nil {
				t.Errorf("call after timeout: stdout %q error %+v, want ok", next.stdout, next.err)
			}
		})
	}
}

func TestExecuteEnvironment(t *testing.T) {
	ta := newTestAgent(t, nil)
	code := `echo "$SANDBOX_VAR|$CALL_VAR|$HOME|$LANG|${PATH%%:*}|${LIZARD_AGENT_SECRET-unset}"`
	want := fmt.Sprintf("from-sandbox|per-call|%s|C.UTF-8|/opt/lizard/venv/bin|unset\n", ta.home)
	ex := ta.execute(t, api.ExecuteRequest{Language: "bash", Code: code, Envs: map[string]string{"CALL_VAR": "per-call"}})
	if ex.stdout != want {
		t.Errorf("with envs: stdout %q, want %q", ex.stdout, want)
	}
	want = strings.Replace(want, "|per-call|", "||", 1)
	ex = ta.execute(t, api.ExecuteRequest{Language: "bash", Code: code})
	if ex.stdout != want {
		t.Errorf("next call: stdout %q, want %q (per-call envs must not leak)", ex.stdout, want)
	}
	ex = ta.execute(t, api.ExecuteRequest{Language: "js", Code: "console.log(process.env.SANDBOX_VAR, process.env.CALL_VAR, process.cwd())", Envs: map[string]string{"CALL_VAR": "js"}})
	if want := "from-sandbox js " + ta.home + "\n"; ex.stdout != want {
		t.Errorf("js: stdout %q, want %q", ex.stdout, want)
	}
}

func TestExecuteLongBashScript(t *testing.T) {
	ta := newTestAgent(t, nil)
	// Longer than one argv string may be: goes through a file.
	code := "# " + strings.Repeat("x", 200<<10) + "\necho long script ran"
	ex := ta.execute(t, api.ExecuteRequest{Language: "bash", Code: code})
	if ex.stdout != "long script ran\n" || ex.err != nil {
		t.Errorf("stdout %q, error %+v", ex.stdout, ex.err)
	}
}

func TestExecuteInContext(t *testing.T) {
	ta := newTestAgent(t, nil)
	dir := filepath.Join(ta.home, "work")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, lang := range []string{"bash", "javascript"} {
		var c api.Context
		ta.json(t, "POST", "/contexts", api.CreateContextRequest{Language: lang, Cwd: "work"}, &c, http.StatusCreated)
		if c.Cwd != dir || c.Language != lang || !strings.HasPrefix(c.ID, "ctx_") {
			t.Errorf("created %+v, want %s context in %s", c, lang, dir)
		}
		code := map[string]string{"bash": "pwd", "javascript": "console.log(process.cwd())"}[lang]
		ex := ta.execute(t, api.ExecuteRequest{ContextID: c.ID, Code: code}) // language from the context
		if ex.stdout != dir+"\n" {
			t.Errorf("%s in context: stdout %q, want %q", lang, ex.stdout, dir+"\n")
		}
	}
}

// TestExecuteQueuesPerContext checks that calls to one context run one after
// another while calls to different contexts overlap.
func TestExecuteQueuesPerContext(t *testing.T) {
	ta := newTestAgent(t, nil)
	var other api.Context
	ta.json(t, "POST", "/contexts", api.CreateContextRequest{Language: "bash"}, &other, http.StatusCreated)
	log := filepath.Join(ta.home, "log")
	run := func(ctxID, name string) execution {
		return ta.execute(t, api.ExecuteRequest{ContextID: ctxID, Language: "bash",
			Code: fmt.Sprintf("echo start-%s >> %s; sleep 0.4; echo end-%s >> %s", name, log, name, log)})
	}
	tests := []struct {
		name   string
		second string
		want   string
	}{
		{"same context", "default-bash", "start-a end-a start-b end-b"},
		{"different contexts", other.ID, "start-a start-b end-a end-b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(log)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); run("default-bash", "a") }()
			time.Sleep(150 * time.Millisecond)
			go func() { defer wg.Done(); run(tt.second, "b") }()
			wg.Wait()
			b, _ := os.ReadFile(log)
			if got := strings.Join(strings.Fields(string(b)), " "); got != tt.want {
				t.Errorf("order %q, want %q", got, tt.want)
			}
		})
	}
}

// TestExecuteDisconnectKills checks that a client going away kills the
// running process group.
func TestExecuteDisconnectKills(t *testing.T) {
	ta := newTestAgent(t, nil)
	tests := []struct {
		name string
		path string
		body func(pidfile string) any
	}{
		{"execute", "/execute", func(p string) any {
			return api.ExecuteRequest{Language: "bash", Code: "sleep 60 & echo $! > " + p + "; echo ready; wait"}
		}},
		{"process", "/process", func(p string) any {
			return api.ProcessRequest{Cmd: "sleep 60 & echo $! > " + p + "; echo ready; wait"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pidfile := filepath.Join(t.TempDir(), "pid")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			resp := ta.send(t, ctx, "POST", tt.path, tt.body(pidfile))
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if err != nil || !strings.Contains(line, "ready") {
				t.Fatalf("first line %q, %v; want ready", line, err)
			}
			b, err := os.ReadFile(pidfile)
			if err != nil {
				t.Fatal(err)
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			cancel()
			resp.Body.Close()
			deadline := time.Now().Add(5 * time.Second)
			for processAlive(pid) {
				if time.Now().After(deadline) {
					syscall.Kill(pid, syscall.SIGKILL)
					t.Fatalf("background process %d still alive after the client went away", pid)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// processAlive reports whether pid runs (a zombie counts as gone).
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestExecutePythonWithFakeKernel(t *testing.T) {
	t.Run("events pass through", func(t *testing.T) {
		ta := newTestAgent(t, nil)
		ex := ta.execute(t, api.ExecuteRequest{Code: "print(1)"})
		if ex.stdout != "print(1)" || len(ex.results) != 1 || ex.results[0].Data != "'"+ta.home+"'" {
			t.Errorf("got stdout %q results %+v, want the fake's echo and cwd", ex.stdout, ex.results)
		}
		if end := ex.events[len(ex.events)-1]; end.ExecutionCount != 1 {
			t.Errorf("end = %+v, want executionCount 1", end)
		}
	})
	t.Run("request reaches the kernel", func(t *testing.T) {
		ta := newTestAgent(t, nil)
		k := ta.defaultKernel(t)
		var got pykernel.Request
		k.setExecute(func(ctx context.Context, req pykernel.Request, emit func(api.ExecuteEvent)) error {
			got = req
			emit(api.ExecuteEvent{Type: api.EventEnd})
			return nil
		})
		ta.execute(t, api.ExecuteRequest{Code: "x", TimeoutMs: i64(1500), Envs: map[string]string{"A": "b"}})
		if got.Code != "x" || got.Timeout != 1500*time.Millisecond || got.Envs["A"] != "b" {
			t.Errorf("kernel got %+v", got)
		}
		ta.execute(t, api.ExecuteRequest{Code: "y"})
		if got.Timeout != DefaultExecuteTimeoutMs*time.Millisecond {
			t.Errorf("default timeout = %v, want %v", got.Timeout, DefaultExecuteTimeoutMs*time.Millisecond)
		}
		if k.cfg.Cwd != ta.home || k.cfg.Python != "/opt/lizard/venv/bin/python" || getenv(k.cfg.Env, "SANDBOX_VAR") != "from-sandbox" || k.cfg.Credential != nil {
			t.Errorf("kernel config %+v", k.cfg)
		}
	})
	t.Run("huge line is split", func(t *testing.T) {
		ta := newTestAgent(t, nil)
		line := strings.Repeat("é", 300<<10) // 600 KiB, two bytes a rune
		ta.defaultKernel(t).setExecute(func(ctx context.Context, req pykernel.Request, emit func(api.ExecuteEvent)) error {
			emit(api.ExecuteEvent{Type: api.EventStdout, Text: line})
			emit(api.ExecuteEvent{Type: api.EventEnd})
			return nil
		})
		ex := ta.execute(t, api.ExecuteRequest{Code: "print(line)"})
		if ex.stdout != line {
			t.Errorf("stdout is %d bytes, want the %d-byte line intact", len(ex.stdout), len(line))
		}
		for _, ev := range ex.events {
			if len(ev.Text) > maxChunk {
				t.Errorf("event with %d bytes of text, want at most %d", len(ev.Text), maxChunk)
			}
		}
	})
	t.Run("kernel failure ends the stream", func(t *testing.T) {
		ta := newTestAgent(t, nil)
		ta.defaultKernel(t).setExecute(func(ctx context.Context, req pykernel.Request, emit func(api.ExecuteEvent)) error {
			emit(api.ExecuteEvent{Type: api.EventStdout, Text: "partial"})
			return errors.New("kernel died")
		})
		ex := ta.execute(t, api.ExecuteRequest{Code: "x"})
		if ex.err == nil || ex.err.Name != ErrNameKernel || ex.err.Message != "kernel died" {
			t.Errorf("error = %+v, want %s: kernel died", ex.err, ErrNameKernel)
		}
	})
	t.Run("kernel that cannot start", func(t *testing.T) {
		fail := true
		var mu sync.Mutex
		ks := &kernels{make: func(cfg pykernel.Config) (*fakeKernel, error) {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return nil, errors.New("no python")
			}
			return &fakeKernel{cfg: cfg}, nil
		}}
		ta := newTestAgentKernels(t, ks, nil)
		status, b := ta.do(t, "POST", "/execute", api.ExecuteRequest{Code: "1"})
		var e api.Error
		json.Unmarshal(b, &e)
		if status != http.StatusServiceUnavailable || e.Code != api.CodeUnavailable || !strings.Contains(e.Message, "no python") {
			t.Errorf("status %d body %s, want 503 unavailable mentioning the cause", status, b)
		}
		mu.Lock()
		fail = false
		mu.Unlock()
		if ex := ta.execute(t, api.ExecuteRequest{Code: "retry"}); ex.stdout != "retry" {
			t.Errorf("after the cause is gone: stdout %q, want the kernel to start on demand", ex.stdout)
		}
	})
}
