package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node/nodetest"
	"github.com/lizard-build/lizard/internal/sandbox"
)

// TestSandboxDiesDuringCheckpoint checks that a sandbox whose processes
// die under a pause, snapshot or fork (the chaos suite's kill -9 of its
// runsc processes) ends that call with ErrGone and is recorded failed with
// a reason, instead of a 500 claiming it keeps running.
func TestSandboxDiesDuringCheckpoint(t *testing.T) {
	ops := []struct {
		name string
		do   func(e *nodetest.Env, id string) error
	}{
		{"pause", func(e *nodetest.Env, id string) error { _, err := e.Node.Pause(context.Background(), id); return err }},
		{"snapshot", func(e *nodetest.Env, id string) error {
			_, _, err := e.Node.Snapshot(context.Background(), id, "snap-dies")
			return err
		}},
		{"fork", func(e *nodetest.Env, id string) error {
			_, err := e.Node.Fork(context.Background(), id, nodetest.Plan(0), 2)
			return err
		}},
	}
	for _, op := range ops {
		for _, later := range []time.Duration{0, 300 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s, dead %s after the failure", op.name, later), func(t *testing.T) {
				e := nodetest.New(t)
				sb := e.Create(t, nodetest.Plan(60_000))
				e.Runtime.CheckpointFunc = func(_ context.Context, id, _ string, _ bool) error {
					// Killed processes take a moment to exit: the
					// checkpoint may fail before the sandbox reads dead.
					time.AfterFunc(later, func() { e.Runtime.Stop(id) })
					return errors.New("checkpoint: connection reset by peer")
				}
				err := op.do(e, sb.ID)
				if !errors.Is(err, errdefs.ErrGone) || !strings.Contains(errdefs.Message(err), "stopped while being checkpointed") {
					t.Fatalf("%s = %v (message %q); want ErrGone saying it stopped while being checkpointed", op.name, err, errdefs.Message(err))
				}
				row := e.Row(t, sb.ID)
				if row.State != api.StateFailed || !strings.Contains(row.EndReason, "runtime stopped") {
					t.Errorf("row = %s, reason %q; want failed with a reason", row.State, row.EndReason)
				}
				if nodetest.Exists(e.Image(sb.ID)) {
					t.Errorf("the image of a sandbox that died during its pause is left")
				}
			})
		}
	}
}

// TestPauseStopCutShort checks that a pause whose stop of the checkpointed
// sandbox is cut short (runsc delete killed) tries once more and pauses,
// and that one whose sandbox died anyway ends it as failed, not as a 500
// saying it keeps running.
func TestPauseStopCutShort(t *testing.T) {
	t.Run("second try", func(t *testing.T) {
		e := nodetest.New(t)
		sb := e.Create(t, nodetest.Plan(60_000))
		kill, tries := e.Runtime.KillFunc, 0
		e.Runtime.KillFunc = func(ctx context.Context, id string) error {
			if tries++; tries == 1 {
				e.Runtime.Stop(id)
				return errors.New("runsc delete: signal: killed")
			}
			return kill(ctx, id)
		}
		got, err := e.Node.Pause(context.Background(), sb.ID)
		if err != nil || got.State != api.StatePaused || !nodetest.Exists(e.Image(sb.ID)) {
			t.Fatalf("Pause = %s, %v, image %v; want paused with its image", got.State, err, nodetest.Exists(e.Image(sb.ID)))
		}
	})
	t.Run("dead anyway", func(t *testing.T) {
		e := nodetest.New(t)
		sb := e.Create(t, nodetest.Plan(60_000))
		e.Runtime.KillFunc = func(_ context.Context, id string) error {
			e.Runtime.Stop(id)
			return errors.New("runsc delete: signal: killed")
		}
		e.Runtime.StateFunc = func(context.Context, string) (sandbox.State, error) { return "", sandbox.ErrNotFound }
		_, err := e.Node.Pause(context.Background(), sb.ID)
		if !errors.Is(err, errdefs.ErrGone) || strings.Contains(errdefs.Message(err), "keeps running") {
			t.Fatalf("Pause = %v (message %q); want ErrGone", err, errdefs.Message(err))
		}
		if row := e.Row(t, sb.ID); row.State != api.StateFailed || row.EndReason == "" || nodetest.Exists(e.Image(sb.ID)) {
			t.Errorf("row = %s, reason %q, image %v; want failed with a reason and no image", row.State, row.EndReason, nodetest.Exists(e.Image(sb.ID)))
		}
	})
}

// TestDeadSandboxEndsCallsAtOnce checks that the calls to a sandbox whose
// processes died end with ErrGone once the node sees it dead, not after
// its removal (the processes' exit, its cgroups), which a loaded host may
// take seconds over; the chaos suite holds a run in a killed sandbox to
// ending within 3 s.
func TestDeadSandboxEndsCallsAtOnce(t *testing.T) {
	e := nodetest.New(t)
	sb := e.Create(t, nodetest.Plan(60_000))
	call, err := e.Node.Acquire(context.Background(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer call.Release()
	kill, removed := e.Runtime.KillFunc, make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(removed) }) }
	t.Cleanup(release) // a failure below must not leave the removal, and the cleanup after it, waiting
	e.Runtime.KillFunc = func(ctx context.Context, id string) error {
		<-removed
		return kill(ctx, id)
	}
	e.Runtime.Stop(sb.ID)
	select {
	case <-call.Ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the call did not end while the dead sandbox was being removed")
	}
	if cause := context.Cause(call.Ctx); !errors.Is(cause, errdefs.ErrGone) || !strings.Contains(errdefs.Message(cause), "runtime stopped") {
		t.Errorf("the call ended with %v; want ErrGone saying its runtime stopped", cause)
	}
	release()
	deadline := time.Now().Add(5 * time.Second)
	for e.Row(t, sb.ID).State != api.StateFailed && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if row := e.Row(t, sb.ID); row.State != api.StateFailed || !strings.Contains(row.EndReason, "runtime stopped") {
		t.Errorf("row = %s, reason %q; want failed, its runtime stopped", row.State, row.EndReason)
	}
}
