package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/testenv"
)

// TestE2BCluster runs E2B's code interpreter SDK (pinned in
// test/requirements.txt) against lizard api + lizard node with only
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set: a create and run_code
// through one api process, then connect, run_code and list through the
// other, then the sandbox killed under a running cell, whose call must end
// with the SDK's TimeoutException within 2 s (e2e/testdata/e2b_interpreter.py
// asserts each). The single-machine suite is sdk/python/tests/e2e/test_e2b.py.
func TestE2BCluster(t *testing.T) {
	c, clients := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Python(t), filepath.Join(testenv.RepoRoot(t), "e2e", "testdata", "e2b_interpreter.py"))
	cmd.Env = append(os.Environ(),
		"E2B_API_URL="+c.apis[0].url+"/e2b",
		"E2B_SANDBOX_URL="+c.apis[0].url+"/e2b/sandbox",
		"E2B_API_KEY="+c.key,
		"OTHER_API="+c.apis[1].url,
	)
	out, err := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || lines[len(lines)-1] != "ok" {
		t.Fatalf("e2b_interpreter.py: %v\n%s", err, out)
	}
	var figures struct {
		KillEndS float64 `json:"killEndS"`
	}
	if len(lines) < 2 || json.Unmarshal([]byte(lines[len(lines)-2]), &figures) != nil {
		t.Fatalf("no figures in the script's output:\n%s", out)
	}
	t.Logf("run_code ended %.3fs after its sandbox was killed", figures.KillEndS)
	if figures.KillEndS > 2 {
		t.Errorf("run_code ended %.3fs after the kill; want within 2s", figures.KillEndS)
	}
	list, err := clients[0].ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list {
		if sb.State == "running" || sb.State == "paused" {
			t.Errorf("sandbox %s left %s", sb.SandboxID, sb.State)
		}
	}
}
