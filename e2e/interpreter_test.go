package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// interpreter is one sandbox shared by the subtests of TestInterpreter, as a
// conversation with a model would share it.
type interpreter struct {
	t  *testing.T
	c  *client.Client
	id string
}

func (in *interpreter) run(req api.ExecuteRequest) *client.Execution {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := in.c.Execute(ctx, in.id, req, nil)
	if err != nil {
		in.t.Fatalf("Execute(%q): %v", req.Code, err)
	}
	return run
}

func (in *interpreter) code(code string) *client.Execution {
	in.t.Helper()
	return in.run(api.ExecuteRequest{Code: code})
}

// one returns the only result of run, failing the test otherwise.
func one(t *testing.T, run *client.Execution) api.Result {
	t.Helper()
	if run.Error != nil || len(run.Results) != 1 {
		t.Fatalf("got results %+v error %+v, want exactly one result", run.Results, run.Error)
	}
	return run.Results[0]
}

func TestInterpreter(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_123")
	sb := newSandbox(t, c, api.CreateSandboxRequest{Envs: map[string]string{"SANDBOX_WIDE": "everywhere"}})
	ctx := context.Background()
	in := &interpreter{t: t, c: c, id: sb.SandboxID}

	t.Run("seed example", func(t *testing.T) {
		in.t = t
		if run := in.code("import pandas as pd\ndf = pd.DataFrame({\"x\": [1, 2, 3]})"); run.Error != nil || len(run.Results) != 0 {
			t.Fatalf("setup run = %+v", run)
		}
		r := one(t, in.code("df.x.sum()"))
		if r != (api.Result{Type: "result", Mime: "text/plain", Data: "np.int64(6)"}) {
			t.Errorf("df.x.sum() = %+v, want text/plain np.int64(6)", r)
		}
		bad := in.code("1/0")
		if bad.Error == nil || bad.Error.Name != "ZeroDivisionError" || bad.Error.Message != "division by zero" {
			t.Fatalf("1/0 error = %+v, want ZeroDivisionError: division by zero", bad.Error)
		}
		if strings.Contains(bad.Error.Traceback, "\x1b") || !strings.Contains(bad.Error.Traceback, "1/0") {
			t.Errorf("traceback %q: want the failing line and no ANSI codes", bad.Error.Traceback)
		}
	})

	t.Run("one mime per result, richest first", func(t *testing.T) {
		in.t = t
		tests := []struct{ code, typ, mime, contains string }{
			{"1 + 1", "result", "text/plain", "2"},
			{"df", "result", "text/html", "<table"},
			{"from IPython.display import Markdown; Markdown('**hi**')", "result", "text/markdown", "**hi**"},
			{"from IPython.display import JSON; JSON({'a': 1})", "result", "application/json", `"a"`},
			{"from IPython.display import Latex; Latex(r'$x^2$')", "result", "text/latex", "x^2"},
			{"from IPython.display import SVG; SVG('<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>')", "result", "image/svg+xml", "<svg"},
			{"from IPython.display import HTML, display; display(HTML('<b>x</b>'))", "display", "text/html", "<b>x</b>"},
			{"class R:\n  def _repr_html_(self): return '<i>h</i>'\n  def _repr_markdown_(self): return 'md'\n  def _repr_latex_(self): return '$l$'\nR()", "result", "text/html", "<i>h</i>"},
		}
		for _, tc := range tests {
			r := one(t, in.code(tc.code))
			if r.Type != tc.typ || r.Mime != tc.mime || !strings.Contains(r.Data, tc.contains) {
				t.Errorf("%q = %s %s %.80q, want %s %s containing %q", tc.code, r.Type, r.Mime, r.Data, tc.typ, tc.mime, tc.contains)
			}
		}
	})

	t.Run("chart", func(t *testing.T) {
		in.t = t
		r := one(t, in.code("import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()"))
		png, err := base64.StdEncoding.DecodeString(r.Data)
		if r.Type != "display" || r.Mime != "image/png" || err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("chart = %s %s (%d bytes, %v), want a display image/png with a PNG header", r.Type, r.Mime, len(png), err)
		}
	})

	t.Run("stdout, stderr and execution count", func(t *testing.T) {
		in.t = t
		a := in.code("import sys\nprint('out')\nprint('err', file=sys.stderr)")
		b := in.code("None")
		if a.Stdout != "out\n" || a.Stderr != "err\n" {
			t.Errorf("stdout %q stderr %q, want out and err", a.Stdout, a.Stderr)
		}
		if b.ExecutionCount != a.ExecutionCount+1 {
			t.Errorf("execution counts %d then %d, want consecutive", a.ExecutionCount, b.ExecutionCount)
		}
	})

	t.Run("envs", func(t *testing.T) {
		in.t = t
		run := in.run(api.ExecuteRequest{Code: "import os\nprint(os.environ.get('CALL_ONLY'), os.environ.get('SANDBOX_WIDE'))", Envs: map[string]string{"CALL_ONLY": "yes"}})
		if run.Stdout != "yes everywhere\n" {
			t.Errorf("with per-call envs: %q, want \"yes everywhere\"", run.Stdout)
		}
		if run := in.code("import os\nprint(os.environ.get('CALL_ONLY'))"); run.Stdout != "None\n" {
			t.Errorf("next call sees CALL_ONLY=%q, want it gone", run.Stdout)
		}
		for _, lang := range []string{"bash", "javascript"} {
			code := map[string]string{"bash": "echo $CALL_ONLY $SANDBOX_WIDE", "javascript": "console.log(process.env.CALL_ONLY, process.env.SANDBOX_WIDE)"}[lang]
			run := in.run(api.ExecuteRequest{Language: lang, Code: code, Envs: map[string]string{"CALL_ONLY": "yes"}})
			if run.Stdout != "yes everywhere\n" {
				t.Errorf("%s with envs: %q, want \"yes everywhere\"", lang, run.Stdout)
			}
		}
	})

	t.Run("timeout keeps state", func(t *testing.T) {
		in.t = t
		run := in.run(api.ExecuteRequest{Code: "kept = 7\nimport time\ntime.sleep(60)", TimeoutMs: ms(1000)})
		if run.Error == nil || run.Error.Name != "TimeoutError" {
			t.Fatalf("sleep past the timeout: error %+v, want TimeoutError", run.Error)
		}
		if r := one(t, in.code("kept")); r.Data != "7" {
			t.Errorf("after timeout kept = %q, want 7", r.Data)
		}
	})

	t.Run("kernel death", func(t *testing.T) {
		in.t = t
		run := in.code("import os\nos._exit(1)")
		if run.Error == nil || !strings.Contains(strings.ToLower(run.Error.Message), "restart") {
			t.Fatalf("os._exit: error %+v, want one saying the kernel died and was restarted", run.Error)
		}
		if r := one(t, in.code("1 + 1")); r.Data != "2" {
			t.Errorf("after kernel death 1 + 1 = %q", r.Data)
		}
	})

	t.Run("contexts", func(t *testing.T) {
		in.t = t
		in.code("shared = 'default'")
		if _, err := c.MakeDir(ctx, in.id, "/tmp/ctxdir"); err != nil {
			t.Fatal(err)
		}
		cx, err := c.CreateContext(ctx, in.id, api.CreateContextRequest{Cwd: "/tmp/ctxdir"})
		if err != nil || cx.Language != "python" || cx.Cwd != "/tmp/ctxdir" {
			t.Fatalf("CreateContext = %+v, %v", cx, err)
		}
		run := in.run(api.ExecuteRequest{ContextID: cx.ID, Code: "import os\nprint(os.getcwd(), 'shared' in globals())\nmine = 1"})
		if run.Stdout != "/tmp/ctxdir False\n" {
			t.Errorf("new context sees %q, want its own cwd and no variables from the default", run.Stdout)
		}
		if run := in.code("import os\nprint(os.getcwd(), 'mine' in globals())"); run.Stdout != "/home/user False\n" {
			t.Errorf("default context sees %q, want /home/user and no variables from the new context", run.Stdout)
		}
		list, err := c.ListContexts(ctx, in.id)
		if err != nil || !containsContext(list, cx.ID) {
			t.Errorf("ListContexts = %+v, %v; want %s in it", list, err, cx.ID)
		}
		if _, err := c.RestartContext(ctx, in.id, cx.ID); err != nil {
			t.Fatal(err)
		}
		if run := in.run(api.ExecuteRequest{ContextID: cx.ID, Code: "'mine' in globals()"}); one(t, run).Data != "False" {
			t.Errorf("after restart the variable survived")
		}
		if err := c.DeleteContext(ctx, in.id, cx.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Execute(ctx, in.id, api.ExecuteRequest{ContextID: cx.ID, Code: "1"}, nil); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("run in a deleted context: %v, want ErrNotFound", err)
		}
	})

	t.Run("contexts run in parallel, calls to one are queued", func(t *testing.T) {
		in.t = t
		cx, err := c.CreateContext(ctx, in.id, api.CreateContextRequest{})
		if err != nil {
			t.Fatal(err)
		}
		// Each run reports when it slept; the two sleeps must overlap. The
		// kernels' own clocks say so, whatever the load on the machine.
		var wg sync.WaitGroup
		spans := make([][2]float64, 2)
		for i, id := range []string{"", cx.ID} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				run, err := c.Execute(ctx, in.id, api.ExecuteRequest{ContextID: id, Code: "import time\na = time.time()\ntime.sleep(2)\nprint(a, time.time())"}, nil)
				if err != nil {
					t.Error(err)
					return
				}
				fmt.Sscan(run.Stdout, &spans[i][0], &spans[i][1])
			}()
		}
		wg.Wait()
		if a, b := spans[0], spans[1]; a[0] == 0 || b[0] == 0 || !(a[0] < b[1] && b[0] < a[1]) {
			t.Errorf("sleeps in two contexts ran at %v and %v, want them to overlap", a, b)
		}
		var order []string
		var mu sync.Mutex
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				run, _ := c.Execute(ctx, in.id, api.ExecuteRequest{ContextID: cx.ID, Code: "import time\nprint('a')\ntime.sleep(0.5)\nprint('b')"}, nil)
				mu.Lock()
				order = append(order, run.Stdout)
				mu.Unlock()
			}()
		}
		wg.Wait()
		for _, out := range order {
			if out != "a\nb\n" {
				t.Errorf("queued call printed %q, want a then b uninterleaved", out)
			}
		}
	})

	t.Run("javascript and bash are fresh per call", func(t *testing.T) {
		in.t = t
		js := in.run(api.ExecuteRequest{Language: "javascript", Code: "globalThis.v = 1; console.log(process.version)"})
		if !strings.HasPrefix(js.Stdout, "v22.") || len(js.Results) != 0 || js.Error != nil {
			t.Errorf("node version run = %+v, want v22 and no results", js)
		}
		if js := in.run(api.ExecuteRequest{Language: "javascript", Code: "console.log(typeof globalThis.v)"}); js.Stdout != "undefined\n" {
			t.Errorf("second JavaScript call sees %q, want a fresh process", js.Stdout)
		}
		if js := in.run(api.ExecuteRequest{Language: "javascript", Code: "null.x"}); js.Error == nil || js.Error.Name != "TypeError" {
			t.Errorf("JavaScript TypeError = %+v", js.Error)
		}
		in.run(api.ExecuteRequest{Language: "bash", Code: "export B=1"})
		if sh := in.run(api.ExecuteRequest{Language: "bash", Code: "echo ${B:-unset}; echo oops >&2; exit 3"}); sh.Stdout != "unset\n" || sh.Stderr != "oops\n" || sh.Error == nil {
			t.Errorf("bash run = %+v, want a fresh shell, stderr and an error for exit 3", sh)
		}
	})

	// E2B's JavaScript kernel takes static imports and top-level await;
	// so do per-call JavaScript (Node 22 reads the code as a module) and
	// stateful contexts, whose imports bind variables later calls see.
	t.Run("javascript and typescript imports", func(t *testing.T) {
		in.t = t
		js := in.run(api.ExecuteRequest{Language: "javascript", Code: "import { readFileSync } from 'fs'\nimport * as p from 'path'\nconsole.log(typeof readFileSync, typeof p.join, await Promise.resolve(3))"})
		if js.Stdout != "function function 3\n" || js.Error != nil {
			t.Errorf("per-call imports: stdout %q error %+v, want function function 3", js.Stdout, js.Error)
		}
		for _, step := range []struct{ lang, code, stdout, result string }{
			{"javascript", "\n    import { readFileSync } from 'fs'\n    console.log(typeof readFileSync)\n    ", "function\n", ""},
			{"javascript", "import os, { EOL } from 'os'\ntypeof readFileSync + typeof os.cpus + EOL.length", "", "'functionfunction1'"},
			{"typescript", "import { join } from 'path'\nconst joined: string = join('a', 'b')", "", ""},
			{"typescript", "await Promise.resolve(joined)", "", "'a/b'"},
		} {
			run := in.run(api.ExecuteRequest{Language: step.lang, Stateful: true, Code: step.code})
			var result string
			if len(run.Results) == 1 {
				result = run.Results[0].Data
			}
			if run.Error != nil || run.Stdout != step.stdout || result != step.result || len(run.Results) > 1 {
				t.Errorf("%s %q: stdout %q results %+v error %+v, want stdout %q result %q", step.lang, step.code, run.Stdout, run.Results, run.Error, step.stdout, step.result)
			}
		}
	})

	// A PIL image saved to a path is shown too (E2B's interpreter does
	// so, and its suite expects the PNG), and boxplot takes labels=, the
	// name of E2B's matplotlib (3.10) that the template's 3.11 dropped.
	t.Run("image saved and boxplot labels", func(t *testing.T) {
		in.t = t
		r := one(t, in.code("from PIL import Image\nImage.new('RGB', (4, 4), 'red').save('/tmp/red.png')"))
		if r.Type != "display" || r.Mime != "image/png" {
			t.Errorf("saved image = %s %s, want a display image/png", r.Type, r.Mime)
		}
		box := in.code("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.boxplot([[1, 2, 3], [4, 5]], labels=['a', 'b'], patch_artist=True)\nplt.show()\n[t.get_text() for t in ax.get_xticklabels()]")
		if box.Error != nil || len(box.Results) != 2 || box.Results[0].Mime != "image/png" || box.Results[1].Data != "['a', 'b']" {
			t.Errorf("boxplot(labels=) = results %+v error %+v, want its PNG and ['a', 'b']", box.Results, box.Error)
		}
	})

	t.Run("large output is bounded", func(t *testing.T) {
		in.t = t
		before := rss(t, s.cmd.Process.Pid)
		run := in.run(api.ExecuteRequest{Language: "bash", Code: "head -c 100000000 /dev/zero | tr '\\0' x; echo"})
		after := rss(t, s.cmd.Process.Pid)
		if len(run.Stdout) > 16<<20 || !strings.Contains(run.Stdout+run.Stderr, "truncated") {
			t.Errorf("100 MB of output gave %d bytes without a truncation marker", len(run.Stdout))
		}
		if after-before > 64<<20 {
			t.Errorf("server RSS grew by %d MiB while streaming 100 MB", (after-before)>>20)
		}
		if r := one(t, in.code("1 + 1")); r.Data != "2" {
			t.Errorf("after the flood 1 + 1 = %q", r.Data)
		}
	})

	t.Run("files", func(t *testing.T) {
		in.t = t
		data := make([]byte, 5<<20)
		rand.Read(data)
		if _, err := c.WriteFile(ctx, in.id, "data/blob.bin", bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		r, err := c.ReadFile(ctx, in.id, "/home/user/data/blob.bin")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(r)
		r.Close()
		if !bytes.Equal(got, data) {
			t.Errorf("read back %d bytes, want the %d written", len(got), len(data))
		}
		if run := in.code("import os\nos.path.getsize('data/blob.bin')"); one(t, run).Data != "5242880" {
			t.Errorf("python sees size %+v", run.Results)
		}
		entries, err := c.ListDir(ctx, in.id, "data")
		if err != nil || len(entries) != 1 || entries[0].Name != "blob.bin" || entries[0].Size != 5<<20 {
			t.Errorf("ListDir = %+v, %v", entries, err)
		}
		if err := c.Remove(ctx, in.id, "data"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Stat(ctx, in.id, "data/blob.bin"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("stat after remove: %v, want ErrNotFound", err)
		}
		if _, err := c.Stat(ctx, in.id, "bad\x00path"); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("stat of a path with NUL: %v, want ErrInvalidArgument", err)
		}
	})

	t.Run("pip install from exec, import from the kernel", func(t *testing.T) {
		in.t = t
		whl, err := os.ReadFile("testdata/lizard_fixture-1.0-py3-none-any.whl")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteFile(ctx, in.id, "lizard_fixture-1.0-py3-none-any.whl", bytes.NewReader(whl)); err != nil {
			t.Fatal(err)
		}
		res, err := c.Exec(ctx, in.id, api.ProcessRequest{Cmd: "pip install --no-index lizard_fixture-1.0-py3-none-any.whl"}, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("pip install = %+v, %v", res, err)
		}
		if r := one(t, in.code("import lizard_fixture\nlizard_fixture.GREETING")); r.Data != "'hello from a wheel'" {
			t.Errorf("import after pip install = %q", r.Data)
		}
		res, err = c.Exec(ctx, in.id, api.ProcessRequest{Cmd: "pwd; echo $X; cat", Cwd: "/tmp", Envs: map[string]string{"X": "y"}, Stdin: "in"}, nil)
		if err != nil || res.Stdout != "/tmp\ny\nin" || res.ExitCode != 0 {
			t.Errorf("exec with cwd, envs and stdin = %+v, %v", res, err)
		}
	})
}

func containsContext(list []api.Context, id string) bool {
	for _, c := range list {
		if c.ID == id {
			return true
		}
	}
	return false
}

// rss returns a process's resident memory in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			var kb int64
			fmt.Sscan(f[1], &kb)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}
