package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestNodeScope: sandboxes of a handle scoped to a node record it, hold
// that node's address slots, and are the only ones its lists see; an
// unscoped handle sees them all.
func TestNodeScope(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		s := be.open(t)
		if err := s.CreateProject(ctx, "p", time.Now()); err != nil {
			t.Fatal(err)
		}
		n1, n2 := s.OnNode("n1"), s.OnNode("n2")
		a := newSandbox(t, n1, "a", "p", 1)
		b := newSandbox(t, n2, "b", "p", 1) // slot 0 again: another node's
		if a.Node != "n1" || b.Node != "n2" || a.Slot != 0 || b.Slot != 0 {
			t.Errorf("a = node %q slot %d, b = node %q slot %d; want n1/0 and n2/0", a.Node, a.Slot, b.Node, b.Slot)
		}
		sb := Sandbox{ID: "c", ProjectID: "p", Template: "t", State: "starting", CreatedAt: time.Now()}
		if err := n1.CreateSandbox(ctx, &sb, 1, addrs); err == nil {
			t.Errorf("a second sandbox on n1's one slot was recorded; want ErrFull")
		}
		ids := func(st *Store) []string {
			rows, err := st.ListSandboxes(ctx, Filter{LiveOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, r := range rows {
				out = append(out, r.ID)
			}
			return out
		}
		if got := ids(n1); !slices.Equal(got, []string{"a"}) {
			t.Errorf("n1 lists %v; want [a]", got)
		}
		if got := ids(s); !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("unscoped lists %v; want [a b]", got)
		}
		// Snapshot images are named with their node; a node lists its own
		// with their local paths.
		for _, sn := range []Snapshot{
			{ID: "s1", ProjectID: "p", SandboxID: "a", Template: "t", CreatedAt: time.Now(), ImageDir: ImageRef("n1", "/d/snapshots/s1")},
			{ID: "s2", ProjectID: "p", SandboxID: "b", Template: "t", CreatedAt: time.Now(), ImageDir: ImageRef("n2", "/d/snapshots/s2")},
		} {
			if err := s.CreateSnapshot(ctx, sn); err != nil {
				t.Fatal(err)
			}
		}
		snaps, err := n1.ListSnapshots(ctx, "")
		if err != nil || len(snaps) != 1 || snaps[0].ImageDir != "/d/snapshots/s1" {
			t.Errorf("n1's snapshots = %+v, %v; want s1 at /d/snapshots/s1", snaps, err)
		}
		if node, path := SplitImageRef("/plain/path"); node != "" || path != "/plain/path" {
			t.Errorf("SplitImageRef(/plain/path) = %q, %q", node, path)
		}
	})
}

