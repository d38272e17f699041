package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// TestTemplateStepCacheEdit: every step is cached by its inputs, so an
// edit to one step of a template's recipe runs only that step and the
// ones after it. Four run steps, each stamping a file: the 3rd edited →
// the build restores steps 1-2 from the step cache (no step event for
// them, their stamps unchanged) and runs 3 and 4; the original's 4th
// edited → only the 4th runs (its time against the first build's is
// logged, a figure, not a check). Deleting the template removes its
// entries from the step cache.
func TestTemplateStepCacheEdit(t *testing.T) {
	s := startServer(t, "--template-builds-per-hour", "0")
	const project = "proj_tplstepedit"
	c := s.createProject(project)
	ctx := context.Background()
	nonce := make([]byte, 6)
	rand.Read(nonce)
	step := func(i int, what string) api.TemplateStep {
		return api.TemplateStep{Run: &api.TemplateCommand{Cmd: fmt.Sprintf(": %x %s; sleep 4; date +%%s%%N > /home/user/s%d", nonce, what, i)}}
	}
	steps := []api.TemplateStep{step(1, ""), step(2, ""), step(3, ""), step(4, "")}
	ran := func(events []api.TemplateBuildEvent) (out []string) {
		for _, ev := range events {
			if ev.Type == api.BuildEventStep && strings.HasPrefix(ev.Name, "run: ") {
				_, n, _ := strings.Cut(ev.Name, "/home/user/s")
				out = append(out, n)
			}
		}
		return out
	}
	restored := func(events []api.TemplateBuildEvent) string {
		for _, ev := range events {
			if ev.Type == api.BuildEventStep && strings.HasPrefix(ev.Name, "restoring the first ") {
				return ev.Name
			}
		}
		return ""
	}
	stamps := func(key string) []string {
		t.Helper()
		rootfs, ok := template.LayerRootFS(cacheDir(), recipe.LayerKey(key))
		var out []string
		for i := 1; i <= 4; i++ {
			b, err := os.ReadFile(filepath.Join(rootfs, fmt.Sprintf("home/user/s%d", i)))
			if !ok || err != nil {
				t.Fatalf("build %s's stamp %d: %v (built %v)", key, i, err, ok)
			}
			out = append(out, strings.TrimSpace(string(b)))
		}
		return out
	}
	build := func(steps []api.TemplateStep) (*api.Template, []api.TemplateBuildEvent) {
		t.Helper()
		tpl, cached, ev, err := buildTemplate(t, c, api.BuildTemplateRequest{Name: "step-edit", Recipe: api.TemplateRecipe{Steps: steps}})
		if err != nil || cached {
			t.Fatalf("build = %+v cached %v, %v", tpl, cached, err)
		}
		return tpl, ev
	}
	first, ev1 := build(steps)
	if got := ran(ev1); !slices.Equal(got, []string{"1", "2", "3", "4"}) || restored(ev1) != "" {
		t.Fatalf("the first build ran steps %v, restored %q; want all four run", got, restored(ev1))
	}
	s1 := stamps(first.Key)

	third := slices.Clone(steps)
	third[2] = step(3, "edited")
	edited, ev2 := build(third)
	if got := ran(ev2); !slices.Equal(got, []string{"3", "4"}) || !strings.Contains(restored(ev2), "first 2 step(s)") {
		t.Errorf("the 3rd step edited: ran steps %v, restored %q; want 3 and 4 run, the first 2 restored:\n%+v", got, restored(ev2), ev2)
	}
	if s2 := stamps(edited.Key); s2[0] != s1[0] || s2[1] != s1[1] || s2[2] == s1[2] {
		t.Errorf("stamps %v after editing the 3rd step, %v before; want 1 and 2 kept, 3 new", s2, s1)
	}

	last := slices.Clone(steps)
	last[3] = step(4, "edited")
	lastBuild, ev3 := build(last)
	if got := ran(ev3); !slices.Equal(got, []string{"4"}) || !strings.Contains(restored(ev3), "first 3 step(s)") {
		t.Errorf("the 4th step edited: ran steps %v, restored %q; want only 4 run:\n%+v", got, restored(ev3), ev3)
	}
	if s3 := stamps(lastBuild.Key); !slices.Equal(s3[:3], s1[:3]) || s3[3] == s1[3] {
		t.Errorf("stamps %v after editing the 4th step, %v before; want 1-3 kept, 4 new", s3, s1)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("first build %d ms; the 4th of 4 steps edited %d ms (%.2f×); the 3rd edited %d ms; load %s",
		first.BuildMs, lastBuild.BuildMs, float64(lastBuild.BuildMs)/float64(first.BuildMs), edited.BuildMs, strings.Fields(string(load))[0])

	if n := stepEntries(t, project); n < 6 {
		t.Errorf("the step cache has %d entries of %s; want at least 6 (4 steps, 2 edits)", n, project)
	}
	if err := c.Templates().Delete(ctx, "step-edit"); err != nil {
		t.Fatal(err)
	}
	if n := stepEntries(t, project); n != 0 {
		t.Errorf("the step cache has %d entries of %s after its template was deleted; want none", n, project)
	}
	s.stopAndExpectNothingLeft(t)
}

// stepEntries counts the step cache's entries a template of project made
// or used.
func stepEntries(t *testing.T, project string) int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(cacheDir(), "template-steps", "*", "entry.json"))
	n := 0
	for _, f := range files {
		var e struct {
			Users []struct{ Project string } `json:"users"`
		}
		b, err := os.ReadFile(f)
		if err != nil || json.Unmarshal(b, &e) != nil {
			continue
		}
		if slices.ContainsFunc(e.Users, func(u struct{ Project string }) bool { return u.Project == project }) {
			n++
		}
	}
	return n
}
