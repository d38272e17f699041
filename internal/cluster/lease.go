package cluster

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/store"
)

// DefaultLease is how long a node's heartbeat keeps it live.
const DefaultLease = 15 * time.Second

// Member keeps one node registered: it renews the node's lease every
// third of Lease with what the node holds and has free.
type Member struct {
	Store *store.Store
	Name  string
	Addr  string // host:port the API reaches the node at
	Slots int    // the node's address pool
	// ImageStore is the node's --image-store ("" none), which a drain
	// needs the other nodes to share.
	ImageStore string
	Lease      time.Duration
	Log        *slog.Logger
	// Images returns the image store names of the images on the node's
	// disk, which placement prefers it for (nil: none).
	Images func() []string
	// Version is the Lizard version the node registers with, which the
	// API processes place by (version.Compatible): its own, or for tests
	// and upgrade rehearsals the one LIZARD_NODE_VERSION names.
	Version string
}

// Run renews the lease until ctx ends. A renewal that fails (the database
// is away) is logged and tried again at the next beat: the node keeps
// serving what it runs.
func (m *Member) Run(ctx context.Context) {
	started := time.Now()
	t := time.NewTicker(m.Lease / 3)
	defer t.Stop()
	failing := false
	for {
		err := m.Beat(ctx, started)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			m.Log.Error("renewing the node's lease failed; retrying", "err", err)
			failing = true
		case err == nil && failing:
			m.Log.Info("renewed the node's lease again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Drain tells the API processes, when the node is stopping, to place no
// more sandboxes on it (it offers no address slots); its lease runs on
// until it expires or the node is back, so a restart within the lease
// loses nothing.
func (m *Member) Drain(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.Lease/3)
	defer cancel()
	n, err := m.Store.Nodes().Get(ctx, m.Name)
	if err != nil {
		return err
	}
	n.Slots = 0
	return m.Store.Nodes().Heartbeat(ctx, n)
}

// Beat renews the lease once.
func (m *Member) Beat(ctx context.Context, started time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, m.Lease/3)
	defer cancel()
	n, err := m.Store.Nodes().CountLive(ctx, m.Name)
	if err != nil {
		return err
	}
	total, free := memory()
	now := time.Now()
	var images []string
	if m.Images != nil {
		images = m.Images()
	}
	return m.Store.Nodes().Heartbeat(ctx, store.NodeInfo{Name: m.Name, Addr: m.Addr, Slots: m.Slots, Sandboxes: n,
		MemoryBytes: total, FreeMemory: free, StartedAt: started, LeaseUntil: now.Add(m.Lease),
		ImageStore: m.ImageStore, Images: images, Version: m.Version})
}

// memory is the machine's memory and what of it is available
// (/proc/meminfo).
func memory() (total, free int64) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "MemTotal:":
			total = kb << 10
		case "MemAvailable:":
			free = kb << 10
		}
	}
	return total, free
}

// sweepEvery bounds the time between sweeps.
const sweepEvery = time.Second

// Sweeper ends the sandboxes of nodes whose lease has run out, in one API
// process at a time (a PostgreSQL advisory lock taken per run).
type Sweeper struct {
	Store  *store.Store
	Router *Router // told of the ends, for the audit trail
	Lease  time.Duration
	Log    *slog.Logger
}

// Run sweeps every quarter of Lease, or every second if that is sooner,
// until ctx ends: a lost node is judged within a second of its lease's end
// (the target is lease + 2 s), and a sweep that finds none reads no row.
// After the database was unreachable it waits one Lease before sweeping
// again: nodes could not renew their leases meanwhile, and must be given
// the time to.
func (s *Sweeper) Run(ctx context.Context) {
	t := time.NewTicker(min(s.Lease/4, sweepEvery))
	defer t.Stop()
	var lastFailure time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.sweep(ctx, lastFailure); err != nil && ctx.Err() == nil {
			lastFailure = time.Now()
			s.Log.Warn("sweeping lost nodes", "err", err)
		}
	}
}

func (s *Sweeper) sweep(ctx context.Context, lastFailure time.Time) error {
	release, ok, err := s.Store.TryLock(ctx, "lease-sweeper")
	if err != nil || !ok {
		return err
	}
	defer release()
	if time.Since(lastFailure) < s.Lease {
		return nil
	}
	now := time.Now()
	ended, err := s.Store.Nodes().EndLost(ctx, now, func(n store.NodeInfo) string {
		return fmt.Sprintf("node lost: node %s missed its lease (last renewed to %s)", n.Name, n.LeaseUntil.UTC().Format(time.RFC3339))
	})
	for _, sb := range ended {
		s.Log.Warn("sandbox ended: its node was lost", "sandbox_id", sb.ID, "project_id", sb.ProjectID, "node", sb.Node)
		if s.Router != nil {
			// Its keys were revoked with its end: the audit names them.
			s.Router.emit(node.Event{Kind: node.Stopped, SandboxID: sb.ID, ProjectID: sb.ProjectID, State: api.StateFailed, Reason: "node lost",
				Token: sb.Shape.Token, LostNode: sb.Node, KeyIDs: sb.KeyIDs})
		}
	}
	return err
}
