package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/trace"
)

// Kill implements Node.
func (n *Local) Kill(ctx context.Context, id string) (err error) {
	defer func(begin time.Time) { n.cfg.Metrics.SandboxOp(metrics.OpKill, time.Since(begin), err) }(time.Now())
	ctx, sp := trace.Start(ctx, "node.kill", trace.Sandbox(id))
	defer func() { trace.End(sp, err) }()
	unlock := n.locks.Lock(id)
	defer unlock()
	sb, err := n.get(ctx, id)
	if err != nil || !sb.Live() {
		return err
	}
	caller, _ := auth.CallerOf(ctx)
	n.bus.emit(Event{Kind: Killed, SandboxID: sb.ID, ProjectID: sb.ProjectID, Caller: caller, Token: sb.Shape.Token})
	return n.end(ctx, sb, api.StateKilled, "killed through the API")
}

// End ends sandbox id as state for reason, if it is live; the warm pool
// ends its own sandboxes with it.
func (n *Local) End(ctx context.Context, id, state, reason string) error {
	unlock := n.locks.Lock(id)
	defer unlock()
	sb, err := n.get(ctx, id)
	if err != nil || !sb.Live() {
		return err
	}
	return n.end(ctx, sb, state, reason)
}

// end kills a live sandbox in the runtime and records its end. The caller
// holds the sandbox's lock.
func (n *Local) end(ctx context.Context, sb store.Sandbox, state, reason string) error {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	log := n.log.With("sandbox_id", sb.ID, "project_id", sb.ProjectID)
	if err := n.cfg.Runtime.Kill(cctx, sb.ID); err != nil {
		return &errdefs.Error{Msg: fmt.Sprintf("could not kill sandbox %s; try again", sb.ID), Cause: fmt.Errorf("killing sandbox: %w", err)}
	}
	err := n.cfg.Store.EndSandbox(cctx, sb.ID, state, reason, n.clock.now())
	if errors.Is(err, store.ErrConflict) {
		return nil // ended meanwhile by another server process
	}
	if err != nil {
		return fmt.Errorf("recording the end of sandbox %s: %w", sb.ID, err)
	}
	n.images.removeImage(sb.ID) // a paused sandbox's checkpoint
	n.stopped(sb, state, reason)
	log.Info("sandbox ended", "state", state, "reason", reason)
	return nil
}

// SetTimeout gives sandbox id a new deadline ms from now; 0 means it never
// expires.
func (n *Local) SetTimeout(ctx context.Context, id string, ms int64) (Sandbox, error) {
	unlock := n.locks.Lock(id)
	defer unlock()
	sb, err := n.get(ctx, id)
	if err != nil {
		return SandboxOf(sb), err
	}
	if err := check(sb, WantLive); err != nil {
		return SandboxOf(sb), err
	}
	if err := n.cfg.Store.SetTimeout(ctx, id, ms, n.clock.deadline(ms)); err != nil {
		return SandboxOf(sb), err
	}
	return seam(n.cfg.Store.GetSandbox(ctx, id))
}

// sweepEvery is how many reaper ticks pass between orphan sweeps.
const sweepEvery = 60

// RunReaper ends expired sandboxes every ReapInterval, checks running ones
// for a dead runtime every LivenessInterval, and now and then kills
// runtime sandboxes no live row accounts for, until ctx ends.
func (n *Local) RunReaper(ctx context.Context) {
	t := time.NewTicker(n.cfg.ReapInterval)
	defer t.Stop()
	every := max(1, int(n.cfg.LivenessInterval/n.cfg.ReapInterval))
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.Reap(ctx)
		if i%every == 0 {
			n.checkLiveness(ctx)
		}
		if i%sweepEvery == 0 {
			if err := n.sweepOrphans(ctx); err != nil && ctx.Err() == nil {
				n.log.Error("sweeping orphan sandboxes", "err", err)
			}
		}
	}
}

// Reap ends every sandbox whose deadline has passed.
func (n *Local) Reap(ctx context.Context) {
	now := n.clock.now()
	due, err := n.cfg.Store.ListSandboxes(ctx, store.Filter{ExpiredBy: &now})
	if err != nil {
		if ctx.Err() == nil {
			n.log.Error("listing expired sandboxes", "err", err)
		}
		return
	}
	for _, sb := range due {
		if err := n.expire(ctx, sb.ID, now); err != nil {
			n.log.Error("expiring sandbox", "sandbox_id", sb.ID, "project_id", sb.ProjectID, "err", err)
		}
	}
	n.reapPaused(ctx)
}

