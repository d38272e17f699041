package e2e

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// TestPythonKernel checks, under gVisor, what users expect of a Jupyter
// kernel from the agent's own kernel (internal/pykernel): display updates,
// inline figures, magics and !cmd, input(), interrupts that keep state,
// kernels killed from outside, huge output, and a cwd the user cannot enter.
func TestPythonKernel(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_kernel")
	sb := newSandbox(t, c, api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
	ctx := context.Background()
	in := &interpreter{t: t, c: c, id: sb.SandboxID}

	t.Run("display updates and clear_output", func(t *testing.T) {
		in.t = t
		run := in.code("from IPython.display import display, clear_output\nh = display('first', display_id=True)\nh.update('second')\nclear_output(wait=True)\ndisplay('third')")
		var got []string
		for _, r := range run.Results {
			got = append(got, r.Type+":"+r.Data)
		}
		if want := "[display:'first' display:'second' display:'third']"; fmt.Sprint(got) != want || run.Error != nil {
			t.Errorf("results %v error %+v, want %s", got, run.Error, want)
		}
	})

	t.Run("figures left open are shown as PNG", func(t *testing.T) {
		in.t = t
		run := in.code("import matplotlib.pyplot as plt\nplt.figure()\nplt.plot([1, 2, 3])\nplt.title('no show()')\nNone")
		if run.Error != nil || len(run.Results) != 1 || run.Results[0].Type != "display" || run.Results[0].Mime != "image/png" {
			t.Fatalf("results %+v error %+v, want one display image/png", run.Results, run.Error)
		}
		if r := one(t, in.code("len(plt.get_fignums())")); r.Data != "0" {
			t.Errorf("figures still open after the cell: %s", r.Data)
		}
	})

	t.Run("fonts read from memory; PDF and PS still embed them", func(t *testing.T) {
		in.t = t
		r := one(t, in.code(`import io, os, matplotlib, matplotlib.pyplot as plt
from matplotlib import font_manager as fm, ft2font
plt.figure()
plt.title('héllo')
ok = [fm.ft2font is not ft2font, os.fspath(fm.get_font(fm.findfont('DejaVu Sans')).fname).endswith('.ttf')]
for fonttype in (3, 42):
    matplotlib.rcParams['pdf.fonttype'] = matplotlib.rcParams['ps.fonttype'] = fonttype
    for fmt in ('pdf', 'ps', 'svg', 'png'):
        b = io.BytesIO()
        plt.savefig(b, format=fmt)
        ok.append(len(b.getvalue()) > 1000)
plt.close('all')
all(ok), ok`))
		if !strings.HasPrefix(r.Data, "(True,") {
			t.Errorf("checks = %s, want all true", r.Data)
		}
	})

	t.Run("magics and !cmd", func(t *testing.T) {
		in.t = t
		if run := in.code("%time y = sum(range(10))"); run.Error != nil || !strings.Contains(run.Stdout, "Wall time") {
			t.Errorf("%%time: stdout %q error %+v", run.Stdout, run.Error)
		}
		if run := in.code("!echo from-shell; whoami"); run.Error != nil || !strings.Contains(run.Stdout, "from-shell") || !strings.Contains(run.Stdout, "user") {
			t.Errorf("!cmd: stdout %q error %+v, want the command's output as the sandbox user", run.Stdout, run.Error)
		}
		if r := one(t, in.code("files = !echo a b\nfiles")); r.Data != "['a b']" {
			t.Errorf("captured !cmd = %s, want ['a b']", r.Data)
		}
		if run := in.code("print('one')\nimport os\nos.system('echo two')\nprint('three')"); run.Stdout != "one\ntwo\nthree\n" {
			t.Errorf("print, os.system, print: stdout %q, want them in order", run.Stdout)
		}
	})

	t.Run("input() fails at once", func(t *testing.T) {
		in.t = t
		start := time.Now()
		run := in.run(api.ExecuteRequest{Code: "name = input('name? ')", TimeoutMs: ms(20_000)})
		if run.Error == nil || run.Error.Name != "StdinNotImplementedError" || !strings.Contains(run.Error.Message, "not supported") {
			t.Errorf("input(): error %+v, want StdinNotImplementedError saying input is not supported", run.Error)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("input() took %s: it waited for an answer", d)
		}
	})

	t.Run("interrupt on timeout keeps state, output before it arrives", func(t *testing.T) {
		in.t = t
		in.code("kept = 'yes'")
		run := in.run(api.ExecuteRequest{Code: "import time\nfor i in range(100):\n    print(i, flush=True)\n    time.sleep(0.1)\nkept = 'no'", TimeoutMs: ms(1500)})
		if run.Error == nil || run.Error.Name != "TimeoutError" || !strings.Contains(run.Error.Message, "state kept") {
			t.Fatalf("error %+v, want TimeoutError with state kept", run.Error)
		}
		if !strings.HasPrefix(run.Stdout, "0\n") {
			t.Errorf("stdout %q, want the lines printed before the timeout", run.Stdout)
		}
		if r := one(t, in.code("kept")); r.Data != "'yes'" {
			t.Errorf("kept = %s after the interrupt, want 'yes'", r.Data)
		}
	})

	t.Run("kernel killed with SIGKILL during a call", func(t *testing.T) {
		in.t = t
		in.code("before = 1")
		pid := strings.Trim(one(t, in.code("import os\nos.getpid()")).Data, "'")
		done := make(chan *client.Execution)
		go func() {
			run, err := c.Execute(ctx, in.id, api.ExecuteRequest{Code: "import time\nprint('working', flush=True)\ntime.sleep(60)"}, nil)
			if err != nil {
				t.Errorf("Execute: %v", err)
			}
			done <- run
		}()
		time.Sleep(time.Second)
		if _, err := c.Exec(ctx, in.id, api.ProcessRequest{Args: []string{"kill", "-9", pid}}, nil); err != nil {
			t.Fatalf("kill -9 %s: %v", pid, err)
		}
		var run *client.Execution
		select {
		case run = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the call did not end after its kernel was killed")
		}
		if run == nil || run.Error == nil || run.Error.Name != "KernelDiedError" || !strings.Contains(run.Error.Message, "SIGKILL") {
			t.Fatalf("run %+v, want KernelDiedError naming SIGKILL", run)
		}
		if run.Stdout != "working\n" {
			t.Errorf("stdout %q, want what was printed before the kill", run.Stdout)
		}
		if r := one(t, in.code("'before' in globals()")); r.Data != "False" {
			t.Errorf("after the kill 'before' in globals() = %s, want a fresh kernel", r.Data)
		}
	})

	t.Run("kernel ended with os._exit", func(t *testing.T) {
		in.t = t
		run := in.code("print('bye', flush=True)\nimport os\nos._exit(7)")
		if run.Error == nil || run.Error.Name != "KernelDiedError" || !strings.Contains(run.Error.Message, "exit status 7") {
			t.Fatalf("run %+v, want KernelDiedError with exit status 7", run)
		}
		if r := one(t, in.code("1 + 1")); r.Data != "2" {
			t.Errorf("after os._exit 1 + 1 = %s", r.Data)
		}
	})

	t.Run("a cell printing 100 MB", func(t *testing.T) {
		in.t = t
		before := rss(t, s.cmd.Process.Pid)
		run := in.run(api.ExecuteRequest{Code: "import sys\nline = 'x' * 1023 + '\\n'\nfor i in range(100 * 1024):\n    sys.stdout.write(line)\nprint('end')"})
		after := rss(t, s.cmd.Process.Pid)
		if len(run.Stdout) > 16<<20 || !strings.Contains(run.Stdout+run.Stderr, "truncated") {
			t.Errorf("100 MB of output gave %d bytes without a truncation marker", len(run.Stdout))
		}
		if after-before > 64<<20 {
			t.Errorf("server RSS grew by %d MiB while streaming 100 MB", (after-before)>>20)
		}
		// The agent's memory, read inside the sandbox (gVisor has no
		// VmHWM; the Go heap that a burst grew stays mapped for a while).
		agent := one(t, in.code(`import os
def agent_rss():
    most = 0
    for p in os.listdir('/proc'):
        try:
            if open(f'/proc/{p}/cmdline', 'rb').read().split(b'\0')[0].endswith(b'/lizard-agent'):
                most = max([most] + [int(l.split()[1]) for l in open(f'/proc/{p}/status') if l.startswith('VmRSS')])
        except (OSError, ValueError):
            pass
    return most
agent_rss()`)).Data
		if kb, err := strconv.Atoi(agent); err != nil || kb == 0 || kb > 128<<10 {
			t.Errorf("agent RSS %s KiB after streaming 100 MB, want under 128 MiB", agent)
		}
		if r := one(t, in.code("1 + 1")); r.Data != "2" {
			t.Errorf("after the flood 1 + 1 = %s", r.Data)
		}
	})

	t.Run("a cwd the sandbox user cannot enter is a 400 at create", func(t *testing.T) {
		in.t = t
		for _, lang := range []string{"python", "bash"} {
			_, err := c.CreateContext(ctx, in.id, api.CreateContextRequest{Language: lang, Cwd: "/root"})
			if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "cannot enter") {
				t.Errorf("%s context in /root: %v, want invalid argument saying the user cannot enter it", lang, err)
			}
		}
	})
}

