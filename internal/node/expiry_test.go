package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
)

func TestReaperAndPaused(t *testing.T) {
	e := nodetest.New(t, func(c *node.Config) { c.PausedRetention = 24 * time.Hour })
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(10_000))
	e.Clock.Add(5 * time.Second)
	pause(t, e, sb.ID)

	e.Clock.Add(time.Hour) // far past its old deadline
	e.Node.Reap(ctx)
	if got := e.Row(t, sb.ID); got.State != api.StatePaused {
		t.Fatalf("paused sandbox past its old deadline: %s; want still paused", got.State)
	}
	e.Clock.Add(23 * time.Hour) // 24 h + 1 h since the pause
	e.Node.Reap(ctx)
	got := e.Row(t, sb.ID)
	if got.State != api.StateExpired || nodetest.Exists(e.Image(sb.ID)) {
		t.Errorf("paused sandbox past the retention: state %s image=%v; want expired, image removed", got.State, nodetest.Exists(e.Image(sb.ID)))
	}
	if !strings.Contains(got.EndReason, "retention") {
		t.Errorf("end reason %q; want it to name the retention", got.EndReason)
	}
}

func TestOnTimeoutPause(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	p := nodetest.Plan(10_000)
	p.OnTimeout = api.OnTimeoutPause
	sb := e.Create(t, p)
	killer := e.Create(t, nodetest.Plan(10_000))

	// A call in flight holds the pause off until it ends.
	call, err := e.Node.Acquire(ctx, sb.ID)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	e.Clock.Add(11 * time.Second)
	e.Node.Reap(ctx)
	if got := e.Row(t, sb.ID); got.State != api.StateRunning {
		t.Errorf("onTimeout pause with a call in flight: %s; want running until the call ends", got.State)
	}
	call.Release()
	e.Node.Reap(ctx)
	if got := e.Row(t, sb.ID); got.State != api.StatePaused {
		t.Fatalf("onTimeout pause after expiry: %s; want paused", got.State)
	}
	if got := e.Row(t, killer.ID); got.State != api.StateExpired {
		t.Errorf("default onTimeout after expiry: %s; want expired", got.State)
	}
	// It resumes with its full timeout, here through a call.
	if call, err := e.Node.Acquire(ctx, sb.ID); err != nil {
		t.Fatalf("Acquire of the paused sandbox: %v", err)
	} else {
		call.Release()
	}
	got := e.Row(t, sb.ID)
	if want := e.Clock.Now().Add(10 * time.Second); got.State != api.StateRunning || got.ExpiresAt == nil || !got.ExpiresAt.Equal(want) {
		t.Errorf("resumed by a call: state %s expiresAt %v; want running until %v (its full timeout)", got.State, got.ExpiresAt, want)
	}
}

func TestPauseWaitsForCalls(t *testing.T) {
	e := nodetest.New(t, func(c *node.Config) { c.PauseWait = 200 * time.Millisecond })
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(0))
	call, err := e.Node.Acquire(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Node.Pause(ctx, sb.ID)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(errdefs.Message(err), "has a call running") {
		t.Fatalf("Pause with a call running past PauseWait = %v; want ErrConflict saying a call is running", err)
	}
	if got := e.Row(t, sb.ID); got.State != api.StateRunning {
		t.Errorf("state after the refused pause: %s; want running", got.State)
	}
	// A release counts once, however often it is called: a second call
	// still holds the pause off.
	call2, err := e.Node.Acquire(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	call.Release()
	call.Release()
	if _, err := e.Node.Pause(ctx, sb.ID); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("Pause with a second call running = %v; want ErrConflict", err)
	}
	// A call that ends within PauseWait is waited for.
	time.AfterFunc(50*time.Millisecond, call2.Release)
	if p, err := e.Node.Pause(ctx, sb.ID); err != nil || p.State != api.StatePaused {
		t.Errorf("Pause while a call ends = %+v, %v; want paused", p, err)
	}
}
