package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
)

// TestDataDirInUse: a second `lizard serve` on a running server's data
// directory exits at once saying so (the pid, --data-dir) instead of
// reconciling the first's sandboxes as its own; the first goes on serving.
func TestDataDirInUse(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_123")
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ms(120_000)})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer c.KillSandbox(ctx, sb.SandboxID)

	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	second := exec.CommandContext(cctx, s.bin, "serve", "--listen", freeAddr(t), "--data-dir", s.dataDir,
		"--cache-dir", cacheDir(), "--address-pool", fmt.Sprintf("169.254.%d.0/24", s.pool),
		"--egress=none", "--metrics-listen=")
	out, err := second.CombinedOutput()
	if err == nil {
		t.Fatalf("a second lizard serve on %s exited 0; want a refusal\n%s", s.dataDir, out)
	}
	pid := fmt.Sprint(s.cmd.Process.Pid)
	if !strings.Contains(string(out), "is in use by another lizard serve or node (pid "+pid+")") ||
		!strings.Contains(string(out), "--data-dir") {
		t.Errorf("second lizard serve: %v\n%s\nwant the data directory in use by pid %s, and --data-dir", err, out, pid)
	}
	if strings.Contains(string(out), "reconciled") {
		t.Errorf("the second server reconciled the first's sandboxes before refusing:\n%s", out)
	}
	if got := run(t, c, sb.SandboxID, "python", "6*7"); len(got.Results) != 1 || got.Results[0].Data != "42" {
		t.Errorf("the first server's sandbox after the refusal: %+v", got)
	}
}
