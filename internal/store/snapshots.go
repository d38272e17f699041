package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Pause is what the store keeps about a sandbox's pausing: what it does on
// timeout, and while it is paused, where its image is and how much of its
// life it had left.
type Pause struct {
	SandboxID   string
	OnTimeout   string // "kill" or "pause"
	ImageDir    string // "" unless paused
	RemainingMs *int64 // nil: never expires
	PausedAt    *time.Time
	// Durable: the image is in the image store too (SetPauseDurable).
	Durable bool
	// DiskOnly: its pauses save its disk alone, not its memory, and it
	// boots fresh over that disk at resume (SetPauseDiskOnly).
	DiskOnly bool
}

// SetPauseDiskOnly records whether sandbox id's next pauses, explicit or
// at its timeout, keep its disk alone (true) or its memory too.
func (s *Store) SetPauseDiskOnly(ctx context.Context, id string, diskOnly bool) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO sandbox_pause (sandbox_id, disk_only) VALUES (?, ?)
		ON CONFLICT(sandbox_id) DO UPDATE SET disk_only = excluded.disk_only`, id, boolInt(diskOnly))
	if err != nil {
		return fmt.Errorf("setting the pause kind of sandbox %s: %w", id, err)
	}
	return nil
}

// SetOnTimeout records what sandbox id does when its timeout passes.
func (s *Store) SetOnTimeout(ctx context.Context, id, onTimeout string) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO sandbox_pause (sandbox_id, on_timeout) VALUES (?, ?)
		ON CONFLICT(sandbox_id) DO UPDATE SET on_timeout = excluded.on_timeout`, id, onTimeout)
	if err != nil {
		return fmt.Errorf("setting on-timeout of sandbox %s: %w", id, err)
	}
	return nil
}

// GetPause returns sandbox id's pause record; a sandbox never paused and
// created without onTimeout has the zero record with OnTimeout "kill".
func (s *Store) GetPause(ctx context.Context, id string) (Pause, error) {
	p := Pause{SandboxID: id, OnTimeout: "kill"}
	var remaining, pausedAt sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT on_timeout, image_dir, remaining_ms, paused_at, durable, disk_only FROM sandbox_pause WHERE sandbox_id = ?`, id).
		Scan(&p.OnTimeout, &p.ImageDir, &remaining, &pausedAt, &p.Durable, &p.DiskOnly)
	if errors.Is(err, sql.ErrNoRows) {
		return p, nil
	}
	if err != nil {
		return p, fmt.Errorf("getting pause of sandbox %s: %w", id, err)
	}
	if remaining.Valid {
		p.RemainingMs = &remaining.Int64
	}
	p.PausedAt = timePtr(pausedAt)
	return p, nil
}

// PauseSandbox moves a running sandbox to paused: it frees its address
// slot, stops its clock (expires_at NULL) and records its image, the life
// it had left (nil: never expires) and whether the image is durable
// already. ErrConflict if it was not running.
func (s *Store) PauseSandbox(ctx context.Context, id, imageDir string, remainingMs *int64, now time.Time, durable bool) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("pausing sandbox %s: %w", id, err)
	}
	defer tx.Rollback()
	if err := tx.nextPausedSlot(ctx); err != nil {
		return fmt.Errorf("pausing sandbox %s: %w", id, err)
	}
	res, err := tx.ExecContext(ctx, `UPDATE sandboxes SET state = 'paused', expires_at = NULL, slot = `+pausedSlot+`,
		host_addr = '', guest_addr = '' WHERE id = ? AND state = 'running' AND ended_at IS NULL`, id)
	if err != nil {
		return fmt.Errorf("pausing sandbox %s: %w", id, err)
	}
	if err := s.affected(ctx, res, id, "pausing sandbox %s"); err != nil {
		return err
	}
	var rem sql.NullInt64
	if remainingMs != nil {
		rem = sql.NullInt64{Int64: *remainingMs, Valid: true}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO sandbox_pause (sandbox_id, image_dir, remaining_ms, paused_at, durable) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(sandbox_id) DO UPDATE SET image_dir = excluded.image_dir, remaining_ms = excluded.remaining_ms,
		paused_at = excluded.paused_at, durable = excluded.durable`, id, imageDir, rem, toMillis(now), boolInt(durable)); err != nil {
		return fmt.Errorf("recording pause of sandbox %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("pausing sandbox %s: %w", id, err)
	}
	return nil
}

