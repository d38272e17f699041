package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func TestPauseResumeAndSnapshots(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		s := be.open(t)
		ctx := context.Background()
		if err := s.CreateProject(ctx, "p", time.Now()); err != nil {
			t.Fatal(err)
		}
		a := newSandbox(t, s, "a", "p", 2)
		newSandbox(t, s, "b", "p", 2)
		for _, id := range []string{"a", "b"} {
			if err := s.MarkRunning(ctx, id, nil); err != nil {
				t.Fatal(err)
			}
		}
		if p, err := s.GetPause(ctx, "a"); err != nil || p.OnTimeout != "kill" || p.ImageDir != "" {
			t.Fatalf("GetPause of a never-paused sandbox = %+v, %v; want on-timeout kill", p, err)
		}
		if err := s.SetOnTimeout(ctx, "a", "pause"); err != nil {
			t.Fatal(err)
		}
		if err := s.SetOnTimeout(ctx, "a", "pause"); err != nil {
			t.Fatalf("SetOnTimeout again (upsert): %v", err)
		}
		rem := int64(4000)
		pausedAt := time.UnixMilli(time.Now().UnixMilli()).UTC()
		if err := s.PauseSandbox(ctx, "a", "/img/a", &rem, pausedAt, false); err != nil {
			t.Fatal(err)
		}
		if err := s.PauseSandbox(ctx, "a", "/img/a", &rem, pausedAt, false); !errors.Is(err, ErrConflict) {
			t.Fatalf("PauseSandbox of a paused sandbox = %v; want ErrConflict", err)
		}
		got, _ := s.GetSandbox(ctx, "a")
		if got.State != "paused" || got.Slot >= 0 || got.HostAddr != "" || got.ExpiresAt != nil {
			t.Fatalf("paused sandbox = %+v; want state paused, a negative slot, no address, no deadline", got)
		}
		p, err := s.GetPause(ctx, "a")
		if err != nil || p.OnTimeout != "pause" || p.ImageDir != "/img/a" || p.RemainingMs == nil || *p.RemainingMs != 4000 ||
			p.PausedAt == nil || !p.PausedAt.Equal(pausedAt) {
			t.Fatalf("GetPause = %+v, %v", p, err)
		}
		// a's slot is free: a new sandbox takes it.
		c := newSandbox(t, s, "c", "p", 2)
		if c.Slot != a.Slot {
			t.Fatalf("slot of c = %d; want %d, freed by the pause", c.Slot, a.Slot)
		}
		if _, _, err := s.AssignSlot(ctx, "a", 2, addrs); !errors.Is(err, ErrFull) {
			t.Fatalf("AssignSlot with a full pool = %v; want ErrFull", err)
		}
		if err := s.MarkResumed(ctx, "a", 1000, nil); !errors.Is(err, ErrConflict) {
			t.Fatalf("MarkResumed without a slot = %v; want ErrConflict", err)
		}
		list, err := s.ListPaused(ctx, nil)
		if err != nil || len(list) != 1 || list[0].SandboxID != "a" {
			t.Fatalf("ListPaused = %+v, %v; want [a]", list, err)
		}
		before := pausedAt.Add(-time.Second)
		if list, _ := s.ListPaused(ctx, &before); len(list) != 0 {
			t.Fatalf("ListPaused(before the pause) = %+v; want none", list)
		}
		if err := s.EndSandbox(ctx, "c", "killed", "", time.Now()); err != nil {
			t.Fatal(err)
		}
		host, guest, err := s.AssignSlot(ctx, "a", 2, addrs)
		if err != nil || host != fmt.Sprintf("h%d", a.Slot) || guest != fmt.Sprintf("g%d", a.Slot) {
			t.Fatalf("AssignSlot = %s %s, %v; want slot %d's addresses", host, guest, err, a.Slot)
		}
		// A resume that could not start gives the slot back, and takes it again.
		if err := s.ReleaseSlot(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetSandbox(ctx, "a"); got.Slot >= 0 || got.HostAddr != "" {
			t.Fatalf("after ReleaseSlot = slot %d addr %q; want a negative slot and no address", got.Slot, got.HostAddr)
		}
		if _, _, err := s.AssignSlot(ctx, "a", 2, addrs); err != nil {
			t.Fatal(err)
		}
		exp := time.Now().Add(time.Minute)
		if err := s.MarkResumed(ctx, "a", 60000, &exp); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetSandbox(ctx, "a"); got.State != "running" || got.Slot != a.Slot || got.ExpiresAt == nil || got.TimeoutMs != 60000 {
			t.Fatalf("resumed = %+v; want running in slot %d with a deadline", got, a.Slot)
		}
		if p, _ := s.GetPause(ctx, "a"); p.ImageDir != "" || p.RemainingMs != nil || p.OnTimeout != "pause" {
			t.Fatalf("pause record after resume = %+v; want image and clock forgotten, on-timeout kept", p)
		}

		// Snapshots.
		sn := Snapshot{ID: "s1", ProjectID: "p", SandboxID: "a", Template: "t", CreatedAt: time.Now(), SizeBytes: 5 << 30, ImageDir: "/img/s1"}
		if err := s.CreateSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateSnapshot(ctx, sn); !errors.Is(err, ErrConflict) {
			t.Fatalf("CreateSnapshot twice = %v; want ErrConflict", err)
		}
		got2, err := s.GetSnapshot(ctx, "s1")
		if err != nil || got2.SizeBytes != 5<<30 || got2.ImageDir != "/img/s1" {
			t.Fatalf("GetSnapshot = %+v, %v; want 5 GiB (a 64-bit integer) at /img/s1", got2, err)
		}
		if l, err := s.ListSnapshots(ctx, "p"); err != nil || len(l) != 1 {
			t.Fatalf("ListSnapshots(p) = %d, %v; want 1", len(l), err)
		}
		if err := s.DeleteSnapshot(ctx, "s1"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteSnapshot(ctx, "s1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("DeleteSnapshot twice = %v; want ErrNotFound", err)
		}
		if _, err := s.GetSnapshot(ctx, "s1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("GetSnapshot of a deleted snapshot = %v; want ErrNotFound", err)
		}
	})
}

