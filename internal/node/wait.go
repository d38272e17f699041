package node

// Every bounded wait of the node goes through these: cleanupContext for
// tearing down or recording what a request started, poll for waiting on a
// condition the node cannot be told of (calls draining, a runtime dying).

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"
)

// cleanupTimeout bounds tearing a sandbox down after its request has gone.
const cleanupTimeout = 30 * time.Second

// cleanupContext is the context of cleaning up after ctx's request: it
// outlives the request, so that a client that goes away never leaves half
// a sandbox, and is bounded by cleanupTimeout.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// errWaitedOut: a poll's bound passed before its condition held.
var errWaitedOut = errors.New("waited out")

// poll checks cond every interval until it holds (nil), ctx ends
// (ctx.Err()) or within has passed (errWaitedOut).
func poll(ctx context.Context, within, every time.Duration, cond func() bool) error {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return errWaitedOut
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
	return nil
}

// removeDir removes dir (what, for the log), best-effort: a failure is
// logged, and what is left is swept at the next start (sweepImages).
func removeDir(log *slog.Logger, what, dir string) {
	if err := os.RemoveAll(dir); err != nil {
		log.Error("removing "+what, "dir", dir, "err", err)
	}
}
