package store

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestShapeAndWarmPool(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		s := be.open(t)
		for _, p := range []string{"p", InternalProject} {
			if err := s.CreateProject(ctx, p, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		want := Shape{MemoryBytes: 256 << 20, CPUs: 0.5, Internet: true, Token: true, Recorded: true}
		sb := Sandbox{ID: "user1", ProjectID: "p", Template: "t", State: "running", CreatedAt: time.Now(), Shape: want}
		if err := s.CreateSandbox(ctx, &sb, 8, addrs); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetSandbox(ctx, "user1")
		if err != nil || !reflect.DeepEqual(got.Shape, want) {
			t.Fatalf("GetSandbox shape = %+v, %v; want %+v", got.Shape, err, want)
		}
		sn := Snapshot{ID: "snap", ProjectID: "p", SandboxID: "user1", Template: "t", CreatedAt: time.Now(), Shape: want}
		if err := s.CreateSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
		if gotSn, err := s.GetSnapshot(ctx, "snap"); err != nil || !reflect.DeepEqual(gotSn.Shape, want) {
			t.Fatalf("GetSnapshot shape = %+v, %v; want %+v", gotSn.Shape, err, want)
		}
		if _, err := s.ClaimWarm(ctx, "t", "p", nil, 1000, time.Now(), nil); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ClaimWarm with an empty pool: err = %v, want ErrNotFound", err)
		}
		warm := Sandbox{ID: "warm1", ProjectID: InternalProject, Template: "t", State: "running", Role: RoleWarm, CreatedAt: time.Now()}
		if err := s.CreateSandbox(ctx, &warm, 8, addrs); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetSandbox(ctx, "warm1"); got.Shape.Recorded {
			t.Errorf("shape of a row created without one: Recorded = true, want false")
		}
		for _, f := range []Filter{{ProjectID: InternalProject}, {ProjectID: "p"}} {
			rows, _ := s.ListSandboxes(ctx, f)
			for _, r := range rows {
				if r.Role != "" {
					t.Errorf("ListSandboxes(%+v) returned %s of role %q; project filters must select only users' sandboxes", f, r.ID, r.Role)
				}
			}
		}
		if rows, _ := s.ListSandboxes(ctx, Filter{Role: RoleWarm, LiveOnly: true}); len(rows) != 1 {
			t.Errorf("ListSandboxes(role warm) = %d rows, want 1", len(rows))
		}
		exp := time.Now().Add(time.Minute)
		c, err := s.ClaimWarm(ctx, "t", "p", map[string]string{"a": "b"}, 60000, time.Now(), &exp)
		if err != nil {
			t.Fatalf("ClaimWarm: %v", err)
		}
		if c.ID != "warm1" || c.ProjectID != "p" || c.Role != "" || c.Metadata["a"] != "b" || c.TimeoutMs != 60000 || c.ExpiresAt == nil {
			t.Errorf("claimed = %+v; want warm1 in project p, role \"\", metadata a=b, timeout 60000 with a deadline", c)
		}
		if _, err := s.ClaimWarm(ctx, "t", "p", nil, 0, time.Now(), nil); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ClaimWarm of a drained pool: err = %v, want ErrNotFound", err)
		}
	})
}
