package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/bench/internal/loadgen"
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
	calls := callUntilGone(ctx, owner, affected, killed)
	gone, before, example, message := calls.gone, calls.before, calls.example, calls.message
	creates, createErrs, createErr := stopCreates()

	nLost, marked, expired, err := markedLost(ctx, db, killed)
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
	for k, v := range example {
		seen = append(seen, fmt.Sprintf("%s e.g. %q", k, v))
	}
	slices.Sort(seen)
	fmt.Printf("\n%d of %d nodes killed at once (lease %s; target: noticed within lease + 2 s = %s), %d of their sandboxes (of %d), load %s:\n",
		lose, len(nodes), *lease, *lease+2*time.Second, len(affected), len(ids), loadAvg())
	fmt.Printf("  marked lost: %d nodes, the last %.2f s after the kill; the last of their leases ran out %.2f s after it\n", nLost, marked.Seconds(), expired.Seconds())
	fmt.Printf("  410 answered: %d of %d sandboxes; the first %.2f s, p50 %.2f s, the last %.2f s after the kill (%.2f s after the last lease ran out); %d never\n",
		len(gone), len(affected), first(times)/1000, loadgen.Pct(times, 50)/1000, loadgen.Pct(times, 100)/1000, loadgen.Pct(times, 100)/1000-expired.Seconds(), len(affected)-len(gone))
	fmt.Printf("  the 410's message: %q\n", message)
	fmt.Printf("  calls answered before their 410: %s\n", strings.Join(seen, ", "))
	fmt.Printf("  creates meanwhile: %d, p50 %.1f ms, p99 %.1f ms, max %.1f ms, %d errors (the first: %q)\n",
		len(creates), loadgen.Pct(creates, 50), loadgen.Pct(creates, 99), loadgen.Pct(creates, 100), createErrs, createErr)
	return nil
}

// callsSeen is what the callers of the lost nodes' sandboxes saw (callUntilGone).
type callsSeen struct {
	gone    map[string]time.Duration // sandbox → its 410, after the kill
	before  map[string]int           // what calls answered before their 410
	example map[string]string        // an error of each kind before
	message string                   // a 410's message
}

// callUntilGone calls each of ids through its owner's client on its own
// until it answers 410 (a call, then 100 ms, then the next), at most 32
// calls in flight, for up to 3 leases and a minute after killed. No
// rounds: a sandbox's 410 is timed when its own call answers, not when a
// round of every pending sandbox's calls ends (rounds made the last 410s
// wait for the slowest calls of each).
func callUntilGone(ctx context.Context, owner map[string]*client.Client, ids []string, killed time.Time) callsSeen {
	out := callsSeen{gone: map[string]time.Duration{}, before: map[string]int{}, example: map[string]string{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	deadline := killed.Add(3**lease + time.Minute)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				sem <- struct{}{}
				_, err := owner[id].Execute(ctx, id, api.ExecuteRequest{Code: "1+1"}, nil)
				<-sem
				var ae *client.Error
				kind := "200"
				switch {
				case errors.As(err, &ae):
					kind = fmt.Sprint(ae.Status)
				case err != nil:
					kind = "error"
				}
				mu.Lock()
				if kind == "410" {
					out.gone[id] = time.Since(killed)
					out.message = ae.Message
					mu.Unlock()
					return
				}
				out.before[kind]++
				if err != nil && out.example[kind] == "" {
					out.example[kind] = err.Error()
				}
				mu.Unlock()
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return out
}

// createMeanwhile creates and kills sandboxes through the APIs, four at a
// time, until the function it returns is called, which returns the
// creates' latencies (ms), how many failed and the first failure.
func createMeanwhile(ctx context.Context, clients []*client.Client) func() ([]float64, int64, string) {
	var mu sync.Mutex
	var creates []float64
	var errs atomic.Int64
	var firstErr string
	stop := loadgen.UntilStopped(4, func(w int) {
		c := clients[w%len(clients)]
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ptr(int64(300_000))})
		d := ms(time.Since(t0))
		if err != nil {
			errs.Add(1)
			mu.Lock()
			if firstErr == "" {
				firstErr = err.Error()
			}
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
			return
		}
		mu.Lock()
		creates = append(creates, d)
		mu.Unlock()
		c.KillSandbox(ctx, sb.SandboxID)
	})
	return func() ([]float64, int64, string) {
		stop()
		return creates, errs.Load(), firstErr
	}
}

// markedLost is how many nodes the sweeper marked lost and, of the last,
// how long after killed; and how long after killed the last of their
// leases ran out.
func markedLost(ctx context.Context, db *sql.DB, killed time.Time) (int, time.Duration, time.Duration, error) {
	rows, err := db.QueryContext(ctx, `SELECT lost_at, lease_until FROM nodes WHERE lost_at IS NOT NULL`)
	if err != nil {
		return 0, 0, 0, err
	}
	defer rows.Close()
	n, last, expired := 0, time.Duration(0), time.Duration(0)
	for rows.Next() {
		var at, until int64
		if err := rows.Scan(&at, &until); err != nil {
			return 0, 0, 0, err
		}
		n++
		last = max(last, time.UnixMilli(at).Sub(killed))
		expired = max(expired, time.UnixMilli(until).Sub(killed))
	}
	return n, last, expired, rows.Err()
}

func first(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return slices.Min(xs)
}
