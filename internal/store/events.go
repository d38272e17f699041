package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Event is one lifecycle event's row (package events gives it meaning).
// IDs grow in the order events are committed, so a reader that has seen
// every event up to ID n misses none by asking for those after n.
type Event struct {
	ID        int64
	Type      string
	At        time.Time
	ProjectID string
	SandboxID string
	Metadata  map[string]string
	// Data is the event's JSON object, kept as written.
	Data json.RawMessage
}

// AppendEvent records e and sets e.ID. On PostgreSQL the appends take one
// advisory lock, so that IDs (a sequence, handed out at insert) become
// visible in their order: without it a reader could see 8 committed before
// 7 and, resuming after 8, never see 7. SQLite's writers are serial.
func (s *Store) AppendEvent(ctx context.Context, e *Event) error {
	meta, err := json.Marshal(nonNil(e.Metadata))
	if err != nil {
		return fmt.Errorf("encoding metadata: %w", err)
	}
	data := string(e.Data)
	if data == "" {
		data = "{}"
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("appending event: %w", err)
	}
	defer tx.Rollback()
	if err := tx.serialize(ctx, eventsLockKey); err != nil {
		return fmt.Errorf("appending event: %w", err)
	}
	var id int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO events (project_id, sandbox_id, type, at, metadata, data)
		VALUES (?, ?, ?, ?, ?, ?) RETURNING id`,
		e.ProjectID, e.SandboxID, e.Type, toMillis(e.At), string(meta), data).Scan(&id); err != nil {
		return fmt.Errorf("appending event: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("appending event: %w", err)
	}
	e.ID = id
	return nil
}

// EventFilter selects events. Zero fields select everything.
type EventFilter struct {
	ProjectID string // "": every project's (the webhook workers)
	SandboxID string
	Types     []string // any of these
	After     int64    // events with a greater ID
	Limit     int      // at most this many (0: 100)
}

// ListEvents returns the events f selects, in ID order.
func (s *Store) ListEvents(ctx context.Context, f EventFilter) ([]Event, error) {
	where := []string{"id > ?"}
	args := []any{f.After}
	if f.ProjectID != "" {
		where = append(where, "project_id = ?")
		args = append(args, f.ProjectID)
	}
	if f.SandboxID != "" {
		where = append(where, "sandbox_id = ?")
		args = append(args, f.SandboxID)
	}
	if len(f.Types) > 0 {
		where = append(where, "type IN ("+placeholders(len(f.Types))+")")
		for _, t := range f.Types {
			args = append(args, t)
		}
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	args = append(args, f.Limit)
	rows, err := s.db.QueryContext(ctx, `SELECT id, project_id, sandbox_id, type, at, metadata, data FROM events
		WHERE `+strings.Join(where, " AND ")+` ORDER BY id LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("listing events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var at int64
		var meta, data string
		if err := rows.Scan(&e.ID, &e.ProjectID, &e.SandboxID, &e.Type, &at, &meta, &data); err != nil {
			return nil, fmt.Errorf("listing events: %w", err)
		}
		if err := json.Unmarshal([]byte(meta), &e.Metadata); err != nil {
			return nil, fmt.Errorf("decoding metadata of event %d: %w", e.ID, err)
		}
		e.At, e.Data = fromMillis(at), json.RawMessage(data)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing events: %w", err)
	}
	return out, nil
}

// PruneEvents deletes the events recorded before before, and the webhook
// deliveries of such events with their attempts, and says how many events.
func (s *Store) PruneEvents(ctx context.Context, before time.Time) (int64, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("pruning events: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM webhook_attempts WHERE delivery_id IN
		(SELECT id FROM webhook_deliveries WHERE created_at < ?)`, toMillis(before)); err != nil {
		return 0, fmt.Errorf("pruning webhook attempts: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE created_at < ?`, toMillis(before)); err != nil {
		return 0, fmt.Errorf("pruning webhook deliveries: %w", err)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM events WHERE at < ?`, toMillis(before))
	if err != nil {
		return 0, fmt.Errorf("pruning events: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	return n, tx.Commit()
}

// LastEventID is the ID of the newest event (0: none).
func (s *Store) LastEventID(ctx context.Context) (int64, error) {
	var id int64
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM events`).Scan(&id); err != nil {
		return 0, fmt.Errorf("reading the last event: %w", err)
	}
	return id, nil
}