// TestLostNodes: a node whose lease ran out has its starting and running
// sandboxes ended as node lost, once; its paused ones are kept; a
// heartbeat brings it back.
func TestLostNodes(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		s := be.open(t)
		if err := s.CreateProject(ctx, "p", time.Now()); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		beat := func(name string, lease time.Time) {
			t.Helper()
			if err := s.Nodes().Heartbeat(ctx, NodeInfo{Name: name, Addr: name + ":1", Slots: 10, MemoryBytes: 1 << 30,
				FreeMemory: 1 << 29, StartedAt: now, LeaseUntil: lease}); err != nil {
				t.Fatal(err)
			}
		}
		beat("live", now.Add(time.Minute))
		beat("dead", now.Add(-time.Second))
		keep := newSandbox(t, s.OnNode("live"), "keep", "p", 10)
		run := newSandbox(t, s.OnNode("dead"), "run", "p", 10)
		paused := newSandbox(t, s.OnNode("dead"), "paused", "p", 10)
		for _, id := range []string{keep.ID, run.ID, paused.ID} {
			if err := s.MarkRunning(ctx, id, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PauseSandbox(ctx, paused.ID, "/img", nil, now, false); err != nil {
			t.Fatal(err)
		}
		nodes, err := s.Nodes().List(ctx)
		if err != nil || len(nodes) != 2 || nodes[0].Name != "dead" || nodes[0].Sandboxes != 2 || nodes[0].Live(now) || !nodes[1].Live(now) {
			t.Fatalf("ListNodes = %+v, %v; want dead (2 sandboxes, expired) and live", nodes, err)
		}
		reason := func(n NodeInfo) string { return "node lost: " + n.Name }
		ended, err := s.Nodes().EndLost(ctx, now, reason)
		if err != nil || len(ended) != 1 || ended[0].ID != "run" {
			t.Fatalf("EndLostNodes = %+v, %v; want [run]", ended, err)
		}
		got, _ := s.GetSandbox(ctx, "run")
		if got.State != "failed" || got.EndReason != "node lost: dead" {
			t.Errorf("run = %s (%q); want failed, node lost", got.State, got.EndReason)
		}
		for _, id := range []string{"keep", "paused"} {
			if got, _ := s.GetSandbox(ctx, id); !got.Live() {
				t.Errorf("%s ended; want it kept", id)
			}
		}
		if ended, err := s.Nodes().EndLost(ctx, now, reason); err != nil || len(ended) != 0 {
			t.Errorf("second EndLostNodes = %+v, %v; want nothing", ended, err)
		}
		if n, _ := s.Nodes().Get(ctx, "dead"); n.LostAt == nil {
			t.Errorf("dead node not marked lost")
		}
		beat("dead", now.Add(time.Minute))
		if n, _ := s.Nodes().Get(ctx, "dead"); n.LostAt != nil || !n.Live(now) {
			t.Errorf("node after a heartbeat = %+v; want live, not lost", n)
		}
	})
}

