package node_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

// fakeWarm is a node.Warm with a fixed template image and pool.
type fakeWarm struct {
	image string
	pool  bool

	mu       sync.Mutex
	claimed  int
	restored []error
}

func (w *fakeWarm) Image(string, node.Limits) string    { return w.image }
func (w *fakeWarm) Pool(string, node.Limits, bool) bool { return w.pool }
func (w *fakeWarm) Claimed(string)                      { w.mu.Lock(); w.claimed++; w.mu.Unlock() }
func (w *fakeWarm) Restored(_ context.Context, _, _ string, err error) {
	w.mu.Lock()
	w.restored = append(w.restored, err)
	w.mu.Unlock()
}

// TestCreateSources checks which source serves a create — warm pool,
// template snapshot, boot — the fallbacks when one fails, and that every
// source passes the plan's admission, charged once per create whatever the
// fallbacks, and a refusal is final.
func TestCreateSources(t *testing.T) {
	refuse := errors.New("over quota")
	tests := []struct {
		name         string
		pool         bool
		failRestore  bool
		refuse       bool
		wantSource   string // "warm", "image", "boot" or "" (refused)
		wantAdmits   int32  // one per sandbox row the create records, or claim tried
		wantRestored int    // Restored calls with an error
		wantClaimed  int
	}{
		{name: "template snapshot", wantSource: "image", wantAdmits: 1},
		{name: "template snapshot fails, boot", failRestore: true, wantSource: "boot", wantAdmits: 2, wantRestored: 1},
		{name: "warm pool", pool: true, wantSource: "warm", wantAdmits: 1, wantClaimed: 1},
		{name: "refused", refuse: true, wantAdmits: 1},
		{name: "refused with a pool", pool: true, refuse: true, wantAdmits: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &fakeWarm{pool: tt.pool}
			var admits atomic.Int32
			var refusing atomic.Bool
			admit := admitFunc(func(context.Context, string, int64) (store.Quota, func(), error) {
				admits.Add(1)
				if refusing.Load() {
					return store.Quota{}, nil, &errdefs.Error{Kind: errdefs.ErrRateLimited, Msg: "over quota", Cause: refuse}
				}
				return store.Quota{}, func() {}, nil
			})
			e := nodetest.New(t, func(c *node.Config) { c.Warm, c.Admission = w, admit })
			ctx := context.Background()
			// The template image, and one warm sandbox restored from it.
			tmpl := e.Create(t, nodetest.Plan(0))
			w.image = filepath.Join(e.DataDir, "templates", "interpreter-0123456789abcdef")
			if err := e.Node.Checkpoint(ctx, tmpl.ID, w.image); err != nil {
				t.Fatal(err)
			}
			if err := e.Store.CreateProject(ctx, store.InternalProject, time.Now()); err != nil {
				t.Fatal(err)
			}
			wp := node.Plan{ProjectID: store.InternalProject, Role: store.RoleWarm, Template: nodetest.Template, Image: w.image}
			warm := e.Create(t, wp)
			if tt.failRestore {
				e.Runtime.RestoreFunc = func(context.Context, sandbox.Spec, string) error { return errors.New("bad image") }
			}
			boots, restores := len(e.Runtime.Creates()), len(e.Runtime.Restores())

			admits.Store(0)
			refusing.Store(tt.refuse)
			p := nodetest.Plan(60_000)
			p.Envs = []string{"K=V"}
			sb, err := e.Node.Create(ctx, p)
			if n := admits.Load(); n != tt.wantAdmits {
				t.Errorf("admitted %d times; want %d", n, tt.wantAdmits)
			}
			newBoots, newRestores := len(e.Runtime.Creates())-boots, len(e.Runtime.Restores())-restores
			if tt.wantSource == "" {
				if !errors.Is(err, errdefs.ErrRateLimited) || newBoots+newRestores != 0 {
					t.Fatalf("refused Create = %v, with %d boots and %d restores; want ErrRateLimited and neither", err, newBoots, newRestores)
				}
				if e.Row(t, warm.ID).Role != store.RoleWarm {
					t.Error("a refused create claimed the warm sandbox")
				}
				return
			}
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			switch tt.wantSource {
			case "warm":
				if sb.ID != warm.ID || sb.ProjectID != "p1" || sb.Role != "" || sb.ExpiresAt == nil || newBoots+newRestores != 0 {
					t.Errorf("claimed %+v; want the warm sandbox %s, now p1's with a deadline, started nothing", sb, warm.ID)
				}
			case "image":
				rs := e.Runtime.Restores()
				if newRestores != 1 || newBoots != 0 || rs[len(rs)-1].Dir != w.image || rs[len(rs)-1].Spec.ID != sb.ID {
					t.Errorf("%d boots, %d restores; want %s restored from the template image", newBoots, newRestores, sb.ID)
				}
			case "boot":
				if newBoots != 1 || e.Runtime.Creates()[boots].ID != sb.ID {
					t.Errorf("%d boots; want %s booted after the failed restore", newBoots, sb.ID)
				}
			}
			if tt.wantSource != "boot" {
				rs := e.Agent.Reseeds(sb.ID)
				if last := rs[len(rs)-1]; last.Envs["K"] != "V" || last.Envs["LIZARD_PROJECT_ID"] != "p1" || last.Envs["LIZARD_SANDBOX_ID"] != sb.ID {
					t.Errorf("reseed = %+v; want K=V and its identity", last)
				}
			}
			failed := 0
			for _, err := range w.restored {
				if err != nil {
					failed++
				}
			}
			if failed != tt.wantRestored || w.claimed != tt.wantClaimed {
				t.Errorf("warm told of %d failed restores and %d claims; want %d and %d", failed, w.claimed, tt.wantRestored, tt.wantClaimed)
			}
		})
	}
}