// Pauses at once (from two Stores: two processes) each get a slot of their
// own: the negative slots stay unique among live sandboxes.
func TestConcurrentPauses(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		u := be.newURL(t)
		s1, s2 := openURL(t, u), openURL(t, u)
		ctx := context.Background()
		if err := s1.CreateProject(ctx, "p", time.Now()); err != nil {
			t.Fatal(err)
		}
		const n = 16
		for i := range n {
			id := fmt.Sprintf("s%d", i)
			newSandbox(t, s1, id, "p", n)
			if err := s1.MarkRunning(ctx, id, nil); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		for i := range n {
			s := []*Store{s1, s2}[i%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.PauseSandbox(ctx, fmt.Sprintf("s%d", i), "/img", nil, time.Now(), false); err != nil {
					t.Errorf("PauseSandbox: %v", err)
				}
			}()
		}
		wg.Wait()
		seen := map[int]bool{}
		list, _ := s1.ListSandboxes(ctx, Filter{States: []string{"paused"}})
		for _, sb := range list {
			if sb.Slot >= 0 || seen[sb.Slot] {
				t.Errorf("paused %s holds slot %d; want a negative slot of its own", sb.ID, sb.Slot)
			}
			seen[sb.Slot] = true
		}
		if len(list) != n {
			t.Errorf("%d paused; want %d", len(list), n)
		}
	})
}

