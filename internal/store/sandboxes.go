package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/lizard-build/lizard/internal/netpolicy"
	"strings"
	"time"
)

// Sandbox is one sandbox's row. A sandbox is live until EndedAt is set;
// while live it holds its address slot.
type Sandbox struct {
	ID        string
	ProjectID string
	Template  string
	State     string
	TimeoutMs int64
	Metadata  map[string]string
	CreatedAt time.Time
	ExpiresAt *time.Time // nil: never expires
	EndedAt   *time.Time
	EndReason string
	Slot      int
	HostAddr  string
	GuestAddr string
	Shape     Shape  // limits, egress and token it was made with
	Role      string // "" for users' sandboxes; RoleTemplate, RoleWarm
	// ParentID is the sandbox whose lizardToken created this one ("": a
	// project key did).
	ParentID string
	// Node is the cluster node it runs on ("": the one `lizard serve`).
	Node string
	// Durable: it is paused and its image is in the image store (read,
	// never written, with the row: SetPauseDurable).
	Durable bool
}

// Live reports whether the sandbox has not ended.
func (sb Sandbox) Live() bool { return sb.EndedAt == nil }

const sandboxColumns = `id, project_id, template, state, timeout_ms, metadata, created_at,
	expires_at, ended_at, end_reason, slot, host_addr, guest_addr, shape, role, parent_id, node`

// sandboxSelect is what reads a row: its columns and whether its pause is
// durable.
const sandboxSelect = sandboxColumns + `, COALESCE((SELECT p.durable FROM sandbox_pause p
	WHERE p.sandbox_id = sandboxes.id AND sandboxes.state = 'paused'), 0)`

type scanner interface{ Scan(dest ...any) error }

func scanSandbox(r scanner) (Sandbox, error) {
	var sb Sandbox
	var meta, shape string
	var created int64
	var expires, ended sql.NullInt64
	var durable int64
	if err := r.Scan(&sb.ID, &sb.ProjectID, &sb.Template, &sb.State, &sb.TimeoutMs, &meta, &created,
		&expires, &ended, &sb.EndReason, &sb.Slot, &sb.HostAddr, &sb.GuestAddr, &shape, &sb.Role, &sb.ParentID, &sb.Node, &durable); err != nil {
		return Sandbox{}, err
	}
	sh, err := decodeShape(shape)
	if err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: %w", sb.ID, err)
	}
	sb.Shape = sh
	sb.Durable = durable != 0
	if err := json.Unmarshal([]byte(meta), &sb.Metadata); err != nil {
		return Sandbox{}, fmt.Errorf("decoding metadata of sandbox %s: %w", sb.ID, err)
	}
	if sb.Metadata == nil {
		sb.Metadata = map[string]string{}
	}
	sb.CreatedAt = fromMillis(created)
	sb.ExpiresAt = timePtr(expires)
	sb.EndedAt = timePtr(ended)
	return sb, nil
}

// CreateSandbox inserts sb as a live sandbox holding the lowest address slot
// below slots that no live sandbox holds, and sets sb.Slot. A slot in
// settling is taken only when no other is free: the node is still deleting
// its last owner's connection tracking entries, which the new owner's
// network would wait for. addrs turns the
// slot into the sandbox's host and guest addresses, stored with the row so
// that a server restarted with another pool still reaches old sandboxes.
// ErrFull if every slot is taken, ErrNotFound if the project does not exist,
// ErrConflict if the ID is taken.
func (s *Store) CreateSandbox(ctx context.Context, sb *Sandbox, slots int, addrs func(slot int) (host, guest string), settling ...int) error {
	return s.createSandbox(ctx, sb, nil, slots, addrs, settling)
}

// CreateAdmitted is CreateSandbox for a user's sandbox admitted against its
// project's quota q: the project's holdings are counted in the insert's own
// transaction, under the project's lock, so that creates through any number
// of processes cannot pass q together. An *OverQuota if the sandbox would
// pass q (nothing is recorded then).
//
// On PostgreSQL the project's lock is a transaction-level advisory lock
// (the key LockProject's session lock uses, so a volume's record waits for
// it and it for a volume's), taken with the node's slots' lock in one
// statement, and the count rides in the insert's statement: what runs
// under it is the slot read, the insert and the commit, three round trips.
// It used to be held on a connection of its own from the count to the
// commit and its unlock, seven, and every create of the project, cluster-
// wide, waited in that line. SQLite's immediate transaction serialises the
// count and the insert with every other writer.
func (s *Store) CreateAdmitted(ctx context.Context, sb *Sandbox, q Quota, slots int, addrs func(slot int) (host, guest string), settling ...int) error {
	if q.MaxLive <= 0 && q.MaxDisk <= 0 {
		return s.createSandbox(ctx, sb, nil, slots, addrs, settling) // nothing to count
	}
	return s.createSandbox(ctx, sb, &q, slots, addrs, settling)
}

