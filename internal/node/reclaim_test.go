package node_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sandbox/sandboxtest"
)

// reclaiming is the fake runtime with what --idle-reclaim needs of a real
// one: each sandbox's usage, set by the test, and the squeezes asked.
type reclaiming struct {
	*sandboxtest.Fake
	mu       sync.Mutex
	usage    map[string]sandbox.Usage
	squeezes map[string]int
	cannot   error
}

func (r *reclaiming) CanReclaim() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cannot
}

func (r *reclaiming) Reclaim(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.squeezes[id]++
	u := r.usage[id]
	u.SwapBytes = u.MemoryBytes - 4<<20 // what an interpreter sandbox keeps
	r.usage[id] = u
	return nil
}

func (r *reclaiming) Usage(_ context.Context, id string) (sandbox.Usage, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.usage[id], nil
}

func (r *reclaiming) set(id string, f func(*sandbox.Usage)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := r.usage[id]
	f(&u)
	r.usage[id] = u
}

func (r *reclaiming) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.squeezes[id]
}

func newReclaiming(t *testing.T) (*nodetest.Env, *reclaiming) {
	rt := &reclaiming{usage: map[string]sandbox.Usage{}, squeezes: map[string]int{}}
	e := nodetest.New(t, func(c *node.Config) {
		rt.Fake = c.Runtime.(*sandboxtest.Fake)
		c.Runtime = rt
		c.IdleReclaim = time.Minute
	})
	return e, rt
}

// TestReclaimIdle: a sandbox is squeezed once it has been idle for
// IdleReclaim — no call or port connection in flight, begun or ended, and
// its CPU under 5% of a core — and squeezed again only after another
// IdleReclaim, and only if what came back to RAM is worth it.
func TestReclaimIdle(t *testing.T) {
	e, rt := newReclaiming(t)
	ctx := context.Background()
	sweep := func(what string, wantNew int) {
		t.Helper()
		if got := node.ReclaimIdle(ctx, e.Node); got != wantNew {
			t.Fatalf("%s: squeezed %d; want %d", what, got, wantNew)
		}
	}
	sb := e.Create(t, nodetest.Plan(0))
	rt.set(sb.ID, func(u *sandbox.Usage) { u.MemoryBytes = 95 << 20 })

	sweep("first seen", 0) // idle from now
	e.Clock.Add(59 * time.Second)
	sweep("idle 59 s", 0)
	e.Clock.Add(time.Second)
	sweep("idle 1 min", 1)
	e.Clock.Add(15 * time.Second)
	sweep("squeezed 15 s ago", 0)

	// 10 MiB back (the Sentry's collector): not worth another squeeze.
	rt.set(sb.ID, func(u *sandbox.Usage) { u.SwapBytes = u.MemoryBytes - 10<<20 })
	e.Clock.Add(time.Minute)
	sweep("10 MiB back after a minute", 0)
	// 40 MiB back (what the first squeeze leaves): squeezed again.
	rt.set(sb.ID, func(u *sandbox.Usage) { u.SwapBytes = u.MemoryBytes - 40<<20 })
	sweep("40 MiB back after a minute", 1)

	// A call in flight keeps it from being idle however long it lasts;
	// idle starts again when it ends.
	call, err := e.Node.Acquire(ctx, sb.ID)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	e.Clock.Add(5 * time.Minute)
	sweep("a call in flight for 5 min", 0)
	call.Release()
	e.Clock.Add(59 * time.Second)
	sweep("59 s after the call ended", 0)
	e.Clock.Add(time.Second)
	sweep("a minute after the call ended", 1)

	// CPU of its own (a program working with nobody connected) is
	// activity: 1 s of CPU over 15 s.
	e.Clock.Add(15 * time.Second)
	sweep("squeezed, 15 s on", 0)
	rt.set(sb.ID, func(u *sandbox.Usage) { u.CPU += time.Second; u.SwapBytes = 0 })
	e.Clock.Add(15 * time.Second)
	sweep("busy with CPU", 0)
	e.Clock.Add(59 * time.Second)
	sweep("59 s after its CPU", 0)
	// A squeezed sandbox's moment of faulting its Go heap back (40 ms in
	// a second, 4% of a core) is not.
	rt.set(sb.ID, func(u *sandbox.Usage) { u.CPU += 40 * time.Millisecond })
	e.Clock.Add(time.Second)
	sweep("a minute after its CPU", 1)
	if got := rt.count(sb.ID); got != 4 {
		t.Errorf("squeezes = %d; want 4", got)
	}

	// A QEMU VM keeps its template's pages that other VMs map in RAM
	// (SharedBytes): however many, they are no reason to squeeze again;
	// what came back of its own is.
	rt.set(sb.ID, func(u *sandbox.Usage) { u.MemoryBytes, u.SwapBytes, u.SharedBytes = 235<<20, 85<<20, 140<<20 })
	e.Clock.Add(time.Minute)
	sweep("140 MiB of shared template pages and 10 of its own in RAM", 0)
	rt.set(sb.ID, func(u *sandbox.Usage) { u.SwapBytes -= 30 << 20 })
	sweep("40 MiB of its own back", 1)
}

