package store

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestVolumes(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		s := be.open(t)
		for _, p := range []string{"p", "q"} {
			if err := s.CreateProject(ctx, p, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		now := time.UnixMilli(time.Now().UnixMilli()).UTC()
		v := Volume{ID: "vol_a", ProjectID: "p", Name: "data", SizeBytes: 5 << 30, CreatedAt: now}
		if err := s.Volumes().Create(ctx, v); err != nil {
			t.Fatal(err)
		}
		if err := s.Volumes().Create(ctx, Volume{ID: "vol_b", ProjectID: "p", Name: "data", SizeBytes: 1, CreatedAt: now}); !errors.Is(err, ErrConflict) {
			t.Errorf("a second volume named data in p: %v; want ErrConflict", err)
		}
		if err := s.Volumes().Create(ctx, Volume{ID: "vol_c", ProjectID: "q", Name: "data", SizeBytes: 1, CreatedAt: now}); err != nil {
			t.Errorf("volume data in another project: %v", err)
		}
		if got, err := s.Volumes().Get(ctx, "p", "data"); err != nil || !reflect.DeepEqual(got, v) {
			t.Errorf("GetVolume = %+v, %v; want %+v", got, err, v)
		}
		if _, err := s.Volumes().Get(ctx, "p", "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetVolume of an unknown name: %v; want ErrNotFound", err)
		}
		if vs, err := s.Volumes().List(ctx, "p"); err != nil || len(vs) != 1 || vs[0].ID != "vol_a" {
			t.Errorf("ListVolumes(p) = %+v, %v", vs, err)
		}
		if vs, err := s.Volumes().List(ctx, ""); err != nil || len(vs) != 2 {
			t.Errorf("ListVolumes() = %+v, %v; want both projects'", vs, err)
		}
		if err := s.Volumes().Delete(ctx, "vol_a"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Volumes().Get(ctx, "p", "data"); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetVolume after delete: %v; want ErrNotFound", err)
		}
	})
}
