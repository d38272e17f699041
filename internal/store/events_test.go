package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/store/pgtest"
)

func TestEvents(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		s := be.open(t)
		old := time.Now().Add(-time.Hour)
		add := func(project, sandbox, typ string, at time.Time) int64 {
			t.Helper()
			e := Event{Type: typ, At: at, ProjectID: project, SandboxID: sandbox,
				Metadata: map[string]string{"user": project}, Data: json.RawMessage(`{"state":"running"}`)}
			if err := s.Events().Append(ctx, &e); err != nil {
				t.Fatalf("AppendEvent: %v", err)
			}
			return e.ID
		}
		a := add("p", "s1", "sandbox.created", old)
		b := add("q", "s2", "sandbox.created", time.Now())
		c := add("p", "s1", "sandbox.paused", time.Now())
		d := add("p", "s3", "sandbox.killed", time.Now())
		if !(a < b && b < c && c < d) {
			t.Fatalf("IDs %d %d %d %d; want increasing", a, b, c, d)
		}
		ids := func(f EventFilter) []int64 {
			t.Helper()
			evs, err := s.Events().List(ctx, f)
			if err != nil {
				t.Fatalf("ListEvents(%+v): %v", f, err)
			}
			var out []int64
			for _, e := range evs {
				out = append(out, e.ID)
			}
			return out
		}
		for _, tc := range []struct {
			name string
			f    EventFilter
			want []int64
		}{
			{"project", EventFilter{ProjectID: "p"}, []int64{a, c, d}},
			{"other project", EventFilter{ProjectID: "q"}, []int64{b}},
			{"all projects", EventFilter{}, []int64{a, b, c, d}},
			{"after", EventFilter{ProjectID: "p", After: a}, []int64{c, d}},
			{"limit", EventFilter{ProjectID: "p", Limit: 2}, []int64{a, c}},
			{"sandbox", EventFilter{ProjectID: "p", SandboxID: "s1"}, []int64{a, c}},
			{"types", EventFilter{ProjectID: "p", Types: []string{"sandbox.paused", "sandbox.killed"}}, []int64{c, d}},
			{"none", EventFilter{ProjectID: "p", SandboxID: "s2"}, nil},
		} {
			if got := ids(tc.f); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
			}
		}
		evs, _ := s.Events().List(ctx, EventFilter{ProjectID: "p", Limit: 1})
		if e := evs[0]; e.Metadata["user"] != "p" || string(e.Data) != `{"state":"running"}` || e.At.UnixMilli() != old.UnixMilli() {
			t.Errorf("event read back as %+v", e)
		}
		n, err := s.Events().Prune(ctx, time.Now().Add(-time.Minute))
		if err != nil || n != 1 {
			t.Fatalf("PruneEvents = %d, %v; want 1 pruned", n, err)
		}
		if got := ids(EventFilter{}); fmt.Sprint(got) != fmt.Sprint([]int64{b, c, d}) {
			t.Errorf("after pruning: %v", got)
		}
		// IDs are never reused, even after the newest is pruned.
		if _, err := s.Events().Prune(ctx, time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if e := add("p", "s1", "sandbox.resumed", time.Now()); e <= d {
			t.Errorf("ID after pruning everything = %d; want > %d", e, d)
		}
	})
}

// TestEventsFollowMissesNone appends from several connections while a
// reader resumes after the last ID it saw, as GET /v1/events?follow=1
// does: it must see every event.
func TestEventsFollowMissesNone(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		u := be.newURL(t)
		const writers, each = 4, 40
		var wg sync.WaitGroup
		for w := range writers {
			s := openURL(t, u)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					e := Event{Type: "sandbox.created", At: time.Now(), ProjectID: "p", SandboxID: fmt.Sprintf("s%d-%d", w, i)}
					if err := s.Events().Append(ctx, &e); err != nil {
						t.Errorf("AppendEvent: %v", err)
						return
					}
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		r := openURL(t, u)
		seen := map[string]bool{}
		var after int64
		for finished := false; ; {
			select {
			case <-done:
				finished = true
			default:
			}
			evs, err := r.Events().List(ctx, EventFilter{ProjectID: "p", After: after, Limit: 7})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				if seen[e.SandboxID] {
					t.Fatalf("event of %s seen twice", e.SandboxID)
				}
				seen[e.SandboxID] = true
				after = e.ID
			}
			if finished && len(evs) == 0 {
				break
			}
		}
		if len(seen) != writers*each {
			t.Errorf("follower saw %d events; want %d", len(seen), writers*each)
		}
	})
}

