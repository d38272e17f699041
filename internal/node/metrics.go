package node

// Per-sandbox metrics: every running sandbox is sampled every few seconds
// into a small ring, so that a client asking for the last minutes gets
// them at once (E2B's get_metrics) without the node reading the runtime
// on its request path.

import (
	"context"
	"sync"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

const (
	// SampleEvery is how often each running sandbox is sampled.
	SampleEvery = 5 * time.Second
	// keepSamples is 5 minutes of them.
	keepSamples = 60
	// diskQuietCPU and diskMaxAge spare an idle sandbox the disk probe,
	// which is a request to its agent: under gVisor a few milliseconds of
	// the Sentry's and the agent's CPU, every sample, and most of what an
	// idle sandbox burnt (docs/performance.md, "An idle sandbox's CPU and
	// tasks"). Its filesystem changes only when something in it runs, so
	// a sandbox that used less CPU than diskQuietCPU since its last probe
	// (the probe's own cost included) keeps that figure, for at most
	// diskMaxAge.
	diskQuietCPU = 50 * time.Millisecond
	diskMaxAge   = time.Minute
)

// meters holds each running sandbox's samples.
type meters struct {
	// limits are the node's default shape, for a sandbox whose row
	// records none.
	limits Limits

	mu    sync.Mutex
	rings map[string]*ring
}

// ring is one sandbox's samples, and what the next CPU percentage is
// measured from.
type ring struct {
	samples []api.SandboxMetric // oldest first, at most keepSamples
	lastCPU time.Duration
	lastAt  time.Time
	// The last disk probe's answer, and the CPU and time it was asked at.
	disk    api.DiskUsage
	diskCPU time.Duration
	diskAt  time.Time
}

// Metrics implements Node: sandbox id's samples, oldest first. One that is
// not running, or whose first sample is not taken yet, has none.
func (n *Local) Metrics(ctx context.Context, id string) ([]api.SandboxMetric, error) {
	if _, err := n.get(ctx, id); err != nil {
		return nil, err
	}
	n.meters.mu.Lock()
	defer n.meters.mu.Unlock()
	out := []api.SandboxMetric{}
	if r := n.meters.rings[id]; r != nil {
		out = append(out, r.samples...)
	}
	return out, nil
}

// RunSampler samples every running sandbox every SampleEvery until ctx
// ends. A runtime that cannot say what a sandbox uses (not a
// sandbox.Meter) samples nothing.
func (n *Local) RunSampler(ctx context.Context) {
	m, ok := n.cfg.Runtime.(sandbox.Meter)
	if !ok {
		n.log.Info("the runtime reports no usage: sandboxes have no metrics", "runtime", n.cfg.Runtime.Name())
		return
	}
	t := time.NewTicker(SampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.sample(ctx, m)
	}
}

// sample takes one sample of every running sandbox, and forgets those no
// longer running: a paused sandbox's CPU counter starts again at its
// restore, and its old samples would describe another process.
func (n *Local) sample(ctx context.Context, m sandbox.Meter) {
	rows, err := n.cfg.Store.ListSandboxes(ctx, store.Filter{States: []string{api.StateRunning}, LiveOnly: true})
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("listing running sandboxes to sample", "err", err)
		}
		return
	}
	running := make(map[string]bool, len(rows))
	for _, sb := range rows {
		running[sb.ID] = true
		u, err := m.Usage(ctx, sb.ID)
		if err != nil {
			continue // stopped meanwhile, or not this node's
		}
		at := n.clock.now()
		disk, fresh := n.meters.lastDisk(sb.ID, u.CPU, at)
		if !fresh {
			if disk, err = n.disk(ctx, sb.ID); err != nil {
				n.log.Debug("sampling a sandbox's disk", "sandbox_id", sb.ID, "err", err)
			} else {
				n.meters.keepDisk(sb.ID, disk, u.CPU, at)
			}
		}
		n.meters.addSample(sb, u, disk, at)
	}
	n.meters.mu.Lock()
	defer n.meters.mu.Unlock()
	for id := range n.meters.rings {
		if !running[id] {
			delete(n.meters.rings, id)
		}
	}
}

// lastDisk returns sandbox id's last disk figure while it still holds: the
// sandbox has used less than diskQuietCPU since it was asked (cpu is its
// CPU time now) and it is younger than diskMaxAge.
func (m *meters) lastDisk(id string, cpu time.Duration, at time.Time) (api.DiskUsage, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rings[id]
	if r == nil || r.diskAt.IsZero() || cpu < r.diskCPU || cpu-r.diskCPU >= diskQuietCPU || at.Sub(r.diskAt) >= diskMaxAge {
		return api.DiskUsage{}, false
	}
	return r.disk, true
}

// keepDisk records a disk probe's answer for lastDisk. The ring is made by
// addSample, so the first sample's probe is asked again at the second.
func (m *meters) keepDisk(id string, disk api.DiskUsage, cpu time.Duration, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.rings[id]; r != nil {
		r.disk, r.diskCPU, r.diskAt = disk, cpu, at
	}
}

// addSample adds sandbox sb's usage u at time at to its ring. The first
// usage seen only sets where the CPU percentage is measured from.
func (m *meters) addSample(sb store.Sandbox, u sandbox.Usage, disk api.DiskUsage, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rings == nil {
		m.rings = map[string]*ring{}
	}
	r := m.rings[sb.ID]
	if r == nil {
		m.rings[sb.ID] = &ring{lastCPU: u.CPU, lastAt: at}
		return
	}
	cpus := sb.Shape.CPUs
	if cpus <= 0 {
		cpus = m.limits.CPUs
	}
	if cpus <= 0 {
		cpus = 1
	}
	mem := sb.Shape.MemoryBytes
	if mem <= 0 {
		mem = m.limits.MemoryBytes
	}
	pct := 0.0
	if wall := at.Sub(r.lastAt); wall > 0 && u.CPU >= r.lastCPU {
		pct = float64(u.CPU-r.lastCPU) / float64(wall) / cpus * 100
	}
	r.lastCPU, r.lastAt = u.CPU, at
	s := api.SandboxMetric{Timestamp: at, CPUUsedPct: pct, CPUCount: cpus, MemUsed: u.MemoryBytes, MemTotal: mem,
		DiskUsed: disk.UsedBytes, DiskTotal: disk.TotalBytes}
	if len(r.samples) == keepSamples {
		r.samples = append(r.samples[:0], r.samples[1:]...)
	}
	r.samples = append(r.samples, s)
}

// disk asks sandbox id's agent what its root filesystem holds, as a call
// in flight: a pause waits for it, so the checkpoint never catches the
// connection open.
func (n *Local) disk(ctx context.Context, id string) (api.DiskUsage, error) {
	unlock := n.locks.Lock(id)
	sb, err := n.get(ctx, id)
	if err != nil || check(sb, WantRunning) != nil {
		unlock()
		return api.DiskUsage{}, err
	}
	cctx, cancel := context.WithCancelCause(ctx)
	// The probe is the node's, no use of the sandbox: it does not keep
	// the sandbox from counting as idle (--idle-reclaim, reclaim.go).
	prev, _ := n.calls.lastAt(id)
	n.calls.add(id, &cancel, false)
	unlock()
	defer func() {
		n.calls.remove(id, &cancel)
		n.calls.putLast(id, prev)
		cancel(nil)
	}()
	return n.agents.Disk(cctx, id)
}
