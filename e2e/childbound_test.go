package e2e

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// TestTokenChildBound: a sandbox made with another sandbox's lizardToken
// lives within --max-child-timeout of its creation, and so does its own
// key, whatever becomes of it: onTimeout "pause" is refused for it, its key
// stops working at the bound although it is paused (not ended, so not
// revoked), and the paused child cannot be resumed past the bound, even
// with a project key.
func TestTokenChildBound(t *testing.T) {
	const bound = 20 * time.Second
	s := startServer(t, "--max-child-timeout="+bound.String())
	c := s.createProject("bound")
	ctx := context.Background()
	parent := newSandbox(t, c, api.CreateSandboxRequest{LizardToken: true, TimeoutMs: ms(600_000)})
	pc := s.client(strings.TrimSpace(execOK(t, c, parent.SandboxID, "sh", "-c", "echo $LIZARD_API_KEY")))

	if _, err := pc.CreateSandbox(ctx, api.CreateSandboxRequest{LizardToken: true, OnTimeout: api.OnTimeoutPause}); !isStatus(err, 400) ||
		!strings.Contains(err.Error(), "max-child-timeout") {
		t.Errorf("a child with onTimeout pause = %v; want 400 naming --max-child-timeout", err)
	}

	begin := time.Now()
	kid, err := pc.CreateSandbox(ctx, api.CreateSandboxRequest{LizardToken: true})
	if err != nil {
		t.Fatalf("child create: %v", err)
	}
	t.Cleanup(func() { c.KillSandbox(context.Background(), kid.SandboxID) })
	kc := s.client(strings.TrimSpace(execOK(t, c, kid.SandboxID, "sh", "-c", "echo $LIZARD_API_KEY")))
	if _, err := kc.ListSandboxes(ctx, client.ListOptions{}); err != nil {
		t.Fatalf("the child's key within its bound: %v", err)
	}
	// Paused, the child does not end at its timeout, so its key is not
	// revoked: only its expiry stops it.
	if _, err := c.PauseSandbox(ctx, kid.SandboxID); err != nil {
		t.Fatalf("pausing the child: %v", err)
	}
	if d := time.Until(begin.Add(bound + time.Second)); d > 0 {
		time.Sleep(d)
	}
	if sb, err := c.GetSandbox(ctx, kid.SandboxID); err != nil || sb.State != api.StatePaused {
		t.Fatalf("the child past its bound = %+v, %v; want it paused", sb, err)
	}

	var ce *client.Error
	calls := map[string]func() error{
		"list":   func() error { _, err := kc.ListSandboxes(ctx, client.ListOptions{}); return err },
		"create": func() error { _, err := kc.CreateSandbox(ctx, api.CreateSandboxRequest{}); return err },
		"resume": func() error { _, err := kc.ResumeSandbox(ctx, kid.SandboxID, api.ResumeRequest{}); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.As(err, &ce) || ce.Status != http.StatusUnauthorized {
			t.Errorf("%s with the child's key past its bound = %v; want 401", name, err)
		}
	}
	if _, err := c.ResumeSandbox(ctx, kid.SandboxID, api.ResumeRequest{}); !errors.As(err, &ce) || ce.Status != http.StatusConflict ||
		!strings.Contains(ce.Message, "max-child-timeout") {
		t.Errorf("resume of the child past its bound with the project key = %v; want 409 naming --max-child-timeout", err)
	}
	// The parent's own key is not bound: a project key made the parent.
	if _, err := pc.ListSandboxes(ctx, client.ListOptions{}); err != nil {
		t.Errorf("the parent's key: %v", err)
	}
}