// AssignSlot gives a paused sandbox the lowest free address slot below
// slots, one in settling only if no other is free, as CreateSandbox does,
// and returns its addresses. The sandbox
// stays paused until MarkResumed. ErrFull if every slot is taken,
// ErrConflict if it is not paused.
func (s *Store) AssignSlot(ctx context.Context, id string, slots int, addrs func(slot int) (host, guest string), settling ...int) (host, guest string, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", "", fmt.Errorf("assigning a slot to sandbox %s: %w", id, err)
	}
	defer tx.Rollback()
	// The slot is on the sandbox's own node, which is where it resumes.
	var node string
	if err := tx.QueryRowContext(ctx, `SELECT node FROM sandboxes WHERE id = ?`, id).Scan(&node); errors.Is(err, sql.ErrNoRows) {
		return "", "", fmt.Errorf("assigning a slot to sandbox %s: %w", id, ErrNotFound)
	} else if err != nil {
		return "", "", fmt.Errorf("assigning a slot to sandbox %s: %w", id, err)
	}
	slot, err := tx.freeSlot(ctx, node, slots, settling)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", fmt.Errorf("assigning a slot to sandbox %s: %w", id, ErrFull)
	}
	if err != nil {
		return "", "", fmt.Errorf("allocating address slot: %w", err)
	}
	host, guest = addrs(slot)
	res, err := tx.ExecContext(ctx, `UPDATE sandboxes SET slot = ?, host_addr = ?, guest_addr = ?
		WHERE id = ? AND state = 'paused' AND ended_at IS NULL`, slot, host, guest, id)
	if err != nil {
		return "", "", fmt.Errorf("assigning a slot to sandbox %s: %w", id, err)
	}
	if err := s.affected(ctx, res, id, "assigning a slot to sandbox %s"); err != nil {
		return "", "", err
	}
	return host, guest, tx.Commit()
}

