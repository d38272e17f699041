package control_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/recipe"
	"github.com/lizard-build/lizard/internal/secrets"
	"github.com/lizard-build/lizard/internal/store"
)

// imageBuilder is a template builder on images that pulls nothing: it
// keeps the credentials its resolve and its build were given.
type imageBuilder struct {
	resolved, built *api.RegistryAuth
}

func (b *imageBuilder) BaseKey(context.Context, string) (string, error) { return "base", nil }
func (b *imageBuilder) Hold(string) error                               { return nil }
func (b *imageBuilder) Release(string) (bool, error)                    { return false, nil }
func (b *imageBuilder) ResolveImage(_ context.Context, ref string, auth *api.RegistryAuth) (string, string, error) {
	b.resolved = auth
	return ref + "@sha256:" + strings.Repeat("a", 64), "sha256:" + strings.Repeat("a", 64), nil
}
func (b *imageBuilder) Build(ctx context.Context, _ string, _ api.TemplateRecipe, key string, _ func(api.TemplateBuildEvent)) (recipe.Result, error) {
	b.built = recipe.RegistryAuthOf(ctx)
	return recipe.Result{Key: key, BuildMs: 1}, nil
}

// TestRegistryPasswordSecret: a build's registry password named by a
// secret of the project (registry.passwordSecret) is opened for the
// image's registry alone — the secret's hosts must hold it, plain HTTP
// only if the secret allows it — reaches the resolve and the build, is
// in no record nor the audit log (its use is), and a missing secret,
// another project's, one for other hosts, or both a password and a
// secret, are refused naming what to do.
func TestRegistryPasswordSecret(t *testing.T) {
	raw := make([]byte, 32)
	rand.Read(raw)
	key, err := secrets.ParseKey(base64.StdEncoding.EncodeToString(raw))
	if err != nil {
		t.Fatal(err)
	}
	var audit bytes.Buffer
	b := &imageBuilder{}
	var sec *secrets.Store
	e := newEnv(t, func(c *control.Config) {
		sec = &secrets.Store{Store: c.Store, Key: key, Audit: slog.New(slog.NewTextHandler(&audit, nil))}
		c.Secrets, c.Builder, c.BuildsPerHour = sec, b, 0
	})
	ctx := context.Background()
	const value = "s3cret-registry-token"
	for _, p := range []string{"p1", "p2"} {
		if err := e.Store.CreateProject(ctx, p, time.Now()); err != nil && !errors.Is(err, store.ErrConflict) {
			t.Fatal(err)
		}
	}
	set := func(project, name string, sc secrets.Scope) {
		if _, err := sec.Set(ctx, project, name, value, sc); err != nil {
			t.Fatal(err)
		}
	}
	set("p1", "REG", secrets.Scope{Hosts: []string{"registry.example.com"}})
	set("p1", "OTHER_HOST", secrets.Scope{Hosts: []string{"ghcr.io"}})
	set("p1", "LOCAL", secrets.Scope{Hosts: []string{"localhost"}})
	set("p1", "LOCAL_HTTP", secrets.Scope{Hosts: []string{"localhost"}, AllowHTTP: true})
	set("p2", "THEIRS", secrets.Scope{Hosts: []string{"registry.example.com"}})

	build := func(from, secret, password string) (*api.Template, error) {
		b.resolved, b.built = nil, nil
		req := api.BuildTemplateRequest{Name: "img", Recipe: api.TemplateRecipe{From: from, Env: map[string]string{"N": from}},
			Registry: &api.RegistryAuth{Username: "u", Password: password, PasswordSecret: secret}}
		tb, err := e.c.Project("p1").Templates().Plan(ctx, req)
		if err != nil {
			return nil, err
		}
		tpl, _, err := tb.Run(ctx, func(api.TemplateBuildEvent) {})
		return &tpl, err
	}

	for _, from := range []string{"registry.example.com/team/app:1", "registry.example.com:5000/team/app:1", "localhost:5000/app:1"} {
		secret := map[bool]string{true: "LOCAL_HTTP", false: "REG"}[strings.HasPrefix(from, "localhost")]
		tpl, err := build(from, secret, "")
		if err != nil {
			t.Fatalf("%s with passwordSecret %s: %v", from, secret, err)
		}
		for what, got := range map[string]*api.RegistryAuth{"resolve": b.resolved, "build": b.built} {
			if got == nil || got.Username != "u" || got.Password != value || got.PasswordSecret != "" {
				t.Errorf("%s: the %s got %+v; want user u and the secret's value", from, what, got)
			}
		}
		if rec, _ := e.Store.Templates().Get(ctx, "p1", "img"); strings.Contains(rec.Recipe, value) || strings.Contains(rec.Recipe, "passwordSecret") {
			t.Errorf("the template's record holds the credentials: %s", rec.Recipe)
		}
		if tpl.Digest == "" {
			t.Errorf("%s: no digest pinned", from)
		}
	}
	if strings.Contains(audit.String(), value) || !strings.Contains(audit.String(), "secret=REG") || !strings.Contains(audit.String(), "host=registry.example.com") {
		t.Errorf("audit log: want the use of REG for registry.example.com, never its value:\n%s", audit.String())
	}

	for _, c := range []struct {
		from, secret, password string
		kind                   error
		want                   string
	}{
		{"registry.example.com/app:1", "MISSING", "", errdefs.ErrInvalid, "which project p1 does not have"},
		{"registry.example.com/app:1", "THEIRS", "", errdefs.ErrInvalid, "which project p1 does not have"},
		{"registry.example.com/app:1", "OTHER_HOST", "", errdefs.ErrInvalid, "not one of the hosts it may be sent to (ghcr.io)"},
		{"evil.example.net/app:1", "REG", "", errdefs.ErrInvalid, "for evil.example.net, which is not one of the hosts"},
		{"localhost:5000/app:1", "LOCAL", "", errdefs.ErrForbidden, "may not be sent over plain HTTP"},
		{"registry.example.com/app:1", "REG", "pw", errdefs.ErrInvalid, "give password or passwordSecret, not both"},
	} {
		_, err := build(c.from, c.secret, c.password)
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with passwordSecret %s = %v; want %v saying %q", c.from, c.secret, err, c.kind, c.want)
		}
		if b.resolved != nil {
			t.Errorf("%s with passwordSecret %s: the image was resolved with %+v", c.from, c.secret, b.resolved)
		}
	}
}
