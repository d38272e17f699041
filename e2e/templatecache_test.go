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
	"github.com/lizard-build/lizard/internal/testenv"
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
	slow := "sleep 3; date +%s%N > /home/user/stamp"
	first := api.TemplateRecipe{Env: map[string]string{"E2E_NONCE": hex.EncodeToString(nonce)},
		Steps: []api.TemplateStep{{Run: &api.TemplateCommand{Cmd: slow}}}, Start: "echo started > /tmp/started",
		// Without a ready check the template snapshot does not wait for
		// the start command (docs/templates.md): on a loaded machine it
		// was taken before the echo ran.
		Ready: "test -s /tmp/started"}
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
	if err != nil || !ran(ev1, "sleep 3") {
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
	if !resumed || ran(ev2, "sleep 3") || !ran(ev2, "echo two") {
		t.Errorf("the build extending cache-one's steps: resumed %v, its slow step run %v; want it resumed, only the new step run:\n%+v", resumed, ran(ev2, "sleep 3"), ev2)
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
	if err != nil || cached || !ran(ev3, "sleep 3") || fresh.Key == two.Key {
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
		if err != nil || ran(evc, "sleep 3") {
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

// TestTemplateStepCacheExact: a build whose first steps are restored from
// the step cache has exactly the root filesystem of the build that ran
// them. Steps 1-3 (root) make what a delta could lose — set-id and
// sticky bits, a FIFO, a device node where the build sandbox allows one,
// a file rewritten at its size and time (printf then touch -d @0, twice,
// in two steps), a deleted file and directory, a directory replaced by a
// file, a hard link, an owner or mode changed alone, a retargeted link,
// extended attributes and file capabilities — and step 4 writes what it
// sees of them to /opt/seen. Editing step 4 restores 1-3: its /opt/seen
// and the whole finished tree (type, mode, owner, size, content, link,
// device, xattrs, hard links; not times) match the first build's.
func TestTemplateStepCacheExact(t *testing.T) {
	s := startServer(t, "--template-builds-per-hour", "0")
	const project = "proj_tplstepexact"
	c := s.createProject(project)
	ctx := context.Background()
	nonce := make([]byte, 6)
	rand.Read(nonce)
	root := func(cmd string) api.TemplateStep {
		return api.TemplateStep{Run: &api.TemplateCommand{Cmd: fmt.Sprintf(": %x\n%s", nonce, cmd), User: "root"}}
	}
	// security.capability, version 2, cap_net_bind_service+ep.
	const setcap = `python3 -c 'import os; os.setxattr("/opt/sc/cap", "security.capability", bytes([1,0,0,2, 0,4,0,0, 0,0,0,0, 0,0,0,0, 0,0,0,0]))'`
	steps := []api.TemplateStep{
		root(`mkdir -p /opt/sc/gonedir/sub /opt/sc/dir2file /opt/sc/sticky
echo gone > /opt/sc/gone; echo x > /opt/sc/gonedir/sub/f; echo y > /opt/sc/dir2file/f
for f in owned mode cap xattr hardsrc; do echo $f > /opt/sc/$f; done
printf AAAA > /opt/sc/same; touch -d @0 /opt/sc/same
ln -s /etc/hostname /opt/sc/link`),
		root(`cp /bin/true /opt/sc/suid; chmod u+s,g+s /opt/sc/suid; chmod +t /opt/sc/sticky
mknod /opt/sc/null c 1 3 || echo refused > /opt/sc/mknod-refused
mkfifo /opt/sc/fifo
ln /opt/sc/hardsrc /opt/sc/hard
rm /opt/sc/gone; rm -rf /opt/sc/gonedir
rm -rf /opt/sc/dir2file; echo file > /opt/sc/dir2file
chown 1000:1000 /opt/sc/owned; chmod 0600 /opt/sc/mode
ln -sfn /etc/passwd /opt/sc/link
python3 -c 'import os; os.setxattr("/opt/sc/xattr", "user.lizard", b"v")' || echo refused > /opt/sc/xattr-refused
` + setcap + ` || echo refused > /opt/sc/cap-refused`),
		root(`printf BBBB > /opt/sc/same; touch -d @0 /opt/sc/same`),
	}
	observe := func(v string) api.TemplateStep {
		return root(": " + v + `
cd /opt/sc
for f in $(ls -A | sort); do stat -c '%n %F %a %u:%g %s %h %t:%T %N' "$f"; done > /opt/seen
find . -type f | sort | xargs md5sum >> /opt/seen
python3 -c '
import os
for f in sorted(os.listdir(".")):
    try:
        print(f, sorted((a, os.getxattr(f, a, follow_symlinks=False).hex()) for a in os.listxattr(f, follow_symlinks=False)))
    except OSError as e:
        print(f, "xattrs:", e.strerror)
' >> /opt/seen`)
	}
	build := func(steps []api.TemplateStep) (*api.Template, []api.TemplateBuildEvent) {
		t.Helper()
		tpl, cached, ev, err := buildTemplate(t, c, api.BuildTemplateRequest{Name: "step-exact", Recipe: api.TemplateRecipe{Steps: steps}})
		if err != nil || cached {
			t.Fatalf("build = %+v cached %v, %v:\n%+v", tpl, cached, err, ev)
		}
		return tpl, ev
	}
	rootfs := func(key string) string {
		t.Helper()
		p, ok := template.LayerRootFS(cacheDir(), recipe.LayerKey(key))
		if !ok {
			t.Fatalf("build %s is not in the cache", key)
		}
		return p
	}
	first, _ := build(append(slices.Clone(steps), observe("v1")))
	seen1, err := os.ReadFile(filepath.Join(rootfs(first.Key), "opt/seen"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("what step 4 of the first build saw:\n%s", seen1)
	// What the first build made, so that the comparison below compares
	// something. gVisor refuses mknod of a device and setting
	// security.capability (mknod-refused, cap-refused), so neither is
	// made in a build sandbox; and keeps a FIFO in the sandbox's memory,
	// never on the host's disk, so the later steps of the build that made
	// it see it, and no delta can hold it: its line is left out below.
	for _, want := range []string{"suid regular file 6755 0:0", "sticky directory 1755", "fifo fifo 644",
		"hard regular file 644 0:0 8 2", "dir2file regular file", "owned regular file 644 1000:1000", "mode regular file 600",
		"link symbolic link 777 0:0 11 1 0:0 'link' -> '/etc/passwd'", "xattr [('user.lizard', '76')]", "f50881ced34c7d9e6bce100bf33dec60  ./same"} {
		if !strings.Contains(string(seen1), want) {
			t.Errorf("step 4 of the first build did not see %q", want)
		}
	}
	if strings.Contains(string(seen1), "gone") {
		t.Errorf("step 4 of the first build saw the deleted file or directory")
	}
	m1 := testenv.TreeManifest(t, rootfs(first.Key), false) // the build goes when the template is rebuilt

	edited, ev := build(append(slices.Clone(steps), observe("v2")))
	restored := ""
	for _, e := range ev {
		if e.Type == api.BuildEventStep && strings.HasPrefix(e.Name, "restoring the first ") {
			restored = e.Name
		}
	}
	if !strings.Contains(restored, "first 3 step(s)") {
		t.Fatalf("step 4 edited: restored %q; want the first 3 steps restored:\n%+v", restored, ev)
	}
	seen2, err := os.ReadFile(filepath.Join(rootfs(edited.Key), "opt/seen"))
	if err != nil {
		t.Fatal(err)
	}
	noFIFO := func(b []byte) string {
		return strings.Join(slices.DeleteFunc(strings.Split(string(b), "\n"), func(l string) bool { return strings.HasPrefix(l, "fifo ") }), "\n")
	}
	if noFIFO(seen1) != noFIFO(seen2) {
		t.Errorf("step 4 saw, after steps 1-3 restored from the step cache:\n%s\nand after they ran:\n%s", seen2, seen1)
	}
	if diff := testenv.TreeDiff(m1, testenv.TreeManifest(t, rootfs(edited.Key), false), "opt/seen"); diff != "" {
		t.Errorf("the build after steps 1-3 ran, then after they were restored, differs:\n%s", diff)
	}
	if err := c.Templates().Delete(ctx, "step-exact"); err != nil {
		t.Fatal(err)
	}
	s.stopAndExpectNothingLeft(t)
}
