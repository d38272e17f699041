package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Nodes are the cluster's registered nodes and their leases.
type Nodes struct{ s *Store }

// Nodes are the nodes registered in s's database.
func (s *Store) Nodes() Nodes { return Nodes{s} }

// NodeInfo is one cluster node's row (docs/cluster.md): where the API
// reaches it, what it can hold and holds, and its lease. A node renews
// its lease with every heartbeat; one whose lease has run out is lost,
// and its running sandboxes are ended (Nodes.EndLost).
type NodeInfo struct {
	Name string
	Addr string // host:port of its internal API
	// Slots is how many sandboxes its address pool holds; Sandboxes how
	// many live sandboxes it has (paused ones included), counted when read.
	Slots     int
	Sandboxes int
	// MemoryBytes is its machine's memory, FreeMemory what is available.
	MemoryBytes int64
	FreeMemory  int64
	StartedAt   time.Time
	LeaseUntil  time.Time
	// LostAt is when its lease was found run out (nil: not lost).
	LostAt *time.Time
	// ImageStore is its --image-store ("" none: its images stay on its
	// disk); Draining is set by a drain (Nodes.SetDraining), never by the
	// node's heartbeat.
	ImageStore string
	Draining   bool
	// Images are the image store names of the images it holds on its
	// disk (at most MaxNodeImages, the most recently used), which
	// placement prefers it for.
	Images []string
	// Version is the Lizard version the node reports ("" a node of a
	// release that reported none): the API places sandboxes only on
	// nodes whose version it works with (version.Compatible).
	Version string
}

// MaxNodeImages bounds NodeInfo.Images: a heartbeat stays small, and
// placement's preference is a hint, not an inventory.
const MaxNodeImages = 256

// Holds reports whether n reported holding image name.
func (n NodeInfo) Holds(name string) bool {
	for _, i := range n.Images {
		if i == name {
			return true
		}
	}
	return false
}

// Live reports whether n's lease runs at now.
func (n NodeInfo) Live(now time.Time) bool { return now.Before(n.LeaseUntil) }

// Heartbeat records node n and renews its lease to n.LeaseUntil: the
// first heartbeat registers it, and one after it was lost brings it back.
func (ns Nodes) Heartbeat(ctx context.Context, n NodeInfo) error {
	images := ""
	if len(n.Images) > 0 {
		b, _ := json.Marshal(n.Images[:min(len(n.Images), MaxNodeImages)])
		images = string(b)
	}
	_, err := ns.s.db.ExecContext(ctx, `INSERT INTO nodes
		(name, addr, slots, memory_bytes, free_memory, sandboxes, started_at, lease_until, lost_at, image_store, images, version)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET addr = excluded.addr, slots = excluded.slots,
			memory_bytes = excluded.memory_bytes, free_memory = excluded.free_memory,
			sandboxes = excluded.sandboxes, started_at = excluded.started_at,
			lease_until = excluded.lease_until, lost_at = NULL,
			image_store = excluded.image_store, images = excluded.images, version = excluded.version`,
		n.Name, n.Addr, n.Slots, n.MemoryBytes, n.FreeMemory, n.Sandboxes, toMillis(n.StartedAt), toMillis(n.LeaseUntil),
		n.ImageStore, images, n.Version)
	if err != nil {
		return fmt.Errorf("renewing the lease of node %s: %w", n.Name, err)
	}
	return nil
}

