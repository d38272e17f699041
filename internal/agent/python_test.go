package agent

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/testenv"
)

// TestPythonRealKernel runs Python through the real pykernel package.
func TestPythonRealKernel(t *testing.T) {
	python := testenv.Python(t)
	ta := newTestAgent(t, func(c *Config) {
		c.Python = python
		c.StartKernel = nil // the real pykernel.Start
	})
	run := func(t *testing.T, req api.ExecuteRequest) execution {
		t.Helper()
		return ta.execute(t, req)
	}
	text := func(ex execution) string {
		for _, r := range ex.results {
			if r.Mime == "text/plain" {
				return r.Data
			}
		}
		return ""
	}

	t.Run("state carries over", func(t *testing.T) {
		run(t, api.ExecuteRequest{Code: "import pandas as pd\ndf = pd.DataFrame({'x': [1, 2, 3]})"})
		ex := run(t, api.ExecuteRequest{Code: "df.x.sum()"})
		if got := text(ex); got != "np.int64(6)" || ex.err != nil {
			t.Errorf("df.x.sum() = %q (error %+v), want np.int64(6)", got, ex.err)
		}
		if end := ex.events[len(ex.events)-1]; end.ExecutionCount < 2 {
			t.Errorf("end event %+v, want an execution count", end)
		}
	})
	t.Run("error", func(t *testing.T) {
		ex := run(t, api.ExecuteRequest{Language: "python", Code: "print('before')\n1/0"})
		if ex.err == nil || ex.err.Name != "ZeroDivisionError" || ex.stdout != "before\n" {
			t.Errorf("got stdout %q error %+v, want before and ZeroDivisionError", ex.stdout, ex.err)
		}
	})
	t.Run("environment and cwd", func(t *testing.T) {
		ex := run(t, api.ExecuteRequest{Code: "import os; '|'.join([os.getcwd(), os.environ['HOME'], os.environ.get('SANDBOX_VAR'), os.environ.get('CALL')])",
			Envs: map[string]string{"CALL": "yes"}})
		want := "'" + ta.home + "|" + ta.home + "|from-sandbox|yes'"
		if got := text(ex); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
		ex = run(t, api.ExecuteRequest{Code: "os.environ.get('CALL')"})
		if got := text(ex); got != "" {
			t.Errorf("per-call env leaked into the next call: %q", got)
		}
	})
	t.Run("timeout keeps state", func(t *testing.T) {
		run(t, api.ExecuteRequest{Code: "kept = 'still here'"})
		start := time.Now()
		ex := run(t, api.ExecuteRequest{Code: "import time\ntime.sleep(30)", TimeoutMs: i64(1000)})
		if ex.err == nil || ex.err.Name != ErrNameTimeout || time.Since(start) > 15*time.Second {
			t.Errorf("error %+v after %v, want TimeoutError soon", ex.err, time.Since(start))
		}
		if got := text(run(t, api.ExecuteRequest{Code: "kept"})); got != "'still here'" {
			t.Errorf("after timeout kept = %q, want 'still here'", got)
		}
	})
	t.Run("chart", func(t *testing.T) {
		ex := run(t, api.ExecuteRequest{Code: "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()"})
		if len(ex.results) != 1 || ex.results[0].Mime != "image/png" || ex.results[0].Type != api.ResultTypeDisplay {
			t.Errorf("results %+v, want one image/png display", ex.results)
		}
	})
	t.Run("output is bounded", func(t *testing.T) {
		ex := run(t, api.ExecuteRequest{Code: "print('x' * 20_000_000)\n'done'"})
		if len(ex.stdout) != DefaultMaxOutputBytes {
			t.Errorf("stdout %d bytes, want %d", len(ex.stdout), DefaultMaxOutputBytes)
		}
		if !regexp.MustCompile(`^\[lizard: output truncated after 8 MiB; \d+ bytes dropped\]\n$`).MatchString(ex.stderr) {
			t.Errorf("stderr %q, want the truncation marker", ex.stderr)
		}
		if got := text(ex); got != "'done'" {
			t.Errorf("result after truncated output = %q, want 'done'", got)
		}
	})
	t.Run("contexts", func(t *testing.T) {
		dir := filepath.Join(ta.home, "ctx")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		var c api.Context
		ta.json(t, "POST", "/contexts", api.CreateContextRequest{Language: "python", Cwd: dir}, &c, http.StatusCreated)
		ex := run(t, api.ExecuteRequest{ContextID: c.ID, Code: "import os; os.getcwd()"})
		if got := text(ex); got != "'"+dir+"'" {
			t.Errorf("cwd in context = %q, want %q", got, dir)
		}
		ex = run(t, api.ExecuteRequest{ContextID: c.ID, Code: "kept"})
		if ex.err == nil || ex.err.Name != "NameError" {
			t.Errorf("default context's variable visible in a new context: %+v", ex)
		}
		run(t, api.ExecuteRequest{ContextID: c.ID, Code: "mine = 1"})
		ta.json(t, "POST", "/contexts/"+c.ID+"/restart", nil, nil, http.StatusOK)
		ex = run(t, api.ExecuteRequest{ContextID: c.ID, Code: "mine"})
		if ex.err == nil || ex.err.Name != "NameError" {
			t.Errorf("variable survived a restart: %+v", ex)
		}
		if status, b := ta.do(t, "DELETE", "/contexts/"+c.ID, nil); status != http.StatusNoContent {
			t.Errorf("DELETE: %d %s", status, b)
		}
		if got := text(run(t, api.ExecuteRequest{Code: "kept"})); !strings.Contains(got, "still here") {
			t.Errorf("default context lost its state: %q", got)
		}
	})
}

