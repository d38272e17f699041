package loadgen

import (
	"errors"
	"sync"
	"testing"
	"time"
)

func TestPct(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	for _, tc := range []struct {
		p    int
		want float64
	}{{0, 1}, {50, 3}, {99, 5}, {100, 5}, {20, 1}, {21, 2}} {
		if got := Pct(xs, tc.p); got != tc.want {
			t.Errorf("Pct(%v, %d) = %v; want %v", xs, tc.p, got, tc.want)
		}
	}
	if Pct(nil, 50) != 0 {
		t.Error("Pct of nothing; want 0")
	}
	if xs[0] != 5 {
		t.Error("Pct sorted its argument")
	}
}

func TestCalls(t *testing.T) {
	var c Calls
	c.Note("create", 2*time.Millisecond, nil)
	c.Note("create", 0, errors.New("first"))
	c.Note("create", 0, errors.New("second"))
	got := c.ByKind()["create"]
	if len(got.MS) != 1 || got.MS[0] != 2 || got.Errors != 2 || got.First != "first" {
		t.Errorf("ByKind()[create] = %+v; want one call of 2 ms, 2 failures, the first's message", got)
	}
	got.MS[0] = 9
	if c.ByKind()["create"].MS[0] != 2 {
		t.Error("ByKind shares its times with the Calls")
	}
}

func TestUntilStopped(t *testing.T) {
	var mu sync.Mutex
	steps := map[int]int{}
	running := 0
	stop := UntilStopped(3, func(w int) {
		mu.Lock()
		steps[w]++
		running++
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
	})
	for {
		mu.Lock()
		all := len(steps) == 3 && steps[0] > 1 && steps[1] > 1 && steps[2] > 1
		mu.Unlock()
		if all {
			break
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	if running != 0 {
		t.Errorf("%d steps still running after stop returned", running)
	}
	after := steps[0] + steps[1] + steps[2]
	mu.Unlock()
	time.Sleep(10 * time.Millisecond)
	mu.Lock()
	if n := steps[0] + steps[1] + steps[2]; n != after {
		t.Errorf("%d steps after stop returned", n-after)
	}
}
