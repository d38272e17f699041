package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/store/pgtest"
)

// The tests are a conformance suite: each runs against every engine the
// Store speaks, SQLite always and PostgreSQL (pgtest) when it is installed
// (a failure instead of a skip under LIZARD_TEST_STRICT=1).

func TestMain(m *testing.M) {
	if u := os.Getenv(migrateHelperEnv); u != "" {
		openAndExit(u) // a child of TestConcurrentMigration
	}
	code := m.Run()
	if err := pgtest.StopShared(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the test PostgreSQL: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// backend makes empty databases of one engine.
type backend struct {
	name string
	// newURL returns the OpenURL address of a new empty database.
	newURL func(t *testing.T) string
	pg     *pgtest.Server // nil for SQLite
}

// forEachStore runs f once per engine, as subtests named after them.
func forEachStore(t *testing.T, f func(t *testing.T, be backend)) {
	t.Run("sqlite", func(t *testing.T) {
		f(t, backend{name: "sqlite", newURL: func(t *testing.T) string {
			return filepath.Join(t.TempDir(), FileName)
		}})
	})
	t.Run("postgres", func(t *testing.T) {
		srv := pgtest.Shared(t)
		f(t, backend{name: "postgres", newURL: func(t *testing.T) string { return srv.NewDatabase(t) }, pg: srv})
	})
}

func openURL(t *testing.T, u string) *Store {
	t.Helper()
	s, err := OpenURL(context.Background(), u)
	if err != nil {
		t.Fatalf("OpenURL: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// open opens a new empty database of b's engine.
func (b backend) open(t *testing.T) *Store {
	t.Helper()
	return openURL(t, b.newURL(t))
}

func addrs(slot int) (string, string) {
	return fmt.Sprintf("h%d", slot), fmt.Sprintf("g%d", slot)
}

func newSandbox(t *testing.T, s *Store, id, project string, slots int) Sandbox {
	t.Helper()
	sb := Sandbox{ID: id, ProjectID: project, Template: "interpreter", State: "starting", TimeoutMs: 1000,
		Metadata: map[string]string{"k": "v"}, CreatedAt: time.Now()}
	if err := s.CreateSandbox(context.Background(), &sb, slots, addrs); err != nil {
		t.Fatalf("CreateSandbox(%s): %v", id, err)
	}
	return sb
}

func TestMigrationsIdempotent(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		u := be.newURL(t)
		s := openURL(t, u)
		ctx := context.Background()
		if err := s.CreateProject(ctx, "p", time.Now()); err != nil {
			t.Fatal(err)
		}
		s.Close()
		// Reopening must not re-run migrations nor lose data.
		s2 := openURL(t, u)
		v, err := s2.Version(ctx)
		if err != nil || v != SchemaVersion {
			t.Fatalf("Version = %d, %v; want %d", v, err, SchemaVersion)
		}
		if _, err := s2.GetProject(ctx, "p"); err != nil {
			t.Fatalf("GetProject after reopen: %v", err)
		}
	})
}

func TestNewerSchemaRejected(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		u := be.newURL(t)
		s := openURL(t, u)
		if _, err := s.db.ExecContext(context.Background(), `UPDATE schema_version SET version = 999`); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if _, err := OpenURL(context.Background(), u); err == nil {
			t.Fatal("Open of a newer schema succeeded; want an error")
		}
	})
}

func TestProjectsAndKeys(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		s := be.open(t)
		ctx := context.Background()
		now := time.Now()
		if err := s.CreateProject(ctx, "p", now); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateProject(ctx, "p", now); !errors.Is(err, ErrConflict) {
			t.Fatalf("second CreateProject = %v; want ErrConflict", err)
		}
		if err := s.CreateProject(ctx, InternalProject, now); err != nil {
			t.Fatal(err)
		}
		if n, err := s.CountProjects(ctx); n != 1 || err != nil {
			t.Fatalf("CountProjects = %d, %v; want 1 (the server's own not counted)", n, err)
		}
		if _, err := s.GetProject(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("GetProject(nope) = %v; want ErrNotFound", err)
		}
		k := APIKey{ID: "abcd1234", ProjectID: "p", Hash: []byte{1, 2, 3}, CreatedAt: now}
		if err := s.CreateAPIKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateAPIKey(ctx, k); !errors.Is(err, ErrConflict) {
			t.Fatalf("duplicate CreateAPIKey = %v; want ErrConflict", err)
		}
		if err := s.CreateAPIKey(ctx, APIKey{ID: "x", ProjectID: "missing", Hash: []byte{1}, CreatedAt: now}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("CreateAPIKey for missing project = %v; want ErrNotFound", err)
		}
		got, err := s.GetAPIKey(ctx, "abcd1234")
		if err != nil || got.ProjectID != "p" || string(got.Hash) != "\x01\x02\x03" || got.RevokedAt != nil {
			t.Fatalf("GetAPIKey = %+v, %v", got, err)
		}
		if err := s.RevokeAPIKey(ctx, "abcd1234", now); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetAPIKey(ctx, "abcd1234"); got.RevokedAt == nil {
			t.Fatal("key not revoked")
		}
		if _, err := s.GetAPIKey(ctx, "zzzz"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("GetAPIKey(zzzz) = %v; want ErrNotFound", err)
		}
	})
}