// Quota is what a project may hold when a sandbox of it is created
// (CreateAdmitted). Zero bounds admit all.
type Quota struct {
	// MaxLive is how many live sandboxes the project may have.
	MaxLive int
	// MaxDisk is the disk it may be promised: its live sandboxes' disk
	// limits (DefaultDisk for those recorded without a shape) and its
	// volumes' sizes added up. Disk is the new sandbox's (0: DefaultDisk).
	MaxDisk, DefaultDisk, Disk int64
}

// OverQuota is CreateAdmitted's refusal: what the project held, counted
// under its lock, and the quota the sandbox would have passed.
type OverQuota struct {
	ProjectID string
	Live      int
	Promised  Promised // counted only when the quota bounds disk
	Quota     Quota
}

func (e *OverQuota) Error() string {
	return fmt.Sprintf("project %s is at its quota: %d live sandboxes (max %d), %d bytes of disk promised (max %d)",
		e.ProjectID, e.Live, e.Quota.MaxLive, e.Promised.Total(), e.Quota.MaxDisk)
}

// held reads what projectID holds, as CreateAdmitted counts it: one
// statement, its live sandboxes through sandboxes_live_project and, when
// disk is bounded, their disk and its volumes'. Not scoped to a node:
// a quota is the project's, cluster-wide.
func (d dialect) held(projectID string, q Quota) (string, []any) {
	if q.MaxDisk <= 0 {
		return `SELECT (` + countProjectLive + `), 0, 0, 0`, []any{projectID}
	}
	disk := `json_extract(shape, '$.diskBytes')`
	if d == postgresDialect {
		disk = `(shape::jsonb->>'diskBytes')::bigint`
	}
	return `SELECT (` + countProjectLive + `),
		(SELECT CAST(COALESCE(SUM(CASE WHEN shape = '' THEN ? ELSE COALESCE(` + disk + `, 0) END), 0) AS BIGINT)
			FROM sandboxes WHERE project_id = ? AND role = '' AND ended_at IS NULL),
		(SELECT COUNT(*) FROM volumes WHERE project_id = ?),
		(SELECT CAST(COALESCE(SUM(size_bytes), 0) AS BIGINT) FROM volumes WHERE project_id = ?)`,
		[]any{projectID, q.DefaultDisk, projectID, projectID, projectID}
}

// admits checks what projectID held before the create against q.
func (q Quota) admits(projectID string, live int, p Promised) error {
	disk := q.Disk
	if disk <= 0 {
		disk = q.DefaultDisk
	}
	if (q.MaxLive > 0 && live+1 > q.MaxLive) || (q.MaxDisk > 0 && p.Total()+disk > q.MaxDisk) {
		return &OverQuota{ProjectID: projectID, Live: live, Promised: p, Quota: q}
	}
	return nil
}

// projectLockKey is the advisory lock of projectID's admission.
func projectLockKey(projectID string) int64 { return lockKey("lizard:project:" + projectID) }

