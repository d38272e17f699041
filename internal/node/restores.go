package node

// Restore admission. A restore is CPU-bound (runsc decoding the kernel's
// state, the page loader, the guest picking up where it was checkpointed):
// 50 creates started at once on 2 cores all finish late together, and each
// costs more CPU than alone. Restores of users' sandboxes — creates from
// the template snapshot or a snapshot, forks' copies, resumes — therefore
// run at most Config.MaxRestores at once and the rest wait in FIFO order,
// so that the first creates of a burst answer first. A waiting restore has
// no row, address or lock of its own yet (a resume holds its sandbox's
// lock, as it does during the restore itself): a client that goes away
// just leaves the queue, and other sandboxes' calls never wait on it.
// Claims of warm sandboxes, boots and the node's own sandboxes (the
// template, the pool's refills, which yield their CPU already) do not
// queue.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/trace"
)

// restoreGate admits restores, at most its size at once, in FIFO order.
// The zero value (no semaphore) admits all at once.
type restoreGate struct {
	sem              *semaphore.Weighted
	waiting, running atomic.Int64
	metrics          *metrics.Metrics
}

func newRestoreGate(size int, m *metrics.Metrics) *restoreGate {
	g := &restoreGate{metrics: m}
	if size > 0 {
		g.sem = semaphore.NewWeighted(int64(size))
	}
	m.Restores(func() map[string]int {
		return map[string]int{"waiting": int(g.waiting.Load()), "running": int(g.running.Load())}
	})
	return g
}

// enter waits, as ctx allows, until a restore may start, and returns the
// function that ends its turn (safe to call more than once). The wait is
// the node.restore_queue span and lizard_restore_queue_seconds.
func (g *restoreGate) enter(ctx context.Context) (leave func(), err error) {
	begin := time.Now()
	g.waiting.Add(1)
	err = trace.Step(ctx, "node.restore_queue", func(ctx context.Context) error {
		if g.sem == nil {
			return nil
		}
		return g.sem.Acquire(ctx, 1)
	})
	g.waiting.Add(-1)
	g.metrics.RestoreQueued(time.Since(begin), err)
	if err != nil {
		return nil, err
	}
	g.running.Add(1)
	return sync.OnceFunc(func() {
		g.running.Add(-1)
		if g.sem != nil {
			g.sem.Release(1)
		}
	}), nil
}
