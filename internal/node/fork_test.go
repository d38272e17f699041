package node_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

// admitFunc is a node.Admission of a function.
type admitFunc func(ctx context.Context, projectID string, disk int64) (store.Quota, func(), error)

func (f admitFunc) Admit(ctx context.Context, projectID string, disk int64) (store.Quota, func(), error) {
	return f(ctx, projectID, disk)
}

// admitCounter is a node.Admission that admits everything and counts.
func admitCounter(n *atomic.Int32) node.Admission {
	return admitFunc(func(context.Context, string, int64) (store.Quota, func(), error) {
		n.Add(1)
		return store.Quota{}, func() {}, nil
	})
}

func TestForkCount(t *testing.T) {
	tests := []struct {
		count   int
		wantErr error
	}{
		{1, nil},
		{3, nil},
		{node.MaxForks, nil},
		{0, errdefs.ErrInvalid},
		{node.MaxForks + 1, errdefs.ErrInvalid},
		{400, errdefs.ErrInvalid},
		{-1, errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("count %d", tt.count), func(t *testing.T) {
			var admits atomic.Int32
			e := nodetest.New(t, func(c *node.Config) { c.Admission = admitCounter(&admits) })
			ctx := context.Background()
			parent := e.Create(t, nodetest.Plan(0))
			admits.Store(0)
			p := nodetest.Plan(0)
			p.Metadata = map[string]string{"role": "fork"}
			got, err := e.Node.Fork(ctx, parent.ID, p, tt.count)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(errdefs.Message(err), "out of range") {
					t.Errorf("Fork(count %d) = %v; want %v saying out of range", tt.count, err, tt.wantErr)
				}
				if n := len(e.Runtime.Restores()); n != 0 || admits.Load() != 0 {
					t.Errorf("an invalid fork restored %d sandboxes, admitted %d", n, admits.Load())
				}
				return
			}
			if err != nil || len(got) != tt.count {
				t.Fatalf("Fork(count %d) = %d sandboxes, %v", tt.count, len(got), err)
			}
			// Every copy passes admission, like any create.
			if n := admits.Load(); int(n) != tt.count {
				t.Errorf("admitted %d copies; want %d", n, tt.count)
			}
			seen := map[string]bool{parent.ID: true}
			for _, f := range got {
				if f.State != api.StateRunning || f.Metadata["role"] != "fork" || seen[f.ID] || !e.Runtime.IsRunning(f.ID) {
					t.Errorf("fork %+v; want a new running sandbox with the fork's metadata", f)
				}
				seen[f.ID] = true
				// Each copy takes its own identity and seeds, and drops any
				// lizardToken its parent held.
				rs := e.Agent.Reseeds(f.ID)
				if len(rs) != 1 || rs[0].Envs["LIZARD_SANDBOX_ID"] != f.ID || rs[0].KeepSeeds || !slices.Contains(rs[0].Unset, "LIZARD_API_KEY") {
					t.Errorf("reseeds of fork %s = %+v; want one with its ID, new seeds, unsetting LIZARD_API_KEY", f.ID, rs)
				}
			}
			if !e.Runtime.IsRunning(parent.ID) {
				t.Error("the parent stopped running")
			}
			if left, _ := os.ReadDir(filepath.Join(e.DataDir, "snapshots")); len(left) != 0 {
				t.Errorf("the fork's image was left on disk: %d entries", len(left))
			}
		})
	}
}

func TestForkAllOrNothing(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	parent := e.Create(t, nodetest.Plan(0))
	restore := e.Runtime.RestoreFunc
	var n atomic.Int32
	e.Runtime.RestoreFunc = func(ctx context.Context, spec sandbox.Spec, dir string) error {
		if n.Add(1) == 3 {
			return errors.New("restore: out of memory")
		}
		return restore(ctx, spec, dir)
	}
	got, err := e.Node.Fork(ctx, parent.ID, nodetest.Plan(0), 5)
	if err == nil || got != nil {
		t.Fatalf("Fork with one failing restore = %d sandboxes, %v; want an error and none", len(got), err)
	}
	live, _ := e.Store.ListSandboxes(ctx, store.Filter{LiveOnly: true})
	if len(live) != 1 || live[0].ID != parent.ID {
		t.Errorf("live rows after a failed fork = %d; want only the parent", len(live))
	}
	ids, _ := e.Runtime.List(ctx)
	if len(ids) != 1 || ids[0] != parent.ID {
		t.Errorf("runtime sandboxes after a failed fork = %v; want only the parent", ids)
	}
	if left, _ := os.ReadDir(filepath.Join(e.DataDir, "snapshots")); len(left) != 0 {
		t.Errorf("the fork's image was left on disk: %d entries", len(left))
	}
}

