package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Events is the event log: what happened to a project's sandboxes, in the
// order it was committed (package events gives it meaning).
type Events struct{ s *Store }

// Events is the event log in s's database.
func (s *Store) Events() Events { return Events{s} }

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

// Append records e and sets e.ID, and returns once e can be read.
//
// IDs must become visible in their order: a reader that has seen 8 and
// resumes after it must never find 7 committed later. SQLite's writers are
// serial, so its sequence is enough. On PostgreSQL an event's ID is its
// transaction's ID (txid_current, 64-bit, never reused) plus a base
// (eventIDs), and readers see only IDs below the oldest transaction still
// running (txid_snapshot_xmin: the watermark). Every transaction below it
// has ended, and every one still to end is above it, so nothing can appear
// below what a reader has seen — without appends waiting for each other:
// the global advisory lock this replaces put every create of the cluster
// in one line (bench/fleet). The price: a write transaction running long
// anywhere on the PostgreSQL server holds the watermark back, delaying
// events (never losing one) while it runs — the same bargain as PgQ's.
// Each append is its own transaction, so one event has one ID.
func (el Events) Append(ctx context.Context, e *Event) error {
	meta, err := json.Marshal(nonNil(e.Metadata))
	if err != nil {
		return fmt.Errorf("encoding metadata: %w", err)
	}
	data := string(e.Data)
	if data == "" {
		data = "{}"
	}
	if err := el.s.db.QueryRowContext(ctx, el.s.db.d.appendEvent(),
		e.ProjectID, e.SandboxID, e.Type, toMillis(e.At), string(meta), data).Scan(&e.ID); err != nil {
		return fmt.Errorf("appending event: %w", err)
	}
	if el.s.db.d == postgresDialect {
		el.waitVisible(ctx, e.ID)
	}
	return nil
}

// appendEvent is Append's statement: on PostgreSQL the ID is the
// transaction's; a NULL key is SQLite's next AUTOINCREMENT ID.
func (d dialect) appendEvent() string {
	id := "NULL"
	if d == postgresDialect {
		id = `txid_current() + (SELECT MAX(base) FROM event_ids)`
	}
	return `INSERT INTO events (id, project_id, sandbox_id, type, at, metadata, data)
		VALUES (` + id + `, ?, ?, ?, ?, ?, ?) RETURNING id`
}

// maxVisibleWait bounds how long Append waits for the transactions older
// than its own to end: past it the event is recorded and becomes readable
// when they end.
const maxVisibleWait = 2 * time.Second

// waitVisible waits until readers see event id: until every transaction
// older than its own has ended (at once, almost always).
func (el Events) waitVisible(ctx context.Context, id int64) {
	end := time.Now().Add(maxVisibleWait)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		var mark int64
		if err := el.s.db.QueryRowContext(ctx, `SELECT `+eventsWatermark).Scan(&mark); err != nil || id < mark || time.Now().After(end) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

// eventsWatermark is PostgreSQL's first event ID readers may not see yet:
// the oldest transaction still running, as an event ID.
const eventsWatermark = `txid_snapshot_xmin(txid_current_snapshot()) + (SELECT MAX(base) FROM event_ids)`

// visible is the condition that keeps a reader below the watermark.
func (el Events) visible() string {
	if el.s.db.d == postgresDialect {
		return "id < " + eventsWatermark
	}
	return "1 = 1"
}

// EventFilter selects events. Zero fields select everything.
type EventFilter struct {
	ProjectID string // "": every project's (the webhook workers)
	SandboxID string
	Types     []string // any of these
	After     int64    // events with a greater ID
	Limit     int      // at most this many (0: 100)
}

// List returns the events f selects, in ID order.
func (el Events) List(ctx context.Context, f EventFilter) ([]Event, error) {
	where := []string{"id > ?", el.visible()}
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
	rows, err := el.s.db.QueryContext(ctx, `SELECT id, project_id, sandbox_id, type, at, metadata, data FROM events
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

// Prune deletes the events recorded before before, and the webhook
// deliveries of such events with their attempts, and says how many events.
func (el Events) Prune(ctx context.Context, before time.Time) (int64, error) {
	tx, err := el.s.db.BeginTx(ctx, nil)
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

// LastID is the ID of the newest event readers see (0: none): a follower
// that starts after it misses none committed later.
func (el Events) LastID(ctx context.Context) (int64, error) {
	var id int64
	if err := el.s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM events WHERE `+el.visible()).Scan(&id); err != nil {
		return 0, fmt.Errorf("reading the last event: %w", err)
	}
	return id, nil
}

// Get returns event id, or ErrNotFound (never recorded, or pruned).
func (el Events) Get(ctx context.Context, id int64) (Event, error) {
	evs, err := el.List(ctx, EventFilter{After: id - 1, Limit: 1})
	if err != nil {
		return Event{}, err
	}
	if len(evs) == 0 || evs[0].ID != id {
		return Event{}, fmt.Errorf("getting event %d: %w", id, ErrNotFound)
	}
	return evs[0], nil
}