// ReleaseSlot takes a paused sandbox's slot back (a resume that could not
// start it but left its image usable).
func (s *Store) ReleaseSlot(ctx context.Context, id string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("releasing the slot of sandbox %s: %w", id, err)
	}
	defer tx.Rollback()
	if err := tx.nextPausedSlot(ctx); err != nil {
		return fmt.Errorf("releasing the slot of sandbox %s: %w", id, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE sandboxes SET slot = `+pausedSlot+`, host_addr = '', guest_addr = ''
		WHERE id = ? AND state = 'paused' AND ended_at IS NULL`, id); err != nil {
		return fmt.Errorf("releasing the slot of sandbox %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("releasing the slot of sandbox %s: %w", id, err)
	}
	return nil
}

// A paused sandbox holds no address, but the unique index on live slots
// still wants a value: -n for the n the paused_slot counter was just
// advanced to, unique among live rows since the counter only grows. The
// counter's row lock orders concurrent pauses on PostgreSQL.
const pausedSlot = `-(SELECT value FROM counters WHERE name = 'paused_slot')`

func (t *tx) nextPausedSlot(ctx context.Context) error {
	_, err := t.ExecContext(ctx, `UPDATE counters SET value = value + 1 WHERE name = 'paused_slot'`)
	return err
}

// MarkResumed moves a paused sandbox back to running with its new
// deadline and forgets its image. ErrConflict if it was not paused.
func (s *Store) MarkResumed(ctx context.Context, id string, timeoutMs int64, expiresAt *time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("resuming sandbox %s: %w", id, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE sandboxes SET state = 'running', timeout_ms = ?, expires_at = ?
		WHERE id = ? AND state = 'paused' AND ended_at IS NULL AND slot >= 0`, timeoutMs, nullMillis(expiresAt), id)
	if err != nil {
		return fmt.Errorf("resuming sandbox %s: %w", id, err)
	}
	if err := s.affected(ctx, res, id, "resuming sandbox %s"); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE sandbox_pause SET image_dir = '', remaining_ms = NULL, paused_at = NULL, durable = 0
		WHERE sandbox_id = ?`, id); err != nil {
		return fmt.Errorf("resuming sandbox %s: %w", id, err)
	}
	return tx.Commit()
}

// ListPaused returns the live paused sandboxes paused at or before t, or
// all of them when t is nil.
func (s *Store) ListPaused(ctx context.Context, t *time.Time) ([]Pause, error) {
	q := `SELECT p.sandbox_id, p.on_timeout, p.image_dir, p.remaining_ms, p.paused_at, p.durable FROM sandbox_pause p
		JOIN sandboxes s ON s.id = p.sandbox_id WHERE s.state = 'paused' AND s.ended_at IS NULL`
	var args []any
	if s.scoped {
		q += ` AND s.node = ?`
		args = append(args, s.node)
	}
	if t != nil {
		q += ` AND p.paused_at <= ?`
		args = append(args, toMillis(*t))
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("listing paused sandboxes: %w", err)
	}
	defer rows.Close()
	var out []Pause
	for rows.Next() {
		var p Pause
		var remaining, pausedAt sql.NullInt64
		if err := rows.Scan(&p.SandboxID, &p.OnTimeout, &p.ImageDir, &remaining, &pausedAt, &p.Durable); err != nil {
			return nil, fmt.Errorf("listing paused sandboxes: %w", err)
		}
		if remaining.Valid {
			p.RemainingMs = &remaining.Int64
		}
		p.PausedAt = timePtr(pausedAt)
		out = append(out, p)
	}
	return out, rows.Err()
}

// Snapshot is one snapshot's row.
type Snapshot struct {
	ID        string
	ProjectID string
	SandboxID string
	Template  string
	CreatedAt time.Time
	SizeBytes int64
	ImageDir  string
	Shape     Shape // of the sandbox it was taken from
	// Durable: its image is in the image store (SetSnapshotDurable).
	Durable bool
	// Name is the name it is known by in its project, "" none.
	Name string
}

const snapshotColumns = `id, project_id, sandbox_id, template, created_at, size_bytes, image_dir, shape, durable, name`

func scanSnapshot(r scanner) (Snapshot, error) {
	var sn Snapshot
	var created int64
	var shape string
	if err := r.Scan(&sn.ID, &sn.ProjectID, &sn.SandboxID, &sn.Template, &created, &sn.SizeBytes, &sn.ImageDir, &shape, &sn.Durable, &sn.Name); err != nil {
		return Snapshot{}, err
	}
	sh, err := decodeShape(shape)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", sn.ID, err)
	}
	sn.Shape = sh
	sn.CreatedAt = fromMillis(created)
	return sn, nil
}

// CreateSnapshot records a snapshot. ErrConflict if the ID is taken. A
// name another snapshot of the project holds moves to this one, which the
// other keeps being under its ID alone: the name is the newest's, as an
// E2B snapshot name is its latest build's.
func (s *Store) CreateSnapshot(ctx context.Context, sn Snapshot) error {
	shape, err := encodeShape(sn.Shape)
	if err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("creating snapshot %s: %w", sn.ID, err)
	}
	defer tx.Rollback()
	if sn.Name != "" {
		if _, err := tx.ExecContext(ctx, `UPDATE snapshots SET name = '' WHERE project_id = ? AND name = ?`, sn.ProjectID, sn.Name); err != nil {
			return fmt.Errorf("creating snapshot %s: taking its name: %w", sn.ID, err)
		}
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO snapshots (`+snapshotColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sn.ID, sn.ProjectID, sn.SandboxID, sn.Template, toMillis(sn.CreatedAt), sn.SizeBytes, sn.ImageDir, shape, boolInt(sn.Durable), sn.Name)
	if err == nil {
		err = tx.Commit()
	}
	switch {
	case isUniqueViolation(err):
		return fmt.Errorf("creating snapshot %s: %w", sn.ID, ErrConflict)
	case err != nil:
		return fmt.Errorf("creating snapshot %s: %w", sn.ID, err)
	}
	return nil
}

