package agent

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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
