package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
)

// TestQuotaLockPerProject: admission on SQLite holds one project's lock
// in the process, never a lock of every project: p2 is admitted while p1's is held, and p1's next
// admission waits for it.
func TestQuotaLockPerProject(t *testing.T) {
	e := nodetest.New(t)
	q := &node.Quota{Store: e.Store}
	ctx := context.Background()
	_, release, err := q.Admit(ctx, "p1", 0)
	if err != nil {
		t.Fatal(err)
	}
	other := make(chan error, 1)
	go func() {
		_, r, err := q.Admit(ctx, "p2", 0)
		if err == nil {
			r()
		}
		other <- err
	}()
	select {
	case err := <-other:
		if err != nil {
			t.Fatalf("admitting p2: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("p2's admission waited for p1's lock")
	}
	same := make(chan struct{})
	go func() {
		_, r, err := q.Admit(ctx, "p1", 0)
		if err == nil {
			r()
		}
		close(same)
	}()
	select {
	case <-same:
		t.Fatal("p1 was admitted twice at once")
	case <-time.After(100 * time.Millisecond):
	}
	release()
	<-same
}

// TestQuotaAdmit: the live-sandbox quota counts the project's live
// sandboxes as the node records them, and says how to make room.
func TestQuotaAdmit(t *testing.T) {
	q := &node.Quota{MaxLive: 2}
	e := nodetest.New(t, func(c *node.Config) { q.Store, c.Admission = c.Store, q })
	a := e.Create(t, nodetest.Plan(0))
	e.Create(t, nodetest.Plan(0))
	_, err := e.Node.Create(context.Background(), nodetest.Plan(0))
	var ne *errdefs.Error
	if !errors.Is(err, errdefs.ErrRateLimited) || !errors.As(err, &ne) || ne.RetryAfter <= 0 {
		t.Fatalf("third create with a quota of 2 = %v; want ErrRateLimited with a RetryAfter", err)
	}
	if err := q.Fits(context.Background(), "p1", 1, 0); err == nil {
		t.Error("Fits a third sandbox; want the same refusal")
	}
	if err := e.Node.Kill(context.Background(), a.ID); err != nil {
		t.Fatal(err)
	}
	e.Create(t, nodetest.Plan(0))
}

// TestQuotaAdmitDisk: the disk quota is counted as the node records the
// sandbox, and the refusal says what the project is promised and what to
// do.
func TestQuotaAdmitDisk(t *testing.T) {
	q := &node.Quota{MaxDisk: 2500 << 20, DefaultDisk: 1 << 30}
	e := nodetest.New(t, func(c *node.Config) { q.Store, c.Admission = c.Store, q })
	p := nodetest.Plan(0)
	p.Limits.DiskBytes = 1 << 30
	e.Create(t, p)
	p.Limits.DiskBytes = 1500 << 20
	_, err := e.Node.Create(context.Background(), p)
	if !errors.Is(err, errdefs.ErrRateLimited) || !strings.Contains(errdefs.Message(err), "is promised 1024 MiB of disk") ||
		!strings.Contains(errdefs.Message(err), "--max-disk-per-project-mb") {
		t.Fatalf("a sandbox of 1500 MiB beside 1024 MiB within 2500 MiB = %v; want ErrRateLimited saying what is promised", err)
	}
	p.Limits.DiskBytes = 1500 << 20 / 2
	e.Create(t, p)
}