// TestEndLostBatched: one EndLost ends every starting and running sandbox
// of every lost node, revokes their keys and marks the nodes lost in the
// same number of statements whether one sandbox of one node is lost or
// sixty of three: the time from a lease's end to its sandboxes' 410s does
// not grow with them (bench/fleet at 500 nodes: one by one, four round
// trips a sandbox, the last of 201 callers' 410s came 9 s late).
func TestEndLostBatched(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		now := time.Now()
		reason := func(n NodeInfo) string { return "node lost: node " + n.Name + " missed its lease" }
		// lose makes lost nodes with perNode running sandboxes each (every
		// other with a key, one more paused), and a live node with one,
		// then counts the statements of one EndLost.
		lose := func(s *Store, lost []string, perNode int) ([]LostSandbox, int64) {
			t.Helper()
			if err := s.CreateProject(ctx, "p", now); err != nil {
				t.Fatal(err)
			}
			beat := func(name string, lease time.Time) {
				t.Helper()
				if err := s.Nodes().Heartbeat(ctx, NodeInfo{Name: name, Addr: name + ":1", Slots: 1000, MemoryBytes: 1 << 30,
					FreeMemory: 1 << 29, StartedAt: now, LeaseUntil: lease}); err != nil {
					t.Fatal(err)
				}
			}
			beat("live", now.Add(time.Minute))
			newSandbox(t, s.OnNode("live"), "keep", "p", 1000)
			for _, n := range lost {
				beat(n, now.Add(-time.Second))
				for i := range perNode + 1 {
					id := fmt.Sprintf("%s-%d", n, i)
					newSandbox(t, s.OnNode(n), id, "p", 1000)
					if err := s.MarkRunning(ctx, id, nil); err != nil {
						t.Fatal(err)
					}
					if i == perNode {
						if err := s.PauseSandbox(ctx, id, "/img", nil, now, false); err != nil {
							t.Fatal(err)
						}
					}
					if i%2 == 0 {
						if err := s.CreateAPIKey(ctx, APIKey{ID: "k-" + id, ProjectID: "p", Hash: []byte(id), CreatedAt: now, SandboxID: id}); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			before := s.db.statements.Load()
			ended, err := s.Nodes().EndLost(ctx, now, reason)
			if err != nil {
				t.Fatalf("EndLost: %v", err)
			}
			return ended, s.db.statements.Load() - before
		}
		_, one := lose(be.open(t), []string{"n0"}, 1)
		lost := []string{"n1", "n2", "n3"}
		s := be.open(t)
		ended, many := lose(s, lost, 20)
		if many != one {
			t.Errorf("EndLost ran %d statements for 60 sandboxes of 3 nodes, %d for 1 of 1; want the same", many, one)
		}
		if len(ended) != 60 {
			t.Fatalf("EndLost ended %d sandboxes; want 60", len(ended))
		}
		for _, sb := range ended {
			var i int
			fmt.Sscanf(sb.ID[len(sb.Node)+1:], "%d", &i)
			wantKeys := 0
			if i%2 == 0 {
				wantKeys = 1
			}
			if sb.State != "failed" || sb.EndReason != reason(NodeInfo{Name: sb.Node}) || len(sb.KeyIDs) != wantKeys {
				t.Errorf("ended %s = %s (%q), keys %v; want failed naming its node, %d key", sb.ID, sb.State, sb.EndReason, sb.KeyIDs, wantKeys)
			}
			got, err := s.GetSandbox(ctx, sb.ID)
			if err != nil || got.Live() || got.EndReason != sb.EndReason {
				t.Errorf("row %s = %+v, %v; want ended as returned", sb.ID, got, err)
			}
			for _, k := range sb.KeyIDs {
				if key, err := s.GetAPIKey(ctx, k); err != nil || key.RevokedAt == nil {
					t.Errorf("key %s = %+v, %v; want revoked", k, key, err)
				}
			}
		}
		for _, n := range lost {
			if got, _ := s.GetSandbox(ctx, n+"-20"); !got.Live() || got.State != "paused" {
				t.Errorf("paused sandbox of %s = %s, ended %v; want kept paused", n, got.State, got.EndedAt)
			}
			if info, _ := s.Nodes().Get(ctx, n); info.LostAt == nil {
				t.Errorf("node %s not marked lost", n)
			}
		}
		if got, _ := s.GetSandbox(ctx, "keep"); !got.Live() {
			t.Errorf("the live node's sandbox ended")
		}
		if again, err := s.Nodes().EndLost(ctx, now, reason); err != nil || len(again) != 0 {
			t.Errorf("second EndLost = %d ended, %v; want none", len(again), err)
		}
	})
}

// TestLockProject: on PostgreSQL a project's admission lock is held by one
// session at a time, and released by release.
func TestLockProject(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		if be.pg == nil {
			t.Skip("SQLite's one process admits under the control plane's lock")
		}
		ctx := context.Background()
		s := be.open(t)
		release, err := s.LockProject(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan func(), 1)
		go func() {
			r, err := s.LockProject(ctx, "p")
			if err != nil {
				t.Error(err)
				r = func() {}
			}
			got <- r
		}()
		other, err := s.LockProject(ctx, "q") // another project's is free
		if err != nil {
			t.Fatal(err)
		}
		other()
		select {
		case <-got:
			t.Fatal("a second session took the project's lock while the first held it")
		case <-time.After(300 * time.Millisecond):
		}
		release()
		select {
		case r := <-got:
			r()
		case <-time.After(10 * time.Second):
			t.Fatal("the lock was not passed on after release")
		}
	})
}

// TestDraining: a drain's mark outlives the node's heartbeats, which
// record its image store; an unknown node is ErrNotFound.
func TestDraining(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		s := be.open(t)
		now := time.Now()
		beat := func() {
			t.Helper()
			if err := s.Nodes().Heartbeat(ctx, NodeInfo{Name: "n1", Addr: "n1:1", Slots: 10, MemoryBytes: 1 << 30,
				StartedAt: now, LeaseUntil: now.Add(time.Minute), ImageStore: "s3://b/p"}); err != nil {
				t.Fatal(err)
			}
		}
		beat()
		for _, tc := range []struct {
			draining bool
		}{{true}, {true}, {false}} {
			if err := s.Nodes().SetDraining(ctx, "n1", tc.draining); err != nil {
				t.Fatal(err)
			}
			beat()
			n, err := s.Nodes().Get(ctx, "n1")
			if err != nil || n.Draining != tc.draining || n.ImageStore != "s3://b/p" {
				t.Fatalf("after SetDraining(%v) and a heartbeat: %+v, %v", tc.draining, n, err)
			}
		}
		if err := s.Nodes().SetDraining(ctx, "nope", true); !errors.Is(err, ErrNotFound) {
			t.Fatalf("SetDraining of an unknown node: %v; want ErrNotFound", err)
		}
	})
}

