package node

// Pause and resume. A paused sandbox is a live row in state "paused" with
// no address slot and an image in DataDir/images/ID. The image is a
// runtime checkpoint taken with the sandbox left running, then the sandbox
// is killed: a checkpoint that fails (disk full) thus always leaves the
// sandbox running as it was.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/trace"
)

// Defaults of the pause settings in Config.
const (
	DefaultPausedRetention = 7 * 24 * time.Hour
	DefaultPauseWait       = 10 * time.Second
)

// Pause implements Node: pausing a paused sandbox returns it as it is.
// Calls in flight are waited for up to PauseWait, after which the pause
// fails with ErrConflict; calls that follow a process (Following) are
// ended instead.
func (n *Local) Pause(ctx context.Context, id string) (_ Sandbox, err error) {
	defer func(begin time.Time) { n.cfg.Metrics.SandboxOp(metrics.OpPause, time.Since(begin), err) }(time.Now())
	ctx, sp := trace.Start(ctx, "node.pause", trace.Sandbox(id))
	defer func() { trace.End(sp, err) }()
	if err := n.images.needData(); err != nil {
		return Sandbox{}, err
	}
	unlock := n.locks.Lock(id)
	defer unlock()
	sb, done, err := n.moving(ctx, id, api.StateRunning, api.StatePaused)
	if done || err != nil {
		return SandboxOf(sb), err
	}
	// New calls wait for the lock we hold (and then resume the sandbox);
	// calls already in flight get a bounded time to end.
	err = poll(ctx, n.cfg.PauseWait, 20*time.Millisecond, func() bool { return n.calls.waited(id) == 0 })
	if errors.Is(err, errWaitedOut) {
		return SandboxOf(sb), &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf("sandbox %s has a call running; retry when it ends", id)}
	}
	if err != nil {
		return SandboxOf(sb), err
	}
	if err := n.pauseLocked(ctx, sb); err != nil {
		return SandboxOf(sb), err
	}
	return seam(n.cfg.Store.GetSandbox(ctx, id))
}

