package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/recipe"
	"github.com/lizard-build/lizard/internal/template"
)

// TestTemplateStepCache: a build whose steps extend an earlier build's
// of the project resumes from that build — its slow first step not run
// again (no step event, the file it stamped unchanged);
// skipCache runs every step (a new stamp); and a template built on the
// project's own (base: NAME, from: NAME) has its files, env and start
// command, built on top of its build.
func TestTemplateStepCache(t *testing.T) {
	s := startServer(t, "--template-builds-per-hour", "0") // six builds: past the default's burst of 3
	c := s.createProject("proj_tplcache")
	ctx := context.Background()
	nonce := make([]byte, 6)
	rand.Read(nonce)
	slow := "sleep 15; date +%s%N > /home/user/stamp"
	first := api.TemplateRecipe{Env: map[string]string{"E2E_NONCE": hex.EncodeToString(nonce)},
		Steps: []api.TemplateStep{{Run: &api.TemplateCommand{Cmd: slow}}}, Start: "echo started > /tmp/started"}
	stamp := func(key string) string {
		t.Helper()
		rootfs, ok := template.LayerRootFS(cacheDir(), recipe.LayerKey(key))
		b, err := os.ReadFile(filepath.Join(rootfs, "home/user/stamp"))
		if !ok || err != nil {
			t.Fatalf("build %s's stamp: %v (built %v)", key, err, ok)
		}
		return strings.TrimSpace(string(b))
	}
	ran := func(events []api.TemplateBuildEvent, cmd string) bool {
		for _, ev := range events {
			if ev.Type == api.BuildEventStep && strings.Contains(ev.Name, "run: "+cmd) {
				return true
			}
		}
		return false
	}
	one, _, ev1, err := buildTemplate(t, c, api.BuildTemplateRequest{Name: "cache-one", Recipe: first})
	if err != nil || !ran(ev1, "sleep 15") {
		t.Fatalf("first build = %+v, %v; want the slow step run", one, err)
	}

	longer := first
	longer.Steps = append(append([]api.TemplateStep{}, first.Steps...), api.TemplateStep{Run: &api.TemplateCommand{Cmd: "echo two > /home/user/two"}})
	two, cached, ev2, err := buildTemplate(t, c, api.BuildTemplateRequest{Name: "cache-two", Recipe: longer})
	if err != nil || cached {
		t.Fatalf("second build = %+v cached %v, %v", two, cached, err)
	}
	resumed := false
	for _, ev := range ev2 {
		resumed = resumed || (ev.Type == api.BuildEventStep && strings.Contains(ev.Name, "copying the cached build "+one.Key+" of the first 2 step(s)"))
	}
	if !resumed || ran(ev2, "sleep 15") || !ran(ev2, "echo two") {
		t.Errorf("the build extending cache-one's steps: resumed %v, its slow step run %v; want it resumed, only the new step run:\n%+v", resumed, ran(ev2, "sleep 15"), ev2)
	}
	if a, b := stamp(one.Key), stamp(two.Key); a != b {
		t.Errorf("the resumed build's stamp %s; want cache-one's %s (the step not run again)", b, a)
	}
	// Its speed is a figure, not a check (a loaded machine can stretch a
	// copy past the 15 s saved): the events and the stamp prove the skip.
	t.Logf("first build %d ms, the resumed one %d ms", one.BuildMs, two.BuildMs)

	// skipCache: every step again, a new stamp; then the same recipe is
	// the cache.
	fresh, cached, ev3, err := buildTemplate(t, c, api.BuildTemplateRequest{Name: "cache-two", Recipe: longer, SkipCache: true})
	if err != nil || cached || !ran(ev3, "sleep 15") || fresh.Key == two.Key {
		t.Fatalf("skipCache = %+v cached %v, %v; want every step run under a new key", fresh, cached, err)
	}
	if stamp(fresh.Key) == stamp(one.Key) {
		t.Errorf("skipCache kept the stamp %s; want the step run again", stamp(one.Key))
	}
	again, cached, _, err := buildTemplate(t, c, api.BuildTemplateRequest{Name: "cache-two", Recipe: longer})
	if err != nil || !cached || again.Key != fresh.Key {
		t.Errorf("the same recipe after skipCache = %+v cached %v, %v; want its build from the cache", again, cached, err)
	}

	// On the project's own template, by base and by from (as a
	// Dockerfile's FROM cache-one sends it).
	for _, r := range []api.TemplateRecipe{
		{Base: "cache-one", Run: []api.TemplateCommand{{Cmd: "echo child > /home/user/child"}}},
		{From: "cache-one", Run: []api.TemplateCommand{{Cmd: "echo child > /home/user/child"}}},
	} {
		child, _, evc, err := buildTemplate(t, c, api.BuildTemplateRequest{Name: "cache-child", Recipe: r})
		if err != nil || ran(evc, "sleep 15") {
			t.Fatalf("building on cache-one (%+v) = %+v, %v; want it resumed from cache-one's build", r, child, err)
		}
		if stamp(child.Key) != stamp(one.Key) {
			t.Errorf("the child's stamp %s; want cache-one's %s", stamp(child.Key), stamp(one.Key))
		}
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "cache-child"})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Exec(ctx, sb.SandboxID, api.ProcessRequest{Cmd: "cat /home/user/child /tmp/started; echo $E2E_NONCE"}, nil)
		if want := "child\nstarted\n" + hex.EncodeToString(nonce) + "\n"; err != nil || res.Stdout != want {
			t.Errorf("a sandbox of the child printed %+v, %v; want %q (its file, the parent's start command and env)", res, err, want)
		}
		c.KillSandbox(ctx, sb.SandboxID)
	}
	for _, n := range []string{"cache-child", "cache-two", "cache-one"} {
		if err := c.Templates().Delete(ctx, n); err != nil {
			t.Errorf("deleting %s: %v", n, err)
		}
	}
	for _, k := range []string{one.Key, two.Key, fresh.Key} {
		if left := cacheEntries(k); len(left) > 0 {
			t.Errorf("build %s left in the cache: %v", k, left)
		}
	}
	s.stopAndExpectNothingLeft(t)
}
