package node_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
)

func TestKillAndGone(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(0))
	if err := e.Node.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.Node.Kill(ctx, sb.ID); err != nil {
		t.Fatalf("second Kill = %v; want nil (idempotent)", err)
	}
	if e.Runtime.IsRunning(sb.ID) || e.Runtime.Kills() != 1 {
		t.Fatalf("after two Kills: running=%v, runtime kills %d; want stopped, killed once", e.Runtime.IsRunning(sb.ID), e.Runtime.Kills())
	}
	if got := e.Row(t, sb.ID); got.State != api.StateKilled || got.EndedAt == nil {
		t.Fatalf("row after Kill = %+v; want killed with endedAt", got)
	}
	if ev := e.Events(sb.ID); len(ev) != 2 || ev[1].Kind != node.Stopped || ev[1].State != api.StateKilled {
		t.Errorf("events = %+v; want Started then Stopped, killed", ev)
	}
	_, err := e.Node.Acquire(ctx, sb.ID)
	if !errors.Is(err, errdefs.ErrGone) || !strings.Contains(errdefs.Message(err), "was killed at") {
		t.Errorf("Acquire after Kill = %v; want ErrGone saying it was killed", err)
	}
	if _, err := e.Node.SetTimeout(ctx, sb.ID, 1000); !errors.Is(err, errdefs.ErrGone) {
		t.Errorf("SetTimeout after Kill = %v; want ErrGone", err)
	}
	for name, err := range map[string]error{
		"Kill":       e.Node.Kill(ctx, "nosuch"),
		"SetTimeout": func() error { _, err := e.Node.SetTimeout(ctx, "nosuch", 1); return err }(),
		"Acquire":    func() error { _, err := e.Node.Acquire(ctx, "nosuch"); return err }(),
	} {
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s of an unknown sandbox = %v; want ErrNotFound", name, err)
		}
	}
}

func TestKillFailureKeepsSandbox(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(0))
	e.Runtime.KillFunc = func(context.Context, string) error { return errors.New("runsc: busy") }
	if err := e.Node.Kill(ctx, sb.ID); err == nil || strings.Contains(errdefs.Message(err), "busy") {
		t.Fatalf("Kill = %v; want an error whose message hides the cause", err)
	}
	if got := e.Row(t, sb.ID); got.State != api.StateRunning || !got.Live() {
		t.Errorf("row after a failed kill = %s; want running (the kill can be retried)", got.State)
	}
}

func TestExpiry(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	short := e.Create(t, nodetest.Plan(1000))
	extended := e.Create(t, nodetest.Plan(1000))
	forever := e.Create(t, nodetest.Plan(0))
	if forever.ExpiresAt != nil {
		t.Errorf("timeoutMs 0: expiresAt = %v; want none", forever.ExpiresAt)
	}
	e.Clock.Add(500 * time.Millisecond)
	got, err := e.Node.SetTimeout(ctx, extended.ID, 10_000)
	if want := e.Clock.Now().Add(10 * time.Second); err != nil || got.ExpiresAt == nil || !got.ExpiresAt.Equal(want) || got.TimeoutMs != 10_000 {
		t.Fatalf("SetTimeout = %+v, %v; want expiresAt %v", got, err, want)
	}
	e.Node.Reap(ctx)
	if st := e.Row(t, short.ID); st.State != api.StateRunning {
		t.Fatalf("state before the deadline = %s; want running", st.State)
	}
	e.Clock.Add(time.Second)
	e.Node.Reap(ctx)
	want := map[string]string{short.ID: api.StateExpired, extended.ID: api.StateRunning, forever.ID: api.StateRunning}
	for id, w := range want {
		if got := e.Row(t, id); got.State != w {
			t.Errorf("sandbox %s: state %s; want %s", id, got.State, w)
		}
	}
	if e.Runtime.IsRunning(short.ID) {
		t.Error("expired sandbox still running in the runtime")
	}
	_, err = e.Node.Acquire(ctx, short.ID)
	if !errors.Is(err, errdefs.ErrGone) || !strings.Contains(errdefs.Message(err), "expired at") {
		t.Errorf("Acquire of an expired sandbox = %v; want ErrGone saying it expired", err)
	}
	// A year on, only the extended one has expired; timeoutMs 0 never does.
	e.Clock.Add(365 * 24 * time.Hour)
	e.Node.Reap(ctx)
	if got := e.Row(t, extended.ID); got.State != api.StateExpired {
		t.Errorf("extended sandbox after its deadline: %s; want expired", got.State)
	}
	if got := e.Row(t, forever.ID); got.State != api.StateRunning {
		t.Errorf("timeoutMs 0 sandbox after a year: %s; want running", got.State)
	}
	// SetTimeout 0 removes a deadline.
	if got, err := e.Node.SetTimeout(ctx, forever.ID, 0); err != nil || got.ExpiresAt != nil {
		t.Errorf("SetTimeout 0 = %+v, %v; want no expiresAt", got, err)
	}
}

// TestRunReaper checks the background loop: expiry on the real clock,
// and the liveness check ending a sandbox whose runtime died.
func TestRunReaper(t *testing.T) {
	e := nodetest.New(t, func(c *node.Config) {
		c.Now = nil
		c.ReapInterval = 20 * time.Millisecond
		c.LivenessInterval = 40 * time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.Node.RunReaper(ctx)
	short := e.Create(t, nodetest.Plan(50))
	dying := e.Create(t, nodetest.Plan(0))
	e.Runtime.Stop(dying.ID)
	nodetest.WaitFor(t, "the reaper to expire a 50 ms sandbox", func() bool { return e.Row(t, short.ID).State == api.StateExpired })
	nodetest.WaitFor(t, "the liveness check to end a dead sandbox", func() bool { return e.Row(t, dying.ID).State == api.StateFailed })
	if r := e.Row(t, dying.ID).EndReason; !strings.Contains(r, "runtime stopped") {
		t.Errorf("dead sandbox's end reason %q; want it to say its runtime stopped", r)
	}
}

func TestConcurrentKillAndExpire(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	var kills atomic.Int32
	kill := e.Runtime.KillFunc
	e.Runtime.KillFunc = func(ctx context.Context, id string) error { kills.Add(1); return kill(ctx, id) }
	sb := e.Create(t, nodetest.Plan(1000))
	e.Clock.Add(2 * time.Second)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				e.Node.Kill(ctx, sb.ID)
			} else {
				e.Node.Reap(ctx)
			}
		}()
	}
	wg.Wait()
	if n := kills.Load(); n != 1 {
		t.Errorf("runtime Kill called %d times; want 1", n)
	}
	if got := e.Row(t, sb.ID); got.State != api.StateKilled && got.State != api.StateExpired {
		t.Errorf("state = %s; want killed or expired", got.State)
	}
	if ev := e.Events(sb.ID); len(ev) != 2 {
		t.Errorf("events = %+v; want one Started and one Stopped", ev)
	}
}
