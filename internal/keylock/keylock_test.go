package keylock

import (
	"sync"
	"testing"
	"time"
)

func TestSerialisesOneKey(t *testing.T) {
	var k Map
	var mu sync.Mutex
	inside := 0
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock := k.Lock("a")
			mu.Lock()
			inside++
			if inside > 1 {
				t.Error("two holders of one key at once")
			}
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			inside--
			mu.Unlock()
			unlock()
		}()
	}
	wg.Wait()
	if n := k.Len(); n != 0 {
		t.Errorf("%d keys left after every unlock, want 0", n)
	}
}

func TestKeysIndependent(t *testing.T) {
	var k Map
	unlockA := k.Lock("a")
	done := make(chan struct{})
	go func() {
		k.Lock("b")()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("locking b waited for a")
	}
	unlockA()
}
