package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
)

// TestLizardTokenChildren: a sandbox's lizardToken can make sandboxes (the
// key can change its project, as documented), but none that outlives the
// server's --max-child-timeout, and each records its parent in the audit
// log, so the chain is there to read.
func TestLizardTokenChildren(t *testing.T) {
	s := startServer(t, "--max-child-timeout=10m")
	c := s.createProject("chain")
	ctx := context.Background()
	parent := newSandbox(t, c, api.CreateSandboxRequest{LizardToken: true})
	key := strings.TrimSpace(execOK(t, c, parent.SandboxID, "sh", "-c", "echo $LIZARD_API_KEY"))
	child := s.client(key) // the parent's key, as code inside would use it

	if _, err := child.CreateSandbox(ctx, api.CreateSandboxRequest{LizardToken: true, TimeoutMs: ptr(int64(0))}); !isStatus(err, 400) ||
		!strings.Contains(err.Error(), "max-child-timeout") {
		t.Errorf("child with timeoutMs 0 = %v; want 400 naming --max-child-timeout", err)
	}
	if _, err := child.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ptr(int64(11 * 60_000))}); !isStatus(err, 400) {
		t.Errorf("child past the bound = %v; want 400", err)
	}
	kid, err := child.CreateSandbox(ctx, api.CreateSandboxRequest{LizardToken: true})
	if err != nil {
		t.Fatalf("child create: %v", err)
	}
	t.Cleanup(func() { c.KillSandbox(context.Background(), kid.SandboxID) })
	if kid.TimeoutMs != 5*60_000 || kid.ExpiresAt == nil || time.Until(*kid.ExpiresAt) > 10*time.Minute {
		t.Errorf("child = timeout %d, expires %v; want the default 5 min, bounded", kid.TimeoutMs, kid.ExpiresAt)
	}
	if _, err := child.SetTimeout(ctx, kid.SandboxID, 0); !isStatus(err, 400) {
		t.Errorf("setTimeout 0 on a child = %v; want 400", err)
	}
	// The parent's project key is not bound: it made the parent.
	if _, err := c.SetTimeout(ctx, parent.SandboxID, 0); err != nil {
		t.Errorf("setTimeout 0 on a sandbox made with a project key: %v", err)
	}
	// A grandchild, through the child's own key, is bounded too.
	kidKey := strings.TrimSpace(execOK(t, c, kid.SandboxID, "sh", "-c", "echo $LIZARD_API_KEY"))
	forks, err := s.client(kidKey).Fork(ctx, kid.SandboxID, api.ForkRequest{})
	if err != nil {
		t.Fatalf("fork through the child's key: %v", err)
	}
	t.Cleanup(func() { c.KillSandbox(context.Background(), forks[0].SandboxID) })
	if forks[0].ExpiresAt == nil {
		t.Errorf("a fork made with a child's key never expires")
	}

	// The audit log shows the chain: parent → child → fork.
	links := map[string]string{}
	for _, line := range strings.Split(s.audit(t), "\n") {
		var e struct{ Msg, SandboxID, ParentSandboxID string }
		var raw map[string]any
		if json.Unmarshal([]byte(line), &raw) != nil || raw["msg"] != "sandbox.create" {
			continue
		}
		e.SandboxID, _ = raw["sandbox_id"].(string)
		e.ParentSandboxID, _ = raw["parent_sandbox_id"].(string)
		links[e.SandboxID] = e.ParentSandboxID
	}
	if links[kid.SandboxID] != parent.SandboxID || links[forks[0].SandboxID] != kid.SandboxID || links[parent.SandboxID] != "" {
		t.Errorf("audit chain = %v; want %s → %s → %s", links, parent.SandboxID, kid.SandboxID, forks[0].SandboxID)
	}
}