// TestEventIDsVisibleInOrder: on PostgreSQL, two API processes append
// without waiting for each other, and an event is never readable before
// one with a smaller ID whose transaction is still running — the case
// the global advisory lock was for. Process 1's append is held between
// its insert and its commit; process 2's commits meanwhile with a larger
// ID: a reader sees neither (so resuming after what it saw misses
// nothing), and process 2's Append does not return, until process 1's
// commits; then both, in order. SQLite's writers are serial.
func TestEventIDsVisibleInOrder(t *testing.T) {
	srv := pgtest.Shared(t)
	u := srv.NewDatabase(t)
	ctx := context.Background()
	p1, p2, reader := openURL(t, u), openURL(t, u), openURL(t, u)
	held, err := p1.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback()
	var id1 int64
	if err := held.QueryRowContext(ctx, postgresDialect.appendEvent(), "p", "s1", "sandbox.created", 1, "{}", "{}").Scan(&id1); err != nil {
		t.Fatal(err)
	}
	e2 := Event{Type: "sandbox.created", At: time.Now(), ProjectID: "p", SandboxID: "s2"}
	appended := make(chan error, 1)
	go func() { appended <- p2.Events().Append(ctx, &e2) }()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var n int
		if err := reader.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM events`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break // process 2's event is committed
		}
		if time.Now().After(end) {
			t.Fatal("process 2's append did not commit while process 1's was held: appends still wait for each other")
		}
	}
	evs, err := reader.Events().List(ctx, EventFilter{ProjectID: "p"})
	if err != nil || len(evs) != 0 {
		t.Fatalf("events readable while an append with a smaller ID runs: %+v, %v; want none", evs, err)
	}
	if last, err := reader.Events().LastID(ctx); err != nil || last != 0 {
		t.Fatalf("LastID while an append with a smaller ID runs = %d, %v; want 0", last, err)
	}
	select {
	case err := <-appended:
		t.Fatalf("process 2's Append returned (%v) before its event could be read", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	evs, err = reader.Events().List(ctx, EventFilter{ProjectID: "p"})
	if err != nil || len(evs) != 2 || evs[0].ID != id1 || evs[1].ID != e2.ID || id1 >= e2.ID {
		t.Fatalf("events after both committed: %+v, %v; want s1 (%d) then s2 (%d)", evs, err, id1, e2.ID)
	}
}

// TestEventIDsAboveRestored: a database whose events have IDs above the
// server's transaction IDs (restored from another server, or upgraded
// from a sequence) keeps new IDs above them once a process opens it.
func TestEventIDsAboveRestored(t *testing.T) {
	srv := pgtest.Shared(t)
	u := srv.NewDatabase(t)
	ctx := context.Background()
	s := openURL(t, u)
	const restored = int64(1) << 40
	if _, err := s.db.ExecContext(ctx, `INSERT INTO events (id, project_id, sandbox_id, type, at) VALUES (?, 'p', 's0', 'sandbox.created', 1)`, restored); err != nil {
		t.Fatal(err)
	}
	s2 := openURL(t, u)
	e := Event{Type: "sandbox.killed", At: time.Now(), ProjectID: "p", SandboxID: "s0"}
	if err := s2.Events().Append(ctx, &e); err != nil {
		t.Fatal(err)
	}
	evs, err := s2.Events().List(ctx, EventFilter{ProjectID: "p"})
	if err != nil || len(evs) != 2 || evs[0].ID != restored || evs[1].ID <= restored {
		t.Fatalf("events after reopening: %+v, %v; want the restored one (%d), then a new one above it", evs, err, restored)
	}
}
