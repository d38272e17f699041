package store

import (
	"context"
	"testing"
	"time"
)

// TestSnapshotNames: a snapshot's name is kept; a name given again moves
// to the new snapshot (the older one keeps being, unnamed); the same name
// in another project is another name.
func TestSnapshotNames(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		s := be.open(t)
		ctx := context.Background()
		for _, p := range []string{"p", "q"} {
			if err := s.CreateProject(ctx, p, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		for i, sn := range []Snapshot{
			{ID: "snap-1", ProjectID: "p", Name: "base"},
			{ID: "snap-2", ProjectID: "p"},
			{ID: "snap-3", ProjectID: "q", Name: "base"},
			{ID: "snap-4", ProjectID: "p", Name: "base"},
		} {
			sn.CreatedAt = time.UnixMilli(int64(1000 + i))
			if err := s.CreateSnapshot(ctx, sn); err != nil {
				t.Fatalf("CreateSnapshot %s: %v", sn.ID, err)
			}
		}
		names := map[string]string{}
		for _, p := range []string{"p", "q"} {
			sns, err := s.ListSnapshots(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			for _, sn := range sns {
				names[sn.ID] = sn.Name
			}
		}
		want := map[string]string{"snap-1": "", "snap-2": "", "snap-3": "base", "snap-4": "base"}
		for id, n := range want {
			if names[id] != n {
				t.Errorf("snapshot %s named %q, want %q (all: %v)", id, names[id], n, names)
			}
		}
	})
}