// TestReclaimIdleOpenPort: a connection to an exposed port in flight is
// activity as a call is.
func TestReclaimIdleOpenPort(t *testing.T) {
	e, rt := newReclaiming(t)
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(0))
	rt.set(sb.ID, func(u *sandbox.Usage) { u.MemoryBytes = 95 << 20 })
	node.ReclaimIdle(ctx, e.Node)
	conn, err := e.Node.OpenPort(ctx, sb.ID, 8000, false)
	if err != nil {
		t.Fatalf("OpenPort: %v", err)
	}
	e.Clock.Add(2 * time.Minute)
	if got := node.ReclaimIdle(ctx, e.Node); got != 0 {
		t.Errorf("with a port connection open for 2 min: squeezed %d; want 0", got)
	}
	conn.Release()
	e.Clock.Add(time.Minute)
	if got := node.ReclaimIdle(ctx, e.Node); got != 1 {
		t.Errorf("a minute after the port connection ended: squeezed %d; want 1", got)
	}
}

// TestReclaimIdleWithoutSwap: a host that can no longer (swap turned off
// after the start) squeezes nothing, and does again once it can; a node
// without IdleReclaim never does.
func TestReclaimIdleWithoutSwap(t *testing.T) {
	e, rt := newReclaiming(t)
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(0))
	rt.set(sb.ID, func(u *sandbox.Usage) { u.MemoryBytes = 95 << 20 })
	node.ReclaimIdle(ctx, e.Node)
	rt.cannot = errors.New("no swap")
	e.Clock.Add(2 * time.Minute)
	if got := node.ReclaimIdle(ctx, e.Node); got != 0 {
		t.Errorf("without swap: squeezed %d; want 0", got)
	}
	rt.cannot = nil
	if got := node.ReclaimIdle(ctx, e.Node); got != 1 {
		t.Errorf("with swap back: squeezed %d; want 1", got)
	}

	off := nodetest.New(t, func(c *node.Config) {
		c.Runtime = &reclaiming{Fake: c.Runtime.(*sandboxtest.Fake), usage: map[string]sandbox.Usage{}, squeezes: map[string]int{}}
	})
	off.Create(t, nodetest.Plan(0))
	node.ReclaimIdle(ctx, off.Node)
	off.Clock.Add(time.Hour)
	if got := node.ReclaimIdle(ctx, off.Node); got != 0 {
		t.Errorf("IdleReclaim 0: squeezed %d; want 0", got)
	}
}

func TestReclaimEvery(t *testing.T) {
	for after, want := range map[time.Duration]time.Duration{
		time.Second: time.Second, time.Minute: 15 * time.Second, 10 * time.Minute: 30 * time.Second,
	} {
		if got := node.ReclaimEvery(after); got != want {
			t.Errorf("ReclaimEvery(%s) = %s; want %s", after, got, want)
		}
	}
}

// TestReclaimIdleDiskProbe: the metrics sampler's disk probe, a call of
// the node's own to the agent, is no use of the sandbox: a sandbox probed
// every minute is squeezed, and not again for the probe.
func TestReclaimIdleDiskProbe(t *testing.T) {
	e, rt := newReclaiming(t)
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(0))
	rt.set(sb.ID, func(u *sandbox.Usage) { u.MemoryBytes = 95 << 20 })
	node.ReclaimIdle(ctx, e.Node)
	for i, want := range []int{1, 0, 0} {
		e.Clock.Add(time.Minute)
		node.SampleOnce(ctx, e.Node)
		if got := node.ReclaimIdle(ctx, e.Node); got != want {
			t.Errorf("minute %d, after a disk probe: squeezed %d; want %d", i+1, got, want)
		}
	}
	if e.Agent.Requests(api.AgentDiskPath) < 3 {
		t.Fatalf("the sampler probed no disk: the test tests nothing")
	}
}
