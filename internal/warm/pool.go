package warm

// The warm pool: restored sandboxes of each template kept running for
// creates of the default shape, fewer when memory is short.

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/store"
)

// Drain waits (as ctx allows) for Run, whose context has ended, and its
// image makers, then ends the warm pool's sandboxes. The server calls it
// on its way out: pool sandboxes hold no one's state and would otherwise
// sit idle, holding memory, until the next start ends them anyway.
func (p *Pool) Drain(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		p.running.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		p.log.Error("the warm pool did not stop in time; draining it anyway", "err", ctx.Err())
	}
	p.mu.Lock()
	n := p.node
	p.mu.Unlock()
	if n == nil {
		return
	}
	for _, sb := range p.warm(ctx, "") {
		p.endWarm(ctx, n, sb.ID, "the server stopped")
	}
}

// endWarm ends warm sandbox id unless a create claimed it meanwhile.
func (p *Pool) endWarm(ctx context.Context, n Node, id, reason string) {
	cur, err := p.cfg.Store.GetSandbox(ctx, id)
	if err != nil || !cur.Live() || cur.Role != store.RoleWarm {
		return
	}
	if err := n.End(ctx, id, api.StateKilled, reason); err != nil {
		p.log.Error("ending a warm sandbox", "sandbox_id", id, "err", err)
	}
}

// warm lists the live warm sandboxes of template ("": of all).
func (p *Pool) warm(ctx context.Context, template string) []store.Sandbox {
	rows, err := p.cfg.Store.ListSandboxes(ctx, store.Filter{Role: store.RoleWarm, LiveOnly: true})
	if err != nil {
		p.log.Error("listing the warm pool", "err", err)
		return nil
	}
	var out []store.Sandbox
	for _, sb := range rows {
		if template == "" || sb.Template == template {
			out = append(out, sb)
		}
	}
	return out
}

// fill keeps the pool full, and smaller under memory pressure.
func (p *Pool) fill(ctx context.Context) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		for _, name := range p.templates(ctx) {
			p.fillTemplate(ctx, name)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.kick:
		}
	}
}

// fillTemplate restores warm sandboxes of template until the pool is
// full, or ends one if memory is short.
func (p *Pool) fillTemplate(ctx context.Context, name string) {
	for ctx.Err() == nil {
		warm := p.warm(ctx, name)
		if low, avail := p.memoryLow(); low {
			if len(warm) > 0 {
				sb := warm[len(warm)-1]
				p.log.Warn("memory is short; shrinking the warm pool", "template", name, "sandbox_id", sb.ID,
					"mem_available", avail, "pool", len(warm)-1)
				p.endWarm(ctx, p.node, sb.ID, "the warm pool shrank: memory is short")
			}
			return
		}
		if len(warm) > p.size(name) {
			// The pool of a template no longer wanted (or smaller) drains.
			p.endWarm(ctx, p.node, warm[len(warm)-1].ID, "the warm pool of its template shrank")
			continue
		}
		if len(warm) >= p.size(name) {
			return
		}
		// The wait may outlast the template: deleted or rebuilt
		// meanwhile (Forget), it must get neither a sandbox nor, through
		// Image, a new template snapshot, which would hold its build.
		if !p.settle(ctx) || !p.wanted(ctx, name) {
			return
		}
		dir := p.Image(name, p.cfg.Limits)
		if dir == "" {
			return
		}
		_, err := p.node.Create(ctx, node.Plan{ProjectID: store.InternalProject, Role: store.RoleWarm, Template: name,
			Limits: p.cfg.Limits, Internet: p.cfg.Internet, Image: dir})
		if err != nil {
			if ctx.Err() == nil {
				p.log.Error("filling the warm pool", "template", name, "err", err)
				p.Restored(ctx, name, dir, err)
			}
			return
		}
	}
}

// settle waits until creates have claimed nothing for RefillQuiet, or
// RefillWait has passed: a refill restore started amid a burst of claims
// would take CPU from their own work (the reseeds, the first calls), even
// in the background. False if ctx ended.
func (p *Pool) settle(ctx context.Context) bool {
	deadline := time.Now().Add(p.cfg.RefillWait)
	for {
		wait := p.cfg.RefillQuiet - time.Since(time.Unix(0, p.lastClaim.Load()))
		if left := time.Until(deadline); wait > left {
			wait = left
		}
		if wait <= 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
	}
}

// memoryLow reports whether MemAvailable is under the pool's floor.
func (p *Pool) memoryLow() (bool, int64) {
	if p.cfg.MinAvailable < 0 {
		return false, 0
	}
	avail, err := p.cfg.MemAvailable()
	if err != nil {
		return false, 0
	}
	return avail < p.cfg.MinAvailable, avail
}

// memAvailable reads MemAvailable from /proc/meminfo, in bytes.
func memAvailable() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, errors.New("no MemAvailable in /proc/meminfo")
}

// templates are the templates with a pool: the built-ins and Sizes'
// (read again here), and any that still have warm sandboxes, so that a
// pool no longer wanted drains.
func (p *Pool) templates(ctx context.Context) []string {
	names := slices.Clone(p.cfg.Templates)
	for name := range p.readSizes(ctx) {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, sb := range p.warm(ctx, "") {
		if !slices.Contains(names, sb.Template) {
			names = append(names, sb.Template)
		}
	}
	return names
}

// readSizes reads Config.Sizes again (nil without it).
func (p *Pool) readSizes(ctx context.Context) map[string]int {
	if p.cfg.Sizes == nil {
		return nil
	}
	sizes := p.cfg.Sizes(ctx)
	p.mu.Lock()
	p.sizes = sizes
	p.mu.Unlock()
	return sizes
}

// wanted reports whether template still gets a pool, reading the sizes
// again.
func (p *Pool) wanted(ctx context.Context, template string) bool {
	p.readSizes(ctx)
	return p.size(template) > 0
}
