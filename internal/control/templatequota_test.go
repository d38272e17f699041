package control_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/recipe"
	"github.com/lizard-build/lizard/internal/store"
)

// sizedBuilder builds templates of size bytes, keeping the room each
// build was given and the builds released.
type sizedBuilder struct {
	size     int64
	room     []int64
	released []string
}

func (b *sizedBuilder) BaseKey(context.Context, string) (string, error) { return "base", nil }
func (b *sizedBuilder) Hold(string) error                               { return nil }
func (b *sizedBuilder) Release(key string) (bool, error) {
	b.released = append(b.released, key)
	return true, nil
}
func (b *sizedBuilder) Build(ctx context.Context, _ string, _ api.TemplateRecipe, key string, _ func(api.TemplateBuildEvent)) (recipe.Result, error) {
	b.room = append(b.room, recipe.MaxBytesOf(ctx))
	return recipe.Result{Key: key, BuildMs: 1, SizeBytes: b.size}, nil
}

// TestTemplateQuotas: a project holds at most MaxTemplates templates and
// MaxTemplateBytes of builds. A build of a new name past the count, or any
// build once the sizes reach the maximum, is a 429 before it starts
// saying what to delete or raise; a rebuild under a name replaces its
// size; each build is given the room left, and one that came out larger
// is removed and not recorded.
func TestTemplateQuotas(t *testing.T) {
	const mib = 1 << 20
	b := &sizedBuilder{size: 60 * mib}
	e := newEnv(t, func(c *control.Config) {
		c.Builder, c.BuildsPerHour, c.MaxTemplates, c.MaxTemplateBytes = b, 0, 2, 100*mib
	})
	ctx := context.Background()
	if err := e.Store.CreateProject(ctx, "p1", time.Now()); err != nil && !errors.Is(err, store.ErrConflict) {
		t.Fatal(err)
	}
	build := func(name, cmd string) error {
		req := api.BuildTemplateRequest{Name: name, Recipe: api.TemplateRecipe{Run: []api.TemplateCommand{{Cmd: cmd}}}}
		tb, err := e.c.Project("p1").Templates().Plan(ctx, req)
		if err != nil {
			return err
		}
		_, _, err = tb.Run(ctx, func(api.TemplateBuildEvent) {})
		return err
	}
	refused := func(err error, want string) {
		t.Helper()
		if !errors.Is(err, errdefs.ErrRateLimited) || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v; want a 429 saying %q", err, want)
		}
	}
	names := func() []string {
		rows, _ := e.Store.Templates().List(ctx, "p1")
		var n []string
		for _, r := range rows {
			n = append(n, r.Name)
		}
		return n
	}

	if err := build("a", "true"); err != nil {
		t.Fatal(err)
	}
	if b.room[0] != 100*mib {
		t.Errorf("the first build's room is %d; want all 100 MiB", b.room[0])
	}
	// 60 + 60 MiB is past 100: the second build is given 40 MiB, and
	// what came out larger is removed, not recorded.
	refused(build("b", "true"), "nothing of the build is kept: delete templates")
	if got := b.room[1]; got != 40*mib {
		t.Errorf("the second build's room is %d MiB; want 40", got/mib)
	}
	if len(b.released) != 1 {
		t.Errorf("released %v; want the refused build's key", b.released)
	}
	if n := names(); len(n) != 1 {
		t.Errorf("templates %v; want only a", n)
	}

	b.size = 10 * mib
	if err := build("b", "true"); err != nil {
		t.Fatal(err)
	}
	refused(build("c", "true"), "has 2 custom templates (builds under way included), its maximum: delete one first")
	if len(b.room) != 3 {
		t.Errorf("%d builds ran; the refused one should not have started", len(b.room))
	}
	// A rebuild under a name replaces it: not one more template, and its
	// old size is not counted against it.
	b.size = 90 * mib
	if err := build("a", "echo rebuilt"); err != nil {
		t.Fatalf("rebuilding a: %v", err)
	}
	// a takes all 100 MiB now (90 + 10 would pass it: b is removed first).
	if err := e.c.Project("p1").Templates().Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	b.size = 100 * mib
	if err := build("a", "echo all of it"); err != nil {
		t.Fatal(err)
	}
	before := len(b.room)
	refused(build("b", "true"), "custom templates use 100 MiB, its maximum of 100 MiB for templates: delete templates")
	if len(b.room) != before {
		t.Error("a build was started with no room left")
	}
	if n := names(); len(n) != 1 || n[0] != "a" {
		t.Errorf("templates %v; want only a", n)
	}
}