// CountLive is how many live sandboxes node has.
func (ns Nodes) CountLive(ctx context.Context, node string) (int, error) {
	var n int
	err := ns.s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sandboxes WHERE node = ? AND ended_at IS NULL`, node).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting the sandboxes of node %s: %w", node, err)
	}
	return n, nil
}

// nodeColumns reads a node's live sandboxes from the sandboxes table, not
// its last heartbeat's count: placement must see the creates of the last
// moments, from every API process. The count reads sandboxes_live_node,
// a node's live rows: fine for a few nodes, a cost per node for all.
const nodeColumns = `name, addr, slots, memory_bytes, free_memory,
	(SELECT COUNT(*) FROM sandboxes s WHERE s.node = nodes.name AND s.ended_at IS NULL),
	started_at, lease_until, lost_at, image_store, draining, images, version`

// reportedColumns are nodeColumns with the live sandboxes the node
// reported at its last heartbeat: a read of the nodes table alone.
const reportedColumns = `name, addr, slots, memory_bytes, free_memory, sandboxes,
	started_at, lease_until, lost_at, image_store, draining, images, version`

func scanNode(r scanner) (NodeInfo, error) {
	var n NodeInfo
	var started, lease int64
	var lost sql.NullInt64
	var draining int
	var images string
	if err := r.Scan(&n.Name, &n.Addr, &n.Slots, &n.MemoryBytes, &n.FreeMemory, &n.Sandboxes, &started, &lease, &lost, &n.ImageStore, &draining, &images, &n.Version); err != nil {
		return NodeInfo{}, err
	}
	if images != "" {
		// A hint: one that does not parse prefers nothing.
		json.Unmarshal([]byte(images), &n.Images)
	}
	n.StartedAt, n.LeaseUntil, n.LostAt, n.Draining = fromMillis(started), fromMillis(lease), timePtr(lost), draining != 0
	return n, nil
}

// Get returns node name's row, or ErrNotFound.
func (ns Nodes) Get(ctx context.Context, name string) (NodeInfo, error) {
	n, err := scanNode(ns.s.db.QueryRowContext(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return NodeInfo{}, fmt.Errorf("getting node %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return NodeInfo{}, fmt.Errorf("getting node %s: %w", name, err)
	}
	return n, nil
}

// SetDraining marks node name draining or not (docs/cluster.md): every
// API process's placement reads it with the nodes. ErrNotFound if no node
// of that name ever registered.
func (ns Nodes) SetDraining(ctx context.Context, name string, draining bool) error {
	res, err := ns.s.db.ExecContext(ctx, `UPDATE nodes SET draining = ? WHERE name = ?`, boolInt(draining), name)
	if err != nil {
		return fmt.Errorf("marking node %s draining=%v: %w", name, draining, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("marking node %s draining=%v: %w", name, draining, err)
	} else if n == 0 {
		return fmt.Errorf("marking node %s draining: %w", name, ErrNotFound)
	}
	return nil
}

// List returns every registered node, by name, with its live sandboxes
// counted now.
func (ns Nodes) List(ctx context.Context) ([]NodeInfo, error) {
	return ns.list(ctx, `SELECT `+nodeColumns+` FROM nodes ORDER BY name`)
}

// ListReported returns every registered node, by name, as its last
// heartbeat left it: Sandboxes is the count the node reported then (at
// most a third of a lease old). It reads the nodes table alone, whatever
// the sandboxes: what an API process keeps in memory to sample from.
func (ns Nodes) ListReported(ctx context.Context) ([]NodeInfo, error) {
	return ns.list(ctx, `SELECT `+reportedColumns+` FROM nodes ORDER BY name`)
}

// GetMany returns the rows of the nodes named (those registered), with
// their live sandboxes counted now: placement's fresh look at the few it
// sampled, by the nodes' key and sandboxes_live_node.
func (ns Nodes) GetMany(ctx context.Context, names []string) ([]NodeInfo, error) {
	if len(names) == 0 {
		return nil, nil
	}
	args := make([]any, len(names))
	for i, n := range names {
		args[i] = n
	}
	return ns.list(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE name IN (`+placeholders(len(names))+`) ORDER BY name`, args...)
}