// TestPythonKernelOnFullDisk: with the sandbox's disk full, a Python kernel
// whose IPython profile directory is not there yet cannot start (IPython
// copies a README into it) and the call is told so with what to do. Such a
// start used to end in the kernel's own exit 3 times in 4 and wait for the
// 2-minute start timeout the other: Python's exit flushed the traceback
// through a lock its frozen flusher thread held (e2e
// TestAdversarialDiskOnlyPause before 793c195). Each call below starts a
// kernel afresh without the profile directory.
func TestPythonKernelOnFullDisk(t *testing.T) {
	testenv.RequiresRoot(t)
	python := testenv.Python(t)
	home := t.TempDir()
	if err := syscall.Mount("tmpfs", home, "tmpfs", 0, "size=256k,mode=0755"); err != nil {
		t.Fatalf("mounting a small tmpfs on %s: %v", home, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(home, syscall.MNT_DETACH) })
	fill, err := os.Create(filepath.Join(home, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = fill.Write(make([]byte, 64<<10))
	}
	fill.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling %s: %v, want ENOSPC", home, err)
	}
	ta := newTestAgent(t, func(c *Config) {
		c.Python = python
		c.StartKernel = nil // the real pykernel.Start
		c.Home = home
	})
	full := func(what string, status, want int, body []byte) {
		t.Helper()
		if status != want || !strings.Contains(string(body), "the sandbox's disk is full") || !strings.Contains(string(body), "free space") ||
			!strings.Contains(string(body), "No space left on device") {
			t.Errorf("%s on a full disk: status %d, body %s; want %d saying the disk is full and to free space", what, status, body, want)
		}
	}
	noProfile := func() {
		t.Helper()
		if err := os.RemoveAll(filepath.Join(home, ".ipython")); err != nil {
			t.Fatal(err)
		}
	}
	// The default kernel's start at the agent's.
	status, body := ta.do(t, "GET", "/ready", nil)
	full("the default kernel", status, http.StatusInternalServerError, body)
	for i := range 4 {
		noProfile()
		status, body := ta.do(t, "POST", "/execute", api.ExecuteRequest{Code: "1 + 1"})
		full(fmt.Sprintf("execute %d", i+1), status, http.StatusServiceUnavailable, body)
	}
	noProfile()
	status, body = ta.do(t, "POST", "/contexts/default-python/restart", nil)
	full("restart", status, http.StatusInternalServerError, body)
	noProfile()
	status, body = ta.do(t, "POST", "/contexts", api.CreateContextRequest{Language: "python"})
	full("a new context", status, http.StatusInternalServerError, body)

	// Room again: the next call starts a kernel and runs.
	if err := os.Remove(filepath.Join(home, "fill")); err != nil {
		t.Fatal(err)
	}
	if ex := ta.execute(t, api.ExecuteRequest{Code: "print(1 + 1)"}); ex.stdout != "2\n" || ex.err != nil {
		t.Errorf("after freeing the disk: stdout %q, error %+v; want 2", ex.stdout, ex.err)
	}
}
