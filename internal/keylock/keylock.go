// Package keylock is a mutex per key (a sandbox ID), made when first
// locked and dropped when nobody holds or waits for it: operations on one
// sandbox are serialised, operations on different ones are not.
package keylock

import "sync"

// Map is a set of mutexes by key. The zero Map is ready to use; a Map must
// not be copied after first use.
type Map struct {
	mu sync.Mutex
	m  map[string]*entry
}

type entry struct {
	sync.Mutex
	refs int // holders and waiters
}

// Lock locks key's mutex and returns its unlock.
func (k *Map) Lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*entry{}
	}
	e := k.m[key]
	if e == nil {
		e = &entry{}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.Lock()
	return func() {
		e.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}

// Len is how many keys are locked or waited for.
func (k *Map) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.m)
}
