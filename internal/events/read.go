package events

import (
	"context"
	"log/slog"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/store"
)

// Query selects a project's events. Zero fields select everything.
type Query struct {
	SandboxID string
	Types     []string          // any of these
	Metadata  map[string]string // every pair, as the sandbox had it
	After     int64             // events after this ID
	Limit     int               // page size (1 to MaxLimit; 0: DefaultLimit)
}

// Page sizes of List.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// maxScan bounds the rows one List reads when a metadata filter skips
// most of them: the page ends early, with HasMore, and the next resumes.
const maxScan = 10_000

// PollInterval is how often Follow reads the store for new events: a
// follower sees an event at most this long (plus a query) after it is
// recorded, through any API process.
const PollInterval = 250 * time.Millisecond

func (q Query) matches(e store.Event) bool {
	for k, v := range q.Metadata {
		if got, ok := e.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Log reads the events recorded in a store.
type Log struct {
	Store *store.Store
}

// List returns one page of projectID's events q selects, oldest first.
func (l *Log) List(ctx context.Context, projectID string, q Query) (api.EventList, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	out := api.EventList{Events: []api.Event{}, Next: q.After}
	batch := limit + 1
	if len(q.Metadata) > 0 {
		batch = max(batch, 500)
	}
	for scanned := 0; scanned < maxScan; {
		rows, err := l.Store.Events().List(ctx, store.EventFilter{ProjectID: projectID, SandboxID: q.SandboxID, Types: q.Types,
			After: out.Next, Limit: batch})
		if err != nil {
			return api.EventList{}, err
		}
		for _, e := range rows {
			scanned++
			if !q.matches(e) {
				out.Next = e.ID
				continue
			}
			if len(out.Events) == limit {
				out.HasMore = true
				return out, nil
			}
			out.Events = append(out.Events, Wire(e))
			out.Next = e.ID
		}
		if len(rows) < batch {
			return out, nil
		}
	}
	out.HasMore = true
	return out, nil
}

// Last is the ID of the newest event recorded (0: none), where a follow
// that names no start begins.
func (l *Log) Last(ctx context.Context) (int64, error) {
	return l.Store.Events().LastID(ctx)
}

// Follow sends projectID's events q selects, after q.After, as they are
// recorded, until ctx ends or send fails.
func (l *Log) Follow(ctx context.Context, projectID string, q Query, send func(api.Event) error) error {
	q.Limit = MaxLimit
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	for {
		page, err := l.List(ctx, projectID, q)
		if err != nil {
			return err
		}
		for _, e := range page.Events {
			if err := send(e); err != nil {
				return err
			}
		}
		q.After = page.Next
		if page.HasMore {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RunPruner deletes events older than retention every so often, in one
// process at a time (store.TryLock), until ctx ends.
func (l *Log) RunPruner(ctx context.Context, retention time.Duration, log *slog.Logger) {
	t := time.NewTicker(min(retention/10, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		release, ok, err := l.Store.TryLock(ctx, "events-pruner")
		if err != nil || !ok {
			continue
		}
		if _, err := l.Store.Events().Prune(ctx, time.Now().Add(-retention)); err != nil && ctx.Err() == nil {
			log.Error("pruning old events", "err", err)
		}
		release()
	}
}