// GetSnapshot returns snapshot id or ErrNotFound.
func (s *Store) GetSnapshot(ctx context.Context, id string) (Snapshot, error) {
	sn, err := scanSnapshot(s.db.QueryRowContext(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Snapshot{}, fmt.Errorf("getting snapshot %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("getting snapshot %s: %w", id, err)
	}
	return sn, nil
}

// ImageRef names checkpoint image path on cluster node ("NODE:PATH"), the
// form a snapshot's ImageDir takes in a cluster, where images live on the
// node that took them.
func ImageRef(node, path string) string { return node + ":" + path }

// SplitImageRef splits what ImageRef joined; node is "" for a plain path
// (`lizard serve`).
func SplitImageRef(ref string) (node, path string) {
	if strings.HasPrefix(ref, "/") {
		return "", ref
	}
	node, path, ok := strings.Cut(ref, ":")
	if !ok {
		return "", ref
	}
	return node, path
}

// ListSnapshots returns projectID's snapshots (every one when projectID
// is ""), oldest first. On a handle scoped to a node (OnNode) it returns
// only the snapshots whose image is on that node, with ImageDir the local
// path.
func (s *Store) ListSnapshots(ctx context.Context, projectID string) ([]Snapshot, error) {
	q := `SELECT ` + snapshotColumns + ` FROM snapshots`
	var args []any
	if projectID != "" {
		q += ` WHERE project_id = ?`
		args = append(args, projectID)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("listing snapshots: %w", err)
	}
	defer rows.Close()
	var out []Snapshot
	for rows.Next() {
		sn, err := scanSnapshot(rows)
		if err != nil {
			return nil, fmt.Errorf("listing snapshots: %w", err)
		}
		if s.scoped {
			node, path := SplitImageRef(sn.ImageDir)
			if node != s.node {
				continue
			}
			sn.ImageDir = path
		}
		out = append(out, sn)
	}
	return out, rows.Err()
}

// DeleteSnapshot removes snapshot id's row; ErrNotFound if absent.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("deleting snapshot %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("deleting snapshot %s: %w", id, ErrNotFound)
	}
	return err
}

// SetPauseDurable records that paused sandbox id's image, of the pause at
// pausedAt, is in the image store. It reports false when that pause is
// over (resumed, paused again, ended): the upload was for nothing.
func (s *Store) SetPauseDurable(ctx context.Context, id string, pausedAt time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE sandbox_pause SET durable = 1 WHERE sandbox_id = ? AND paused_at = ?
		AND EXISTS (SELECT 1 FROM sandboxes s WHERE s.id = sandbox_pause.sandbox_id AND s.state = 'paused' AND s.ended_at IS NULL)`,
		id, toMillis(pausedAt))
	if err != nil {
		return false, fmt.Errorf("recording the durable image of sandbox %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// SetSnapshotDurable records that snapshot id's image is in the image
// store; false if there is no such snapshot (deleted, or not recorded yet).
func (s *Store) SetSnapshotDurable(ctx context.Context, id string) (bool, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE snapshots SET durable = 1 WHERE id = ?`, id)
	if err != nil {
		return false, fmt.Errorf("recording the durable image of snapshot %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// AdoptPaused moves paused sandbox id from node from to node to (its image
// is durable, and from was lost): to resumes it. ErrConflict if it is not
// paused on from any more (another API process moved it first).
func (s *Store) AdoptPaused(ctx context.Context, id, from, to string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET node = ? WHERE id = ? AND node = ? AND state = 'paused' AND ended_at IS NULL`, to, id, from)
	if err != nil {
		return fmt.Errorf("moving paused sandbox %s to node %s: %w", id, to, err)
	}
	return s.affected(ctx, res, id, "moving paused sandbox %s")
}

// boolInt is b as the 0 or 1 an INTEGER column holds on both databases.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
