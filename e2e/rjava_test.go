package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// TestRAndJava checks the R and Java contexts under gVisor on Lizard's own
// API (internal/agent/kernels.go): state kept between calls, output, the
// last value as a result, errors as name/message/traceback, per-call envs,
// the sandbox's envs and a context's cwd, a timeout that interrupts and
// keeps the state, and a kernel that dies (KernelDiedError, then a new one).
func TestRAndJava(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_rjava")
	sb := newSandbox(t, c, api.CreateSandboxRequest{TimeoutMs: ms(600_000), Envs: map[string]string{"SANDBOX_WIDE": "everywhere"}})
	ctx := context.Background()
	in := &interpreter{t: t, c: c, id: sb.SandboxID}

	// text runs req and returns its results' text/plain (R's are IRkernel's
	// bundles, whose richest type is HTML; Java's are text) and the run.
	text := func(req api.ExecuteRequest) ([]string, *client.Execution) {
		t.Helper()
		req.Bundle = true
		var texts []string
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		run, err := c.Execute(cctx, sb.SandboxID, req, func(ev api.ExecuteEvent) {
			if ev.Type != api.EventResult || ev.Result == nil {
				return
			}
			if raw, ok := ev.Bundle["text/plain"]; ok {
				var s string
				json.Unmarshal(raw, &s)
				texts = append(texts, s)
			} else {
				texts = append(texts, ev.Result.Data)
			}
		})
		if err != nil {
			t.Fatalf("Execute(%q): %v", req.Code, err)
		}
		return texts, run
	}
	// only is the text of run's one result.
	only := func(req api.ExecuteRequest) string {
		t.Helper()
		texts, run := text(req)
		if run.Error != nil || len(texts) != 1 {
			t.Errorf("%s: results %q error %+v, want one result", req.Code, texts, run.Error)
			return ""
		}
		return texts[0]
	}

	for _, tc := range []struct {
		lang string
		// resultType is what the last value is: IRkernel shows it (display).
		resultType string
		// define sets x to 41; next reads x + 1, whose result is want.
		define, next, want  string
		print, stdout       string
		stderr, stderrWant  string
		fail                string // raises an error
		errName, errMessage string
		errTrace            string // in the traceback
		env, envWant        string // reads FOO (set per call), and after, unset
		envUnset            string
		sandboxEnv, wideOut string
		cwd, cwdWant        string
		sleep               string
		die                 string
	}{
		{
			lang: "r", resultType: api.ResultTypeDisplay, define: "x <- 41", next: "x + 1", want: "[1] 42",
			print: `print("Hello, World!")`, stdout: "[1] \"Hello, World!\"\n",
			stderr: `message("to stderr")`, stderrWant: "to stderr\n",
			fail: `stop("boom")`, errName: "ERROR", errMessage: "boom",
			env: `Sys.getenv("FOO")`, envWant: `[1] "bar"`, envUnset: `[1] ""`,
			sandboxEnv: `Sys.getenv("SANDBOX_WIDE")`, wideOut: `[1] "everywhere"`,
			cwd: "getwd()", cwdWant: `[1] "/tmp"`,
			sleep: "Sys.sleep(60)",
			die:   "tools::pskill(Sys.getpid(), 9L)",
		},
		{
			lang: "java", resultType: api.ResultTypeResult, define: "int x = 41;", next: "x + 1", want: "42",
			print: `System.out.println("Hello, World!")`, stdout: "Hello, World!\n",
			stderr: `System.err.print("to stderr")`, stderrWant: "to stderr",
			fail: "int y = 1 / 0;", errName: "ArithmeticException", errMessage: "/ by zero", errTrace: "java.lang.ArithmeticException: / by zero",
			env: `System.getProperty("FOO")`, envWant: `"bar"`, envUnset: "null",
			sandboxEnv: `System.getenv("SANDBOX_WIDE") + System.getProperty("SANDBOX_WIDE")`, wideOut: `"everywhereeverywhere"`,
			cwd: `System.getProperty("user.dir")`, cwdWant: `"/tmp"`,
			sleep: "Thread.sleep(60_000)",
			die:   "System.exit(3)",
		},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			in.t = t
			lang := func(code string) api.ExecuteRequest { return api.ExecuteRequest{Language: tc.lang, Code: code} }
			first := func(code string) string { return only(lang(code)) }
			start := time.Now()
			if run := in.run(lang(tc.define)); run.Error != nil {
				t.Fatalf("%s: error %+v", tc.define, run.Error)
			}
			t.Logf("%s: first call (the kernel's start) %v", tc.lang, time.Since(start).Round(time.Millisecond))
			start = time.Now()
			if r := one(t, in.run(lang(tc.next))); r.Type != tc.resultType {
				t.Errorf("%s: %+v, want a %s", tc.next, r, tc.resultType)
			}
			if got := first(tc.next); got != tc.want {
				t.Errorf("%s after %s: %q, want %q", tc.next, tc.define, got, tc.want)
			}
			t.Logf("%s: a call in a running kernel %v", tc.lang, time.Since(start).Round(time.Millisecond))
			if run := in.run(lang(tc.print)); run.Stdout != tc.stdout || run.Error != nil || len(run.Results) != 0 {
				t.Errorf("%s: stdout %q results %+v error %+v, want stdout %q alone", tc.print, run.Stdout, run.Results, run.Error, tc.stdout)
			}
			// IRkernel ends a message with its own line end too.
			if run := in.run(lang(tc.stderr)); !strings.HasPrefix(run.Stderr, tc.stderrWant) || strings.TrimSpace(run.Stderr) != strings.TrimSpace(tc.stderrWant) || run.Error != nil {
				t.Errorf("%s: stderr %q error %+v, want %q", tc.stderr, run.Stderr, run.Error, tc.stderrWant)
			}
			run := in.run(lang(tc.fail))
			if e := run.Error; e == nil || e.Name != tc.errName || !strings.Contains(e.Message, tc.errMessage) || !strings.Contains(e.Traceback, tc.errTrace) {
				t.Errorf("%s: error %+v, want %s with %q, traceback with %q", tc.fail, e, tc.errName, tc.errMessage, tc.errTrace)
			}

			// Envs: the call's alone, then gone; the sandbox's always.
			if got := only(api.ExecuteRequest{Language: tc.lang, Code: tc.env, Envs: map[string]string{"FOO": "bar"}}); got != tc.envWant {
				t.Errorf("%s with envs FOO=bar: %q, want %q", tc.env, got, tc.envWant)
			}
			if got := first(tc.env); got != tc.envUnset {
				t.Errorf("%s in the next call: %q, want %q", tc.env, got, tc.envUnset)
			}
			if got := first(tc.sandboxEnv); got != tc.wideOut {
				t.Errorf("%s: %q, want %q", tc.sandboxEnv, got, tc.wideOut)
			}

			// A context of its own: its cwd, its own variables.
			cctx, err := c.CreateContext(ctx, sb.SandboxID, api.CreateContextRequest{Language: tc.lang, Cwd: "/tmp"})
			if err != nil {
				t.Fatalf("CreateContext(%s, /tmp): %v", tc.lang, err)
			}
			if got := only(api.ExecuteRequest{ContextID: cctx.ID, Code: tc.cwd}); got != tc.cwdWant {
				t.Errorf("%s in a context at /tmp: %q, want %q", tc.cwd, got, tc.cwdWant)
			}
			if run := in.run(api.ExecuteRequest{ContextID: cctx.ID, Code: tc.next}); run.Error == nil {
				t.Errorf("%s in a new context: %+v, want an error (x is the default context's)", tc.next, run.Results)
			}
			if err := c.DeleteContext(ctx, sb.SandboxID, cctx.ID); err != nil {
				t.Errorf("DeleteContext: %v", err)
			}
			if tc.lang == "r" {
				// The deleted context's kernel took its directory (the
				// connection file, R's session files) with it; the default
				// context's kernel keeps its own.
				run := in.run(api.ExecuteRequest{Language: "bash", Code: "ls -d /tmp/lizard-r-* | wc -l"})
				if got := strings.TrimSpace(run.Stdout); got != "1" {
					t.Errorf("R kernel directories in /tmp after the context's deletion: %q, want 1 (the default context's)", got)
				}
			}

			// A timeout interrupts the call; the variables stay.
			start = time.Now()
			run = in.run(api.ExecuteRequest{Language: tc.lang, Code: tc.sleep, TimeoutMs: ms(2000)})
			if run.Error == nil || run.Error.Name != api.ErrorNameTimeout || !strings.Contains(run.Error.Message, "keeps its variables") {
				t.Errorf("%s with timeoutMs 2000: error %+v, want TimeoutError keeping the variables", tc.sleep, run.Error)
			}
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("the timed-out call took %v", took)
			}
			if got := first(tc.next); got != tc.want {
				t.Errorf("%s after the timeout: %q, want %q", tc.next, got, tc.want)
			}

			// A kernel that dies: KernelDiedError, then a new kernel.
			run = in.run(lang(tc.die))
			if run.Error == nil || run.Error.Name != api.ErrorNameKernelDied {
				t.Errorf("%s: error %+v, want %s", tc.die, run.Error, api.ErrorNameKernelDied)
			}
			if got := first(tc.sandboxEnv); got != tc.wideOut {
				t.Errorf("%s after the kernel died: %q, want %q from a new kernel", tc.sandboxEnv, got, tc.wideOut)
			}
		})
	}

	t.Run("R results are IRkernel's bundles", func(t *testing.T) {
		in.t = t
		run := in.run(api.ExecuteRequest{Language: "r", Code: "plot(1:10)", Bundle: true})
		if run.Error != nil || len(run.Results) != 1 || run.Results[0].Mime != "image/png" || run.Results[0].Type != api.ResultTypeDisplay {
			t.Errorf("plot(1:10): results %+v error %+v, want one display image/png", run.Results, run.Error)
		}
	})

	t.Run("Adversarial: the sandbox user forges Jupyter messages to a root R kernel", func(t *testing.T) {
		// A root R context's IRkernel listens on loopback ports any code in
		// the sandbox can reach; its messages must carry the HMAC of a key
		// only root can read (the bridge's 0700 directory). The sandbox
		// user sends execute requests signed with a guess, and unsigned,
		// to every listening loopback port.
		in.t = t
		rootCtx, err := c.CreateContext(ctx, sb.SandboxID, api.CreateContextRequest{Language: "r", User: "root"})
		if err != nil {
			t.Fatal(err)
		}
		if got := only(api.ExecuteRequest{ContextID: rootCtx.ID, Code: "secret <- 7; Sys.info()[['effective_user']]"}); got != `[1] "root"` {
			t.Fatalf("root R context runs as %q, want root", got)
		}
		run := in.run(api.ExecuteRequest{Code: forgeJupyter})
		if run.Error != nil || !strings.HasPrefix(strings.TrimSpace(run.Stdout), "sent ") {
			t.Fatalf("forging as the sandbox user: %q %+v", run.Stdout, run.Error)
		}
		var ports int
		fmt.Sscanf(strings.TrimSpace(run.Stdout), "sent %d", &ports)
		if ports < 5 {
			t.Fatalf("the sandbox user saw %d listening loopback ports (%q), want IRkernel's 5 among them", ports, run.Stdout)
		}
		time.Sleep(2 * time.Second)
		if got := only(api.ExecuteRequest{ContextID: rootCtx.ID, Code: `c(file.exists("/root/pwned"), secret == 7)`}); got != "[1] FALSE  TRUE" {
			t.Errorf("after forged messages: %q, want [1] FALSE  TRUE (nothing run, the kernel and its state intact)", got)
		}
		c.DeleteContext(ctx, sb.SandboxID, rootCtx.ID)
	})

	t.Run("kernels' memory", func(t *testing.T) {
		// The figures docs/templates.md gives: each kernel's resident memory
		// once it has run a few calls (R: the bridge and R; Java: the JVM).
		run := in.run(api.ExecuteRequest{Language: "bash", Code: "ps -eo rss=,args= | grep -E 'rkernel|IRkernel|LizardJShell' | grep -v grep"})
		var total int
		for _, line := range strings.Split(strings.TrimSpace(run.Stdout), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			kb, _ := strconv.Atoi(f[0])
			total += kb
			t.Logf("%6d MiB  %.80s", kb>>10, strings.Join(f[1:], " "))
		}
		if total == 0 {
			t.Errorf("no kernel process found: %q", run.Stdout)
		}
	})

	t.Run("contexts list the R and Java defaults once used", func(t *testing.T) {
		list, err := c.ListContexts(ctx, sb.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"default-r", "default-java"} {
			if !containsContext(list, id) {
				t.Errorf("contexts %+v lack %s", list, id)
			}
		}
	})
}

