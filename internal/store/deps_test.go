package store

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/testenv"
)

// TestLeafDependencies keeps the database package on its floor: it records
// network policies (package netpolicy) but links nothing of the node that
// enforces them — not its resolver and proxy (egress), its namespaces and
// nftables (netns) nor a DNS library — so that `lizard api`, the CLI's
// admin commands and every tool over the store stay small and never reach
// up into the node.
func TestLeafDependencies(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./internal/store")
	cmd.Dir = testenv.RepoRoot(t)
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const internal = "github.com/lizard-build/lizard/internal/"
	allowed := map[string]bool{"store": true, "netpolicy": true, "errdefs": true}
	for _, dep := range strings.Fields(string(out)) {
		if rest, ok := strings.CutPrefix(dep, internal); ok && !allowed[rest] {
			t.Errorf("internal/store depends on %s; it may use only api, errdefs and netpolicy of Lizard's", dep)
		}
		if strings.HasPrefix(dep, "github.com/miekg/dns") || strings.HasPrefix(dep, "github.com/vishvananda/") || strings.HasPrefix(dep, "github.com/google/nftables") {
			t.Errorf("internal/store links %s, a dependency of the node's network code", dep)
		}
		// Issue 35's words, whatever the package is called: no egress,
		// netns or DNS library of anyone's (the standard library's own
		// resolver, under net, is not one: its first element has no dot).
		third := strings.Contains(strings.Split(dep, "/")[0], ".")
		if strings.Contains(dep, "egress") || strings.Contains(dep, "netns") || third && strings.Contains(dep, "dns") {
			t.Errorf("internal/store links %s: the store names no egress, netns or DNS package (issue 35)", dep)
		}
	}
}
