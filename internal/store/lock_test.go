package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/store/pgtest"
)

// Two Stores on one database stand in for two API processes: a job's lock
// is held by one at a time, per name.
func TestTryLockExclusive(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		u := be.newURL(t)
		s1, s2 := openURL(t, u), openURL(t, u)
		ctx := context.Background()
		release, ok, err := s1.TryLock(ctx, "reaper")
		if err != nil || !ok {
			t.Fatalf("first TryLock = %v, %v; want it taken", ok, err)
		}
		if _, ok, err := s2.TryLock(ctx, "reaper"); err != nil || ok {
			t.Fatalf("TryLock by another Store while held = %v, %v; want not taken", ok, err)
		}
		if _, ok, err := s1.TryLock(ctx, "reaper"); err != nil || ok {
			t.Fatalf("TryLock again by the holder's Store = %v, %v; want not taken (one run at a time)", ok, err)
		}
		rel2, ok, err := s2.TryLock(ctx, "lease-sweeper")
		if err != nil || !ok {
			t.Fatalf("TryLock of another name = %v, %v; want it taken", ok, err)
		}
		rel2()
		release()
		release() // twice is harmless
		rel3, ok, err := s2.TryLock(ctx, "reaper")
		if err != nil || !ok {
			t.Fatalf("TryLock after release = %v, %v; want it taken", ok, err)
		}
		rel3()
		if _, _, err := s1.TryLock(ctx, "../x"); err == nil {
			t.Fatal("TryLock of a name with a slash succeeded; want an error")
		}
	})
}

// Many holders racing for one lock: exactly one has it at any time.
func TestTryLockRace(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		u := be.newURL(t)
		stores := []*Store{openURL(t, u), openURL(t, u), openURL(t, u)}
		ctx := context.Background()
		var mu sync.Mutex
		holders, runs := 0, 0
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					release, ok, err := stores[i%len(stores)].TryLock(ctx, "job")
					if err != nil {
						t.Errorf("TryLock: %v", err)
						return
					}
					if !ok {
						time.Sleep(time.Millisecond)
						continue
					}
					mu.Lock()
					holders++
					runs++
					if holders != 1 {
						t.Errorf("%d holders at once", holders)
					}
					mu.Unlock()
					time.Sleep(2 * time.Millisecond)
					mu.Lock()
					holders--
					mu.Unlock()
					release()
				}
			}()
		}
		wg.Wait()
		if runs == 0 {
			t.Fatal("no one ever took the lock")
		}
	})
}

// migrateHelperEnv makes the test binary, run again as a child, open the
// database named there and exit: processes migrating one database at once.
const migrateHelperEnv = "LIZARD_STORE_TEST_OPEN_URL"

// openAndExit is TestMain's child mode: it opens the URL in
// migrateHelperEnv (migrating it) and exits 0, or prints the error and
// exits 1.
func openAndExit(u string) {
	s, err := OpenURL(context.Background(), u)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s.Close()
	os.Exit(0)
}

// Several processes (and, within this one, several goroutines) starting
// against one new database at once: every one opens it, and the schema
// is migrated once.
func TestConcurrentMigration(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		u := be.newURL(t)
		ctx := context.Background()
		const procs, goroutines = 4, 6
		var wg sync.WaitGroup
		errs := make(chan error, procs+goroutines)
		for range procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), migrateHelperEnv+"="+u)
				if out, err := cmd.CombinedOutput(); err != nil {
					errs <- fmt.Errorf("child process: %v: %s", err, out)
				}
			}()
		}
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := OpenURL(ctx, u)
				if err != nil {
					errs <- err
					return
				}
				s.Close()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("concurrent open: %v", err)
		}
		s := openURL(t, u)
		if v, err := s.Version(ctx); err != nil || v != SchemaVersion {
			t.Fatalf("Version = %d, %v; want %d", v, err, SchemaVersion)
		}
		var rows int
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_version`).Scan(&rows); err != nil || rows != 1 {
			t.Fatalf("schema_version has %d rows, %v; want 1", rows, err)
		}
		var counters int
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM counters`).Scan(&counters); err != nil || counters != 1 {
			t.Fatalf("counters has %d rows, %v; want 1 (migration 5 ran once)", counters, err)
		}
	})
}

// PostgreSQL stopped under a live Store: calls fail with ErrUnavailable
// (which the API turns into a 503), and the same Store works again once
// the server is back, without being reopened. A job lock held across the
// outage is gone with its session, so another process can take it.
func TestPostgresOutage(t *testing.T) {
	// PostgreSQL only: SQLite is a file inside the process, never away.
	pg := pgtest.Shared(t)
	func() {
		u := pg.NewDatabase(t)
		s, other := openURL(t, u), openURL(t, u)
		ctx := context.Background()
		if err := s.CreateProject(ctx, "p", time.Now()); err != nil {
			t.Fatal(err)
		}
		_, ok, err := s.TryLock(ctx, "reaper")
		if err != nil || !ok {
			t.Fatalf("TryLock = %v, %v", ok, err)
		}

		if err := pg.StopServer(); err != nil {
			t.Fatal(err)
		}
		stopped := true
		t.Cleanup(func() {
			if stopped {
				pg.StartServer()
			}
		})
		qctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if _, err := s.GetProject(qctx, "p"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("GetProject with PostgreSQL stopped = %v; want ErrUnavailable", err)
		}
		err = s.CreateProject(qctx, "q", time.Now())
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrConflict) {
			t.Fatalf("CreateProject with PostgreSQL stopped = %v; want ErrUnavailable", err)
		}
		if !strings.Contains(err.Error(), "database is unreachable") {
			t.Errorf("error %q does not say the database is unavailable", err)
		}
		if _, err := s.ListSandboxes(qctx, Filter{}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("ListSandboxes with PostgreSQL stopped = %v; want ErrUnavailable", err)
		}
		if _, _, err := other.TryLock(qctx, "reaper"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("TryLock with PostgreSQL stopped = %v; want ErrUnavailable", err)
		}

		if err := pg.StartServer(); err != nil {
			t.Fatal(err)
		}
		stopped = false
		if _, err := s.GetProject(ctx, "p"); err != nil {
			t.Fatalf("GetProject after PostgreSQL came back = %v; want the project (no reopen)", err)
		}
		if err := s.CreateProject(ctx, "q", time.Now()); err != nil {
			t.Fatalf("CreateProject after PostgreSQL came back = %v", err)
		}
		rel, ok, err := other.TryLock(ctx, "reaper")
		if err != nil || !ok {
			t.Fatalf("TryLock after the restart = %v, %v; want it taken (the old holder's session ended)", ok, err)
		}
		rel()
	}()
}
