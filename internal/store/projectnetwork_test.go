package store

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/netpolicy"
)

func TestProjectNetwork(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		s := be.open(t)
		for _, p := range []string{"p", "q"} {
			if err := s.CreateProject(ctx, p, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := s.ProjectNetwork(ctx, "p"); err != nil || got != nil {
			t.Fatalf("ProjectNetwork of a new project = %v, %v; want none", got, err)
		}
		pol, err := netpolicy.FromAPI(api.NetworkPolicy{Default: "deny", Allow: []string{"pypi.org", "*.example.com"}}, "network")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetProjectNetwork(ctx, "p", pol); err != nil {
			t.Fatal(err)
		}
		got, err := s.ProjectNetwork(ctx, "p")
		if err != nil || got == nil || !reflect.DeepEqual(got.API(), pol.API()) {
			t.Fatalf("ProjectNetwork after a set = %v, %v; want %+v", got, err, pol.API())
		}
		// Another project's stays unset.
		if got, err := s.ProjectNetwork(ctx, "q"); err != nil || got != nil {
			t.Errorf("ProjectNetwork of another project = %v, %v; want none", got, err)
		}
		if err := s.SetProjectNetwork(ctx, "p", nil); err != nil {
			t.Fatal(err)
		}
		if got, err := s.ProjectNetwork(ctx, "p"); err != nil || got != nil {
			t.Errorf("ProjectNetwork after a clear = %v, %v; want none", got, err)
		}
		if err := s.SetProjectNetwork(ctx, "nope", pol); !errors.Is(err, ErrNotFound) {
			t.Errorf("SetProjectNetwork of no project = %v; want ErrNotFound", err)
		}
		if _, err := s.ProjectNetwork(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("ProjectNetwork of no project = %v; want ErrNotFound", err)
		}
	})
}
