package control_test

// Admission (issue 11, item 1): every path that makes a sandbox for a
// project — boot, snapshot restore, each copy of a fork — passes the same
// quota of live sandboxes and the same create rate.

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/store"
)

// live is how many live sandboxes project has, by the store and by the
// runtime.
func (e *env) live(t *testing.T, project string) int {
	t.Helper()
	rows, err := e.Store.ListSandboxes(context.Background(), store.Filter{ProjectID: project, LiveOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, sb := range rows {
		if e.Runtime.IsRunning(sb.ID) {
			running++
		}
	}
	if running != len(rows) {
		t.Errorf("%d live rows but %d of them run", len(rows), running)
	}
	return len(rows)
}

func wantRateLimited(t *testing.T, what string, err error, msg string) {
	t.Helper()
	var e *errdefs.Error
	if !errors.Is(err, errdefs.ErrRateLimited) || !errors.As(err, &e) || e.RetryAfter <= 0 || !strings.Contains(errdefs.Message(err), msg) {
		t.Errorf("%s = %v; want ErrRateLimited with a RetryAfter, saying %q", what, err, msg)
	}
}

func TestQuotaCreates(t *testing.T) {
	e := newEnv(t, func(c *control.Config) { c.Quota.MaxLive = 2 })
	ctx := context.Background()
	a := e.create(t, "p1", api.CreateSandboxRequest{})
	e.create(t, "p1", api.CreateSandboxRequest{})
	_, err := e.c.Create(ctx, "p1", api.CreateSandboxRequest{})
	wantRateLimited(t, "third create with a quota of 2", err, "already has 2 live sandboxes")
	if n := e.live(t, "p1"); n != 2 {
		t.Errorf("p1 has %d live sandboxes; want 2", n)
	}
	// Other projects have their own quota; a paused sandbox still counts;
	// an ended one does not.
	e.create(t, "p2", api.CreateSandboxRequest{})
	if _, err := e.c.Pause(ctx, "p1", a.SandboxID, api.PauseRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err = e.c.Create(ctx, "p1", api.CreateSandboxRequest{})
	wantRateLimited(t, "create with a paused sandbox in the quota", err, "live sandboxes")
	if err := e.c.Kill(ctx, "p1", a.SandboxID); err != nil {
		t.Fatal(err)
	}
	e.create(t, "p1", api.CreateSandboxRequest{})
}

// TestQuotaForks: with a quota of 12, a fork of 15 is refused and leaves
// no new sandbox; forks fill the quota up to, never past, its bound.
func TestQuotaForks(t *testing.T) {
	e := newEnv(t, func(c *control.Config) { c.Quota.MaxLive = 12 })
	ctx := context.Background()
	parent := e.create(t, "p1", api.CreateSandboxRequest{})
	fork := func(n int) ([]api.Sandbox, error) {
		return e.c.Fork(ctx, "p1", parent.SandboxID, api.ForkRequest{Count: n})
	}
	got, err := fork(15)
	wantRateLimited(t, "fork of 15 with a quota of 12", err, "live sandboxes")
	if got != nil || e.live(t, "p1") != 1 {
		t.Fatalf("refused fork returned %d sandboxes and left %d live; want none and only the parent", len(got), e.live(t, "p1"))
	}
	// Refused before anything was made: no copies restored only to be
	// killed, no rows of sandboxes the caller never got.
	all, _ := e.Store.ListSandboxes(ctx, store.Filter{ProjectID: "p1"})
	if n := len(e.Runtime.Restores()); n != 0 || len(all) != 1 {
		t.Errorf("refused fork restored %d copies and left %d rows; want none, only the parent's", n, len(all))
	}
	steps := []struct {
		count    int
		refused  bool
		wantLive int
	}{
		{4, false, 5},
		{4, false, 9},
		{4, true, 9}, // would be 13
		{3, false, 12},
		{1, true, 12},
	}
	for _, s := range steps {
		got, err := fork(s.count)
		if s.refused {
			wantRateLimited(t, "fork past the quota", err, "live sandboxes")
		} else if err != nil || len(got) != s.count {
			t.Fatalf("fork of %d = %d, %v", s.count, len(got), err)
		}
		if n := e.live(t, "p1"); n != s.wantLive {
			t.Fatalf("after a fork of %d: %d live; want %d", s.count, n, s.wantLive)
		}
	}
}

func TestQuotaSnapshotCreates(t *testing.T) {
	e := newEnv(t, func(c *control.Config) { c.Quota.MaxLive = 3 })
	ctx := context.Background()
	sb := e.create(t, "p1", api.CreateSandboxRequest{})
	sn, err := e.c.Snapshot(ctx, "p1", sb.SandboxID, api.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	made := 0
	for range 14 {
		_, err := e.c.Create(ctx, "p1", api.CreateSandboxRequest{SnapshotID: sn.SnapshotID})
		if err == nil {
			made++
			continue
		}
		wantRateLimited(t, "create from a snapshot past the quota", err, "live sandboxes")
	}
	if made != 2 || e.live(t, "p1") != 3 {
		t.Errorf("14 creates from a snapshot with a quota of 3 made %d, %d live; want 2 and 3", made, e.live(t, "p1"))
	}
}

// TestCreateRate checks that the create rate counts every sandbox made:
// boots, each copy of a fork, and creates from snapshots.
func TestCreateRate(t *testing.T) {
	// One create every 1000 s: only the burst is available to the test.
	rate := func(c *control.Config) { c.CreateRate, c.CreateBurst = 0.001, 4 }
	tests := []struct {
		name string
		// steps after the first create (one token of the burst of 4)
		steps func(t *testing.T, e *env, parent string, snap string) []error
		last  int // index of the step that must be refused; every other one succeeds
	}{
		{"creates", func(_ *testing.T, e *env, _, _ string) []error {
			var errs []error
			for range 4 {
				_, err := e.c.Create(context.Background(), "p1", api.CreateSandboxRequest{})
				errs = append(errs, err)
			}
			return errs
		}, 3},
		{"fork copies", func(t *testing.T, e *env, parent, _ string) []error {
			// A fork of 4 does not fit the 3 left, and costs none of them.
			_, err0 := e.c.Fork(context.Background(), "p1", parent, api.ForkRequest{Count: 4})
			wantRateLimited(t, "a fork past the burst", err0, "too fast")
			_, err1 := e.c.Fork(context.Background(), "p1", parent, api.ForkRequest{Count: 3})
			_, err2 := e.c.Fork(context.Background(), "p1", parent, api.ForkRequest{Count: 1})
			return []error{err1, err2}
		}, 1},
		{"creates from a snapshot", func(_ *testing.T, e *env, _, snap string) []error {
			var errs []error
			for range 4 {
				_, err := e.c.Create(context.Background(), "p1", api.CreateSandboxRequest{SnapshotID: snap})
				errs = append(errs, err)
			}
			return errs
		}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, rate)
			parent := e.create(t, "p1", api.CreateSandboxRequest{})
			sn, err := e.c.Snapshot(context.Background(), "p1", parent.SandboxID, api.SnapshotRequest{})
			if err != nil {
				t.Fatal(err)
			}
			for i, err := range tt.steps(t, e, parent.SandboxID, sn.SnapshotID) {
				if i == tt.last {
					wantRateLimited(t, "a create past the burst", err, "too fast")
				} else if err != nil {
					t.Errorf("step %d: %v; want it within the burst", i, err)
				}
			}
			if n := e.live(t, "p1"); n != 4 {
				t.Errorf("%d live; want the 4 of the burst", n)
			}
			// Another project has its own rate.
			e.create(t, "p2", api.CreateSandboxRequest{})
		})
	}
}
