// Package inflight bounds the calls under way per key (a project, a
// sandbox): calls that hold the server's file descriptors for as long as
// a client keeps them (streams, WebSockets), which a rate alone does not
// bound.
package inflight

import "sync"

// Limit counts each key's calls under way. Its zero value is not usable:
// make one with New.
type Limit struct {
	max int
	mu  sync.Mutex
	n   map[string]int // keys with none under way are not kept
}

// New returns a Limit of max calls under way per key.
func New(max int) *Limit { return &Limit{max: max, n: map[string]int{}} }

// Enter counts a call of key under way and returns the function that ends
// it, or false when key has Max under way already.
func (l *Limit) Enter(key string) (leave func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[key] >= l.max {
		return nil, false
	}
	l.n[key]++
	var once sync.Once
	return func() { once.Do(func() { l.leave(key) }) }, true
}

func (l *Limit) leave(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[key]--; l.n[key] <= 0 {
		delete(l.n, key)
	}
}

// Keys is how many keys have calls under way.
func (l *Limit) Keys() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.n)
}