// Two processes claiming from one warm pool never get the same sandbox.
func TestConcurrentClaimWarm(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		u := be.newURL(t)
		s1, s2 := openURL(t, u), openURL(t, u)
		ctx := context.Background()
		for _, p := range []string{"p", InternalProject} {
			if err := s1.CreateProject(ctx, p, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		const n = 10
		for i := range n {
			w := Sandbox{ID: fmt.Sprintf("w%d", i), ProjectID: InternalProject, Template: "t", State: "running", Role: RoleWarm, CreatedAt: time.Now()}
			if err := s1.CreateSandbox(ctx, &w, 100, addrs); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		claimed := map[string]int{}
		var wg sync.WaitGroup
		for i := range n + 4 {
			s := []*Store{s1, s2}[i%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				sb, err := s.ClaimWarm(ctx, "t", "p", nil, 1000, time.Now(), nil)
				if errors.Is(err, ErrNotFound) {
					return
				}
				if err != nil {
					t.Errorf("ClaimWarm: %v", err)
					return
				}
				mu.Lock()
				claimed[sb.ID]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		for id, c := range claimed {
			if c != 1 {
				t.Errorf("%s claimed %d times", id, c)
			}
		}
		if len(claimed) != n {
			t.Errorf("%d claimed; want all %d (14 claimers, 10 warm)", len(claimed), n)
		}
	})
}

// Databases made before migration 5 hold paused sandboxes at -rowid: the
// counter that replaced rowid starts past them.
func TestPausedSlotCounterStartsPastOldSlots(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	ctx := context.Background()
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	stmts := append([]string{`CREATE TABLE schema_version (version INTEGER NOT NULL)`, `INSERT INTO schema_version VALUES (4)`},
		migrations[:4]...)
	stmts = append(stmts,
		`INSERT INTO projects VALUES ('p', 0)`,
		`INSERT INTO sandboxes (id, project_id, template, state, timeout_ms, created_at, slot, host_addr, guest_addr)
			VALUES ('old', 'p', 't', 'paused', 0, 0, -7, '', '')`)
	for _, q := range stmts {
		if _, err := raw.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	raw.Close()
	s := openURL(t, "sqlite:"+path)
	if v, _ := s.Version(ctx); v != SchemaVersion {
		t.Fatalf("version = %d; want %d", v, SchemaVersion)
	}
	newSandbox(t, s, "new", "p", 4)
	if err := s.MarkRunning(ctx, "new", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PauseSandbox(ctx, "new", "/img", nil, time.Now(), false); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSandbox(ctx, "new"); got.Slot != -8 {
		t.Fatalf("slot of a sandbox paused after the migration = %d; want -8 (past the old -7)", got.Slot)
	}
}

// A pause is durable once SetPauseDurable says so for that pause, and
// only then; a resume or a new pause forgets it. A durable paused sandbox
// can move to another node.
func TestPauseDurable(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		s := be.open(t)
		ctx := context.Background()
		if err := s.CreateProject(ctx, "p", time.Now()); err != nil {
			t.Fatal(err)
		}
		newSandbox(t, s, "a", "p", 2)
		if err := s.MarkRunning(ctx, "a", nil); err != nil {
			t.Fatal(err)
		}
		at := time.UnixMilli(time.Now().UnixMilli()).UTC()
		if ok, err := s.SetPauseDurable(ctx, "a", at); err != nil || ok {
			t.Fatalf("SetPauseDurable of a running sandbox = %v, %v; want false", ok, err)
		}
		if err := s.PauseSandbox(ctx, "a", "/img/a", nil, at, false); err != nil {
			t.Fatal(err)
		}
		if sb, _ := s.GetSandbox(ctx, "a"); sb.Durable {
			t.Fatal("a pause is durable before its upload")
		}
		if ok, err := s.SetPauseDurable(ctx, "a", at.Add(-time.Second)); err != nil || ok {
			t.Fatalf("SetPauseDurable of an older pause = %v, %v; want false", ok, err)
		}
		if ok, err := s.SetPauseDurable(ctx, "a", at); err != nil || !ok {
			t.Fatalf("SetPauseDurable = %v, %v; want true", ok, err)
		}
		sb, _ := s.GetSandbox(ctx, "a")
		p, _ := s.GetPause(ctx, "a")
		if !sb.Durable || !p.Durable {
			t.Fatalf("after SetPauseDurable: sandbox durable %v, pause durable %v; want both", sb.Durable, p.Durable)
		}
		if list, _ := s.ListSandboxes(ctx, Filter{}); len(list) != 1 || !list[0].Durable {
			t.Fatalf("ListSandboxes = %+v; want a durable", list)
		}
		if err := s.AdoptPaused(ctx, "a", "wrong-node", "n2"); !errors.Is(err, ErrConflict) {
			t.Fatalf("AdoptPaused from another node = %v; want ErrConflict", err)
		}
		if err := s.AdoptPaused(ctx, "a", sb.Node, "n2"); err != nil {
			t.Fatal(err)
		}
		if sb, _ := s.GetSandbox(ctx, "a"); sb.Node != "n2" || sb.State != "paused" || !sb.Durable {
			t.Fatalf("adopted sandbox = %+v; want paused and durable on n2", sb)
		}
		if _, _, err := s.AssignSlot(ctx, "a", 2, addrs); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkResumed(ctx, "a", 1000, nil); err != nil {
			t.Fatal(err)
		}
		if p, _ := s.GetPause(ctx, "a"); p.Durable {
			t.Fatal("a resumed sandbox's pause is still durable")
		}
		sn := Snapshot{ID: "snap", ProjectID: "p", SandboxID: "a", CreatedAt: time.Now(), ImageDir: "/img/s"}
		if err := s.CreateSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.SetSnapshotDurable(ctx, "snap"); err != nil || !ok {
			t.Fatalf("SetSnapshotDurable = %v, %v", ok, err)
		}
		if got, _ := s.GetSnapshot(ctx, "snap"); !got.Durable {
			t.Fatal("snapshot not durable after SetSnapshotDurable")
		}
		if ok, _ := s.SetSnapshotDurable(ctx, "nope"); ok {
			t.Fatal("SetSnapshotDurable of a missing snapshot said true")
		}
	})
}
