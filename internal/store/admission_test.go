package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/store/pgtest"
)

// admitRace has workers goroutines, spread over stores (standing in for
// nodes and API processes sharing one database), each trying tries
// admitted creates in project p under q, every one on its own node (so
// that the node's slot lock is not what serialises them). It returns how
// many were admitted, failing the test on any error but an *OverQuota.
func admitRace(t *testing.T, stores []*Store, q Quota, workers, tries int, shape func(i int) Shape) int {
	t.Helper()
	var admitted atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{}) // all at once
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			st := stores[w%len(stores)].OnNode(fmt.Sprintf("n%d", w))
			for i := range tries {
				id := fmt.Sprintf("w%d-%d-%d", w, i, time.Now().UnixNano())
				sb := Sandbox{ID: id, ProjectID: "p", Template: "interpreter", State: "starting", TimeoutMs: 1000,
					CreatedAt: time.Now(), Shape: shape(w*tries + i)}
				err := st.CreateAdmitted(context.Background(), &sb, q, 10, addrs)
				var over *OverQuota
				switch {
				case err == nil:
					admitted.Add(1)
				case errors.As(err, &over):
				default:
					t.Errorf("CreateAdmitted: %v", err)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	return int(admitted.Load())
}

// TestCreateAdmittedQuotaExact: many creates at once through two stores on
// one database, in one project with a quota of Q live sandboxes, end with
// exactly Q live; after k are ended, exactly k more are admitted. The
// count and the insert are one transaction under the project's lock
// (PostgreSQL's advisory lock, SQLite's write lock), so no two creates
// count the same room.
func TestCreateAdmittedQuotaExact(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		u := be.newURL(t)
		stores := []*Store{openURL(t, u), openURL(t, u)}
		ctx := context.Background()
		if err := stores[0].CreateProject(ctx, "p", time.Now()); err != nil {
			t.Fatal(err)
		}
		const quota = 7
		q := Quota{MaxLive: quota}
		noShape := func(int) Shape { return Shape{} }
		if got := admitRace(t, stores, q, 24, 3, noShape); got != quota {
			t.Errorf("admitted %d of 72 creates at once with a quota of %d; want exactly %d", got, quota, quota)
		}
		live, err := stores[1].CountProjectLive(ctx, "p")
		if err != nil || live != quota {
			t.Fatalf("live after the race = %d, %v; want %d", live, err, quota)
		}
		// Three ended: exactly three more fit.
		all, err := stores[0].ListSandboxes(ctx, Filter{ProjectID: "p", LiveOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range all[:3] {
			if err := stores[0].EndSandbox(ctx, sb.ID, "killed", "", time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		if got := admitRace(t, stores, q, 24, 2, noShape); got != 3 {
			t.Errorf("admitted %d after 3 of %d ended; want exactly 3", got, quota)
		}
		if live, err := stores[1].CountProjectLive(ctx, "p"); err != nil || live != quota {
			t.Errorf("live after the second race = %d, %v; want %d", live, err, quota)
		}
		// The server's own sandboxes and another project's are not
		// counted: a third project's create is admitted at once.
		if err := stores[0].CreateProject(ctx, "other", time.Now()); err != nil {
			t.Fatal(err)
		}
		sb := Sandbox{ID: "o1", ProjectID: "other", Template: "interpreter", State: "starting", CreatedAt: time.Now()}
		if err := stores[1].CreateAdmitted(ctx, &sb, Quota{MaxLive: 1}, 10, addrs); err != nil {
			t.Errorf("another project's first create: %v", err)
		}
	})
}

// TestCreateAdmittedDiskExact: the disk quota counts, in the same
// transaction, the live sandboxes' recorded disk, DefaultDisk for those
// without a shape, and the project's volumes; the refusal says what the
// project held.
func TestCreateAdmittedDiskExact(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		u := be.newURL(t)
		stores := []*Store{openURL(t, u), openURL(t, u)}
		ctx := context.Background()
		if err := stores[0].CreateProject(ctx, "p", time.Now()); err != nil {
			t.Fatal(err)
		}
		const mib = 1 << 20
		// A volume of 100 MiB and one sandbox without a shape (DefaultDisk
		// 50 MiB) before the race; then sandboxes of 30 MiB (recorded
		// shapes) within 400 MiB: (400 - 100 - 50) / 30 = 8 fit.
		if err := stores[0].Volumes().Create(ctx, Volume{ID: "v1", ProjectID: "p", Name: "data", SizeBytes: 100 * mib, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		base := Quota{MaxDisk: 400 * mib, DefaultDisk: 50 * mib}
		old := Sandbox{ID: "old", ProjectID: "p", Template: "interpreter", State: "starting", CreatedAt: time.Now()}
		if err := stores[0].CreateAdmitted(ctx, &old, base, 10, addrs); err != nil {
			t.Fatal(err)
		}
		q := base
		q.Disk = 30 * mib
		shaped := func(int) Shape { return Shape{Recorded: true, DiskBytes: 30 * mib, CPUs: 1} }
		if got := admitRace(t, stores, q, 16, 2, shaped); got != 8 {
			t.Errorf("admitted %d sandboxes of 30 MiB with 250 MiB of 400 MiB free; want exactly 8", got)
		}
		sb := Sandbox{ID: "last", ProjectID: "p", Template: "interpreter", State: "starting", CreatedAt: time.Now(), Shape: shaped(0)}
		err := stores[1].CreateAdmitted(ctx, &sb, q, 10, addrs)
		var over *OverQuota
		if !errors.As(err, &over) {
			t.Fatalf("a create past the disk quota = %v; want an *OverQuota", err)
		}
		want := Promised{Sandboxes: 9, SandboxBytes: 50*mib + 8*30*mib, Volumes: 1, VolumeBytes: 100 * mib}
		if over.Promised != want || over.Live != 9 {
			t.Errorf("refusal counted %+v, %d live; want %+v, 9", over.Promised, over.Live, want)
		}
		// What PromisedDisk (the early refusal's count) reads agrees.
		if p, err := stores[0].Volumes().PromisedDisk(ctx, "p", 50*mib); err != nil || p != want {
			t.Errorf("PromisedDisk = %+v, %v; want %+v", p, err, want)
		}
	})
}

// TestCreateAdmittedWaitsForVolume: a volume's record holds the project's
// lock (LockProject, a session lock on PostgreSQL) from its disk count to
// its insert; an admitted create waits for it, and a create of another
// project does not. (On SQLite the lock is the process's:
// node.Quota.Lock.)
func TestCreateAdmittedWaitsForVolume(t *testing.T) {
	u := pgtest.Shared(t).NewDatabase(t)
	s1, s2 := openURL(t, u), openURL(t, u)
	ctx := context.Background()
	for _, p := range []string{"p", "other"} {
		if err := s1.CreateProject(ctx, p, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	release, err := s1.LockProject(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	q := Quota{MaxLive: 5}
	other := Sandbox{ID: "o", ProjectID: "other", Template: "interpreter", State: "starting", CreatedAt: time.Now()}
	if err := s2.OnNode("a").CreateAdmitted(ctx, &other, q, 10, addrs); err != nil {
		t.Fatalf("another project's create while p is locked: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		sb := Sandbox{ID: "s", ProjectID: "p", Template: "interpreter", State: "starting", CreatedAt: time.Now()}
		done <- s2.OnNode("a").CreateAdmitted(ctx, &sb, q, 10, addrs)
	}()
	select {
	case err := <-done:
		t.Fatalf("a create of p while its volume lock is held returned %v; want it to wait", err)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("the create after the volume lock's release: %v", err)
	}
}