// pauseLocked pauses running sandbox sb; the caller holds its lock. On
// failure the sandbox keeps running.
func (n *Local) pauseLocked(ctx context.Context, sb store.Sandbox) error {
	log := n.log.With("sandbox_id", sb.ID, "project_id", sb.ProjectID)
	if err := n.images.roomFor("pause sandbox " + sb.ID + " (it keeps running)"); err != nil {
		return err
	}
	p, err := n.cfg.Store.GetPause(ctx, sb.ID)
	if err != nil {
		return err
	}
	// A pause keeping the disk alone (memory: false) saves the root's
	// writable layer, not the memory: a smaller image, and a fresh boot
	// at resume (resumeSource).
	save, kind := n.checkpoint, "memory"
	if p.DiskOnly {
		if _, ok := n.cfg.Runtime.(sandbox.DiskSaver); !ok {
			return errdefs.Invalidf("the %s runtime cannot pause sandbox %s keeping its disk alone; pause it with its memory", n.cfg.Runtime.Name(), sb.ID)
		}
		save, kind = n.saveDisk, "disk"
	}
	begin := time.Now()
	dir := filepath.Join(n.images.pausedDir(), sb.ID)
	if err := os.RemoveAll(dir); err != nil {
		// An unwritable image directory (read-only, full) is the
		// checkpoint failing, and the client must be told so, not a 500.
		return &errdefs.Error{Msg: fmt.Sprintf("checkpointing sandbox %s failed (disk full? the server log says why); it keeps running", sb.ID),
			Cause: fmt.Errorf("clearing old image of sandbox %s: %w", sb.ID, err)}
	}
	// Connections to its exposed ports, and calls that follow its
	// processes (Following), end now, so that the image holds none.
	n.ports.cancelAll(sb.ID, stopReason(sb.ID, api.StatePaused, ""))
	n.calls.cancelFollowers(sb.ID, stopReason(sb.ID, api.StatePaused, ""))
	if err := save(ctx, sb.ID, dir); err != nil {
		return err
	}
	var remaining *int64
	if sb.ExpiresAt != nil {
		r := max(sb.ExpiresAt.Sub(n.clock.now()).Milliseconds(), 1)
		remaining = &r
	}
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	err = n.cfg.Runtime.Kill(cctx, sb.ID)
	if err != nil {
		// A kill cut short (its runsc process killed, a cgroup still
		// busy) is tried once more: the checkpoint is good.
		log.Warn("stopping a checkpointed sandbox failed; trying again", "err", err)
		err = n.cfg.Runtime.Kill(cctx, sb.ID)
	}
	if err != nil {
		removeDir(log, "the image of a sandbox that kept running", dir)
		if n.diesWithin(cctx, sb.ID, time.Second) {
			return n.endDead(cctx, sb.ID, "while being paused", err)
		}
		// The checkpoint is good but the sandbox still runs: keep it
		// running rather than have two copies.
		return &errdefs.Error{Msg: fmt.Sprintf("could not stop sandbox %s after checkpointing it; it keeps running", sb.ID),
			Cause: fmt.Errorf("killing sandbox: %w", err)}
	}
	if err := n.cfg.Store.PauseSandbox(cctx, sb.ID, dir, remaining, n.clock.now(), n.images.durableNow()); err != nil {
		// The sandbox is gone and unrecorded as paused: reconciliation
		// would end it anyway, so end it now and say so.
		if eerr := n.cfg.Store.EndSandbox(cctx, sb.ID, api.StateFailed, "recording its pause failed", n.clock.now()); eerr != nil {
			log.Error("recording the end of a sandbox whose pause was not recorded", "err", eerr)
		}
		removeDir(log, "the image of an unrecorded pause", dir)
		n.stopped(sb, api.StateFailed, "recording its pause failed")
		return fmt.Errorf("recording pause of sandbox %s: %w", sb.ID, err)
	}
	// Its address is free for others now, and so must be anything held
	// on it (the API listener of a lizardToken).
	n.stopped(sb, api.StatePaused, "paused")
	n.images.wake()
	log.Info("sandbox paused", "kept", kind, "image", dir, "size_bytes", imagestore.DirSize(dir), "took", time.Since(begin).Round(time.Millisecond))
	return nil
}

// Resume implements Node: resuming a running sandbox returns it as it is.
func (n *Local) Resume(ctx context.Context, id string, timeoutMs *int64) (_ Sandbox, err error) {
	defer func(begin time.Time) { n.cfg.Metrics.SandboxOp(metrics.OpResume, time.Since(begin), err) }(time.Now())
	ctx, sp := trace.Start(ctx, "node.resume", trace.Sandbox(id))
	defer func() { trace.End(sp, err) }()
	unlock := n.locks.Lock(id)
	defer unlock()
	sb, done, err := n.moving(ctx, id, api.StatePaused, api.StateRunning)
	if done || err != nil {
		return SandboxOf(sb), err
	}
	return seam(n.resumeLocked(ctx, sb, timeoutMs))
}

// moving reads sandbox id, under its lock, for a move from state from to
// state to: done if it is in to already (a no-op, not an error); Gone if it
// has ended; ErrConflict if it is in neither state.
func (n *Local) moving(ctx context.Context, id, from, to string) (sb store.Sandbox, done bool, err error) {
	sb, err = n.get(ctx, id)
	if err == nil {
		err = check(sb, WantLive)
	}
	switch {
	case err != nil:
		return sb, false, err
	case sb.State == to:
		return sb, true, nil
	case sb.State != from:
		return sb, false, &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf("sandbox %s is %s, not %s; wait until it is", id, sb.State, from)}
	}
	return sb, false, nil
}

