package node

// Idle memory to swap (--idle-reclaim): a sandbox nobody has used for a
// while has its memory pushed out to the host's swap — zram, compressed in
// RAM — and runs on; what it touches again comes back as it touches it,
// in microseconds a page. An idle interpreter sandbox holds ~95 MiB of
// memory and touches ~10 MiB of it while it idles (docs/performance.md,
// "Idle memory to swap").
//
// Idle is what the node sees: no agent call (a run, a command, a file, a
// stream, a terminal) and no connection to an exposed port in flight, none
// begun or ended, and the sandbox's own CPU under 5% of a core, for the
// whole of Config.IdleReclaim. A program working in the background with
// nobody connected is not idle; a call that starts during a squeeze just
// faults back what it needs.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

const (
	// quietCPU is the share of a core under which a sandbox's CPU, between
	// two sweeps, leaves it idle: an idle interpreter sandbox uses ~0.1%
	// (its Sentry's timers), a squeezed one ~0.5% over the seconds its
	// Sentry's Go collector faults its heap back from swap; a program at
	// work in the background uses more than 5%.
	quietCPU = 0.05
	// residentFloor is the memory a squeezed sandbox may have back in RAM
	// before it is squeezed again, once per IdleReclaim while it stays
	// idle. The first squeeze leaves the pages touched just before it
	// (~45 MiB of an interpreter sandbox), the next takes them; the
	// Sentry's Go collector brings back ~10 MiB every two minutes, which
	// is not worth compressing again and again.
	residentFloor = 16 << 20
)

// idleness is what the reclaimer knows of each running sandbox, besides
// the calls' and port connections' times (inflight.last).
type idleness struct {
	mu sync.Mutex
	// seen holds, per sandbox, when it was last seen active by its CPU
	// (or first seen), its CPU time at the last sweep and when that was,
	// and when it was last squeezed.
	seen map[string]*idle
	// warned: the reclaimer said why it cannot (ReclaimIdle's alone).
	warned bool
}

type idle struct {
	active, squeezed, swept time.Time
	cpu                     time.Duration
}

// ReclaimEvery is how often the reclaimer looks at the sandboxes, for an
// idle time of after: a quarter of it, from one second to thirty.
func ReclaimEvery(after time.Duration) time.Duration {
	return min(max(after/4, time.Second), 30*time.Second)
}

// RunReclaimer squeezes n's idle sandboxes (ReclaimIdle) every
// ReclaimEvery(Config.IdleReclaim) until ctx ends; it returns at once if
// n reclaims nothing (IdleReclaim 0).
func RunReclaimer(ctx context.Context, n *Local) {
	if n.cfg.IdleReclaim <= 0 {
		return
	}
	t := time.NewTicker(ReclaimEvery(n.cfg.IdleReclaim))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ReclaimIdle(ctx, n)
	}
}

// ReclaimIdle squeezes every users' sandbox of n that has been idle for
// Config.IdleReclaim, one at a time (each takes a fraction of a core for
// up to a few seconds), and returns how many it squeezed: one sweep of
// RunReclaimer. The runtime must be a sandbox.Reclaimer and a
// sandbox.Meter.
func ReclaimIdle(ctx context.Context, n *Local) int {
	r, rok := n.cfg.Runtime.(sandbox.Reclaimer)
	m, mok := n.cfg.Runtime.(sandbox.Meter)
	s := &n.idle
	if n.cfg.IdleReclaim <= 0 || !rok || !mok {
		return 0
	}
	if err := r.CanReclaim(); err != nil {
		// Checked at start; swap may have been turned off since.
		if !s.warned {
			n.log.Warn("not reclaiming idle sandboxes' memory until this is fixed", "err", err)
		}
		s.warned = true
		return 0
	}
	s.warned = false
	rows, err := n.cfg.Store.ListSandboxes(ctx, store.Filter{States: []string{api.StateRunning}, LiveOnly: true})
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("listing running sandboxes to reclaim idle memory", "err", err)
		}
		return 0
	}
	running := make(map[string]bool, len(rows))
	squeezed := 0
	for _, sb := range rows {
		running[sb.ID] = true
		if sb.Role != "" || ctx.Err() != nil {
			continue // template builds and the warm pool are kept ready
		}
		u, err := m.Usage(ctx, sb.ID)
		if err != nil {
			continue // stopped meanwhile
		}
		call, calls := n.calls.lastAt(sb.ID)
		port, ports := n.ports.lastAt(sb.ID)
		if !s.due(sb.ID, u, n.cfg.IdleReclaim, n.clock.now(), calls+ports > 0, later(call, port)) {
			continue
		}
		begin := time.Now()
		if err := r.Reclaim(ctx, sb.ID); err != nil {
			if !errors.Is(err, sandbox.ErrNotFound) {
				n.log.Warn("reclaiming an idle sandbox's memory", "sandbox_id", sb.ID, "err", err)
			}
			continue
		}
		squeezed++
		s.squeezedAt(sb.ID, n.clock.now())
		after, _ := m.Usage(ctx, sb.ID)
		n.log.Debug("reclaimed an idle sandbox's memory", "sandbox_id", sb.ID, "took", time.Since(begin),
			"resident_before", u.MemoryBytes-u.SwapBytes, "resident_after", after.MemoryBytes-after.SwapBytes)
	}
	s.forget(running)
	n.calls.forget(running)
	n.ports.forget(running)
	return squeezed
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// due reports whether sandbox id, using u now, is to be squeezed: it has
// been idle for after — not busy (calls or port connections in flight),
// none begun or ended since lastCall, its CPU under quietCPU — and was not
// squeezed since, or was squeezed after ago or more and has residentFloor
// of its own back in RAM (what other sandboxes map too stays there).
func (s *idleness) due(id string, u sandbox.Usage, after time.Duration, now time.Time, busy bool, lastCall time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]*idle{}
	}
	st := s.seen[id]
	if st == nil {
		// First seen (made, or found at a restart): idle from now.
		s.seen[id] = &idle{active: now, cpu: u.CPU, swept: now}
		return false
	}
	if wall := now.Sub(st.swept); busy || (wall > 0 && float64(u.CPU-st.cpu) >= quietCPU*float64(wall)) {
		st.active = now
	}
	st.cpu, st.swept = u.CPU, now
	active := later(st.active, lastCall)
	switch {
	case now.Sub(active) < after:
		return false
	case st.squeezed.Before(active):
		return true // not squeezed since it was last used
	default:
		return now.Sub(st.squeezed) >= after && u.MemoryBytes-u.SwapBytes-u.SharedBytes >= residentFloor
	}
}

func (s *idleness) squeezedAt(id string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.seen[id]; st != nil {
		st.squeezed = now
	}
}

// forget drops the sandboxes no longer running.
func (s *idleness) forget(running map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.seen {
		if !running[id] {
			delete(s.seen, id)
		}
	}
}
