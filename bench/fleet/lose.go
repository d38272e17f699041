package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// loseNodes is issue 40's "50 nodes lost at once": perNode sandboxes a
// node on average are made, then the first lose nodes are killed at once
// (as kill -9: no lease renewed, no answer) and, until every sandbox of
// theirs answers 410, their sandboxes are called and creates go on
// through the APIs. It prints when the sweeper marked the nodes lost
// (against the lease: the target is lease + 2 s), what the callers saw
// before and after, and the creates' latency meanwhile (no stall).
func loseNodes(ctx context.Context, db *sql.DB, clients []*client.Client, nodes []*simNode, lose, perNode int) error {
	lose = min(lose, len(nodes)-1)
	total := perNode * len(nodes)
	var ids []string
	// Each sandbox is called through the client that made it: with
	// --projects the clients are of different projects.
	owner := map[string]*client.Client{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < total; i += 8 {
				c := clients[i%len(clients)]
				sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ptr(int64(3_600_000))})
				mu.Lock()
				if err != nil {
					firstErr = cmpErr(firstErr, err)
				} else {
					ids = append(ids, sb.SandboxID)
					owner[sb.SandboxID] = c
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("losing nodes: creating: %w", firstErr)
	}
	lost := map[string]bool{}
	for _, n := range nodes[:lose] {
		lost[n.Name] = true
	}
	var affected []string
	for _, id := range ids {
		var node string
		if err := db.QueryRowContext(ctx, `SELECT node FROM sandboxes WHERE id = $1`, id).Scan(&node); err != nil {
			return err
		}
		if lost[node] {
			affected = append(affected, id)
		}
	}
	killed := time.Now()
	for _, n := range nodes[:lose] {
		wg.Add(1)
		go func() { defer wg.Done(); n.Kill() }()
	}
	wg.Wait()

	// Creates meanwhile, through every API, until the callers are done.
	stopCreates := createMeanwhile(ctx, clients)
	// The callers: each affected sandbox called until it answers 410.
	gone := map[string]time.Duration{}
	before := map[string]int{} // what calls answered before the 410
	var message string
	pending := slices.Clone(affected)
	for len(pending) > 0 && time.Since(killed) < 3**lease+time.Minute {
		var next []string
		var pwg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for _, id := range pending {
			pwg.Add(1)
			sem <- struct{}{}
			go func() {
				defer pwg.Done()
				defer func() { <-sem }()
				_, err := owner[id].Execute(ctx, id, api.ExecuteRequest{Code: "1+1"}, nil)
				var ae *client.Error
				mu.Lock()
				defer mu.Unlock()
				switch {
				case errors.As(err, &ae) && ae.Status == http.StatusGone:
					gone[id] = time.Since(killed)
					message = ae.Message
				case errors.As(err, &ae):
					before[fmt.Sprint(ae.Status)]++
					next = append(next, id)
				case err != nil:
					before["error"]++
					next = append(next, id)
				default:
					before["200"]++
					next = append(next, id)
				}
			}()
		}
		pwg.Wait()
		pending = next
		time.Sleep(100 * time.Millisecond)
	}
	creates, createErrs := stopCreates()

	nLost, marked, err := markedLost(ctx, db, killed)
	if err != nil {
		return err
	}
	var times []float64
	for _, d := range gone {
		times = append(times, d.Seconds()*1000)
	}
	var seen []string
	for k, v := range before {
		seen = append(seen, fmt.Sprintf("%s ×%d", k, v))
	}
	slices.Sort(seen)
	fmt.Printf("\n%d of %d nodes killed at once (lease %s; target: noticed within lease + 2 s = %s), %d of their sandboxes (of %d), load %s:\n",
		lose, len(nodes), *lease, *lease+2*time.Second, len(affected), len(ids), loadAvg())
	fmt.Printf("  marked lost: %d nodes, the last %.2f s after the kill\n", nLost, marked.Seconds())
	fmt.Printf("  410 answered: %d of %d sandboxes; the first %.2f s, p50 %.2f s, the last %.2f s after the kill; %d never\n",
		len(gone), len(affected), first(times)/1000, pct(times, 50)/1000, pct(times, 100)/1000, len(pending))
	fmt.Printf("  the 410's message: %q\n", message)
	fmt.Printf("  calls answered before their 410: %s\n", strings.Join(seen, ", "))
	fmt.Printf("  creates meanwhile: %d, p50 %.1f ms, p99 %.1f ms, max %.1f ms, %d errors\n",
		len(creates), pct(creates, 50), pct(creates, 99), pct(creates, 100), createErrs)
	return nil
}

// createMeanwhile creates and kills sandboxes through the APIs, four at a
// time, until the function it returns is called, which returns the
// creates' latencies (ms) and how many failed.
func createMeanwhile(ctx context.Context, clients []*client.Client) func() ([]float64, int64) {
	var mu sync.Mutex
	var creates []float64
	var errs atomic.Int64
	stop := untilStopped(4, func(w int) {
		c := clients[w%len(clients)]
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ptr(int64(300_000))})
		d := ms(time.Since(t0))
		if err != nil {
			errs.Add(1)
			time.Sleep(50 * time.Millisecond)
			return
		}
		mu.Lock()
		creates = append(creates, d)
		mu.Unlock()
		c.KillSandbox(ctx, sb.SandboxID)
	})
	return func() ([]float64, int64) {
		stop()
		return creates, errs.Load()
	}
}

// markedLost is how many nodes the sweeper marked lost and, of the last,
// how long after killed.
func markedLost(ctx context.Context, db *sql.DB, killed time.Time) (int, time.Duration, error) {
	rows, err := db.QueryContext(ctx, `SELECT lost_at FROM nodes WHERE lost_at IS NOT NULL`)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	n, last := 0, time.Duration(0)
	for rows.Next() {
		var at int64
		if err := rows.Scan(&at); err != nil {
			return 0, 0, err
		}
		n++
		last = max(last, time.UnixMilli(at).Sub(killed))
	}
	return n, last, rows.Err()
}

func first(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return slices.Min(xs)
}
