package control_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/testenv"
)

// TestSpeaksTheSeam keeps the control plane off the runtime: it decides
// in the seam's terms (node.Plan, node.Limits, node.Sandbox) and asks a
// template builder for a base's key, never a runtime's Spec, Limits or
// Artifact. (It links the runtime's package through node, which runs it;
// what it may not do is name it.)
func TestSpeaksTheSeam(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, "./internal/control")
	cmd.Dir = testenv.RepoRoot(t)
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const runtime = "github.com/lizard-build/lizard/internal/sandbox"
	for _, imp := range strings.Fields(string(out)) {
		if imp == runtime || strings.HasPrefix(imp, runtime+"/") {
			t.Errorf("internal/control imports %s; use the seam's types (package node) instead", imp)
		}
	}
}