func (s *Store) createSandbox(ctx context.Context, sb *Sandbox, q *Quota, slots int, addrs func(slot int) (host, guest string), settling []int) error {
	meta, err := json.Marshal(nonNil(sb.Metadata))
	if err != nil {
		return fmt.Errorf("encoding metadata: %w", err)
	}
	shape, err := encodeShape(sb.Shape)
	if err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("creating sandbox %s: %w", sb.ID, err)
	}
	defer tx.Rollback()
	// The project's lock first, then the node's: a create waiting for its
	// project holds nothing another project's create on the node needs.
	if q != nil {
		err = tx.serialize(ctx, projectLockKey(sb.ProjectID), slotsLockKey(s.node))
	} else {
		err = tx.serialize(ctx, slotsLockKey(s.node))
	}
	if err != nil {
		return fmt.Errorf("creating sandbox %s: taking its project's and its node's locks: %w", sb.ID, err)
	}
	slot, err := tx.lowestFree(ctx, s.node, slots, settling)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("creating sandbox %s: %w", sb.ID, ErrFull)
	}
	if err != nil {
		return fmt.Errorf("allocating address slot: %w", err)
	}
	host, guest := addrs(slot)
	insert := `INSERT INTO sandboxes (` + sandboxColumns + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	args := []any{sb.ID, sb.ProjectID, sb.Template, sb.State, sb.TimeoutMs, string(meta), toMillis(sb.CreatedAt),
		nullMillis(sb.ExpiresAt), nullMillis(sb.EndedAt), sb.EndReason, slot, host, guest, shape, sb.Role, sb.ParentID, s.node}
	if q == nil {
		_, err = tx.ExecContext(ctx, insert, args...)
	} else {
		err = tx.admitted(ctx, sb.ProjectID, *q, insert, args)
	}
	var over *OverQuota
	switch {
	case errors.As(err, &over):
		return err
	case isUniqueViolation(err):
		return fmt.Errorf("creating sandbox %s: %w", sb.ID, ErrConflict)
	case isConstraint(err):
		return fmt.Errorf("creating sandbox in project %q: %w", sb.ProjectID, ErrNotFound)
	case err != nil:
		return fmt.Errorf("creating sandbox %s: %w", sb.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("creating sandbox %s: %w", sb.ID, err)
	}
	sb.Slot, sb.HostAddr, sb.GuestAddr, sb.Node = slot, host, guest, s.node
	return nil
}

// admitted runs insert (with args) in t if what projectID held before it
// fits q, else returns an *OverQuota and t must be rolled back. On
// PostgreSQL the count rides in the insert's statement (a WITH's insert is
// not seen by the statement's own reads, so they count what was there
// before it), and an insert past q is rolled back: one round trip.
func (t *tx) admitted(ctx context.Context, projectID string, q Quota, insert string, args []any) error {
	held, heldArgs := t.d.held(projectID, q)
	if t.d == postgresDialect {
		var p Promised
		err := t.QueryRowContext(ctx, `WITH made AS (`+insert+`) `+held, append(args, heldArgs...)...).
			Scan(&p.Sandboxes, &p.SandboxBytes, &p.Volumes, &p.VolumeBytes)
		if err != nil {
			return err
		}
		return q.admits(projectID, p.Sandboxes, p)
	}
	if err := t.check(ctx, projectID, q); err != nil {
		return err
	}
	_, err := t.ExecContext(ctx, insert, args...)
	return err
}

// check reads what projectID holds and checks it against q, in a
// transaction that holds the project's lock (SQLite's: the write lock).
func (t *tx) check(ctx context.Context, projectID string, q Quota) error {
	held, heldArgs := t.d.held(projectID, q)
	var p Promised
	if err := t.QueryRowContext(ctx, held, heldArgs...).Scan(&p.Sandboxes, &p.SandboxBytes, &p.Volumes, &p.VolumeBytes); err != nil {
		return fmt.Errorf("counting the live sandboxes of project %s: %w", projectID, err)
	}
	return q.admits(projectID, p.Sandboxes, p)
}

// freeSlot returns the lowest address slot below slots that no live
// sandbox of node holds and that is not in settling, else the lowest of
// settling free (sql.ErrNoRows: none). The transaction keeps others from
// taking it before the caller writes it: SQLite's holds the write lock,
// PostgreSQL's takes the node's slots' advisory lock first — the node's
// only, since slots are unique per node (sandboxes_live_node_slot): one
// lock for the cluster made every create of every node wait in one line.
func (t *tx) freeSlot(ctx context.Context, node string, slots int, settling []int) (int, error) {
	if err := t.serialize(ctx, slotsLockKey(node)); err != nil {
		return 0, err
	}
	return t.lowestFree(ctx, node, slots, settling)
}

// lowestFree is freeSlot in a transaction that holds node's slots' lock.
func (t *tx) lowestFree(ctx context.Context, node string, slots int, settling []int) (int, error) {
	rows, err := t.QueryContext(ctx, `SELECT slot FROM sandboxes WHERE ended_at IS NULL AND node = ? AND slot >= 0 AND slot < ?`, node, slots)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	taken := map[int]bool{}
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			return 0, err
		}
		taken[n] = true
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	slot, ok := lowestSlot(taken, settling, slots)
	if !ok {
		return 0, sql.ErrNoRows
	}
	return slot, nil
}