// TestNodeImages: a heartbeat records the node's image store and the
// images it holds, at most MaxNodeImages; the next replaces them.
func TestNodeImages(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		s := be.open(t)
		now := time.Now()
		many := make([]string, MaxNodeImages+10)
		for i := range many {
			many[i] = fmt.Sprintf("templates/k%d", i)
		}
		for _, tc := range []struct {
			store  string
			images []string
			want   int
		}{
			{"s3://b/p", many, MaxNodeImages},
			{"", nil, 0},
			{"file:///x", []string{"snapshots/sn1"}, 1},
		} {
			if err := s.Nodes().Heartbeat(ctx, NodeInfo{Name: "n", Addr: "n:1", StartedAt: now, LeaseUntil: now.Add(time.Minute),
				ImageStore: tc.store, Images: tc.images}); err != nil {
				t.Fatal(err)
			}
			n, err := s.Nodes().Get(ctx, "n")
			if err != nil || n.ImageStore != tc.store || len(n.Images) != tc.want || tc.want > 0 && !n.Holds(tc.images[0]) {
				t.Errorf("node after a heartbeat with %q, %d images = %q, %d images, %v; want %q, %d", tc.store, len(tc.images), n.ImageStore, len(n.Images), err, tc.store, tc.want)
			}
		}
	})
}

// TestNodeVersion: a heartbeat records the node's version, the next
// replaces it, and a node that reports none reads as "".
func TestNodeVersion(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		s := be.open(t)
		now := time.Now()
		for _, v := range []string{"0.1.0", "0.2.0", ""} {
			if err := s.Nodes().Heartbeat(ctx, NodeInfo{Name: "n1", Addr: "n1:1", Slots: 10, StartedAt: now, LeaseUntil: now.Add(time.Minute), Version: v}); err != nil {
				t.Fatal(err)
			}
			if n, err := s.Nodes().Get(ctx, "n1"); err != nil || n.Version != v {
				t.Fatalf("after a heartbeat with version %q: %+v, %v", v, n, err)
			}
		}
	})
}

// TestEndLostInParts: more nodes out at once than one EndLost judges are
// all judged, MaxLostPerSweep a call — none of the calls fails on the
// engines' limit of arguments a statement.
func TestEndLostInParts(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		now := time.Now()
		s := be.open(t)
		if err := s.CreateProject(ctx, "p", now); err != nil {
			t.Fatal(err)
		}
		const out = MaxLostPerSweep + 1
		for i := range out {
			name := fmt.Sprintf("n%05d", i)
			if err := s.Nodes().Heartbeat(ctx, NodeInfo{Name: name, Addr: name + ":1", Slots: 10, MemoryBytes: 1 << 30,
				FreeMemory: 1 << 29, StartedAt: now, LeaseUntil: now.Add(-time.Second)}); err != nil {
				t.Fatal(err)
			}
		}
		last := fmt.Sprintf("n%05d", out-1)
		newSandbox(t, s.OnNode(last), "on-the-last", "p", 1000)
		if err := s.MarkRunning(ctx, "on-the-last", nil); err != nil {
			t.Fatal(err)
		}
		reason := func(n NodeInfo) string { return "node lost: " + n.Name }
		for call, want := range []int{0, 1} {
			ended, err := s.Nodes().EndLost(ctx, now, reason)
			if err != nil {
				t.Fatalf("EndLost call %d: %v", call+1, err)
			}
			if len(ended) != want {
				t.Errorf("EndLost call %d ended %d sandboxes; want %d (the last node's is judged in the second)", call+1, len(ended), want)
			}
		}
		nodes, err := s.Nodes().List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if n.LostAt == nil {
				t.Errorf("node %s not marked lost after two calls", n.Name)
			}
		}
		if len(nodes) != out {
			t.Errorf("%d nodes listed; want %d", len(nodes), out)
		}
	})
}