// resumeLocked restores paused sandbox sb; the caller holds its lock. It is
// the provisioning pipeline's resume source (source_resume.go): its row, a new
// address slot, its image. An image that cannot be restored fails the
// sandbox; a lack of addresses, or a client gone during the restore,
// leaves it paused.
func (n *Local) resumeLocked(ctx context.Context, sb store.Sandbox, timeoutMs *int64) (store.Sandbox, error) {
	p, err := n.cfg.Store.GetPause(ctx, sb.ID)
	if err != nil {
		return sb, err
	}
	src := resumeSource{row: sb, timeoutMs: sb.TimeoutMs, dir: p.ImageDir}
	switch {
	case timeoutMs != nil:
		src.timeoutMs = *timeoutMs
		src.expires = n.clock.deadline(src.timeoutMs)
	case p.RemainingMs != nil:
		// It resumes with the time it had left, its timeout unchanged.
		src.expires = n.clock.deadline(*p.RemainingMs)
	}
	plan := Plan{ProjectID: sb.ProjectID, Role: sb.Role, Template: sb.Template, TimeoutMs: src.timeoutMs, Token: sb.Shape.Token}
	if p.ImageDir != "" && !n.images.local(p.ImageDir) {
		// Paused on another node, since lost: its image comes from the
		// image store.
		if !p.Durable {
			return sb, &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: fmt.Sprintf("sandbox %s was paused on node %s, whose disk holds its image, which is not in the image store yet; retry when that node is back", sb.ID, sb.Node)}
		}
		dir, release, lost, err := n.images.fetch(ctx, PausedImage(sb.ID))
		if lost {
			return n.failResume(ctx, n.log.With("sandbox_id", sb.ID, "project_id", sb.ProjectID), sb, "", lostWhy(PausedImage(sb.ID), err), err)
		}
		if err != nil {
			return sb, err
		}
		defer release()
		src.dir, src.cached = dir, true
	}
	src.disk = src.dir != "" && diskOnly(src.dir)
	return n.provision(ctx, plan, src)
}

// expirePaused pauses sb instead of ending it when it was created with
// onTimeout "pause"; it reports whether it did. The caller holds the lock.
func (n *Local) expirePaused(ctx context.Context, sb store.Sandbox) (bool, error) {
	if sb.State != api.StateRunning || n.cfg.DataDir == "" {
		return false, nil
	}
	p, err := n.cfg.Store.GetPause(ctx, sb.ID)
	if err != nil || p.OnTimeout != api.OnTimeoutPause {
		return false, err
	}
	if n.calls.waited(sb.ID) > 0 {
		// Pausing would cut a call off: wait for the next tick.
		return true, nil
	}
	// Its time is up: it resumes with its full timeout.
	full := n.clock.now().Add(time.Duration(sb.TimeoutMs) * time.Millisecond)
	sb.ExpiresAt = &full
	return true, n.pauseLocked(ctx, sb)
}

// reapPaused ends paused sandboxes kept longer than PausedRetention.
func (n *Local) reapPaused(ctx context.Context) {
	if n.cfg.DataDir == "" {
		return
	}
	before := n.clock.now().Add(-n.cfg.PausedRetention)
	old, err := n.cfg.Store.ListPaused(ctx, &before)
	if err != nil {
		if ctx.Err() == nil {
			n.log.Error("listing old paused sandboxes", "err", err)
		}
		return
	}
	for _, p := range old {
		unlock := n.locks.Lock(p.SandboxID)
		sb, err := n.cfg.Store.GetSandbox(ctx, p.SandboxID)
		if err == nil && sb.Live() && sb.State == api.StatePaused {
			err = n.end(ctx, sb, api.StateExpired, fmt.Sprintf("it stayed paused longer than the retention of %s", n.cfg.PausedRetention))
		}
		unlock()
		if err != nil {
			n.log.Error("ending an old paused sandbox", "sandbox_id", p.SandboxID, "err", err)
		}
	}
}