// lowestSlot returns the lowest slot below slots not taken, preferring one
// not in settling. The lowest free slot is 0 or one past a taken slot, and
// the lowest not settling also may be one past a settling one: those are
// all it looks at, not every slot of a pool of up to a million.
func lowestSlot(taken map[int]bool, settling []int, slots int) (int, bool) {
	avoid := make(map[int]bool, len(settling))
	for _, n := range settling {
		avoid[n] = true
	}
	best, fallback := -1, -1
	consider := func(n int) {
		switch {
		case n < 0 || n >= slots || taken[n]:
		case !avoid[n]:
			if best < 0 || n < best {
				best = n
			}
		case fallback < 0 || n < fallback:
			fallback = n
		}
	}
	consider(0)
	for n := range taken {
		consider(n + 1)
	}
	for n := range avoid {
		consider(n + 1)
		consider(n) // free or not, it is a candidate for the fallback
	}
	if best >= 0 {
		return best, true
	}
	return fallback, fallback >= 0
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// GetSandbox returns the sandbox with that ID, live or ended, or ErrNotFound.
func (s *Store) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	sb, err := scanSandbox(s.db.QueryRowContext(ctx, `SELECT `+sandboxSelect+` FROM sandboxes WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Sandbox{}, fmt.Errorf("getting sandbox %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Sandbox{}, fmt.Errorf("getting sandbox %s: %w", id, err)
	}
	return sb, nil
}

// Filter selects sandboxes. Zero fields select everything. With a
// ProjectID or a Role, only sandboxes of that role are selected (role ""
// with a ProjectID): the server's own sandboxes are never a project's.
type Filter struct {
	ProjectID string
	Role      string
	States    []string // any of these
	LiveOnly  bool
	// ExpiredBy selects live sandboxes whose deadline is at or before it.
	ExpiredBy *time.Time
}

// ListSandboxes on a handle scoped to a node (OnNode) lists only that
// node's sandboxes.

// ListSandboxes returns the sandboxes f selects, oldest first.
func (s *Store) ListSandboxes(ctx context.Context, f Filter) ([]Sandbox, error) {
	var where []string
	var args []any
	if f.ProjectID != "" {
		where = append(where, "project_id = ?")
		args = append(args, f.ProjectID)
	}
	if s.scoped {
		where = append(where, "node = ?")
		args = append(args, s.node)
	}
	if f.ProjectID != "" || f.Role != "" {
		where = append(where, "role = ?")
		args = append(args, f.Role)
	}
	if len(f.States) > 0 {
		where = append(where, "state IN ("+placeholders(len(f.States))+")")
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	if f.LiveOnly {
		where = append(where, "ended_at IS NULL")
	}
	if f.ExpiredBy != nil {
		where = append(where, "ended_at IS NULL AND expires_at IS NOT NULL AND expires_at <= ?")
		args = append(args, toMillis(*f.ExpiredBy))
	}
	q := `SELECT ` + sandboxSelect + ` FROM sandboxes`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at, id"
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	defer rows.Close()
	var out []Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, fmt.Errorf("listing sandboxes: %w", err)
		}
		out = append(out, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	return out, nil
}

// MarkRunning moves a starting sandbox to running with its deadline (nil:
// never). ErrConflict if it is not starting, ErrNotFound if absent.
func (s *Store) MarkRunning(ctx context.Context, id string, expiresAt *time.Time) error {
	res, err := s.db.ExecContext(ctx,
		`UPDATE sandboxes SET state = 'running', expires_at = ? WHERE id = ? AND state = 'starting' AND ended_at IS NULL`,
		nullMillis(expiresAt), id)
	if err != nil {
		return fmt.Errorf("marking sandbox %s running: %w", id, err)
	}
	return s.affected(ctx, res, id, "marking sandbox %s running")
}

// SetTimeout sets a live sandbox's timeout and deadline (nil: never).
// ErrConflict if it has ended, ErrNotFound if absent.
func (s *Store) SetTimeout(ctx context.Context, id string, timeoutMs int64, expiresAt *time.Time) error {
	res, err := s.db.ExecContext(ctx,
		`UPDATE sandboxes SET timeout_ms = ?, expires_at = ? WHERE id = ? AND ended_at IS NULL`,
		timeoutMs, nullMillis(expiresAt), id)
	if err != nil {
		return fmt.Errorf("setting timeout of sandbox %s: %w", id, err)
	}
	return s.affected(ctx, res, id, "setting timeout of sandbox %s")
}

// SetNetwork replaces a live sandbox's network policy in its shape, which
// its snapshots and forks copy from then on.
func (s *Store) SetNetwork(ctx context.Context, id string, p *netpolicy.Policy) error {
	sb, err := s.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	sb.Shape.Network = p
	shape, err := encodeShape(sb.Shape)
	if err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET shape = ? WHERE id = ? AND ended_at IS NULL`, shape, id)
	if err != nil {
		return fmt.Errorf("setting the network policy of sandbox %s: %w", id, err)
	}
	return s.affected(ctx, res, id, "setting the network policy of sandbox %s")
}

// EndSandbox ends a live sandbox: it takes state (killed, expired, failed),
// its end time and reason, frees its address slot and revokes the API keys
// minted for it, all at once. ErrConflict if it had already ended,
// ErrNotFound if absent.
func (s *Store) EndSandbox(ctx context.Context, id, state, reason string, now time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("ending sandbox %s: %w", id, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx,
		`UPDATE sandboxes SET state = ?, end_reason = ?, ended_at = ? WHERE id = ? AND ended_at IS NULL`,
		state, reason, toMillis(now), id)
	if err != nil {
		return fmt.Errorf("ending sandbox %s: %w", id, err)
	}
	if err := s.affected(ctx, res, id, "ending sandbox %s"); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx,
		`UPDATE api_keys SET revoked_at = ? WHERE sandbox_id = ? AND revoked_at IS NULL`, toMillis(now), id); err != nil {
		return fmt.Errorf("revoking keys of sandbox %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("ending sandbox %s: %w", id, err)
	}
	return nil
}

// affected turns an update that changed no row into ErrNotFound or
// ErrConflict.
func (s *Store) affected(ctx context.Context, res sql.Result, id, format string) error {
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	var one int
	err := s.db.QueryRowContext(ctx, `SELECT 1 FROM sandboxes WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf(format+": %w", id, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf(format+": %w", id, err)
	}
	return fmt.Errorf(format+": %w", id, ErrConflict)
}

// ClaimWarm hands the oldest running warm-pool sandbox of template to
// projectID, as if just created with meta and timeoutMs (deadline expires,
// nil: never), and returns it. ErrNotFound if the pool has none.
func (s *Store) ClaimWarm(ctx context.Context, template, projectID string, meta map[string]string, timeoutMs int64, now time.Time, expires *time.Time) (Sandbox, error) {
	return s.ClaimWarmAdmitted(ctx, Quota{}, template, projectID, meta, timeoutMs, now, expires)
}

// ClaimWarmAdmitted is ClaimWarm admitted against projectID's quota q, as
// CreateAdmitted: the count and the claim in one transaction under the
// project's lock. An *OverQuota if the sandbox would pass q.
func (s *Store) ClaimWarmAdmitted(ctx context.Context, q Quota, template, projectID string, meta map[string]string, timeoutMs int64, now time.Time, expires *time.Time) (Sandbox, error) {
	m, err := json.Marshal(nonNil(meta))
	if err != nil {
		return Sandbox{}, fmt.Errorf("encoding metadata: %w", err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Sandbox{}, fmt.Errorf("claiming a warm sandbox of %s: %w", template, err)
	}
	defer tx.Rollback()
	if q.MaxLive > 0 || q.MaxDisk > 0 {
		if err := tx.serialize(ctx, projectLockKey(projectID)); err != nil {
			return Sandbox{}, fmt.Errorf("claiming a warm sandbox of %s: taking project %s's lock: %w", template, projectID, err)
		}
		if err := tx.check(ctx, projectID, q); err != nil {
			return Sandbox{}, err
		}
	}
	var id string
	err = tx.QueryRowContext(ctx, `UPDATE sandboxes SET project_id = ?, role = '', metadata = ?, timeout_ms = ?,
		created_at = ?, expires_at = ?
		WHERE id = (SELECT id FROM sandboxes WHERE role = 'warm' AND template = ? AND state = 'running'
			AND ended_at IS NULL AND node = ? ORDER BY created_at, id LIMIT 1`+s.db.d.skipLocked()+`)
		AND role = 'warm' AND ended_at IS NULL
		RETURNING id`, projectID, string(m), timeoutMs, toMillis(now), nullMillis(expires), template, s.node).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return Sandbox{}, fmt.Errorf("claiming a warm sandbox of %s: %w", template, ErrNotFound)
	}
	if err != nil {
		return Sandbox{}, fmt.Errorf("claiming a warm sandbox of %s: %w", template, err)
	}
	if err := tx.Commit(); err != nil {
		return Sandbox{}, fmt.Errorf("claiming a warm sandbox of %s: %w", template, err)
	}
	return s.GetSandbox(ctx, id)
}
