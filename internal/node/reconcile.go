package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

// Reconcile makes the store and the runtime agree after a (re)start:
// running sandboxes the runtime still runs are kept and served again; live
// rows whose sandbox is gone, or that were still starting, are killed and
// marked failed; runtime sandboxes without a live row are killed. Run it
// before serving, after every Subscribe: kept sandboxes are announced as
// Started.
func (n *Local) Reconcile(ctx context.Context) error {
	live, err := n.cfg.Store.ListSandboxes(ctx, store.Filter{LiveOnly: true})
	if err != nil {
		return fmt.Errorf("listing live sandboxes: %w", err)
	}
	kept := 0
	for _, sb := range live {
		log := n.log.With("sandbox_id", sb.ID, "project_id", sb.ProjectID)
		if sb.State == api.StatePaused {
			// Its image on disk is all there is to it; it resumes on demand.
			kept++
			log.Info("sandbox paused; keeping it")
			continue
		}
		reason := "it was still starting when the server restarted"
		if sb.Role != "" {
			// The node's own (template, warm pool): made again from the
			// current template image rather than kept, since the binaries
			// may have changed with the restart.
			reason = "the server's own " + sb.Role + " sandbox does not outlive a restart"
		} else if sb.State == api.StateRunning {
			st, err := n.cfg.Runtime.State(ctx, sb.ID)
			if err == nil && st == sandbox.Running {
				kept++
				if err := n.network.readopt(sb); err != nil {
					log.Error("reinstalling the network policy of a sandbox kept over a restart", "err", err)
				}
				n.started(sb)
				log.Info("sandbox still running; serving it again", "guest_addr", sb.GuestAddr)
				continue
			}
			reason = "it was not running after the server restarted"
			if err != nil && !errors.Is(err, sandbox.ErrNotFound) {
				// A sandbox whose state cannot be read cannot be served
				// either; refusing to start the server would be worse.
				log.Error("reading sandbox state after restart", "err", err)
			}
		}
		unlock := n.locks.Lock(sb.ID)
		err := n.end(ctx, sb, api.StateFailed, reason)
		if err != nil {
			// The row ends regardless, so that the sandbox is not served;
			// being unrecorded, it is then an orphan the sweep kills.
			log.Error("killing a sandbox that did not survive the restart", "err", err)
			if err = n.cfg.Store.EndSandbox(ctx, sb.ID, api.StateFailed, reason, n.clock.now()); err == nil {
				n.stopped(sb, api.StateFailed, reason)
			}
		}
		unlock()
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("recording the end of sandbox %s: %w", sb.ID, err)
		}
	}
	if err := n.sweepOrphans(ctx); err != nil {
		// Left over sandboxes cost resources but break nothing; the
		// reaper sweeps again later.
		n.log.Error("sweeping orphan sandboxes", "err", err)
	}
	if err := n.images.sweepImages(ctx); err != nil {
		n.log.Error("sweeping orphan checkpoint images", "err", err)
	}
	n.log.Info("reconciled sandboxes", "kept", kept, "ended", len(live)-kept)
	return nil
}

// sweepOrphans kills every runtime sandbox that has no live row: left by a
// crash between boot and record, or by a kill that failed.
func (n *Local) sweepOrphans(ctx context.Context) error {
	// List the runtime first: a row is written before its sandbox is
	// created, so any sandbox listed here that is being created already
	// has its row when the rows are read below.
	ids, err := n.cfg.Runtime.List(ctx)
	if err != nil {
		return fmt.Errorf("listing runtime sandboxes: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	live, err := n.cfg.Store.ListSandboxes(ctx, store.Filter{LiveOnly: true})
	if err != nil {
		return fmt.Errorf("listing live sandboxes: %w", err)
	}
	known := make(map[string]bool, len(live))
	for _, sb := range live {
		known[sb.ID] = true
	}
	var errs []error
	for _, id := range ids {
		if known[id] {
			continue
		}
		n.log.Warn("killing orphan sandbox", "sandbox_id", id)
		if err := n.cfg.Runtime.Kill(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("killing orphan sandbox %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}