func (ns Nodes) list(ctx context.Context, query string, args ...any) ([]NodeInfo, error) {
	rows, err := ns.s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	defer rows.Close()
	var out []NodeInfo
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// LostSandbox is a sandbox EndLost ended, as its row reads after the end,
// with the IDs of the keys its end revoked (for the audit trail).
type LostSandbox struct {
	Sandbox
	KeyIDs []string
}

// MaxLostPerSweep is the most nodes one EndLost judges.
const MaxLostPerSweep = 1000

// EndLost finds the nodes whose lease ran out before now and that are
// not yet marked lost, ends their starting and running sandboxes as failed
// for reason(node) — their paused ones keep their image on the node's
// disk and resume when it is back — revokes those sandboxes' keys, and
// marks the nodes lost. It returns the sandboxes it ended, oldest first.
//
// However many nodes and sandboxes are lost, it is four statements (the
// nodes read, then one transaction: the keys, the ends, the marks), so the
// time from a lease's end to every caller's 410 does not grow with them:
// ending them one by one took four round trips a sandbox, and the last
// sandbox's callers got 503s for all of it. Safe to run from several
// processes at once: an end is conditional on the row being live and on
// its node's lease still being out (a heartbeat that came meanwhile wins),
// so each sandbox is ended, and returned, once.
//
// One call judges at most MaxLostPerSweep nodes, the first by name; the
// rest are the next call's. Each node is three arguments of a statement,
// and the engines' limits on them (SQLite's 32,766, PostgreSQL's 65,535)
// would otherwise fail every sweep once ~10,000 nodes are out at once.
func (ns Nodes) EndLost(ctx context.Context, now time.Time, reason func(NodeInfo) string) ([]LostSandbox, error) {
	// Only the nodes to judge: a sweep of a healthy fleet returns no row
	// and counts no node's sandboxes.
	nodes, err := ns.list(ctx, `SELECT `+reportedColumns+` FROM nodes WHERE lease_until < ? AND lost_at IS NULL ORDER BY name LIMIT ?`,
		toMillis(now), MaxLostPerSweep)
	if err != nil || len(nodes) == 0 {
		return nil, err
	}
	at := toMillis(now)
	// Each node's reason, and the nodes, as arguments of the statements.
	var cases strings.Builder
	var reasons, names []any
	for _, n := range nodes {
		cases.WriteString(" WHEN ? THEN ?")
		reasons = append(reasons, n.Name, reason(n))
		names = append(names, n.Name)
	}
	// The nodes still out (a heartbeat since the read above brings one back).
	out := `SELECT name FROM nodes WHERE name IN (` + placeholders(len(names)) + `) AND lease_until < ? AND lost_at IS NULL`
	outArgs := append(slices.Clone(names), at)

	tx, err := ns.s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("ending the sandboxes of lost nodes: %w", err)
	}
	defer tx.Rollback()
	// The keys first, found through the sandboxes still live (an index
	// of live rows by node: an ended row is in none). A sandbox another
	// process ends between the two statements has its keys revoked by
	// that end too; it is not among those returned.
	keys, err := tx.QueryContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE revoked_at IS NULL AND sandbox_id IN
		(SELECT id FROM sandboxes WHERE node IN (`+out+`) AND state IN ('starting', 'running') AND ended_at IS NULL)
		RETURNING id, sandbox_id`, append([]any{at}, outArgs...)...)
	if err != nil {
		return nil, fmt.Errorf("revoking the keys of the sandboxes of lost nodes: %w", err)
	}
	revoked := map[string][]string{}
	for keys.Next() {
		var id, sandbox string
		if err := keys.Scan(&id, &sandbox); err != nil {
			keys.Close()
			return nil, fmt.Errorf("revoking the keys of the sandboxes of lost nodes: %w", err)
		}
		revoked[sandbox] = append(revoked[sandbox], id)
	}
	keys.Close()
	if err := keys.Err(); err != nil {
		return nil, fmt.Errorf("revoking the keys of the sandboxes of lost nodes: %w", err)
	}
	args := append(append(append([]any{}, reasons...), at), outArgs...)
	rows, err := tx.QueryContext(ctx, `UPDATE sandboxes SET state = 'failed', end_reason = CASE node`+cases.String()+` END, ended_at = ?
		WHERE node IN (`+out+`) AND state IN ('starting', 'running') AND ended_at IS NULL
		RETURNING `+sandboxColumns+`, 0`, args...)
	if err != nil {
		return nil, fmt.Errorf("ending the sandboxes of lost nodes: %w", err)
	}
	var ended []LostSandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("ending the sandboxes of lost nodes: %w", err)
		}
		ended = append(ended, LostSandbox{Sandbox: sb, KeyIDs: revoked[sb.ID]})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ending the sandboxes of lost nodes: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE nodes SET lost_at = ? WHERE name IN (`+out+`)`,
		append([]any{at}, outArgs...)...); err != nil {
		return nil, fmt.Errorf("marking nodes lost: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("ending the sandboxes of lost nodes: %w", err)
	}
	slices.SortFunc(ended, func(a, b LostSandbox) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	for i := range ended {
		slices.Sort(ended[i].KeyIDs)
	}
	return ended, nil
}
