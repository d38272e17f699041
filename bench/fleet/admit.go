package main

// The admission line alone (--admission-line): one project's creates as
// the nodes record them, without the API, the runCode or the HTTP between,
// so that what bounds them is the project's lock and not the rest of the
// cycle's CPU. Two store handles (two pools, as two node processes) and
// --workers goroutines, each recording as its own node (so that a node's
// slot lock is not the line), create and end sandboxes in one project with
// the quota --max-sandboxes-per-project, for the given time, twice each
// way, alternated:
//
//   - "admitted": store.CreateAdmitted, what a node runs (the project's and
//     the node's transaction-level locks in one statement, the slot read,
//     the count in the insert's statement, the commit);
//   - "session lock": the sequence a node ran before it (node.Quota.Admit
//     then store.CreateSandbox, c0fcf3d's parent): the project's session
//     lock on a connection of its own, the count, BEGIN, the node's slot
//     lock, the slot read, the insert, COMMIT, the unlock.

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lizard-build/lizard/internal/store"
)

// admissionLine prints one row per run of each way.
func admissionLine(ctx context.Context, db *sql.DB, dbURL string, d time.Duration) error {
	var stores []*store.Store
	for range 2 {
		st, err := store.OpenURL(ctx, dbURL)
		if err != nil {
			return err
		}
		defer st.Close()
		stores = append(stores, st)
	}
	const project = "bench-line"
	if err := stores[0].CreateProject(ctx, project, time.Now()); err != nil {
		return err
	}
	q := store.Quota{MaxLive: *maxLive}
	ways := []struct {
		name   string
		create func(st *store.Store, sb *store.Sandbox) error
	}{
		{"session lock (before)", func(st *store.Store, sb *store.Sandbox) error {
			release, err := st.LockProject(ctx, project)
			if err != nil {
				return err
			}
			defer release()
			live, err := st.CountProjectLive(ctx, project)
			if err != nil {
				return err
			}
			if live >= q.MaxLive {
				return fmt.Errorf("over the quota of %d", q.MaxLive)
			}
			return st.CreateSandbox(ctx, sb, 1024, lineAddrs)
		}},
		{"admitted (after)", func(st *store.Store, sb *store.Sandbox) error {
			return st.CreateAdmitted(ctx, sb, q, 1024, lineAddrs)
		}},
	}
	fmt.Printf("the admission line alone: one project, %d workers over 2 store handles, each as its own node, create + end, %s a run, quota %d\n",
		*workers, d, q.MaxLive)
	fmt.Println("| way | creates/s | lock wait ms / create | statements / create (with the end) | DB ms / create | load avg |")
	fmt.Println("| --- | --- | --- | --- | --- | --- |")
	for round := range 2 {
		for _, w := range ways {
			if _, err := db.ExecContext(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
				return err
			}
			var made atomic.Int64
			var firstErr atomic.Value
			deadline := time.Now().Add(d)
			begin := time.Now()
			var wg sync.WaitGroup
			for i := range *workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					st := stores[i%len(stores)].OnNode(fmt.Sprintf("line-%03d", i))
					for n := 0; time.Now().Before(deadline); n++ {
						sb := store.Sandbox{ID: fmt.Sprintf("line-%d-%d-%d-%d", round, len(w.name), i, n), ProjectID: project,
							Template: "interpreter", State: "starting", TimeoutMs: 300_000, CreatedAt: time.Now()}
						if err := w.create(st, &sb); err != nil {
							firstErr.CompareAndSwap(nil, err)
							return
						}
						made.Add(1)
						if err := st.EndSandbox(ctx, sb.ID, "killed", "", time.Now()); err != nil {
							firstErr.CompareAndSwap(nil, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			secs := time.Since(begin).Seconds()
			if err, _ := firstErr.Load().(error); err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
			var calls int64
			var lockms, dbms float64
			err := db.QueryRowContext(ctx, `SELECT COALESCE(SUM(calls), 0),
				COALESCE(SUM(total_exec_time) FILTER (WHERE query LIKE '%pg_advisory%'), 0),
				COALESCE(SUM(total_exec_time) FILTER (WHERE query NOT LIKE '%pg_advisory%'), 0)
				FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
				AND query NOT LIKE '%pg_stat_statements%'`).Scan(&calls, &lockms, &dbms)
			if err != nil {
				return err
			}
			n := float64(max(1, made.Load()))
			if round == 0 {
				if err := printStatements(ctx, db, w.name, n); err != nil {
					return err
				}
			}
			fmt.Printf("| %s | %.0f | %.2f | %.1f | %.2f | %s |\n", w.name, float64(made.Load())/secs, lockms/n, float64(calls)/n, dbms/n,
				strings.TrimSpace(loadAvg()))
		}
	}
	return nil
}

func lineAddrs(slot int) (string, string) {
	return fmt.Sprintf("10.0.%d.%d", slot/256, slot%256), fmt.Sprintf("10.1.%d.%d", slot/256, slot%256)
}

// printStatements prints each statement's calls a create and mean time,
// in the order of the most called: what a create and its end ran.
func printStatements(ctx context.Context, db *sql.DB, name string, creates float64) error {
	rows, err := db.QueryContext(ctx, `SELECT query, calls, mean_exec_time FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND query NOT LIKE '%pg_stat_statements%' ORDER BY calls DESC, query`)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Printf("  %s: statements (calls a create, mean ms):\n", name)
	for rows.Next() {
		var q string
		var calls int64
		var mean float64
		if err := rows.Scan(&q, &calls, &mean); err != nil {
			return err
		}
		if float64(calls)/creates >= 0.05 {
			fmt.Printf("    %5.2f %8.3f  %s\n", float64(calls)/creates, mean, shorten(q, 100))
		}
	}
	return rows.Err()
}