// TestForkKeepsShape checks that copies run with their parent's limits
// and egress, whatever the plan says, and that a paused parent is resumed
// to be copied.
func TestForkKeepsShape(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	pp := nodetest.Plan(0)
	pp.Limits = node.Limits{MemoryBytes: 256 << 20, CPUs: 1}
	parent := e.Create(t, pp)
	pause(t, e, parent.ID)
	p := nodetest.Plan(0)
	p.Limits, p.Internet = node.Limits{MemoryBytes: 1 << 30, CPUs: 2}, true
	got, err := e.Node.Fork(ctx, parent.ID, p, 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("Fork of a paused parent = %d, %v; want 2", len(got), err)
	}
	if r := e.Row(t, parent.ID); r.State != api.StateRunning {
		t.Errorf("parent after the fork: %s; want resumed, running", r.State)
	}
	rs := e.Runtime.Restores()
	if len(rs) != 3 {
		t.Fatalf("restores = %d; want the parent's resume and 2 copies", len(rs))
	}
	for _, r := range rs {
		if r.Spec.Limits != sandbox.Limits(pp.Limits) || r.Spec.Network.Internet {
			t.Errorf("restore of %s: limits %+v internet %v; want the parent's %+v without internet", r.Spec.ID, r.Spec.Limits, r.Spec.Network.Internet, pp.Limits)
		}
	}
	for _, f := range got {
		if r := e.Row(t, f.ID); !reflect.DeepEqual(r.Shape, parent.Shape.Record()) {
			t.Errorf("fork %s recorded shape %+v; want the parent's %+v", f.ID, r.Shape, parent.Shape.Record())
		}
	}
}

func TestSnapshotImage(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(0))
	dir, size, err := e.Node.Snapshot(ctx, sb.ID, "snap-1")
	if err != nil || dir != filepath.Join(e.DataDir, "snapshots", "snap-1") || size == 0 || !nodetest.Exists(dir) {
		t.Fatalf("Snapshot = %s, %d, %v; want a non-empty image in DATA/snapshots/snap-1", dir, size, err)
	}
	if !e.Runtime.IsRunning(sb.ID) {
		t.Error("the snapshotted sandbox stopped running")
	}
	// A create from the image is a new sandbox restored from it.
	p := nodetest.Plan(0)
	p.Image = dir
	cp := e.Create(t, p)
	if rs := e.Runtime.Restores(); len(rs) != 1 || rs[0].Dir != dir || rs[0].Spec.ID != cp.ID {
		t.Errorf("restores = %+v; want %s from %s", rs, cp.ID, dir)
	}
	if err := e.Node.RemoveImage(ctx, dir); err != nil || nodetest.Exists(dir) {
		t.Errorf("RemoveImage = %v, image left %v", err, nodetest.Exists(dir))
	}
	if !e.Runtime.IsRunning(cp.ID) {
		t.Error("removing the image ended a sandbox made from it")
	}
	plain := nodetest.New(t, func(c *node.Config) { c.DataDir = "" })
	sb = plain.Create(t, nodetest.Plan(0))
	if _, _, err := plain.Node.Snapshot(ctx, sb.ID, "snap-2"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Snapshot without DataDir = %v; want ErrUnavailable", err)
	}
	if _, err := plain.Node.Fork(ctx, sb.ID, nodetest.Plan(0), 1); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Fork without DataDir = %v; want ErrUnavailable", err)
	}
}
