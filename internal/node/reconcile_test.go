package node_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

func TestReconcile(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	alive := e.Create(t, nodetest.Plan(0))
	dead := e.Create(t, nodetest.Plan(0))
	paused := e.Create(t, nodetest.Plan(0))
	if _, err := e.Node.Pause(ctx, paused.ID); err != nil {
		t.Fatal(err)
	}
	// The server's own sandboxes do not outlive a restart.
	tmpl, warm := nodetest.Plan(0), nodetest.Plan(0)
	tmpl.ProjectID, tmpl.Role = store.InternalProject, store.RoleTemplate
	warm.ProjectID, warm.Role = store.InternalProject, store.RoleWarm
	if err := e.Store.CreateProject(ctx, store.InternalProject, time.Now()); err != nil {
		t.Fatal(err)
	}
	own := []node.Sandbox{e.Create(t, tmpl), e.Create(t, warm)}
	// The server "restarts": dead's sandbox vanished, one sandbox was left
	// starting, the runtime holds an orphan nobody recorded, and a crash
	// mid-pause left an image no sandbox accounts for.
	e.Runtime.Stop(dead.ID)
	orphan, half := "orphan", "half"
	for _, id := range []string{orphan, half} {
		if err := e.Runtime.Create(ctx, sandbox.Spec{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	pool := e.Config.Pool
	row := store.Sandbox{ID: half, ProjectID: "p1", Template: "interpreter", State: api.StateStarting, CreatedAt: time.Now()}
	if err := e.Store.CreateSandbox(ctx, &row, pool.Slots(), pool.AddrStrings); err != nil {
		t.Fatal(err)
	}
	stray := e.Image("crashed-mid-pause")
	if err := os.MkdirAll(stray, 0o700); err != nil {
		t.Fatal(err)
	}

	n2 := e.NewNode(t)
	if err := n2.Reconcile(ctx); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	want := map[string]string{alive.ID: api.StateRunning, dead.ID: api.StateFailed, half: api.StateFailed,
		paused.ID: api.StatePaused, own[0].ID: api.StateFailed, own[1].ID: api.StateFailed}
	for id, w := range want {
		if got := e.Row(t, id); got.State != w {
			t.Errorf("sandbox %s: %s; want %s", id, got.State, w)
		}
	}
	if !e.Runtime.IsRunning(alive.ID) {
		t.Error("live sandbox killed by Reconcile")
	}
	for _, id := range []string{orphan, half, own[0].ID, own[1].ID} {
		if e.Runtime.IsRunning(id) || !e.Runtime.WasKilled(id) {
			t.Errorf("%s still running after Reconcile", id)
		}
	}
	if !nodetest.Exists(e.Image(paused.ID)) || nodetest.Exists(stray) {
		t.Errorf("images after Reconcile: paused sandbox's %v, stray %v; want only the paused sandbox's",
			nodetest.Exists(e.Image(paused.ID)), nodetest.Exists(stray))
	}
	// The kept sandbox is announced again, for its listeners.
	if ev := e.Events(alive.ID); len(ev) != 2 || ev[1].Kind != node.Started {
		t.Errorf("events of the kept sandbox = %+v; want Started again", ev)
	}
	if call, err := n2.Acquire(ctx, alive.ID); err != nil {
		t.Errorf("Acquire of the kept sandbox: %v", err)
	} else {
		call.Release()
	}
	_, err := n2.Acquire(ctx, dead.ID)
	if !errors.Is(err, errdefs.ErrGone) || !strings.Contains(errdefs.Message(err), "not running after the server restarted") {
		t.Errorf("Acquire of the dead sandbox = %v; want ErrGone with the restart reason", err)
	}
	if r, err := n2.Resume(ctx, paused.ID, nil); err != nil || r.State != api.StateRunning {
		t.Errorf("Resume of the kept paused sandbox = %+v, %v; want running", r, err)
	}
}

func TestReconcileSurvivesKillFailure(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	dead := e.Create(t, nodetest.Plan(0))
	e.Runtime.Stop(dead.ID)
	e.Runtime.KillFunc = func(context.Context, string) error { return errors.New("runsc: busy") }
	if err := e.NewNode(t).Reconcile(ctx); err != nil {
		t.Fatalf("Reconcile with a failing kill = %v; want it to start anyway", err)
	}
	if got := e.Row(t, dead.ID); got.State != api.StateFailed || got.Live() {
		t.Errorf("dead sandbox after Reconcile = %s; want failed (never served again)", got.State)
	}
}