func TestSandboxLifecycleAndSlots(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		s := be.open(t)
		ctx := context.Background()
		if err := s.CreateProject(ctx, "p", time.Now()); err != nil {
			t.Fatal(err)
		}
		a := newSandbox(t, s, "a", "p", 3)
		b := newSandbox(t, s, "b", "p", 3)
		c := newSandbox(t, s, "c", "p", 3)
		if a.Slot != 0 || b.Slot != 1 || c.Slot != 2 || b.HostAddr != "h1" || b.GuestAddr != "g1" {
			t.Fatalf("slots = %d %d %d (%s %s); want 0 1 2 (h1 g1)", a.Slot, b.Slot, c.Slot, b.HostAddr, b.GuestAddr)
		}
		d := Sandbox{ID: "d", ProjectID: "p", Template: "t", State: "starting", CreatedAt: time.Now()}
		if err := s.CreateSandbox(ctx, &d, 3, addrs); !errors.Is(err, ErrFull) {
			t.Fatalf("CreateSandbox with a full pool = %v; want ErrFull", err)
		}
		dup := Sandbox{ID: "a", ProjectID: "p", Template: "t", State: "starting", CreatedAt: time.Now()}
		if err := s.CreateSandbox(ctx, &dup, 10, addrs); !errors.Is(err, ErrConflict) {
			t.Fatalf("CreateSandbox with a taken ID = %v; want ErrConflict", err)
		}
		orphan := Sandbox{ID: "o", ProjectID: "nope", Template: "t", State: "starting", CreatedAt: time.Now()}
		if err := s.CreateSandbox(ctx, &orphan, 10, addrs); !errors.Is(err, ErrNotFound) {
			t.Fatalf("CreateSandbox in a missing project = %v; want ErrNotFound", err)
		}

		// A key minted for b is revoked when b ends, and b's slot is reused.
		if err := s.CreateAPIKey(ctx, APIKey{ID: "kb", ProjectID: "p", Hash: []byte{1}, CreatedAt: time.Now(), SandboxID: "b"}); err != nil {
			t.Fatal(err)
		}
		exp := time.Now().Add(time.Minute)
		if err := s.MarkRunning(ctx, "b", &exp); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkRunning(ctx, "b", &exp); !errors.Is(err, ErrConflict) {
			t.Fatalf("MarkRunning twice = %v; want ErrConflict", err)
		}
		if err := s.EndSandbox(ctx, "b", "killed", "killed by the API", time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := s.EndSandbox(ctx, "b", "killed", "again", time.Now()); !errors.Is(err, ErrConflict) {
			t.Fatalf("EndSandbox twice = %v; want ErrConflict", err)
		}
		if err := s.EndSandbox(ctx, "zz", "killed", "", time.Now()); !errors.Is(err, ErrNotFound) {
			t.Fatalf("EndSandbox(missing) = %v; want ErrNotFound", err)
		}
		if err := s.SetTimeout(ctx, "b", 5, nil); !errors.Is(err, ErrConflict) {
			t.Fatalf("SetTimeout on an ended sandbox = %v; want ErrConflict", err)
		}
		if k, _ := s.GetAPIKey(ctx, "kb"); k.RevokedAt == nil {
			t.Fatal("sandbox key not revoked when its sandbox ended")
		}
		got, err := s.GetSandbox(ctx, "b")
		if err != nil || got.State != "killed" || got.EndedAt == nil || got.EndReason != "killed by the API" || got.Metadata["k"] != "v" {
			t.Fatalf("GetSandbox(b) = %+v, %v", got, err)
		}
		e := newSandbox(t, s, "e", "p", 3)
		if e.Slot != 1 {
			t.Fatalf("slot after b ended = %d; want 1 (the lowest free)", e.Slot)
		}

		// Filters.
		live, err := s.ListSandboxes(ctx, Filter{ProjectID: "p", LiveOnly: true})
		if err != nil || len(live) != 3 {
			t.Fatalf("live sandboxes = %d, %v; want 3", len(live), err)
		}
		killed, _ := s.ListSandboxes(ctx, Filter{ProjectID: "p", States: []string{"killed"}})
		if len(killed) != 1 || killed[0].ID != "b" {
			t.Fatalf("killed sandboxes = %+v; want [b]", killed)
		}
		past := time.Now().Add(-time.Second)
		if err := s.SetTimeout(ctx, "a", 1, &past); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		expired, _ := s.ListSandboxes(ctx, Filter{ExpiredBy: &now})
		if len(expired) != 1 || expired[0].ID != "a" || expired[0].TimeoutMs != 1 {
			t.Fatalf("expired sandboxes = %+v; want [a]", expired)
		}
	})
}

// The server and `lizard admin` write to one file from two processes; two
// Stores on one file stand in for them.
func TestConcurrentWriters(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		u := be.newURL(t)
		s1 := openURL(t, u)
		s2 := openURL(t, u)
		ctx := context.Background()
		if err := s1.CreateProject(ctx, "p", time.Now()); err != nil {
			t.Fatal(err)
		}
		const n = 20
		var wg sync.WaitGroup
		errs := make(chan error, 2*n)
		slots := make(chan int, 2*n)
		for i := range n {
			for j, s := range []*Store{s1, s2} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sb := Sandbox{ID: fmt.Sprintf("s%d-%d", j, i), ProjectID: "p", Template: "t", State: "starting", CreatedAt: time.Now()}
					if err := s.CreateSandbox(ctx, &sb, 1000, addrs); err != nil {
						errs <- err
						return
					}
					slots <- sb.Slot
					if err := s.CreateProject(ctx, fmt.Sprintf("p%d-%d", j, i), time.Now()); err != nil {
						errs <- err
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		close(slots)
		for err := range errs {
			t.Errorf("concurrent write: %v", err)
		}
		seen := map[int]bool{}
		for sl := range slots {
			if seen[sl] {
				t.Errorf("slot %d given twice", sl)
			}
			seen[sl] = true
		}
		if len(seen) != 2*n {
			t.Errorf("got %d distinct slots; want %d", len(seen), 2*n)
		}
	})
}
