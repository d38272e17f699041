package cli

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/testenv"
)

// TestClientDependencies keeps server code out of the client commands and
// out of the client-only CLI mounted into every sandbox: they talk to the
// API through the Go client and the api types, nothing else of Lizard's.
func TestClientDependencies(t *testing.T) {
	for _, pkg := range []string{"./internal/cli", "./cmd/lizard-client"} {
		cmd := exec.Command("go", "list", "-deps", pkg)
		cmd.Dir = testenv.RepoRoot(t)
		cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		const internal = "github.com/lizard-build/lizard/internal/"
		for _, dep := range strings.Fields(string(out)) {
			rest, ok := strings.CutPrefix(dep, internal)
			// mcp is the MCP server's tools, which call the API through
			// the Go client too: its own dependencies are in this list.
			// version is a leaf holding one string (`lizard version`).
			// dockerfile turns a Dockerfile and its build context into
			// api types (`lizard template build -f Dockerfile`), its
			// errors errdefs' (a leaf over api).
			if ok && rest != "cli" && rest != "mcp" && rest != "version" && rest != "dockerfile" && rest != "errdefs" {
				t.Errorf("%s depends on %s; client commands may use only the Go client and api", pkg, dep)
			}
			if dep == "modernc.org/sqlite" || strings.HasPrefix(dep, "github.com/vishvananda/") {
				t.Errorf("%s links server dependency %s", pkg, dep)
			}
		}
	}
}
