package agent

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/testenv"
)

// TestAgentDependencies keeps server packages out of the agent binary: it
// runs in every sandbox and must stay small, static and free of the
// server's secrets-handling code.
func TestAgentDependencies(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./cmd/lizard-agent")
	cmd.Dir = testenv.RepoRoot(t)
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{"server", "store", "manager", "sandbox", "template", "auth", "cli"}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			p := "github.com/lizard-build/lizard/internal/" + f
			if pkg == p || strings.HasPrefix(pkg, p+"/") {
				t.Errorf("lizard-agent depends on server package %s", pkg)
			}
		}
		// Python kernels speak the pykernel protocol over pipes; ZeroMQ
		// (and the Jupyter wire protocol on it) cost tens of ms a call.
		if strings.HasPrefix(pkg, "github.com/go-zeromq/") {
			t.Errorf("lizard-agent depends on %s; kernels must not need ZeroMQ", pkg)
		}
		if pkg == "runtime/cgo" {
			t.Errorf("lizard-agent depends on runtime/cgo; it must build with CGO_ENABLED=0")
		}
	}
}