func (n *Local) expire(ctx context.Context, id string, now time.Time) error {
	unlock := n.locks.Lock(id)
	defer unlock()
	// The deadline may have moved (SetTimeout) or the sandbox ended while
	// we waited for the lock.
	sb, err := n.cfg.Store.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	if !sb.Live() || sb.ExpiresAt == nil || sb.ExpiresAt.After(now) {
		return nil
	}
	if paused, err := n.expirePaused(ctx, sb); paused || err != nil {
		return err
	}
	return n.end(ctx, sb, api.StateExpired, fmt.Sprintf("its timeout of %d ms passed", sb.TimeoutMs))
}

// checkLiveness ends, as failed, every running sandbox whose runtime has
// stopped: its agent, kernel or runsc processes were killed, so nothing
// will ever answer in it again.
func (n *Local) checkLiveness(ctx context.Context) {
	rows, err := n.cfg.Store.ListSandboxes(ctx, store.Filter{States: []string{api.StateRunning}, LiveOnly: true})
	if err != nil {
		if ctx.Err() == nil {
			n.log.Error("listing running sandboxes", "err", err)
		}
		return
	}
	for _, sb := range rows {
		if !n.dead(ctx, sb.ID) {
			continue
		}
		unlock := n.locks.Lock(sb.ID)
		// Re-read under the lock: a pause or kill may have moved it on.
		cur, err := n.cfg.Store.GetSandbox(ctx, sb.ID)
		if err == nil && check(cur, WantRunning) == nil && n.dead(ctx, sb.ID) {
			err = n.end(ctx, cur, api.StateFailed, "its runtime stopped: the sandbox's processes died or were killed")
		}
		unlock()
		if err != nil {
			n.log.Error("ending a dead sandbox", "sandbox_id", sb.ID, "err", err)
		}
	}
}

// endDead ends sandbox id, whose runtime has stopped during an operation
// (during, such as "while being paused"), as failed, and returns the gone
// error the operation fails with instead of cause: the caller learns the
// sandbox ended, not that something went wrong inside the server. The
// caller holds the sandbox's lock.
func (n *Local) endDead(ctx context.Context, id, during string, cause error) error {
	reason := "its runtime stopped " + during + ": the sandbox's processes died or were killed"
	sb, err := n.cfg.Store.GetSandbox(ctx, id)
	if err == nil && sb.Live() {
		if err = n.end(ctx, sb, api.StateFailed, reason); err != nil {
			// The row ends regardless, so that the sandbox is not served;
			// the reaper's sweep removes what is left of it.
			n.log.Error("ending a sandbox that died "+during, "sandbox_id", id, "err", err)
			if err = n.cfg.Store.EndSandbox(context.WithoutCancel(ctx), id, api.StateFailed, reason, n.clock.now()); err == nil {
				n.stopped(sb, api.StateFailed, reason)
			}
		}
	}
	if err != nil && !errors.Is(err, store.ErrConflict) {
		n.log.Error("recording the end of a sandbox that died "+during, "sandbox_id", id, "err", err)
	}
	n.log.Warn("sandbox died "+during, "sandbox_id", id, "err", cause)
	return &errdefs.Error{Kind: errdefs.ErrGone, Msg: fmt.Sprintf("sandbox %s stopped %s: its processes died or were killed; create a new sandbox", id, during), Cause: cause}
}

// diesWithin reports whether sandbox id's runtime has stopped or stops
// within d: an operation failing under a sandbox that is being killed
// fails before the killed processes have finished exiting.
func (n *Local) diesWithin(ctx context.Context, id string, d time.Duration) bool {
	return poll(ctx, d, 50*time.Millisecond, func() bool { return n.dead(ctx, id) }) == nil
}

func (n *Local) dead(ctx context.Context, id string) bool {
	st, err := n.cfg.Runtime.State(ctx, id)
	return errors.Is(err, sandbox.ErrNotFound) || err == nil && st != sandbox.Running
}
