package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/bench/internal/loadgen"
	"github.com/lizard-build/lizard/client"
)

// drainNode is issue 40's "a drain of one node with 2,000 sandboxes": n
// sandboxes are made through the APIs on the last node (the others
// marked draining meanwhile), then that node is drained through an API
// (POST /v1/nodes/NAME/drain, as lizard node drain does) while calls go
// on. Each sandbox's image is the fake runtime's (a file naming it),
// through the shared image store: what is timed is the control plane's
// part of a move, not a checkpoint's bytes. It prints the drain's time
// and moves, and the latency of creates, runCodes of other sandboxes and
// runCodes of the draining node's own sandboxes, in the drain and in the
// same time before it.
func drainNode(ctx context.Context, db *sql.DB, clients []*client.Client, apis []*apiProc, secret string, nodes []*simNode, n int) error {
	target := nodes[len(nodes)-1].Name
	// Only the target takes creates while its sandboxes are made.
	var others []string
	rows, err := db.QueryContext(ctx, `UPDATE nodes SET draining = 1 WHERE name <> $1 AND draining = 0 AND lost_at IS NULL RETURNING name`, target)
	if err != nil {
		return fmt.Errorf("drain: marking the other nodes: %w", err)
	}
	for rows.Next() {
		var name string
		rows.Scan(&name)
		others = append(others, name)
	}
	rows.Close()
	time.Sleep(1500 * time.Millisecond) // the APIs' kept node lists
	t0 := time.Now()
	ids, err := createOn(ctx, clients, n)
	if err != nil {
		return fmt.Errorf("drain: making %d sandboxes: %w", n, err)
	}
	made := time.Since(t0)
	if _, err := db.ExecContext(ctx, `UPDATE nodes SET draining = 0 WHERE name = ANY($1)`, others); err != nil {
		return fmt.Errorf("drain: unmarking the other nodes: %w", err)
	}
	var on int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sandboxes WHERE node = $1 AND ended_at IS NULL`, target).Scan(&on); err != nil {
		return err
	}
	time.Sleep(1500 * time.Millisecond)
	fmt.Printf("\ndrain: %d sandboxes made on %s through the APIs in %s (%d live there), %d other nodes, load %s\n",
		len(ids), target, made.Round(time.Millisecond), on, len(others), loadAvg())

	// The same load before and in the drain: creates (create, runCode,
	// kill) on the other nodes, and runCodes of the target's sandboxes.
	const window = 10 * time.Second
	before := callLoad(ctx, clients, ids)
	time.Sleep(window)
	b := before()
	admin, err := client.New(client.Config{BaseURL: apis[0].url, APIKey: secret})
	if err != nil {
		return err
	}
	during := callLoad(ctx, clients, ids)
	loadAt := loadAvg()
	t1 := time.Now()
	d, err := admin.DrainNode(ctx, target)
	took := time.Since(t1)
	dd := during()
	if err != nil {
		return fmt.Errorf("drain of %s: %w", target, err)
	}
	var downtime []float64
	for _, m := range d.Moved {
		downtime = append(downtime, float64(m.DowntimeMs))
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sandboxes WHERE node = $1 AND ended_at IS NULL`, target).Scan(&on); err != nil {
		return err
	}
	fmt.Printf("  drained %s in %s (the API's took_ms %d): %d moved, %d left, %d live there after; load %s at the start, %s at the end\n",
		target, took.Round(time.Millisecond), d.TookMs, len(d.Moved), len(d.Left), on, loadAt, loadAvg())
	if len(d.Left) > 0 {
		fmt.Printf("  the first left: %s: %s\n", d.Left[0].SandboxID, d.Left[0].Reason)
	}
	fmt.Printf("  a move's downtime (pause, durable, resume elsewhere): p50 %.0f ms, p99 %.0f ms, max %.0f ms; %.1f moves/s\n",
		loadgen.Pct(downtime, 50), loadgen.Pct(downtime, 99), loadgen.Pct(downtime, 100), float64(len(d.Moved))/took.Seconds())
	fmt.Printf("  | calls | %s before the drain | in the drain (%s) | ratio of p50s |\n", window, took.Round(time.Second))
	fmt.Println("  | --- | --- | --- | --- |")
	for _, k := range []string{"create", "runCode (other sandboxes)", "runCode (the node's sandboxes)"} {
		if len(b[k].MS)+b[k].Errors+len(dd[k].MS)+dd[k].Errors == 0 {
			continue // --drain-calls off
		}
		fmt.Printf("  | %s | %s | %s | %.2f |\n", k, b[k], dd[k], dd[k].P50()/max(b[k].P50(), 0.001))
	}
	return nil
}

// createOn makes n sandboxes through the APIs, 8 at a time, and returns
// them with the client (of its project) that made each.
func createOn(ctx context.Context, clients []*client.Client, n int) (map[string]*client.Client, error) {
	var mu sync.Mutex
	ids := map[string]*client.Client{}
	var firstErr error
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				c := clients[(w+int(i))%len(clients)]
				sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ptr(int64(3_600_000))})
				mu.Lock()
				if err != nil {
					firstErr = cmpErr(firstErr, err)
				} else {
					ids[sb.SandboxID] = c
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ids, firstErr
}

// callLoad runs, until the function it returns is called, 4 workers
// that create, runCode and kill a sandbox, and with --drain-calls 4 that
// runCode one of owners' sandboxes at random (through its own client); that function returns their latencies by
// kind.
func callLoad(ctx context.Context, clients []*client.Client, owners map[string]*client.Client) func() map[string]loadgen.Latencies {
	var ids []string
	for id := range owners {
		ids = append(ids, id)
	}
	var calls loadgen.Calls
	note := calls.Note
	stop := loadgen.UntilStopped(8, func(w int) {
		c := clients[w%len(clients)]
		if w%2 == 1 && !*drainCalls {
			time.Sleep(50 * time.Millisecond)
			return
		}
		if w%2 == 1 {
			t0 := time.Now()
			id := ids[rand.IntN(len(ids))]
			_, err := owners[id].Execute(ctx, id, api.ExecuteRequest{Code: "1+1"}, nil)
			note("runCode (the node's sandboxes)", time.Since(t0), err)
			return
		}
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ptr(int64(300_000))})
		note("create", time.Since(t0), err)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			return
		}
		t0 = time.Now()
		_, err = c.Execute(ctx, sb.SandboxID, api.ExecuteRequest{Code: "1+1"}, nil)
		note("runCode (other sandboxes)", time.Since(t0), err)
		c.KillSandbox(ctx, sb.SandboxID)
	})
	return func() map[string]loadgen.Latencies {
		stop()
		return calls.ByKind()
	}
}
