// Package loadgen is the Go benches' (bench/cluster, bench/fleet) load:
// workers that repeat a step until stopped, and what they count of it —
// calls' times and failures by kind, and percentiles.
package loadgen

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Pct is the p-th percentile of xs by the nearest rank (100: the largest),
// 0 for none.
func Pct(xs []float64, p int) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, max(0, (len(s)*p+99)/100-1))]
}

// Latencies are one kind of call's times (ms) and failures.
type Latencies struct {
	MS     []float64
	Errors int
	First  string // the first failure's message
}

// P50 is the median time.
func (l Latencies) P50() float64 { return Pct(l.MS, 50) }

func (l Latencies) String() string {
	s := fmt.Sprintf("%d calls, p50 %.1f ms, p99 %.1f ms, max %.1f ms", len(l.MS), Pct(l.MS, 50), Pct(l.MS, 99), Pct(l.MS, 100))
	if l.Errors > 0 {
		s += fmt.Sprintf(", %d failed (%s)", l.Errors, l.First)
	}
	return s
}

// Summary is l as the benches' JSON results hold it.
func (l Latencies) Summary() map[string]float64 {
	return map[string]float64{"calls": float64(len(l.MS)), "p50_ms": Pct(l.MS, 50), "p99_ms": Pct(l.MS, 99),
		"max_ms": Pct(l.MS, 100), "errors": float64(l.Errors)}
}

// Calls gathers Latencies by kind from workers running at once. The zero
// value is ready.
type Calls struct {
	mu     sync.Mutex
	byKind map[string]Latencies
}

// Note records a call of kind that took d, or failed with err.
func (c *Calls) Note(kind string, d time.Duration, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKind == nil {
		c.byKind = map[string]Latencies{}
	}
	l := c.byKind[kind]
	if err != nil {
		l.Errors++
		if l.First == "" {
			l.First = err.Error()
		}
	} else {
		l.MS = append(l.MS, float64(d.Microseconds())/1000)
	}
	c.byKind[kind] = l
}

// ByKind is a copy of what was noted so far.
func (c *Calls) ByKind() map[string]Latencies {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]Latencies, len(c.byKind))
	for k, l := range c.byKind {
		l.MS = slices.Clone(l.MS)
		out[k] = l
	}
	return out
}

// UntilStopped runs n workers, each doing step(its number) again and
// again, until stop is called; stop returns once every worker's step in
// progress has ended.
func UntilStopped(n int, step func(w int)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				step(w)
			}
		}()
	}
	return func() {
		close(done)
		wg.Wait()
	}
}
