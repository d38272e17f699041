package agent

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/pykernel"
)

// TestNoPython: a template built on an image without Lizard's kernel's
// needs is ready at once, answers Python with a 400 naming what is
// missing, and runs everything else.
func TestNoPython(t *testing.T) {
	withPython := filepath.Join(t.TempDir(), "python")
	os.WriteFile(withPython, []byte("#!/bin/sh\n"), 0o755)
	for _, tc := range []struct {
		name, python string
		startErr     string
		want         string
	}{
		{"no interpreter", "/nonexistent/venv/bin/python", "fork/exec /nonexistent/venv/bin/python: no such file or directory",
			"there is no /nonexistent/venv/bin/python"},
		{"no IPython", withPython, "kernel exited during start-up (exit status 1): ModuleNotFoundError: No module named 'IPython'",
			withPython + " has no IPython module"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ks := &kernels{make: func(pykernel.Config) (*fakeKernel, error) { return nil, errors.New(tc.startErr) }}
			ta := newTestAgentKernels(t, ks, func(c *Config) { c.Python = tc.python })
			if code, body := ta.do(t, "GET", "/ready", nil); code != http.StatusNoContent {
				t.Errorf("GET /ready: %d %s, want 204: no kernel to wait for", code, body)
			}
			code, body := ta.do(t, "POST", "/execute", api.ExecuteRequest{Code: "print(1)"})
			if code != http.StatusBadRequest || !strings.Contains(string(body), tc.want) || !strings.Contains(string(body), "commands, files, terminals and processes work") {
				t.Errorf("Python: %d %s; want a 400 saying %q", code, body, tc.want)
			}
			ex := ta.execute(t, api.ExecuteRequest{Code: "echo hi", Language: "bash"})
			if ex.stdout != "hi\n" {
				t.Errorf("bash: got %q, want hi", ex.stdout)
			}
		})
	}
}
