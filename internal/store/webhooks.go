package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Webhooks are the projects' registered webhooks and their deliveries.
type Webhooks struct{ s *Store }

// Webhooks are the webhooks in s's database.
func (s *Store) Webhooks() Webhooks { return Webhooks{s} }

// Webhook is one project's registered URL. Cursor is the ID of the last
// event it has been given a delivery for (events before its creation
// never are).
type Webhook struct {
	ID        string
	ProjectID string
	URL       string
	Types     []string // none: every type
	Secret    string   // kept in the clear: deliveries are signed with it
	CreatedAt time.Time
	Cursor    int64
}

// Delivery states.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed" // retried for the time allowed, then given up
)

// Delivery is one event to be sent to one webhook, and how it went.
type Delivery struct {
	ID        int64
	WebhookID string
	EventID   int64
	SandboxID string
	State     string
	Attempts  int
	NextAt    time.Time
	CreatedAt time.Time
	// Tries are its attempts, oldest first (Webhooks.ListDeliveries only).
	Tries []Attempt
}

// Attempt is one try at sending a delivery.
type Attempt struct {
	N      int
	At     time.Time
	Status int    // HTTP status, 0 when none came back
	Error  string // why it failed, "" when it did not
	Took   time.Duration
}

const webhookColumns = `id, project_id, url, types, secret, created_at, cursor`

func scanWebhook(r scanner) (Webhook, error) {
	var w Webhook
	var types string
	var created int64
	if err := r.Scan(&w.ID, &w.ProjectID, &w.URL, &types, &w.Secret, &created, &w.Cursor); err != nil {
		return Webhook{}, err
	}
	if types != "" {
		w.Types = strings.Split(types, ",")
	}
	w.CreatedAt = fromMillis(created)
	return w, nil
}

// Create records w; its cursor is the newest event now, so that it
// is sent only what happens from now on. ErrNotFound if the project does
// not exist, ErrConflict if the ID is taken.
func (wh Webhooks) Create(ctx context.Context, w *Webhook) error {
	last, err := wh.s.Events().LastID(ctx)
	if err != nil {
		return err
	}
	_, err = wh.s.db.ExecContext(ctx, `INSERT INTO webhooks (`+webhookColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		w.ID, w.ProjectID, w.URL, strings.Join(w.Types, ","), w.Secret, toMillis(w.CreatedAt), last)
	switch {
	case isUniqueViolation(err):
		return fmt.Errorf("creating webhook %s: %w", w.ID, ErrConflict)
	case isConstraint(err):
		return fmt.Errorf("creating a webhook in project %q: %w", w.ProjectID, ErrNotFound)
	case err != nil:
		return fmt.Errorf("creating webhook %s: %w", w.ID, err)
	}
	w.Cursor = last
	return nil
}

