package control_test

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/recipe"
	"github.com/lizard-build/lizard/internal/store"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// recordingBuilder builds nothing: it keeps each build's recipe and the
// build it was told to resume from.
type recordingBuilder struct {
	recipes []api.TemplateRecipe
	resumes []*recipe.Resume
	steps   []*recipe.StepCache
}

func (b *recordingBuilder) BaseKey(context.Context, string) (string, error) { return "base", nil }
func (b *recordingBuilder) Hold(string) error                               { return nil }
func (b *recordingBuilder) Release(string) (bool, error)                    { return true, nil }
func (b *recordingBuilder) Build(ctx context.Context, _ string, r api.TemplateRecipe, key string, _ func(api.TemplateBuildEvent)) (recipe.Result, error) {
	b.recipes = append(b.recipes, r)
	b.resumes = append(b.resumes, recipe.ResumeOf(ctx))
	b.steps = append(b.steps, recipe.StepCacheOf(ctx))
	return recipe.Result{Key: key, BuildMs: 1, SizeBytes: 1}, nil
}

// TestTemplateBuildCache: a build whose steps begin with those of one of
// the project's templates (same base, same step texts, same files) is
// told to resume from that build after them; the same recipe again is the
// cache; skipCache builds anew (no resume, a key of its own), and later
// builds are cached on it; a template built on the project's own
// (base: NAME, from: NAME) is its recipe followed by the new one, with
// its start command unless the new one has its own.
func TestTemplateBuildCache(t *testing.T) {
	b := &recordingBuilder{}
	e := newEnv(t, func(c *control.Config) { c.Builder, c.BuildsPerHour = b, 0 })
	ctx := context.Background()
	if err := e.Store.CreateProject(ctx, "p1", time.Now()); err != nil && !errors.Is(err, store.ErrConflict) {
		t.Fatal(err)
	}
	run := func(cmd string) api.TemplateStep { return api.TemplateStep{Run: &api.TemplateCommand{Cmd: cmd}} }
	copyStep := api.TemplateStep{Copy: []api.TemplateFile{{Path: "/home/user/a.txt", Content: b64("a")}}}
	build := func(name string, r api.TemplateRecipe, skip bool) (api.Template, bool, error) {
		t.Helper()
		tb, err := e.c.Project("p1").Templates().Plan(ctx, api.BuildTemplateRequest{Name: name, Recipe: r, SkipCache: skip})
		if err != nil {
			return api.Template{}, false, err
		}
		return tb.Run(ctx, func(api.TemplateBuildEvent) {})
	}
	must := func(tpl api.Template, cached bool, err error) (api.Template, bool) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return tpl, cached
	}
	lastResume := func() *recipe.Resume { return b.resumes[len(b.resumes)-1] }
	lastSteps := func() recipe.StepCache { return *b.steps[len(b.steps)-1] }

	base := api.TemplateRecipe{Env: map[string]string{"A": "1"}, Steps: []api.TemplateStep{copyStep, run("make one")}, Start: "serve"}
	first, _ := must(build("one", base, false))
	if lastResume() != nil {
		t.Errorf("the first build resumes from %+v", lastResume())
	}
	if got := lastSteps(); got != (recipe.StepCache{Template: "one"}) {
		t.Errorf("the first build uses the step cache as %+v; want template one's, not skipped", got)
	}
	if _, cached := must(build("one", base, false)); !cached || len(b.recipes) != 1 {
		t.Errorf("the same recipe again: cached %v after %d builds; want the cache", cached, len(b.recipes))
	}
	// Two steps more: resumed after the first's three (env, copy, run).
	longer := base
	longer.Steps = append(append([]api.TemplateStep{}, base.Steps...), run("make two"), run("make three"))
	must(build("two", longer, false))
	if r := lastResume(); r == nil || r.Key != first.Key || r.Steps != 3 {
		t.Errorf("a build extending one's steps resumes from %+v; want %s after 3 steps", r, first.Key)
	}
	// Another file content is another input: no prefix.
	changed := longer
	changed.Steps = append([]api.TemplateStep{{Copy: []api.TemplateFile{{Path: "/home/user/a.txt", Content: b64("b")}}}}, longer.Steps[1:]...)
	must(build("three", changed, false))
	if r := lastResume(); r != nil {
		t.Errorf("a build whose copied file differs resumes from %+v; want none", r)
	}

	// skipCache: built again, from the base, under a key of its own;
	// then the same recipe is cached on that build.
	fresh, cached := must(build("one", base, true))
	if cached || fresh.Key == first.Key || lastResume() != nil || lastSteps() != (recipe.StepCache{Template: "one", Skip: true}) {
		t.Errorf("skipCache: %+v cached %v resume %+v step cache %+v; want a new build from the base, skipping the step cache", fresh, cached, lastResume(), lastSteps())
	}
	n := len(b.recipes)
	if again, cached := must(build("one", base, false)); !cached || again.Key != fresh.Key || len(b.recipes) != n {
		t.Errorf("after skipCache, the same recipe = %s cached %v; want %s from the cache", again.Key, cached, fresh.Key)
	}
	must(build("four", longer, false))
	if r := lastResume(); r == nil || r.Steps != 5 || r.Key == fresh.Key {
		t.Errorf("resumes from %+v; want two's build, all 5 of its steps", r)
	}

	// On the project's own template: its recipe first.
	child := api.TemplateRecipe{Base: "one", Steps: []api.TemplateStep{run("make child")}}
	tpl, _ := must(build("child", child, false))
	got := b.recipes[len(b.recipes)-1]
	if got.Base != "interpreter" || len(got.Steps) != 4 || got.Steps[3].Run.Cmd != "make child" || got.Start != "serve" || tpl.Recipe.Base != "interpreter" {
		t.Errorf("a build on template one got recipe %+v; want one's 3 steps then its own, one's start", got)
	}
	if r := lastResume(); r == nil || r.Key != fresh.Key || r.Steps != 3 {
		t.Errorf("a build on template one resumes from %+v; want one's build %s after its 3 steps", r, fresh.Key)
	}
	// from: NAME is the project's template before any image of the name.
	must(build("child2", api.TemplateRecipe{From: "one", Start: "other", Run: []api.TemplateCommand{{Cmd: "x"}}}, false))
	if got := b.recipes[len(b.recipes)-1]; got.From != "" || got.Start != "other" || got.Steps[3].Run.User != "root" {
		t.Errorf("from: one got recipe %+v; want one's base, its own start, its run as root", got)
	}
	if _, _, err := build("child3", api.TemplateRecipe{Base: "missing"}, false); err == nil || !strings.Contains(err.Error(), `template "missing" not found in project p1; build it first`) {
		t.Errorf("base: missing = %v; want a 400 saying to build it first", err)
	}
	// Another project's build of the same steps, or its template's name,
	// is never reached: it resumes from nothing and cannot build on p1's.
	if err := e.Store.CreateProject(ctx, "p2", time.Now()); err != nil && !errors.Is(err, store.ErrConflict) {
		t.Fatal(err)
	}
	tb, err := e.c.Project("p2").Templates().Plan(ctx, api.BuildTemplateRequest{Name: "two", Recipe: longer})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb.Run(ctx, func(api.TemplateBuildEvent) {}); err != nil || lastResume() != nil {
		t.Errorf("p2's build of p1's steps = %v, resumes from %+v; want a build of its own", err, lastResume())
	}
	if _, err := e.c.Project("p2").Templates().Plan(ctx, api.BuildTemplateRequest{Name: "x", Recipe: api.TemplateRecipe{Base: "one"}}); err == nil || !strings.Contains(err.Error(), `template "one" not found in project p2`) {
		t.Errorf("p2 building on p1's template one = %v; want a 400, not found in p2", err)
	}
	if got, _ := e.c.Project("p1").Templates().Get(ctx, "one"); len(got.Recipe.Steps) != 2 || got.Recipe.Steps[0].Copy[0].Content != b64("a") {
		// (Files of the fixed key are left out of answers; steps as before.)
		t.Errorf("template one's recipe = %+v", got.Recipe)
	}
}
