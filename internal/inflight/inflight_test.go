package inflight

import (
	"sync"
	"testing"
)

func TestLimit(t *testing.T) {
	l := New(2)
	a1, ok := l.Enter("a")
	if !ok {
		t.Fatal("first call of a refused")
	}
	a2, ok := l.Enter("a")
	if !ok {
		t.Fatal("second call of a refused under a bound of 2")
	}
	if _, ok := l.Enter("a"); ok {
		t.Fatal("third call of a admitted under a bound of 2")
	}
	// Another key has its own count.
	b, ok := l.Enter("b")
	if !ok {
		t.Fatal("b refused while only a is at its bound")
	}
	a1()
	a1() // ending a call twice ends it once
	a3, ok := l.Enter("a")
	if !ok {
		t.Fatal("a refused after one of its calls ended")
	}
	if _, ok := l.Enter("a"); ok {
		t.Fatal("a call ended twice freed two places")
	}
	for _, leave := range []func(){a2, a3, b} {
		leave()
	}
	if n := l.Keys(); n != 0 {
		t.Errorf("%d keys kept with no call under way; want none", n)
	}
}

func TestLimitConcurrent(t *testing.T) {
	const bound, callers = 8, 64
	l := New(bound)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		now, top int
	)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				leave, ok := l.Enter("k")
				if !ok {
					continue
				}
				mu.Lock()
				now++
				top = max(top, now)
				mu.Unlock()
				mu.Lock()
				now--
				mu.Unlock()
				leave()
			}
		}()
	}
	wg.Wait()
	if top > bound {
		t.Errorf("%d calls under way at once; want at most %d", top, bound)
	}
	if n := l.Keys(); n != 0 {
		t.Errorf("%d keys kept once every call ended; want none", n)
	}
}