// List returns projectID's webhooks ("": every project's), oldest
// first.
func (wh Webhooks) List(ctx context.Context, projectID string) ([]Webhook, error) {
	q, args := `SELECT `+webhookColumns+` FROM webhooks`, []any{}
	if projectID != "" {
		q += ` WHERE project_id = ?`
		args = append(args, projectID)
	}
	rows, err := wh.s.db.QueryContext(ctx, q+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("listing webhooks: %w", err)
	}
	defer rows.Close()
	var out []Webhook
	for rows.Next() {
		w, err := scanWebhook(rows)
		if err != nil {
			return nil, fmt.Errorf("listing webhooks: %w", err)
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// Get returns webhook id, or ErrNotFound.
func (wh Webhooks) Get(ctx context.Context, id string) (Webhook, error) {
	w, err := scanWebhook(wh.s.db.QueryRowContext(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Webhook{}, fmt.Errorf("getting webhook %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Webhook{}, fmt.Errorf("getting webhook %s: %w", id, err)
	}
	return w, nil
}

// Delete deletes webhook id and its deliveries; nothing more is
// sent to it. ErrNotFound if absent.
func (wh Webhooks) Delete(ctx context.Context, id string) error {
	tx, err := wh.s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("deleting webhook %s: %w", id, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM webhooks WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("deleting webhook %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("deleting webhook %s: %w", id, ErrNotFound)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM webhook_attempts WHERE delivery_id IN
		(SELECT id FROM webhook_deliveries WHERE webhook_id = ?)`, id); err != nil {
		return fmt.Errorf("deleting the attempts of webhook %s: %w", id, err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE webhook_id = ?`, id); err != nil {
		return fmt.Errorf("deleting the deliveries of webhook %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("deleting webhook %s: %w", id, err)
	}
	return nil
}

// QueueDeliveries makes one pending delivery of each of evs (events after
// w's cursor, in ID order) to w and moves its cursor past them, at once.
// Run twice (two API processes) it makes no second delivery of an event.
func (wh Webhooks) QueueDeliveries(ctx context.Context, w Webhook, evs []Event, cursor int64, now time.Time) error {
	tx, err := wh.s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("queueing deliveries to webhook %s: %w", w.ID, err)
	}
	defer tx.Rollback()
	for _, e := range evs {
		if _, err := tx.ExecContext(ctx, `INSERT INTO webhook_deliveries
			(webhook_id, event_id, sandbox_id, state, next_at, created_at) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (webhook_id, event_id) DO NOTHING`,
			w.ID, e.ID, e.SandboxID, DeliveryPending, toMillis(now), toMillis(now)); err != nil {
			return fmt.Errorf("queueing event %d to webhook %s: %w", e.ID, w.ID, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE webhooks SET cursor = ? WHERE id = ? AND cursor < ?`, cursor, w.ID, cursor); err != nil {
		return fmt.Errorf("moving the cursor of webhook %s: %w", w.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("queueing deliveries to webhook %s: %w", w.ID, err)
	}
	return nil
}

const deliveryColumns = `id, webhook_id, event_id, sandbox_id, state, attempts, next_at, created_at`

func scanDelivery(r scanner) (Delivery, error) {
	var d Delivery
	var next, created int64
	if err := r.Scan(&d.ID, &d.WebhookID, &d.EventID, &d.SandboxID, &d.State, &d.Attempts, &next, &created); err != nil {
		return Delivery{}, err
	}
	d.NextAt, d.CreatedAt = fromMillis(next), fromMillis(created)
	return d, nil
}

// ClaimDelivery takes the pending delivery due soonest for lease: no
// other claimer gets it until the lease runs out (a claimer that dies
// leaves it to the next) or it is finished. A delivery waits while an
// earlier event of the same sandbox is still pending to the same webhook,
// so each sandbox's events arrive in order. Attempts counts this one.
// ErrNotFound: none is due.
func (wh Webhooks) ClaimDelivery(ctx context.Context, now time.Time, lease time.Duration) (Delivery, error) {
	at := toMillis(now)
	d, err := scanDelivery(wh.s.db.QueryRowContext(ctx, `UPDATE webhook_deliveries SET claimed_until = ?, attempts = attempts + 1
		WHERE id = (SELECT d.id FROM webhook_deliveries d
			WHERE d.state = 'pending' AND d.next_at <= ? AND d.claimed_until < ?
			AND NOT EXISTS (SELECT 1 FROM webhook_deliveries e WHERE e.webhook_id = d.webhook_id
				AND e.sandbox_id = d.sandbox_id AND e.state = 'pending' AND e.event_id < d.event_id)
			ORDER BY d.next_at, d.id LIMIT 1`+wh.s.db.d.skipLocked()+`)
		AND state = 'pending' AND claimed_until < ?
		RETURNING `+deliveryColumns, toMillis(now.Add(lease)), at, at, at))
	if errors.Is(err, sql.ErrNoRows) {
		return Delivery{}, fmt.Errorf("claiming a webhook delivery: %w", ErrNotFound)
	}
	if err != nil {
		return Delivery{}, fmt.Errorf("claiming a webhook delivery: %w", err)
	}
	return d, nil
}

// FinishAttempt records attempt a of delivery d and moves d to state:
// pending again from next, delivered or failed.
func (wh Webhooks) FinishAttempt(ctx context.Context, d Delivery, a Attempt, state string, next time.Time) error {
	tx, err := wh.s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("recording an attempt of delivery %d: %w", d.ID, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO webhook_attempts (delivery_id, attempt, at, status, error, took_ms)
		VALUES (?, ?, ?, ?, ?, ?)`, d.ID, a.N, toMillis(a.At), a.Status, a.Error, a.Took.Milliseconds()); err != nil {
		return fmt.Errorf("recording an attempt of delivery %d: %w", d.ID, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries SET state = ?, next_at = ?, claimed_until = 0 WHERE id = ?`,
		state, toMillis(next), d.ID); err != nil {
		return fmt.Errorf("recording an attempt of delivery %d: %w", d.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("recording an attempt of delivery %d: %w", d.ID, err)
	}
	return nil
}

// ListDeliveries returns webhook id's latest deliveries, newest first,
// each with its attempts.
func (wh Webhooks) ListDeliveries(ctx context.Context, webhookID string, limit int) ([]Delivery, error) {
	rows, err := wh.s.db.QueryContext(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries
		WHERE webhook_id = ? ORDER BY event_id DESC LIMIT ?`, webhookID, limit)
	if err != nil {
		return nil, fmt.Errorf("listing deliveries of webhook %s: %w", webhookID, err)
	}
	var out []Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("listing deliveries of webhook %s: %w", webhookID, err)
		}
		out = append(out, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing deliveries of webhook %s: %w", webhookID, err)
	}
	for i := range out {
		if out[i].Tries, err = wh.attempts(ctx, out[i].ID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (wh Webhooks) attempts(ctx context.Context, deliveryID int64) ([]Attempt, error) {
	rows, err := wh.s.db.QueryContext(ctx, `SELECT attempt, at, status, error, took_ms FROM webhook_attempts
		WHERE delivery_id = ? ORDER BY attempt`, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("listing attempts of delivery %d: %w", deliveryID, err)
	}
	defer rows.Close()
	var out []Attempt
	for rows.Next() {
		var a Attempt
		var at, took int64
		if err := rows.Scan(&a.N, &at, &a.Status, &a.Error, &took); err != nil {
			return nil, fmt.Errorf("listing attempts of delivery %d: %w", deliveryID, err)
		}
		a.At, a.Took = fromMillis(at), time.Duration(took)*time.Millisecond
		out = append(out, a)
	}
	return out, rows.Err()
}