// TestHundredContexts runs 100 Python contexts, each its own kernel
// process with its own variables and cwd, in one sandbox.
func TestHundredContexts(t *testing.T) {
	const n = 100
	s := startServer(t)
	c := s.createProject("proj_contexts")
	sb := newSandbox(t, c, api.CreateSandboxRequest{TimeoutMs: ms(900_000), MemoryMb: ms(4096)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	id := sb.SandboxID
	if _, err := c.MakeDir(ctx, id, "/home/user/ctx"); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	var (
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 4)
		mu   sync.Mutex
		errs []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, fmt.Sprintf(format, args...))
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			cx, err := c.CreateContext(ctx, id, api.CreateContextRequest{Cwd: "/home/user/ctx"})
			if err != nil {
				fail("context %d: %v", i, err)
				return
			}
			ids[i] = cx.ID
			run, err := c.Execute(ctx, id, api.ExecuteRequest{ContextID: cx.ID, Code: fmt.Sprintf("import os\nos.chdir(os.path.expanduser('~'))\nmine = %d", i)}, nil)
			if err != nil || run.Error != nil {
				fail("context %d: %v %+v", i, err, run)
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d contexts failed: %s", len(errs), n, strings.Join(errs[:min(5, len(errs))], "; "))
	}
	list, err := c.ListContexts(ctx, id)
	if err != nil || len(list) != n+3 {
		t.Fatalf("ListContexts: %d contexts, %v; want %d and the three defaults", len(list), err, n)
	}
	for i, cx := range ids {
		run, err := c.Execute(ctx, id, api.ExecuteRequest{ContextID: cx, Code: "print(mine, os.getcwd())"}, nil)
		if err != nil || run.Error != nil || run.Stdout != fmt.Sprintf("%d /home/user\n", i) {
			t.Errorf("context %d: stdout %q, %v %+v, want its own variable and cwd", i, runStdout(run), err, run)
		}
	}
	for _, cx := range ids {
		if err := c.DeleteContext(ctx, id, cx); err != nil {
			t.Errorf("DeleteContext(%s): %v", cx, err)
		}
	}
	// Deleted contexts leave no kernel process behind.
	count := "import os\nkernels = 0\nfor p in filter(str.isdigit, os.listdir('/proc')):\n    try:\n        kernels += b'<lizard-kernel>' in open(f'/proc/{p}/cmdline', 'rb').read()\n    except OSError:\n        pass\nprint(kernels)"
	if got := py(t, c, id, count); got != "1" {
		t.Errorf("python kernels running after deleting %d contexts: %s, want 1 (the default's)", n, got)
	}
}

func runStdout(run *client.Execution) string {
	if run == nil {
		return ""
	}
	return run.Stdout
}

// TestPauseForkKernelState pauses, resumes and forks a sandbox whose
// Python contexts (the default and two more) hold state: every kernel comes
// back with its variables and cwd, and the forks' generators are reseeded
// in every kernel.
func TestPauseForkKernelState(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_kstate")
	ctx := context.Background()
	sb := newSandbox(t, c, api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
	id := sb.SandboxID
	if _, err := c.MakeDir(ctx, id, "/home/user/a"); err != nil {
		t.Fatal(err)
	}
	contexts := []string{""} // the default
	for range 2 {
		cx, err := c.CreateContext(ctx, id, api.CreateContextRequest{Cwd: "/home/user/a"})
		if err != nil {
			t.Fatal(err)
		}
		contexts = append(contexts, cx.ID)
	}
	run := func(sandbox, cx, code string) *client.Execution {
		t.Helper()
		r, err := c.Execute(ctx, sandbox, api.ExecuteRequest{ContextID: cx, Code: code}, nil)
		if err != nil {
			t.Fatalf("Execute in %s/%s: %v", sandbox, cx, err)
		}
		if r.Error != nil {
			t.Fatalf("Execute in %s/%s: %s: %s", sandbox, cx, r.Error.Name, r.Error.Message)
		}
		return r
	}
	for i, cx := range contexts {
		run(id, cx, fmt.Sprintf("import numpy as np, random, os\nvalue = np.arange(%d).sum()\nseen = os.getcwd()", 10*(i+1)))
	}
	check := func(sandbox, when string) {
		t.Helper()
		for i, cx := range contexts {
			r := run(sandbox, cx, "print(int(value), seen, os.getcwd())")
			cwd := "/home/user/a"
			if cx == "" {
				cwd = "/home/user"
			}
			n := 10 * (i + 1)
			if want := fmt.Sprintf("%d %s %s\n", n*(n-1)/2, cwd, cwd); r.Stdout != want {
				t.Errorf("%s, context %q: %q, want %q", when, cx, r.Stdout, want)
			}
		}
	}

	if _, err := c.PauseSandbox(ctx, id); err != nil {
		t.Fatalf("PauseSandbox: %v", err)
	}
	if _, err := c.ResumeSandbox(ctx, id, api.ResumeRequest{}); err != nil {
		t.Fatalf("ResumeSandbox: %v", err)
	}
	check(id, "after pause and resume")
	counts := map[string]int{}
	for _, cx := range contexts {
		counts[cx] = run(id, cx, "None").ExecutionCount
	}

	forks, err := c.Fork(ctx, id, api.ForkRequest{Count: 2})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	for _, f := range forks {
		t.Cleanup(func() { c.KillSandbox(context.Background(), f.SandboxID) })
	}
	draws := map[string]string{}
	for _, f := range forks {
		check(f.SandboxID, "in fork "+f.SandboxID)
		for _, cx := range contexts {
			r := run(f.SandboxID, cx, "print(random.random(), np.random.rand())")
			if r.ExecutionCount != counts[cx]+2 {
				t.Errorf("fork %s context %q: execution count %d, want %d (the parent's history goes on)", f.SandboxID, cx, r.ExecutionCount, counts[cx]+2)
			}
			if prev, ok := draws[r.Stdout]; ok {
				t.Errorf("fork %s context %q drew the same numbers as %s: not reseeded", f.SandboxID, cx, prev)
			}
			draws[r.Stdout] = f.SandboxID + "/" + cx
		}
	}
	check(id, "in the parent after the fork")
}
