package remote

import (
	"context"
	"errors"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/recipe"
)

// fakeTemplates is a Templates whose methods are its fields.
type fakeTemplates struct {
	build  func(ctx context.Context, r api.TemplateRecipe, key string, emit func(api.TemplateBuildEvent)) (recipe.Result, error)
	remove func(ctx context.Context, key string) error
	// project is the project of the last build asked for.
	project string
}

func (f *fakeTemplates) Build(ctx context.Context, projectID string, r api.TemplateRecipe, key string, emit func(api.TemplateBuildEvent)) (recipe.Result, error) {
	f.project = projectID
	return f.build(ctx, r, key, emit)
}

func (f *fakeTemplates) Remove(ctx context.Context, key string) error { return f.remove(ctx, key) }

// TestBuildTemplateRoundTrip: a build's recipe reaches the node, its
// events and result come back; a failed step comes back a
// *recipe.StepError, any other failure with its kind; a bad key or
// reference is refused.
func TestBuildTemplateRoundTrip(t *testing.T) {
	const key = "0123456789abcdef"
	sent := api.TemplateRecipe{Base: "interpreter", Env: map[string]string{"A": "b"},
		Files: []api.TemplateFile{{Path: "/home/user/x", Content: "aGk=", Mode: 0o644, Owner: "user"}}}
	// As the API sends it: checked (defaults and sizes filled in), which
	// the node's own check leaves as it is.
	if err := recipe.Validate(&sent, []string{"interpreter"}); err != nil {
		t.Fatal(err)
	}
	events := []api.TemplateBuildEvent{{Type: api.BuildEventStep, Step: 1, Total: 2, Name: "copying"}, {Type: api.BuildEventLog, Text: "line"}}
	for _, tc := range []struct {
		name    string
		fail    error
		want    recipe.Result
		check   func(error) bool
		removed string
	}{
		{name: "done", want: recipe.Result{Key: key, SizeBytes: 7, BuildMs: 8, Cached: true}},
		{name: "step", fail: &recipe.StepError{Step: "run: false", Log: "out", Err: errors.New("exit status 1")},
			check: func(err error) bool {
				var se *recipe.StepError
				return errors.As(err, &se) && se.Step == "run: false" && se.Log == "out" && se.Err.Error() == "exit status 1"
			}},
		{name: "store away", fail: &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: "the image store did not take it"},
			check: func(err error) bool {
				return errors.Is(err, errdefs.ErrUnavailable) && strings.Contains(err.Error(), "did not take it")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got api.TemplateRecipe
			var removed string
			ft := &fakeTemplates{
				build: func(ctx context.Context, r api.TemplateRecipe, k string, emit func(api.TemplateBuildEvent)) (recipe.Result, error) {
					got = r
					for _, ev := range events {
						emit(ev)
					}
					return recipe.Result{Key: k, SizeBytes: 7, BuildMs: 8, Cached: true}, tc.fail
				},
				remove: func(ctx context.Context, k string) error { removed = k; return nil },
			}
			srv := httptest.NewServer(Handler(HandlerConfig{Node: &fakeNode{}, Secret: testSecret, Logger: discard(), Templates: ft}))
			defer srv.Close()
			c := NewClient("n1", srv.Listener.Addr().String(), NewTransport(testSecret))
			var relayed []api.TemplateBuildEvent
			res, err := c.BuildTemplate(context.Background(), "proj_a", sent, key, func(ev api.TemplateBuildEvent) { relayed = append(relayed, ev) })
			if !reflect.DeepEqual(got, sent) || ft.project != "proj_a" {
				t.Errorf("the node got recipe %+v of project %q; want %+v of proj_a", got, ft.project, sent)
			}
			if !reflect.DeepEqual(relayed, events) {
				t.Errorf("relayed events %+v; want %+v", relayed, events)
			}
			switch {
			case tc.check == nil && (err != nil || res != tc.want):
				t.Errorf("BuildTemplate = %+v, %v; want %+v", res, err, tc.want)
			case tc.check != nil && !tc.check(err):
				t.Errorf("BuildTemplate failed with %#v", err)
			}
			if err := c.RemoveTemplate(context.Background(), key); err != nil || removed != key {
				t.Errorf("RemoveTemplate = %v, removed %q; want %q", err, removed, key)
			}
			// 16 characters, as a key's, naming a directory far above
			// the template cache: RemoveLayer would remove it.
			for _, bad := range []string{"../x", "../../../../../x", "0123456789ABCDEF", "01234567/9abcdef"} {
				if err := c.RemoveTemplate(context.Background(), bad); !errors.Is(err, errdefs.ErrInvalid) || removed != key {
					t.Errorf("RemoveTemplate(%q) = %v, removed %q; want invalid", bad, err, removed)
				}
				if _, err := c.BuildTemplate(context.Background(), "proj_a", sent, bad, func(api.TemplateBuildEvent) {}); !errors.Is(err, errdefs.ErrInvalid) {
					t.Errorf("BuildTemplate(key %q) = %v; want invalid", bad, err)
				}
				if err := c.ForgetTemplate(context.Background(), "x@"+bad); !errors.Is(err, errdefs.ErrInvalid) {
					t.Errorf("ForgetTemplate(x@%q) = %v; want invalid", bad, err)
				}
			}
			if err := c.ForgetTemplate(context.Background(), "plain"); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("ForgetTemplate of a built-in name = %v; want invalid", err)
			}
		})
	}
}
