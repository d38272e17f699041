package pykernel

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/testenv"
)

// startKernel starts a kernel with the test Python in a temporary home and
// closes it when the test ends.
func startKernel(t *testing.T) *Kernel {
	t.Helper()
	py := testenv.Python(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k, err := Start(ctx, Config{
		Python: py,
		Cwd:    dir,
		Env:    []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "LANG=C.UTF-8", "MPLBACKEND=Agg"},
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// outcome is what one Execute produced.
type outcome struct {
	events  []api.ExecuteEvent
	stdout  string
	stderr  string
	results []api.Result
	errors  []api.ExecutionError
	count   int
	ended   bool
	err     error
	elapsed time.Duration
}

func (o outcome) lastError() *api.ExecutionError {
	if len(o.errors) == 0 {
		return nil
	}
	return &o.errors[len(o.errors)-1]
}

func execute(t *testing.T, ctx context.Context, k *Kernel, req Request) outcome {
	t.Helper()
	var o outcome
	start := time.Now()
	o.err = k.Execute(ctx, req, func(ev api.ExecuteEvent) {
		if o.ended {
			t.Errorf("event %+v after end", ev)
		}
		o.events = append(o.events, ev)
		switch ev.Type {
		case api.EventStdout:
			o.stdout += ev.Text
		case api.EventStderr:
			o.stderr += ev.Text
		case api.EventResult:
			o.results = append(o.results, *ev.Result)
		case api.EventError:
			o.errors = append(o.errors, *ev.Error)
		case api.EventEnd:
			o.ended, o.count = true, ev.ExecutionCount
		}
	})
	o.elapsed = time.Since(start)
	return o
}

func run(t *testing.T, k *Kernel, code string) outcome {
	t.Helper()
	o := execute(t, context.Background(), k, Request{Code: code, Timeout: time.Minute})
	if o.err != nil {
		t.Fatalf("Execute(%q): %v", code, o.err)
	}
	if !o.ended {
		t.Fatalf("Execute(%q): no end event; events %+v", code, o.events)
	}
	return o
}

func TestExecuteOutputs(t *testing.T) {
	k := startKernel(t)
	reprs := `
class Rich:
    def _repr_html_(self): return "<b>rich</b>"
    def _repr_markdown_(self): return "**rich**"
    def _repr_json_(self): return {"rich": True}
    def _repr_latex_(self): return "$rich$"
class JSONOnly:
    def _repr_json_(self): return {"a": [1, 2]}
class Latex:
    def _repr_latex_(self): return "$x^2$"
class Markdown:
    def _repr_markdown_(self): return "# title"
    def _repr_latex_(self): return "$t$"
class SVG:
    def _repr_svg_(self): return "<svg xmlns='http://www.w3.org/2000/svg'/>"
    def _repr_html_(self): return "<p>svg</p>"
class JPEG:
    def _repr_jpeg_(self): return b"\xff\xd8\xff\xe0fake"
    def _repr_svg_(self): return "<svg/>"
`
	run(t, k, reprs)
	run(t, k, "import pandas as pd\ndf = pd.DataFrame({'x': [1, 2, 3]})")

	tests := []struct {
		name        string
		code        string
		wantStdout  string
		wantStderr  string
		wantResults []api.Result
		wantError   string // exception name
	}{
		{name: "expression", code: "1+1", wantResults: []api.Result{{Type: "result", Mime: "text/plain", Data: "2"}}},
		{name: "stdout", code: "print('hello')", wantStdout: "hello\n"},
		{name: "stderr", code: "import sys\nprint('oops', file=sys.stderr)", wantStderr: "oops\n"},
		{name: "no result for statements", code: "y = 3"},
		{name: "numpy scalar", code: "df.x.sum()", wantResults: []api.Result{{Type: "result", Mime: "text/plain", Data: "np.int64(6)"}}},
		{name: "html beats everything textual", code: "Rich()", wantResults: []api.Result{{Type: "result", Mime: "text/html", Data: "<b>rich</b>"}}},
		{name: "json as JSON text", code: "JSONOnly()", wantResults: []api.Result{{Type: "result", Mime: "application/json", Data: `{"a":[1,2]}`}}},
		{name: "latex over plain", code: "Latex()", wantResults: []api.Result{{Type: "result", Mime: "text/latex", Data: "$x^2$"}}},
		{name: "markdown over latex", code: "Markdown()", wantResults: []api.Result{{Type: "result", Mime: "text/markdown", Data: "# title"}}},
		{name: "svg over html", code: "SVG()", wantResults: []api.Result{{Type: "result", Mime: "image/svg+xml", Data: "<svg xmlns='http://www.w3.org/2000/svg'/>"}}},
		{name: "jpeg over svg", code: "JPEG()", wantResults: []api.Result{{Type: "result", Mime: "image/jpeg", Data: base64.StdEncoding.EncodeToString([]byte("\xff\xd8\xff\xe0fake"))}}},
		{name: "display", code: "from IPython.display import display\ndisplay('shown')\n5", wantResults: []api.Result{
			{Type: "display", Mime: "text/plain", Data: "'shown'"},
			{Type: "result", Mime: "text/plain", Data: "5"},
		}},
		{name: "error", code: "print('before')\n1/0", wantStdout: "before\n", wantError: "ZeroDivisionError"},
		{name: "ordered stream", code: "for i in range(3): print(i)", wantStdout: "0\n1\n2\n"},
		{name: "lone surrogates do not break output", code: "print('a\\ud800b')\n'\\udc80'", wantStdout: "a?b\n", wantResults: []api.Result{{Type: "result", Mime: "text/plain", Data: "'\\udc80'"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := run(t, k, tt.code)
			if o.stdout != tt.wantStdout {
				t.Errorf("stdout = %q, want %q", o.stdout, tt.wantStdout)
			}
			if o.stderr != tt.wantStderr {
				t.Errorf("stderr = %q, want %q", o.stderr, tt.wantStderr)
			}
			if len(o.results) != len(tt.wantResults) {
				t.Fatalf("results = %+v, want %+v", o.results, tt.wantResults)
			}
			for i := range o.results {
				if o.results[i] != tt.wantResults[i] {
					t.Errorf("result %d = %+v, want %+v", i, o.results[i], tt.wantResults[i])
				}
			}
			gotErr := ""
			if e := o.lastError(); e != nil {
				gotErr = e.Name
			}
			if gotErr != tt.wantError {
				t.Errorf("error = %+v, want name %q", o.errors, tt.wantError)
			}
			if o.count == 0 {
				t.Errorf("end event has no execution count")
			}
		})
	}
}

func TestSeedExample(t *testing.T) {
	k := startKernel(t)
	o := run(t, k, "import pandas as pd\ndf = pd.DataFrame({'x': [1, 2, 3], 'y': ['a', 'b', 'c']})\ndf")
	if len(o.results) != 1 || o.results[0].Mime != "text/html" || !strings.Contains(o.results[0].Data, "<table") {
		t.Errorf("DataFrame results = %+v, want one text/html table", o.results)
	}
	o = run(t, k, "df.x.sum()")
	if want := (api.Result{Type: "result", Mime: "text/plain", Data: "np.int64(6)"}); len(o.results) != 1 || o.results[0] != want {
		t.Errorf("df.x.sum() results = %+v, want [%+v]", o.results, want)
	}
	o = run(t, k, "1/0")
	e := o.lastError()
	if e == nil || len(o.errors) != 1 {
		t.Fatalf("1/0 errors = %+v, want one", o.errors)
	}
	if e.Name != "ZeroDivisionError" || e.Message != "division by zero" {
		t.Errorf("1/0 error = %s: %s, want ZeroDivisionError: division by zero", e.Name, e.Message)
	}
	if strings.Contains(e.Traceback, "\x1b") || !strings.Contains(e.Traceback, "ZeroDivisionError") {
		t.Errorf("traceback = %q, want plain text naming ZeroDivisionError", e.Traceback)
	}
}

func TestMatplotlibPNG(t *testing.T) {
	// startKernel passes MPLBACKEND=Agg, which would make plt.show() draw
	// nothing: Start must drop it so ipykernel picks its inline backend.
	k := startKernel(t)
	o := run(t, k, "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()")
	var pngs []api.Result
	for _, r := range o.results {
		if r.Mime == "image/png" {
			pngs = append(pngs, r)
		}
	}
	if len(pngs) != 1 || pngs[0].Type != "display" {
		t.Fatalf("results = %d (%v), want one display image/png", len(o.results), mimes(o.results))
	}
	if strings.HasSuffix(pngs[0].Data, "\n") {
		t.Errorf("base64 data ends with a newline")
	}
	b, err := base64.StdEncoding.DecodeString(pngs[0].Data)
	if err != nil {
		t.Fatalf("decoding PNG: %v", err)
	}
	if !strings.HasPrefix(string(b), "\x89PNG") {
		t.Errorf("PNG starts with %q, want \\x89PNG", b[:min(8, len(b))])
	}
}

func mimes(rs []api.Result) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Type+":"+r.Mime)
	}
	return out
}

func TestStateAndExecutionCount(t *testing.T) {
	k := startKernel(t)
	a := run(t, k, "x = 41")
	b := run(t, k, "x + 1")
	if len(b.results) != 1 || b.results[0].Data != "42" {
		t.Errorf("x + 1 = %+v, want 42", b.results)
	}
	if b.count != a.count+1 {
		t.Errorf("execution counts %d then %d, want consecutive", a.count, b.count)
	}
	c := run(t, k, "1/0")
	d := run(t, k, "x")
	if c.count != b.count+1 || d.count != c.count+1 {
		t.Errorf("counts after an error %d, %d, want %d, %d", c.count, d.count, b.count+1, b.count+2)
	}
	if len(d.errors) != 0 {
		t.Errorf("the call after an error failed: %+v", d.errors)
	}
}

func TestTimeoutKeepsState(t *testing.T) {
	k := startKernel(t)
	run(t, k, "kept = 'yes'")
	o := execute(t, context.Background(), k, Request{Code: "import time\nprint('start', flush=True)\ntime.sleep(30)", Timeout: 2 * time.Second})
	if o.err != nil || !o.ended {
		t.Fatalf("Execute: err %v, ended %v", o.err, o.ended)
	}
	if o.elapsed > 6*time.Second {
		t.Errorf("timed-out call took %s, want about 2s", o.elapsed)
	}
	if len(o.errors) != 1 {
		t.Fatalf("errors = %+v, want exactly one TimeoutError", o.errors)
	}
	e := o.errors[0]
	if e.Name != "TimeoutError" || !strings.Contains(e.Message, "timed out after 2s") || !strings.Contains(e.Message, "state kept") {
		t.Errorf("error = %s: %s, want TimeoutError saying 2s and state kept", e.Name, e.Message)
	}
	if o.stdout != "start\n" {
		t.Errorf("stdout = %q, want %q", o.stdout, "start\n")
	}
	if o.count == 0 {
		t.Errorf("end event has no execution count")
	}
	o = run(t, k, "kept")
	if len(o.results) != 1 || o.results[0].Data != "'yes'" {
		t.Errorf("after timeout kept = %+v, want 'yes'", o.results)
	}
}

func TestTimeoutIgnoredInterruptRestarts(t *testing.T) {
	k := startKernel(t)
	run(t, k, "lost = 1")
	code := "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)"
	o := execute(t, context.Background(), k, Request{Code: code, Timeout: time.Second})
	if o.err != nil || !o.ended {
		t.Fatalf("Execute: err %v, ended %v", o.err, o.ended)
	}
	e := o.lastError()
	if e == nil || e.Name != "TimeoutError" || !strings.Contains(e.Message, "restarted") {
		t.Fatalf("errors = %+v, want TimeoutError saying the kernel was restarted", o.errors)
	}
	o = run(t, k, "lost")
	if e := o.lastError(); e == nil || e.Name != "NameError" {
		t.Errorf("after restart lost gave %+v, want NameError", o.errors)
	}
}

func TestKernelDeath(t *testing.T) {
	k := startKernel(t)
	tests := []struct {
		name string
		code string
		want string // in the message
	}{
		{"os._exit", "import os\nos._exit(3)", "exit status 3"},
		{"segfault", "import ctypes\nctypes.string_at(0)", "SIGSEGV"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run(t, k, "before = 1")
			pid := k.Pid()
			o := run(t, k, tt.code)
			e := o.lastError()
			if e == nil || e.Name != ErrNameKernelDied || !strings.Contains(e.Message, tt.want) || !strings.Contains(e.Message, "restarted") {
				t.Fatalf("errors = %+v, want %s mentioning %q and restarted", o.errors, ErrNameKernelDied, tt.want)
			}
			if k.Pid() == pid {
				t.Errorf("kernel pid unchanged after death")
			}
			o = run(t, k, "1+1")
			if len(o.errors) != 0 || len(o.results) != 1 || o.results[0].Data != "2" {
				t.Errorf("next call: results %+v errors %+v, want 2", o.results, o.errors)
			}
			o = run(t, k, "before")
			if e := o.lastError(); e == nil || e.Name != "NameError" {
				t.Errorf("variables survived the death: %+v", o.results)
			}
		})
	}
	t.Run("SIGKILL during a call, as the OOM killer does", func(t *testing.T) {
		pid := k.Pid()
		time.AfterFunc(500*time.Millisecond, func() { syscall.Kill(pid, syscall.SIGKILL) })
		o := run(t, k, "import time\nprint('working', flush=True)\ntime.sleep(30)")
		if o.stdout != "working\n" {
			t.Errorf("stdout = %q, want the output before the kill", o.stdout)
		}
		e := o.lastError()
		if e == nil || e.Name != ErrNameKernelDied || !strings.Contains(e.Message, "SIGKILL") {
			t.Fatalf("errors = %+v, want %s mentioning SIGKILL", o.errors, ErrNameKernelDied)
		}
		if o := run(t, k, "1+1"); len(o.results) != 1 || o.results[0].Data != "2" {
			t.Errorf("next call: %+v %+v", o.results, o.errors)
		}
	})
	t.Run("just before the call, before the agent sees it die", func(t *testing.T) {
		// A kernel killed (E2B's suite kills its interpreter as root) has
		// closed its pipes before its exit is reaped: the code, which it
		// never read, runs in a new kernel, as after a death already seen.
		for i := range 5 {
			testenv.KillDead(t, k.Pid())
			o := run(t, k, "1+1")
			if len(o.errors) != 0 || len(o.results) != 1 || o.results[0].Data != "2" || !strings.Contains(o.stderr, "restarted") {
				t.Fatalf("call %d right after a kill: results %+v errors %+v stderr %q, want 2 and a note", i, o.results, o.errors, o.stderr)
			}
		}
	})
	t.Run("between calls", func(t *testing.T) {
		pid := k.Pid()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("killing kernel: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
		o := run(t, k, "1+1")
		if len(o.errors) != 0 || len(o.results) != 1 || o.results[0].Data != "2" {
			t.Errorf("call after death: results %+v errors %+v, want 2", o.results, o.errors)
		}
		if !strings.Contains(o.stderr, "restarted") {
			t.Errorf("stderr = %q, want a note that the kernel was restarted", o.stderr)
		}
	})
}

func TestQueuedCallsDoNotInterleave(t *testing.T) {
	k := startKernel(t)
	type span struct {
		name       string
		start, end time.Time
		stdout     string
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		spans []span
	)
	for _, name := range []string{"a", "b", "c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := span{name: name}
			code := "import time\nprint('" + name + "1', flush=True)\ntime.sleep(0.3)\nprint('" + name + "2')"
			err := k.Execute(context.Background(), Request{Code: code}, func(ev api.ExecuteEvent) {
				if s.start.IsZero() {
					s.start = time.Now()
				}
				if ev.Type == api.EventStdout {
					s.stdout += ev.Text
				}
				if ev.Type == api.EventEnd {
					s.end = time.Now()
				}
			})
			if err != nil {
				t.Errorf("Execute %s: %v", name, err)
			}
			mu.Lock()
			spans = append(spans, s)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
	for i, s := range spans {
		if want := s.name + "1\n" + s.name + "2\n"; s.stdout != want {
			t.Errorf("call %s stdout = %q, want %q", s.name, s.stdout, want)
		}
		if i > 0 && s.start.Before(spans[i-1].end) {
			t.Errorf("call %s started before %s ended", s.name, spans[i-1].name)
		}
	}
}

func TestEnvsDoNotLeak(t *testing.T) {
	k := startKernel(t)
	run(t, k, "import os\nos.environ['LZ_KEPT'] = 'original'")
	show := "print(os.environ.get('LZ_NEW'), os.environ.get('LZ_KEPT'))"
	a := execute(t, context.Background(), k, Request{Code: show, Envs: map[string]string{"LZ_NEW": "new 'quoted' \"value\"\n", "LZ_KEPT": "override"}})
	if a.err != nil {
		t.Fatal(a.err)
	}
	if want := "new 'quoted' \"value\"\n override\n"; a.stdout != want {
		t.Errorf("with envs stdout = %q, want %q", a.stdout, want)
	}
	b := run(t, k, show)
	if want := "None original\n"; b.stdout != want {
		t.Errorf("next call stdout = %q, want %q", b.stdout, want)
	}
	if b.count != a.count+1 {
		t.Errorf("counts %d then %d: env handling bumped the execution count", a.count, b.count)
	}
	// An error with stop_on_error set makes the kernel abort what comes
	// next for a moment; the restore must still get through.
	c := execute(t, context.Background(), k, Request{Code: "1/0", Envs: map[string]string{"LZ_NEW": "x"}})
	if e := c.lastError(); e == nil || e.Name != "ZeroDivisionError" {
		t.Errorf("errors = %+v, want ZeroDivisionError", c.errors)
	}
	d := run(t, k, show)
	if want := "None original\n"; d.stdout != want {
		t.Errorf("after an error stdout = %q, want %q", d.stdout, want)
	}
	run(t, k, "import subprocess")
	e := execute(t, context.Background(), k, Request{Code: "print(subprocess.run(['sh', '-c', 'echo $LZ_SUB'], capture_output=True, text=True).stdout, end='')", Envs: map[string]string{"LZ_SUB": "child"}})
	if e.stdout != "child\n" {
		t.Errorf("subprocess saw LZ_SUB = %q, want %q", e.stdout, "child\n")
	}
}

func TestCancelInterrupts(t *testing.T) {
	k := startKernel(t)
	run(t, k, "kept = 7")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	o := execute(t, ctx, k, Request{Code: "import time\ntime.sleep(60)\nkept = 8"})
	if !errors.Is(o.err, context.Canceled) {
		t.Fatalf("Execute err = %v, want context.Canceled", o.err)
	}
	if o.elapsed > 5*time.Second {
		t.Errorf("cancelled call returned after %s, want soon after 1s", o.elapsed)
	}
	start := time.Now()
	o = run(t, k, "kept")
	if len(o.results) != 1 || o.results[0].Data != "7" {
		t.Errorf("kept = %+v errors %+v, want 7 (interrupted, state kept)", o.results, o.errors)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("next call took %s: the kernel was still busy", d)
	}
}

func TestRestartLosesVariables(t *testing.T) {
	k := startKernel(t)
	run(t, k, "gone = 1")
	pid := k.Pid()
	if err := k.Restart(context.Background()); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if k.Pid() == pid {
		t.Errorf("pid unchanged after Restart")
	}
	if alive(pid) {
		t.Errorf("old kernel %d still running after Restart", pid)
	}
	o := run(t, k, "gone")
	if e := o.lastError(); e == nil || e.Name != "NameError" {
		t.Errorf("after Restart gone = %+v, want NameError", o.results)
	}
	o = run(t, k, "1+1")
	if len(o.results) != 1 || o.results[0].Data != "2" {
		t.Errorf("1+1 after restart = %+v", o.results)
	}
}

func TestRestartDuringCall(t *testing.T) {
	k := startKernel(t)
	done := make(chan outcome)
	go func() { done <- execute(t, context.Background(), k, Request{Code: "import time\ntime.sleep(60)"}) }()
	time.Sleep(time.Second)
	if err := k.Restart(context.Background()); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	select {
	case o := <-done:
		if e := o.lastError(); e == nil || e.Name != ErrNameKernelDied || !o.ended {
			t.Errorf("running call got %+v, want a KernelDiedError and end", o.events)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("running call did not end after Restart")
	}
	o := run(t, k, "1+1")
	if len(o.results) != 1 || o.results[0].Data != "2" {
		t.Errorf("1+1 after restart = %+v", o.results)
	}
}

func TestReseed(t *testing.T) {
	k := startKernel(t)
	run(t, k, "import random, numpy\nrandom.seed(1)\nnumpy.random.seed(1)")
	if err := k.Renew(context.Background(), Renewal{Reseed: true}); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	o := run(t, k, "(random.random() != random.Random(1).random(), numpy.random.random() != numpy.random.RandomState(1).random_sample())")
	if len(o.results) != 1 || o.results[0].Data != "(True, True)" {
		t.Errorf("generators after Reseed = %+v, want both differing from seed 1", o.results)
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	py := testenv.Python(t)
	base := runtime.NumGoroutine()
	baseFDs := openFDs(t)
	home := t.TempDir()
	k, err := Start(context.Background(), Config{Python: py, Cwd: home, Env: []string{"HOME=" + home}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	run(t, k, "import subprocess\nchild = subprocess.Popen(['sleep', '300'])\nprint(child.pid)")
	pid := k.Pid()
	o := run(t, k, "print(child.pid)")
	var child int
	for _, c := range strings.TrimSpace(o.stdout) {
		child = child*10 + int(c-'0')
	}
	// A thread that prints between calls: nobody consumes its output,
	// which must neither stall the next call nor leak readers at Close.
	run(t, k, "import threading, time\ndef spam():\n    while True:\n        print('x' * 200)\n        time.sleep(0.0002)\nthreading.Thread(target=spam, daemon=True).start()")
	time.Sleep(time.Second)
	if o := run(t, k, "1+1"); len(o.results) != 1 || o.results[0].Data != "2" {
		t.Errorf("1+1 amid background output = %+v", o.results)
	}
	time.Sleep(time.Second)
	if err := k.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, p := range []int{pid, child} {
		if alive(p) {
			t.Errorf("process %d still running after Close", p)
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
	if n := openFDs(t); n > baseFDs {
		t.Errorf("%d open fds after Close, %d before", n, baseFDs)
	}
	if err := k.Execute(context.Background(), Request{Code: "1"}, func(api.ExecuteEvent) {}); !errors.Is(err, ErrClosed) {
		t.Errorf("Execute after Close = %v, want ErrClosed", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Close, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// alive reports whether pid is a process that has not yet exited. Orphans
// killed with the kernel's group are reaped by PID 1, which may take its
// time: a zombie counts as gone.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestRoundTripLatency(t *testing.T) {
	k := startKernel(t)
	const n = 200
	ds := make([]time.Duration, 0, n)
	for range n {
		o := run(t, k, "1+1")
		if len(o.results) != 1 || o.results[0].Data != "2" {
			t.Fatalf("1+1 = %+v", o.results)
		}
		ds = append(ds, o.elapsed)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	t.Logf("1+1 round trip over %d calls: median %s, p90 %s, max %s", n, ds[n/2], ds[n*9/10], ds[n-1])
	if ds[n/2] > 200*time.Millisecond {
		t.Errorf("median round trip %s, want under 200ms", ds[n/2])
	}
}

func TestFloodedOutput(t *testing.T) {
	k := startKernel(t)
	var events, lines int
	var last string
	err := k.Execute(context.Background(), Request{Code: "from IPython.display import display\nfor i in range(200000): print(i)\nfor i in range(2000): display(i)"}, func(ev api.ExecuteEvent) {
		events++
		switch ev.Type {
		case api.EventStdout:
			lines += strings.Count(ev.Text, "\n")
		case api.EventResult:
			last = ev.Result.Data
			if events%200 == 0 {
				time.Sleep(5 * time.Millisecond) // a slowish client
			}
		}
	})
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if lines != 200000 || last != "1999" {
		t.Errorf("got %d lines and last display %q, want 200000 and 1999", lines, last)
	}
	o := run(t, k, "1+1")
	if len(o.results) != 1 || o.results[0].Data != "2" {
		t.Errorf("1+1 after flood = %+v", o.results)
	}
}

func TestCredential(t *testing.T) {
	testenv.RequiresRoot(t)
	py := testenv.Python(t)
	uid, gid := uint32(65534), uint32(65534) // nobody:nogroup
	probe := exec.Command(py, "-c", "import ipykernel")
	probe.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	if out, err := probe.CombinedOutput(); err != nil {
		// The test interpreter may live under a directory only root can
		// enter (pyenv in /root); then check at least the group switch.
		t.Logf("nobody cannot run %s (%v: %s); testing uid 0 with gid %d", py, err, bytes.TrimSpace(out), gid)
		uid = 0
	}
	// t.TempDir's parent is private to root: make ones nobody can enter.
	home, err := os.MkdirTemp("", "pykernel-cred-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	if err := os.Chmod(home, 0o777); err != nil {
		t.Fatal(err)
	}
	k, err := Start(context.Background(), Config{
		Python: py, Cwd: home,
		Env:        []string{"HOME=" + home, "PATH=/usr/bin:/bin"},
		Credential: &syscall.Credential{Uid: uid, Gid: gid},
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer k.Close()
	o := run(t, k, "import os\nprint(os.getuid(), os.getgid(), os.getcwd())")
	if want := fmt.Sprintf("%d %d %s\n", uid, gid, home); o.stdout != want {
		t.Errorf("kernel identity = %q, want %q", o.stdout, want)
	}
}

// A kernel whose interpreter does not exist fails Start promptly instead of
// waiting for readers that never ran.
func TestStartMissingPython(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	k, err := Start(ctx, Config{Python: "/nonexistent/python"})
	if err == nil {
		k.Close()
		t.Fatal("Start with a missing interpreter succeeded")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Start took %v to fail, want it prompt", d)
	}
}

func TestSetEnvAndImport(t *testing.T) {
	k := startKernel(t)
	ctx := context.Background()
	if err := k.Import(ctx, []string{"json", "email.mime.text"}); err != nil {
		t.Fatalf("Import: %v", err)
	}
	if err := k.Renew(ctx, Renewal{Set: map[string]string{"LZ_NEW": "v1", "HOME": "/elsewhere"}, Unset: []string{"LZ_GONE"}}); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	// Imported without a name, and without counting an execution.
	o := run(t, k, "import os, sys\n('email.mime.text' in sys.modules, 'json' in globals(), os.environ.get('LZ_NEW'), os.environ['HOME'], 'LZ_GONE' in os.environ)")
	if len(o.results) != 1 || o.results[0].Data != "(True, False, 'v1', '/elsewhere', False)" {
		t.Errorf("after Import and SetEnv = %+v, want (True, False, 'v1', '/elsewhere', False)", o.results)
	}
	if o.count != 1 {
		t.Errorf("execution count of the first call = %d, want 1", o.count)
	}
	// A restarted kernel process starts with the new environment.
	if err := k.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	o = run(t, k, "import os\nos.environ.get('LZ_NEW')")
	if len(o.results) != 1 || o.results[0].Data != "'v1'" {
		t.Errorf("LZ_NEW after restart = %+v, want 'v1'", o.results)
	}
}

func TestDisplayUpdatesAndClear(t *testing.T) {
	k := startKernel(t)
	code := `from IPython.display import display, update_display, clear_output
h = display('first', display_id=True)
h.update('second')
display('mine', display_id='m')
update_display('mine again', display_id='m')
clear_output(wait=True)
display('after clear')`
	o := run(t, k, code)
	want := []api.Result{
		{Type: "display", Mime: "text/plain", Data: "'first'"},
		{Type: "display", Mime: "text/plain", Data: "'second'"},
		{Type: "display", Mime: "text/plain", Data: "'mine'"},
		{Type: "display", Mime: "text/plain", Data: "'mine again'"},
		{Type: "display", Mime: "text/plain", Data: "'after clear'"},
	}
	if fmt.Sprint(o.results) != fmt.Sprint(want) {
		t.Errorf("results = %+v, want %+v", o.results, want)
	}
	if len(o.errors) != 0 {
		t.Errorf("errors = %+v", o.errors)
	}
}

func TestFiguresLeftOpen(t *testing.T) {
	k := startKernel(t)
	// No plt.show(): the inline backend shows figures still open when the
	// cell ends, after the cell's result, and closes them.
	o := run(t, k, "import matplotlib.pyplot as plt\nplt.figure()\nplt.plot([1, 2])\nplt.figure()\nplt.bar([1], [2])\n'done'")
	if got := mimes(o.results); fmt.Sprint(got) != "[result:text/plain display:image/png display:image/png]" {
		t.Fatalf("results = %v, want the result then two display PNGs", got)
	}
	o = run(t, k, "len(plt.get_fignums())")
	if len(o.results) != 1 || o.results[0].Data != "0" {
		t.Errorf("open figures after the cell = %+v, want 0", o.results)
	}
}

func TestMagicsAndShell(t *testing.T) {
	k := startKernel(t)
	tests := []struct {
		name, code string
		stdout     string // contained in stdout
		result     string // the result's data, if any
	}{
		{"line magic", "%time x = 1", "Wall time", ""},
		{"cell magic", "%%capture out\nprint('hidden')", "", ""},
		{"captured", "out.stdout", "", "'hidden\\n'"},
		{"shell escape", "!echo from-shell", "from-shell", ""},
		{"shell capture", "files = !echo a b\nfiles", "", "['a b']"},
		{"exit code", "!exit 3\n_exit_code", "", "3"},
		{"os.system in order", "print('one')\nimport os\nos.system('echo two')\nprint('three')", "one\ntwo\nthree\n", ""},
		{"exit() keeps the kernel", "kept_alive = 1\nexit()", "", ""},
		{"after exit()", "kept_alive", "", "1"},
		{"subprocess in order", "import subprocess\nprint('one')\nsubprocess.run(['echo', 'two'])\nprint('three')", "one\ntwo\nthree\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := run(t, k, tt.code)
			if len(o.errors) != 0 {
				t.Fatalf("errors = %+v", o.errors)
			}
			if !strings.Contains(o.stdout, tt.stdout) {
				t.Errorf("stdout = %q, want it to contain %q", o.stdout, tt.stdout)
			}
			if tt.result != "" && (len(o.results) == 0 || o.results[len(o.results)-1].Data != tt.result) {
				t.Errorf("results = %+v, want last %q", o.results, tt.result)
			}
		})
	}
}

func TestInputFailsClearly(t *testing.T) {
	k := startKernel(t)
	run(t, k, "kept = 1")
	for _, code := range []string{"input('name? ')", "import getpass\ngetpass.getpass()"} {
		o := execute(t, context.Background(), k, Request{Code: code, Timeout: 10 * time.Second})
		e := o.lastError()
		if e == nil || e.Name != "StdinNotImplementedError" || !strings.Contains(e.Message, "not supported") {
			t.Errorf("%s: errors = %+v, want StdinNotImplementedError saying input is not supported", code, o.errors)
		}
		if o.elapsed > 5*time.Second {
			t.Errorf("%s took %s: it waited for input", code, o.elapsed)
		}
	}
	o := run(t, k, "import sys\nsys.stdin.readline()")
	if len(o.results) != 1 || o.results[0].Data != "''" {
		t.Errorf("sys.stdin.readline() = %+v %+v, want '' at once", o.results, o.errors)
	}
	if o := run(t, k, "kept"); len(o.results) != 1 || o.results[0].Data != "1" {
		t.Errorf("kept = %+v, want 1", o.results)
	}
}

func TestInterruptKeepsState(t *testing.T) {
	k := startKernel(t)
	run(t, k, "kept = 'yes'")
	time.AfterFunc(time.Second, func() {
		if err := k.Interrupt(); err != nil {
			t.Errorf("Interrupt: %v", err)
		}
	})
	o := run(t, k, "import time\nfor i in range(600):\n    time.sleep(0.1)")
	if e := o.lastError(); e == nil || e.Name != "KeyboardInterrupt" {
		t.Fatalf("errors = %+v, want KeyboardInterrupt", o.errors)
	}
	if o.elapsed > 10*time.Second {
		t.Errorf("interrupted call took %s", o.elapsed)
	}
	if o := run(t, k, "kept, i < 599"); len(o.results) != 1 || o.results[0].Data != "('yes', True)" {
		t.Errorf("after interrupt = %+v %+v, want ('yes', True)", o.results, o.errors)
	}
}

func TestForkedChildOutput(t *testing.T) {
	k := startKernel(t)
	// A forked child's output goes through fds 1 and 2, never as frames that
	// could interleave with the kernel's own.
	code := `import os, multiprocessing as mp
def work(n):
    print('child', n, flush=True)
    return n * 2
with mp.get_context('fork').Pool(2) as pool:
    got = pool.map(work, range(4))
pid = os.fork()
if pid == 0:
    print('forked', flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print('parent', got)`
	o := run(t, k, code)
	if len(o.errors) != 0 {
		t.Fatalf("errors = %+v", o.errors)
	}
	for _, want := range []string{"child 0", "child 3", "forked", "parent [0, 2, 4, 6]"} {
		if !strings.Contains(o.stdout, want) {
			t.Errorf("stdout = %q, want it to contain %q", o.stdout, want)
		}
	}
	if o := run(t, k, "1+1"); len(o.results) != 1 || o.results[0].Data != "2" {
		t.Errorf("1+1 after forks = %+v %+v", o.results, o.errors)
	}
}

// A cell printing 100 MB streams through the agent in bounded memory: the
// kernel waits on a full pipe instead of the agent buffering its output.
func TestHugeOutputBoundedMemory(t *testing.T) {
	k := startKernel(t)
	runtime.GC()
	var peak uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var total int
	err := k.Execute(context.Background(), Request{Code: "import sys\nline = 'x' * 1023 + '\\n'\nfor i in range(100 * 1024):\n    sys.stdout.write(line)\nprint('big', flush=True)\nsys.stdout.write('y' * (8 << 20))"}, func(ev api.ExecuteEvent) {
		if ev.Type == api.EventStdout {
			total += len(ev.Text)
			time.Sleep(10 * time.Microsecond) // a client slower than the kernel
		}
	})
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	if want := 100<<20 + len("big\n") + 8<<20; total != want {
		t.Errorf("stdout bytes = %d, want %d", total, want)
	}
	t.Logf("peak Go heap in use while streaming 108 MiB: %d MiB", peak>>20)
	if peak > 64<<20 {
		t.Errorf("peak heap %d MiB while streaming, want it bounded (under 64 MiB)", peak>>20)
	}
}

func TestRenewDoesNotWait(t *testing.T) {
	k := startKernel(t)
	ctx := context.Background()
	done := make(chan outcome)
	go func() {
		done <- execute(t, ctx, k, Request{Code: "import time, os\ntime.sleep(3)\nos.environ.get('LZ_LATE')"})
	}()
	time.Sleep(500 * time.Millisecond)
	if err := k.Renew(ctx, Renewal{Set: map[string]string{"LZ_LATE": "v"}, Reseed: true}); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	var o outcome
	select {
	case o = <-done:
		t.Errorf("Renew returned after the running call ended: it waited for the kernel")
	default:
		o = <-done
	}
	if len(o.results) != 0 {
		t.Errorf("the running call saw the renewal: %+v", o.results)
	}
	if o := run(t, k, "os.environ.get('LZ_LATE')"); len(o.results) != 1 || o.results[0].Data != "'v'" {
		t.Errorf("next call LZ_LATE = %+v, want 'v'", o.results)
	}
}

// Fonts are read once into memory (FreeType's many small reads of a font
// file are system calls that gVisor traps), and nothing else changes.
func TestFontsReadFromMemory(t *testing.T) {
	k := startKernel(t)
	o := run(t, k, `import matplotlib.pyplot as plt, matplotlib.ft2font as ft
from matplotlib import font_manager as fm
font = fm.get_font(fm.findfont('DejaVu Sans'))
import io, os, matplotlib
plt.title('héllo')
plt.plot([1, 2])
# Backends that embed font files open font.fname as a path.
sizes = []
for fonttype in (3, 42):
    matplotlib.rcParams['pdf.fonttype'] = matplotlib.rcParams['ps.fonttype'] = fonttype
    for fmt in ('pdf', 'ps', 'svg'):
        b = io.BytesIO()
        plt.savefig(b, format=fmt)
        sizes.append(len(b.getvalue()) > 1000)
(fm.ft2font is ft, isinstance(font, ft.FT2Font), os.fspath(font.fname).endswith('.ttf') and all(sizes))`)
	if len(o.errors) != 0 || len(o.results) != 2 || o.results[0].Data != "(False, True, True)" || o.results[1].Mime != "image/png" {
		t.Errorf("results %v %+v errors %+v, want (False, True, True) then a PNG", mimes(o.results), o.results[:min(1, len(o.results))], o.errors)
	}
}

// Code that writes to the kernel's frame pipe itself breaks the stream:
// the kernel is ended and restarted, and the call says why.
func TestCorruptFrameStream(t *testing.T) {
	k := startKernel(t)
	o := run(t, k, "import os\nos.write(4, b'\\xff' * 64)\nimport time\ntime.sleep(30)")
	e := o.lastError()
	if e == nil || e.Name != ErrNameKernelDied || !strings.Contains(e.Message, "fd 4") {
		t.Fatalf("errors = %+v, want %s naming fd 4", o.errors, ErrNameKernelDied)
	}
	if o.elapsed > 10*time.Second {
		t.Errorf("the call took %s: it waited for the sleep", o.elapsed)
	}
	if o := run(t, k, "1+1"); len(o.results) != 1 || o.results[0].Data != "2" {
		t.Errorf("next call = %+v %+v, want 2", o.results, o.errors)
	}
}

// TestExecuteBundle: a request with Bundle gets every representation of
// a result beside the richest one; without it, none (the native API's
// results are one MIME type each).
func TestExecuteBundle(t *testing.T) {
	k := startKernel(t)
	run(t, k, `
class Rich:
    def _repr_html_(self): return "<b>rich</b>"
    def _repr_json_(self): return {"rich": True}
    def _repr_latex_(self): return "$rich$"
    def __repr__(self): return "Rich()"
`)
	o := execute(t, context.Background(), k, Request{Code: "Rich()", Timeout: time.Minute, Bundle: true})
	var bundle map[string]json.RawMessage
	for _, ev := range o.events {
		if ev.Type == api.EventResult {
			bundle = ev.Bundle
		}
	}
	want := map[string]string{"text/html": `"<b>rich</b>"`, "application/json": `{"rich": true}`, "text/latex": `"$rich$"`, "text/plain": `"Rich()"`}
	if len(bundle) != len(want) {
		t.Fatalf("bundle = %s; want the types %v", bundle, want)
	}
	for mime, v := range want {
		var got, w any
		json.Unmarshal(bundle[mime], &got)
		json.Unmarshal([]byte(v), &w)
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("bundle[%s] = %s; want %s", mime, bundle[mime], v)
		}
	}
	if o.results[0].Mime != "text/html" {
		t.Errorf("richest = %s; want text/html as without a bundle", o.results[0].Mime)
	}
	for _, ev := range run(t, k, "Rich()").events {
		if ev.Bundle != nil {
			t.Errorf("a request without Bundle got one: %+v", ev)
		}
	}
}

// TestImageSaveShows: a PIL image saved to a path is shown too, a PNG
// result of the call, as in E2B's interpreter; one saved to a file object
// is not, and the file is written either way.
func TestImageSaveShows(t *testing.T) {
	k := startKernel(t)
	o := run(t, k, `from PIL import Image
import io, os
img = Image.new('RGBA', (16, 16), (255, 0, 0, 255))
img.save('test.png')
img.save(io.BytesIO(), format='PNG')
print(os.path.getsize('test.png') > 0)`)
	var pngs int
	for _, r := range o.results {
		if r.Mime == "image/png" && r.Type == "display" {
			pngs++
		}
	}
	if pngs != 1 || o.stdout != "True\n" || len(o.errors) != 0 {
		t.Errorf("results %v stdout %q errors %+v; want one display image/png and the file written", mimes(o.results), o.stdout, o.errors)
	}
}

// TestBoxplotTakesLabels: boxplot(labels=...), matplotlib 3.10's name
// (E2B's interpreter's version) for what 3.11 calls only tick_labels, is
// taken by Axes.boxplot and plt.boxplot whichever matplotlib the sandbox
// has.
func TestBoxplotTakesLabels(t *testing.T) {
	k := startKernel(t)
	o := run(t, k, `import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.boxplot([[1, 2, 3], [4, 5, 6]], labels=['a', 'b'], patch_artist=True)
plt.figure()
plt.boxplot([[1, 2, 3]], labels=['c'])
[t.get_text() for t in ax.get_xticklabels()], [t.get_text() for t in plt.gca().get_xticklabels()]`)
	if len(o.errors) != 0 || len(o.results) == 0 || o.results[0].Data != "(['a', 'b'], ['c'])" {
		t.Errorf("results %v %+v errors %+v; want (['a', 'b'], ['c'])", mimes(o.results), o.results[:min(1, len(o.results))], o.errors)
	}
}