// TestRAndJavaE2B runs R and Java through E2B's code interpreter protocol
// (/e2b/sandbox, port 49999), as E2B's SDKs and its code-interpreter suite
// call it: the default kernels keep state, env_vars and the sandbox's
// envs, contexts with a cwd, and results as E2B's (text unquoted).
func TestRAndJavaE2B(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_rjava_e2b")
	key := s.keys[c]
	resp, body := send(t, http.MethodPost, s.url+"/e2b/sandboxes", `{"templateID":"code-interpreter-v1","timeout":300,"envVars":{"TEST_ENV_VAR":"supertest"}}`,
		"Content-Type", "application/json", "X-API-Key", key)
	var sb struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if resp.StatusCode != http.StatusCreated || json.Unmarshal([]byte(body), &sb) != nil || sb.SandboxID == "" {
		t.Fatalf("E2B create: %d %s", resp.StatusCode, body)
	}
	t.Cleanup(func() { c.KillSandbox(context.Background(), sb.SandboxID) })
	call := func(method, path, body string) (int, string) {
		t.Helper()
		resp, out := send(t, method, s.url+"/e2b/sandbox"+path, body, "Content-Type", "application/json",
			"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49999", "X-Access-Token", sb.EnvdAccessToken)
		return resp.StatusCode, out
	}
	// run returns the stdout pieces, the first result's text (as E2B's
	// suite reads R's: IRkernel shows a value as display data, not the main
	// result) and the error.
	type result struct {
		stdout []string
		text   string
		err    map[string]any
	}
	run := func(req map[string]any) result {
		t.Helper()
		b, _ := json.Marshal(req)
		code, out := call(http.MethodPost, "/execute", string(b))
		if code != http.StatusOK {
			t.Fatalf("execute %s: %d %s", b, code, out)
		}
		var r result
		sc := bufio.NewScanner(strings.NewReader(out))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				t.Fatalf("execute %s: line %q is not JSON", b, sc.Text())
			}
			switch line["type"] {
			case "stdout":
				r.stdout = append(r.stdout, line["text"].(string))
			case "result":
				if r.text == "" {
					r.text, _ = line["text"].(string)
				}
			case "error":
				r.err = line
			}
		}
		return r
	}

	for _, tc := range []struct {
		lang, define, next, want string
		print                    string
		stdout                   []string
		env, envWant, envDefault string
		sandboxEnv, sandboxWant  string
		cwd, cwdWant             string
	}{
		{
			lang: "r", define: "x <- 41", next: "x + 1", want: "[1] 42",
			print: `print("Hello, World!")`, stdout: []string{"[1] \"Hello, World!\"\n"},
			env: `Sys.getenv("FOO")`, envWant: `[1] "bar"`, envDefault: `Sys.getenv("FOO", unset = "default")`,
			sandboxEnv: `Sys.getenv("TEST_ENV_VAR")`, sandboxWant: `[1] "supertest"`,
			cwd: "getwd()", cwdWant: `[1] "/tmp"`,
		},
		{
			lang: "java", define: "int x = 41;", next: "x + 1", want: "42",
			print: `System.out.println("Hello, World!")`, stdout: []string{"Hello, World!", "\n"},
			env: `System.getProperty("FOO")`, envWant: "bar", envDefault: `System.getProperty("FOO", "default")`,
			sandboxEnv: `System.getProperty("TEST_ENV_VAR")`, sandboxWant: "supertest",
			cwd: `System.getProperty("user.dir")`, cwdWant: "/tmp",
		},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			if r := run(map[string]any{"code": tc.define, "language": tc.lang}); r.err != nil {
				t.Fatalf("%s: error %v", tc.define, r.err)
			}
			if r := run(map[string]any{"code": tc.next, "language": tc.lang}); r.text != tc.want || r.err != nil {
				t.Errorf("%s: text %q error %v, want %q", tc.next, r.text, r.err, tc.want)
			}
			if r := run(map[string]any{"code": tc.print, "language": tc.lang}); strings.Join(r.stdout, "|") != strings.Join(tc.stdout, "|") {
				t.Errorf("%s: stdout %q, want %q", tc.print, r.stdout, tc.stdout)
			}
			if r := run(map[string]any{"code": tc.env, "language": tc.lang, "env_vars": map[string]string{"FOO": "bar"}}); r.text != tc.envWant {
				t.Errorf("%s with env_vars FOO=bar: %q, want %q", tc.env, r.text, tc.envWant)
			}
			if r := run(map[string]any{"code": tc.envDefault, "language": tc.lang}); !strings.Contains(r.text, "default") {
				t.Errorf("%s after: %q, want the default", tc.envDefault, r.text)
			}
			if r := run(map[string]any{"code": tc.sandboxEnv, "language": tc.lang}); r.text != tc.sandboxWant {
				t.Errorf("%s: %q, want %q", tc.sandboxEnv, r.text, tc.sandboxWant)
			}
			code, out := call(http.MethodPost, "/contexts", `{"language":"`+tc.lang+`","cwd":"/tmp"}`)
			var cx api.Context
			if code != http.StatusOK || json.Unmarshal([]byte(out), &cx) != nil || cx.Language != tc.lang {
				t.Fatalf("create_code_context(%s, /tmp): %d %s", tc.lang, code, out)
			}
			if r := run(map[string]any{"code": tc.cwd, "context_id": cx.ID}); r.text != tc.cwdWant {
				t.Errorf("%s in a context at /tmp: %q, want %q", tc.cwd, r.text, tc.cwdWant)
			}
			if r := run(map[string]any{"code": tc.define, "context_id": cx.ID}); r.err != nil {
				t.Errorf("%s in the context: %v", tc.define, r.err)
			}
			if code, out := call(http.MethodDelete, "/contexts/"+cx.ID, ""); code != http.StatusOK {
				t.Errorf("remove_code_context: %d %s", code, out)
			}
		})
	}
}

