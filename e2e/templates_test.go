package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/recipe"
	"github.com/lizard-build/lizard/internal/template"
)

// buildTemplate builds req and returns the template, whether it was
// cached, and the events the build streamed.
func buildTemplate(t *testing.T, c *client.Client, req api.BuildTemplateRequest) (*api.Template, bool, []api.TemplateBuildEvent, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var events []api.TemplateBuildEvent
	tpl, cached, err := c.Templates().Build(ctx, req, func(ev api.TemplateBuildEvent) { events = append(events, ev) })
	return tpl, cached, events, err
}

// cacheEntries lists what the template cache holds for build key: its
// directory, lock file and any temporary build directory.
func cacheEntries(key string) []string {
	dir := filepath.Join(cacheDir(), "templates")
	var out []string
	for _, pat := range []string{"custom-" + key, "custom-" + key + ".lock", "custom-" + key + ".holders", ".build-custom-" + key + "-*"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		out = append(out, m...)
	}
	return out
}

// TestCustomTemplate builds a recipe adding a Debian package (jq, fetched
// from the Debian mirror), a pinned pure-Python wheel, a file, envs, a working directory, a build command and a start command;
// uses it from a new sandbox, from the template snapshot's warm pool and
// after a restart; builds it again (found in the cache, no step runs);
// refuses its deletion while a sandbox uses it and, once deleted, leaves
// nothing of it in the cache; and reports a broken recipe with the
// failing step's output, leaving nothing behind.
func TestCustomTemplate(t *testing.T) {
	name := "e2e-tpl"
	s := startServer(t, "--warm", name+"=1")
	c := s.createProject("proj_tpl")
	ctx := context.Background()

	// A nonce keeps this recipe's build apart from every other run's in
	// the shared cache: its first build is a real one, and deleting it
	// cannot touch another test's.
	nonce := make([]byte, 6)
	rand.Read(nonce)
	req := api.BuildTemplateRequest{Name: name, Recipe: api.TemplateRecipe{
		Apt:     []string{"jq"},
		Pip:     []string{"six==1.16.0"},
		Files:   []api.TemplateFile{{Path: "/home/user/data/hello.txt", Content: base64.StdEncoding.EncodeToString([]byte("hello from the recipe\n"))}},
		Env:     map[string]string{"GREETING": "hi", "E2E_NONCE": hex.EncodeToString(nonce)},
		Workdir: "/home/user/work",
		Run: []api.TemplateCommand{
			{Cmd: "echo built-by-$(id -un) > /home/user/built.txt", User: "user"},
			{Cmd: "id -u"},
			// No network in a build: a connection to a documentation
			// address (never routed) is dropped by the sandbox's egress
			// policy on this host; the step fails if it connects.
			{Cmd: `python3 -c 'import socket, sys; s = socket.socket(); s.settimeout(2); sys.exit(s.connect_ex(("203.0.113.1", 80)) == 0)' && echo no-network`},
		},
		Start: "echo started > /tmp/started.txt",
	}}
	tpl, cached, events, err := buildTemplate(t, c, req)
	if err != nil {
		t.Fatalf("building the template: %v\n%s", err, s.logs())
	}
	if cached || tpl.Name != name || tpl.BuildMs <= 0 || tpl.SizeBytes <= 0 || len(tpl.Key) != 16 {
		t.Fatalf("first build = %+v, cached %v; want a fresh build of %s", tpl, cached, name)
	}
	var steps int
	var installed, debs, rootStep, offline bool
	for _, ev := range events {
		switch ev.Type {
		case api.BuildEventStep:
			steps++
			if ev.Step != steps || ev.Total < ev.Step {
				t.Errorf("step event %+v after %d steps; want steps numbered in order", ev, steps-1)
			}
		case api.BuildEventLog:
			installed = installed || strings.Contains(ev.Text, "Successfully installed six-1.16.0")
			debs = debs || strings.Contains(ev.Text, "Setting up jq")
			offline = offline || strings.TrimSpace(ev.Text) == "no-network"
			// `id -u` of a root step prints 0: the sandbox's root.
			rootStep = rootStep || strings.TrimSpace(ev.Text) == "0"
		}
	}
	if steps < 7 || !installed || !debs || !rootStep || !offline {
		t.Errorf("build streamed %d steps, pip install seen %v, dpkg seen %v, root step output seen %v, no network seen %v; want every step and its output:\n%+v",
			steps, installed, debs, rootStep, offline, events)
	}
	if got, err := c.Templates().List(ctx); err != nil || len(got) != 1 || got[0].Name != name || got[0].Recipe.Files[0].Content != "" || got[0].Recipe.Files[0].Size != 22 {
		t.Errorf("Templates().List = %+v, %v; want %s with its recipe, file contents left out", got, err, name)
	}

	// Everything the recipe gave, in a new sandbox.
	check := func(id string) {
		t.Helper()
		got := py(t, c, id, `import os, six
print(six.__version__, os.getcwd(), os.environ["GREETING"], open("/home/user/data/hello.txt").read().strip(),
      open("/home/user/built.txt").read().strip(), open("/tmp/started.txt").read().strip(), os.stat("/home/user/data/hello.txt").st_uid)`)
		if want := "1.16.0 /home/user/work hi hello from the recipe built-by-user started 1000"; got != want {
			t.Errorf("sandbox %s of the template printed %q; want %q", id, got, want)
		}
		res, err := c.Exec(ctx, id, api.ProcessRequest{Cmd: `echo '{"a": [1, 2]}' | jq -c .a`}, nil)
		if err != nil || res.ExitCode != 0 || res.Stdout != "[1,2]\n" {
			t.Errorf("jq, from the recipe's Debian packages, in %s = %+v, %v; want [1,2]", id, res, err)
		}
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: name})
	if err != nil {
		t.Fatalf("creating a sandbox of the template: %v\n%s", err, s.logs())
	}
	if sb.Template != name {
		t.Errorf("sandbox template = %q; want %q", sb.Template, name)
	}
	check(sb.SandboxID)

	t.Logf("first build: %d steps in %.1f s, %d MiB", steps, float64(tpl.BuildMs)/1000, tpl.SizeBytes>>20)

	// The same recipe again: found in the cache, no step runs.
	begin := time.Now()
	again, cached, events, err := buildTemplate(t, c, req)
	t.Logf("second build of the same recipe: cached %v in %s", cached, time.Since(begin).Round(time.Millisecond))
	if err != nil || !cached || again.Key != tpl.Key || len(events) != 1 || events[0].Type != api.BuildEventDone {
		t.Errorf("second build = %+v, cached %v, %d events, %v; want the first build found in the cache and no step", again, cached, len(events), err)
	}

	// Deleting it is refused while a sandbox uses it.
	var apiErr *client.Error
	if err := c.Templates().Delete(ctx, name); !errors.As(err, &apiErr) || apiErr.Status != 409 || !strings.Contains(apiErr.Message, sb.SandboxID) {
		t.Errorf("Templates().Delete while %s uses it = %v; want a 409 naming the sandbox", sb.SandboxID, err)
	}

	// The warm pool of the template (--warm NAME=1) is restored from its
	// template snapshot; a create claims it.
	ref := name + "@" + tpl.Key
	deadline := time.Now().Add(90 * time.Second)
	for !strings.Contains(s.logs(), "template="+ref+" role=warm") {
		if time.Now().After(deadline) {
			t.Fatalf("no warm sandbox of %s within 90 s:\n%s", ref, s.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	begin = time.Now()
	warm, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: name})
	t.Logf("create from the template's warm pool: %s", time.Since(begin).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("creating a sandbox of the template with a warm pool: %v", err)
	}
	// The server's log reaches the harness through a pipe: the line may
	// come a moment after the answer.
	claimed := `msg="sandbox claimed from the warm pool" sandbox_id=` + warm.SandboxID
	for wait := time.Now().Add(10 * time.Second); !strings.Contains(s.logs(), claimed) && time.Now().Before(wait); {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(s.logs(), claimed) {
		if strings.Contains(s.logs(), "memory is short; shrinking the warm pool") {
			// The machine is shared: under its MemAvailable floor the pool
			// gives its sandboxes back, as it should.
			t.Logf("sandbox %s was not claimed from the warm pool, which shrank: memory is short", warm.SandboxID)
		} else {
			var lines []string
			for _, l := range strings.Split(s.logs(), "\n") {
				if strings.Contains(l, "warm") || strings.Contains(l, warm.SandboxID) {
					lines = append(lines, l)
				}
			}
			t.Errorf("sandbox %s was not claimed from the template's warm pool:\n%s", warm.SandboxID, strings.Join(lines, "\n"))
		}
	}
	check(warm.SandboxID)

	// Records and builds survive a restart.
	s.restart()
	if got, err := c.Templates().Get(ctx, name); err != nil || got.Key != tpl.Key {
		t.Fatalf("Templates().Get after a restart = %+v, %v; want key %s", got, err, tpl.Key)
	}
	check(sb.SandboxID)
	after, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: name})
	if err != nil {
		t.Fatalf("creating a sandbox of the template after a restart: %v\n%s", err, s.logs())
	}
	check(after.SandboxID)

	for _, id := range []string{sb.SandboxID, warm.SandboxID, after.SandboxID} {
		if err := c.KillSandbox(ctx, id); err != nil {
			t.Fatalf("killing %s: %v", id, err)
		}
	}
	if err := c.Templates().Delete(ctx, name); err != nil {
		t.Fatalf("deleting the template: %v", err)
	}
	if _, err := c.Templates().Get(ctx, name); !errors.As(err, &apiErr) || apiErr.Status != 404 {
		t.Errorf("Templates().Get after delete = %v; want 404", err)
	}
	if left := cacheEntries(tpl.Key); len(left) > 0 {
		t.Errorf("the deleted template's build is still in the cache: %v", left)
	}
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: name}); !errors.As(err, &apiErr) || apiErr.Status != 404 {
		t.Errorf("creating from a deleted template = %v; want 404", err)
	}

	// A broken recipe: the failing step's name and output, and nothing
	// left of the build.
	broken := api.BuildTemplateRequest{Name: "e2e-broken", Recipe: api.TemplateRecipe{
		Env: map[string]string{"E2E_NONCE": hex.EncodeToString(nonce)},
		Run: []api.TemplateCommand{{Cmd: "echo first-ok"}, {Cmd: "echo about-to-fail >&2; exit 3"}},
	}}
	begin = time.Now()
	_, _, events, err = buildTemplate(t, c, broken)
	t.Logf("broken recipe reported in %s", time.Since(begin).Round(time.Millisecond))
	var be *client.BuildError
	if !errors.As(err, &be) || be.Code != api.CodeInvalidArgument || !strings.Contains(be.Step, "exit 3") ||
		!strings.Contains(be.Log, "about-to-fail") || !strings.Contains(be.Message, "exit status 3") {
		t.Fatalf("building a broken recipe = %v (%+v); want the failing step with its output", err, be)
	}
	if got, _ := c.Templates().List(ctx); len(got) != 0 {
		t.Errorf("templates after a failed build = %+v; want none", got)
	}
	if last := events[len(events)-1]; last.Type != api.BuildEventError {
		t.Errorf("a broken build's stream ends with %+v; want its error event", last)
	}
	base, err := template.Ensure(ctx, cacheDir(), template.Default, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := broken.Recipe
	if err := recipe.Validate(&r, template.Names()); err != nil {
		t.Fatal(err)
	}
	if left := cacheEntries(recipe.Key("proj_tpl", r, filepath.Base(filepath.Dir(base)))); len(left) > 0 {
		t.Errorf("the failed build left in the cache: %v", left)
	}
	s.stopAndExpectNothingLeft(t)
}
