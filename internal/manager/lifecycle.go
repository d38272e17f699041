package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

// sweepEvery is how many reaper ticks pass between orphan sweeps.
const sweepEvery = 60

// RunReaper ends expired sandboxes every ReapInterval, and now and then
// kills runtime sandboxes no live row accounts for, until ctx ends.
func (m *Manager) RunReaper(ctx context.Context) {
	t := time.NewTicker(m.cfg.ReapInterval)
	defer t.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.Reap(ctx)
		if i%m.livenessEvery() == 0 {
			m.checkLiveness(ctx)
		}
		if i%sweepEvery == 0 {
			if err := m.sweepOrphans(ctx); err != nil && ctx.Err() == nil {
				m.log.Error("sweeping orphan sandboxes", "err", err)
			}
		}
	}
}

// Reap ends every sandbox whose deadline has passed.
func (m *Manager) Reap(ctx context.Context) {
	now := m.now()
	due, err := m.cfg.Store.ListSandboxes(ctx, store.Filter{ExpiredBy: &now})
	if err != nil {
		if ctx.Err() == nil {
			m.log.Error("listing expired sandboxes", "err", err)
		}
		return
	}
	for _, sb := range due {
		if err := m.expire(ctx, sb.ID, now); err != nil {
			m.log.Error("expiring sandbox", "sandbox_id", sb.ID, "project_id", sb.ProjectID, "err", err)
		}
	}
	m.reapPaused(ctx)
}

func (m *Manager) expire(ctx context.Context, id string, now time.Time) error {
	unlock := m.locks.lock(id)
	defer unlock()
	// The deadline may have moved (SetTimeout) or the sandbox ended while
	// we waited for the lock.
	sb, err := m.cfg.Store.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	if !sb.Live() || sb.ExpiresAt == nil || sb.ExpiresAt.After(now) {
		return nil
	}
	if paused, err := m.expirePaused(ctx, sb); paused || err != nil {
		return err
	}
	return m.end(ctx, sb, api.StateExpired, fmt.Sprintf("its timeout of %d ms passed", sb.TimeoutMs))
}

// Reconcile makes the store and the runtime agree after a (re)start:
// running sandboxes the runtime still runs are kept and served again; live
// rows whose sandbox is gone, or that were still starting, are killed and
// marked failed; runtime sandboxes without a live row are killed. Run it
// before serving.
func (m *Manager) Reconcile(ctx context.Context) error {
	live, err := m.cfg.Store.ListSandboxes(ctx, store.Filter{LiveOnly: true})
	if err != nil {
		return fmt.Errorf("listing live sandboxes: %w", err)
	}
	kept := 0
	for _, sb := range live {
		log := m.log.With("sandbox_id", sb.ID, "project_id", sb.ProjectID)
		if sb.State == api.StatePaused {
			// Its image on disk is all there is to it; it resumes on demand.
			kept++
			log.Info("sandbox paused; keeping it")
			continue
		}
		reason := "it was still starting when the server restarted"
		if sb.Role != "" {
			// The server's own (template, warm pool): made again from the
			// current template image rather than kept, since the binaries
			// may have changed with the restart.
			reason = "the server's own " + sb.Role + " sandbox does not outlive a restart"
		} else if sb.State == api.StateRunning {
			st, err := m.cfg.Runtime.State(ctx, sb.ID)
			if err == nil && st == sandbox.Running {
				kept++
				m.reopenSandboxAPI(ctx, sb)
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
		unlock := m.locks.lock(sb.ID)
		err := m.end(ctx, sb, api.StateFailed, reason)
		if err != nil {
			// The row ends regardless, so that the sandbox is not served;
			// being unrecorded, it is then an orphan the sweep kills.
			log.Error("killing a sandbox that did not survive the restart", "err", err)
			err = m.cfg.Store.EndSandbox(ctx, sb.ID, api.StateFailed, reason, m.now())
		}
		unlock()
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("recording the end of sandbox %s: %w", sb.ID, err)
		}
	}
	if err := m.sweepOrphans(ctx); err != nil {
		// Left over sandboxes cost resources but break nothing; the
		// reaper sweeps again later.
		m.log.Error("sweeping orphan sandboxes", "err", err)
	}
	if err := m.sweepImages(ctx); err != nil {
		m.log.Error("sweeping orphan checkpoint images", "err", err)
	}
	m.log.Info("reconciled sandboxes", "kept", kept, "ended", len(live)-kept)
	return nil
}

// sweepOrphans kills every runtime sandbox that has no live row: left by a
// crash between boot and record, or by a kill that failed.
func (m *Manager) sweepOrphans(ctx context.Context) error {
	// List the runtime first: a row is written before its sandbox is
	// created, so any sandbox listed here that is being created already
	// has its row when the rows are read below.
	ids, err := m.cfg.Runtime.List(ctx)
	if err != nil {
		return fmt.Errorf("listing runtime sandboxes: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	live, err := m.cfg.Store.ListSandboxes(ctx, store.Filter{LiveOnly: true})
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
		m.log.Warn("killing orphan sandbox", "sandbox_id", id)
		if err := m.cfg.Runtime.Kill(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("killing orphan sandbox %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}