// forgeJupyter, run by the sandbox user, sends a Jupyter execute request
// (R code creating /root/pwned) to every loopback port listening, signed
// with a guessed key, then unsigned, and prints how many ports it tried.
const forgeJupyter = `
import hashlib, hmac, json, uuid, zmq
ports = []
for line in open("/proc/net/tcp").read().splitlines()[1:]:
    f = line.split()
    ip, port = f[1].split(":")
    if f[3] == "0A" and ip == "0100007F":
        ports.append(int(port, 16))
ctx = zmq.Context()
for port in ports:
    for kind in (zmq.DEALER, zmq.REQ):
        s = ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        s.connect("tcp://127.0.0.1:%d" % port)
        header = json.dumps({"msg_id": uuid.uuid4().hex, "username": "u", "session": uuid.uuid4().hex,
                             "msg_type": "execute_request", "version": "5.3"}).encode()
        content = json.dumps({"code": 'file.create("/root/pwned")', "silent": False, "store_history": True,
                              "user_expressions": {}, "allow_stdin": False}).encode()
        parts = [header, b"{}", b"{}", content]
        for sig in (hmac.new(b"a-guess", b"".join(parts), hashlib.sha256).hexdigest().encode(), b""):
            try:
                s.send_multipart([b"<IDS|MSG>", sig] + parts, flags=zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
        s.close()
print("sent", len(ports))
`
