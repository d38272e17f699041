package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/testenv"
)

// TestMCP drives `lizard mcp` over stdio and /mcp over streamable HTTP on a
// real lizard serve with the official MCP Python client (pinned in
// test/requirements.txt): tools listed, a sandbox created and pinned,
// pandas's sum as text, a matplotlib chart as image content, an exception
// with its traceback as an error result, the sandbox killed, and a wrong
// key refused (e2e/testdata/mcp_client.py asserts each).
func TestMCP(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_mcp")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Python(t), filepath.Join(testenv.RepoRoot(t), "e2e", "testdata", "mcp_client.py"))
	cmd.Env = append(os.Environ(), "LIZARD_BIN="+s.bin, "LIZARD_API_URL="+s.url, "LIZARD_API_KEY="+s.keys[c])
	out, err := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || lines[len(lines)-1] != "ok" {
		t.Fatalf("mcp_client.py: %v\n%s", err, out)
	}
	list, err := c.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list {
		if sb.State == "running" || sb.State == "paused" {
			t.Errorf("sandbox %s left %s", sb.SandboxID, sb.State)
		}
	}
}
