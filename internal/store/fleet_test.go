package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestCountProjectLiveIndexed: the count every create makes under its
// project's lock reads the project's live rows through
// sandboxes_live_project, not the cluster's live rows or every row the
// project ever had (bench/fleet found it reading 2,136 blocks a count at
// 100k rows), and counts right.
func TestCountProjectLiveIndexed(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		s := be.open(t)
		ctx := context.Background()
		for _, p := range []string{"p", "q"} {
			if err := s.CreateProject(ctx, p, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		// 4,000 ended rows of p, 2,000 live (paused) rows of q on
		// other nodes, 3 live rows of p.
		now := time.Now().UnixMilli()
		const batch = 500
		for from := 0; from < 6003; from += batch {
			var values []string
			for i := from; i < min(from+batch, 6003); i++ {
				project, state, ended := "p", "killed", fmt.Sprint(now)
				switch {
				case i >= 6000:
					state, ended = "running", "NULL"
				case i >= 4000:
					project, state, ended = "q", "paused", "NULL"
				}
				values = append(values, fmt.Sprintf("('s%d', '%s', 'interpreter', '%s', 1000, %d, %s, %d, 'h', 'g', 'n%d')",
					i, project, state, now, ended, 10+i, i%50))
			}
			if _, err := s.db.ExecContext(ctx, `INSERT INTO sandboxes (id, project_id, template, state, timeout_ms, created_at, ended_at, slot, host_addr, guest_addr, node) VALUES `+
				strings.Join(values, ", ")); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.db.ExecContext(ctx, `ANALYZE`); err != nil {
			t.Fatal(err)
		}
		if n, err := s.CountProjectLive(ctx, "p"); err != nil || n != 3 {
			t.Fatalf("CountProjectLive(p) = %d, %v; want 3", n, err)
		}
		explain := "EXPLAIN QUERY PLAN "
		if be.pg != nil {
			explain = "EXPLAIN "
		}
		rows, err := s.db.QueryContext(ctx, explain+countProjectLive, "p")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		var plan []string
		for rows.Next() {
			vals := make([]any, len(cols))
			for i := range vals {
				vals[i] = new(any)
			}
			if err := rows.Scan(vals...); err != nil {
				t.Fatal(err)
			}
			for _, v := range vals {
				plan = append(plan, fmt.Sprint(*v.(*any)))
			}
		}
		if got := strings.Join(plan, " "); !strings.Contains(got, "sandboxes_live_project") {
			t.Fatalf("plan of the project's live count: %s; want it on sandboxes_live_project", got)
		}
	})
}

// TestSlotLockPerNode: on PostgreSQL a node's slot allocation waits only
// for allocations on the same node (slots are unique per node), not for
// every node's in the cluster — one lock for all made every create of a
// fleet wait in one line.
func TestSlotLockPerNode(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		if be.pg == nil {
			return // SQLite serialises every writer: one machine, one node
		}
		s := be.open(t)
		ctx := context.Background()
		if err := s.CreateProject(ctx, "p", time.Now()); err != nil {
			t.Fatal(err)
		}
		// An allocation on node a under way: its transaction holds a's lock.
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.freeSlot(ctx, "a", 10, nil); err != nil {
			t.Fatal(err)
		}
		create := func(node, id string, d time.Duration) error {
			ctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			sb := Sandbox{ID: id, ProjectID: "p", Template: "interpreter", State: "starting", TimeoutMs: 1000, CreatedAt: time.Now()}
			return s.OnNode(node).CreateSandbox(ctx, &sb, 10, addrs)
		}
		if err := create("b", "on-b", 5*time.Second); err != nil {
			t.Fatalf("create on node b while a allocates: %v; want it not to wait for a", err)
		}
		if err := create("a", "on-a", 300*time.Millisecond); err == nil {
			t.Fatal("create on node a while a allocates did not wait: want a's allocations one at a time")
		}
	})
}
