package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestLowestSlot(t *testing.T) {
	for _, tc := range []struct {
		name     string
		taken    []int
		settling []int
		slots    int
		want     int
		ok       bool
	}{
		{"empty pool", nil, nil, 4, 0, true},
		{"after the taken", []int{0, 1}, nil, 4, 2, true},
		{"a hole", []int{0, 2}, nil, 4, 1, true},
		{"the hole is settling", []int{0, 2}, []int{1}, 4, 3, true},
		{"settling at 0", nil, []int{0}, 4, 1, true},
		{"a run of settling", []int{0}, []int{1, 2, 3}, 6, 4, true},
		{"settling past the pool", []int{0}, []int{9}, 4, 1, true},
		{"settling and taken", []int{0, 1}, []int{1}, 4, 2, true},
		{"only settling free: the lowest", []int{0, 2}, []int{3, 1}, 4, 1, true},
		{"only settling free at 0", []int{1}, []int{0}, 2, 0, true},
		{"full", []int{0, 1}, nil, 2, 0, false},
		{"full, settling taken", []int{0, 1}, []int{0, 1}, 2, 0, false},
		{"no slots", nil, nil, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			taken := map[int]bool{}
			for _, n := range tc.taken {
				taken[n] = true
			}
			got, ok := lowestSlot(taken, tc.settling, tc.slots)
			if ok != tc.ok || (ok && got != tc.want) {
				t.Errorf("lowestSlot(%v, %v, %d) = %d, %v; want %d, %v", tc.taken, tc.settling, tc.slots, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestSettlingSlots: a create and a resume's AssignSlot take a settling
// slot (its last owner's conntrack entries still being deleted) only when
// no other is free, on both engines.
func TestSettlingSlots(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		s := be.open(t)
		ctx := context.Background()
		if err := s.CreateProject(ctx, "p", time.Now()); err != nil {
			t.Fatal(err)
		}
		newSandbox(t, s, "a", "p", 3)
		b := newSandbox(t, s, "b", "p", 3)
		if err := s.EndSandbox(ctx, "b", "killed", "", time.Now()); err != nil {
			t.Fatal(err)
		}
		create := func(id string, settling ...int) (Sandbox, error) {
			sb := Sandbox{ID: id, ProjectID: "p", Template: "t", State: "starting", CreatedAt: time.Now()}
			err := s.CreateSandbox(ctx, &sb, 3, addrs, settling...)
			return sb, err
		}
		c, err := create("c", b.Slot)
		if err != nil || c.Slot != 2 || c.HostAddr != "h2" {
			t.Fatalf("create beside settling slot %d = slot %d (%s), %v; want 2 (h2)", b.Slot, c.Slot, c.HostAddr, err)
		}
		d, err := create("d", b.Slot)
		if err != nil || d.Slot != b.Slot {
			t.Fatalf("create with only settling slot %d free = slot %d, %v; want it", b.Slot, d.Slot, err)
		}
		if _, err := create("e", b.Slot); !errors.Is(err, ErrFull) {
			t.Fatalf("create with the pool full = %v; want ErrFull", err)
		}

		// c paused gives up slot 2, a killed slot 0, settling: c's resume
		// takes 2 again, not the lower 0.
		if err := s.MarkRunning(ctx, "c", nil); err != nil {
			t.Fatal(err)
		}
		if err := s.PauseSandbox(ctx, "c", t.TempDir(), nil, time.Now(), false); err != nil {
			t.Fatal(err)
		}
		if err := s.EndSandbox(ctx, "a", "killed", "", time.Now()); err != nil {
			t.Fatal(err)
		}
		host, _, err := s.AssignSlot(ctx, "c", 3, addrs, 0)
		if err != nil || host != "h2" {
			t.Fatalf("AssignSlot beside settling slot 0 = %q, %v; want h2 (slot 2)", host, err)
		}
	})
}
