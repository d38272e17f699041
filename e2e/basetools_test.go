package e2e

// What E2B's base image has and code written for E2B runs (issue 34):
// curl, and python as Python 3, as the sandbox user.

import (
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
)

func TestBaseTools(t *testing.T) {
	s := startServer(t)
	c := s.createProject("basetools")
	id := newSandbox(t, c, api.CreateSandboxRequest{}).SandboxID
	if got := execOK(t, c, id, "curl", "--version"); !strings.HasPrefix(got, "curl ") {
		t.Errorf("curl --version = %q", got)
	}
	if got := strings.TrimSpace(execOK(t, c, id, "python", "-c", "import sys; print(sys.version_info[0], 6*7)")); got != "3 42" {
		t.Errorf("python -c ... = %q; want Python 3 printing 42", got)
	}
	// curl reaches a server in the sandbox (E2B's examples check their
	// own servers with it).
	out := execOK(t, c, id, "sh", "-c", "python -m http.server 8123 --bind 127.0.0.1 >/dev/null 2>&1 & pid=$!; for i in $(seq 50); do curl -sf http://127.0.0.1:8123/ >/dev/null && break; sleep 0.2; done; curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8123/; kill $pid")
	if strings.TrimSpace(out) != "200" {
		t.Errorf("curl of python -m http.server in the sandbox = %q; want 200", out)
	}
}
