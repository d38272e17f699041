package recipe

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/testenv"
)

// TestStepKeys: a step's key is made of the project, the seed and every
// step up to it — an edit to step 3 of 4 keeps the first two keys and
// changes the last two; another project or base shares none.
func TestStepKeys(t *testing.T) {
	run := func(cmd string) api.TemplateStep {
		return api.TemplateStep{Run: &api.TemplateCommand{Cmd: cmd, User: "root"}}
	}
	steps := []api.TemplateStep{run("a"), run("b"), run("c"), run("d")}
	edited := slices.Clone(steps)
	edited[2] = run("c2")
	k, e := StepKeys("p", "base interpreter 1", steps), StepKeys("p", "base interpreter 1", edited)
	if k[0] != e[0] || k[1] != e[1] || k[2] == e[2] || k[3] == e[3] {
		t.Errorf("keys %v and, step 3 edited, %v: want the first two equal, the last two not", k, e)
	}
	for _, other := range [][]string{StepKeys("q", "base interpreter 1", steps), StepKeys("p", "base interpreter 2", steps)} {
		for i := range k {
			if other[i] == k[i] {
				t.Errorf("step %d's key %s shared by another project or base", i+1, k[i])
			}
		}
	}
	files := func(content string) api.TemplateStep {
		return api.TemplateStep{Copy: []api.TemplateFile{{Path: "/a", Content: content, Mode: 0o644, Owner: "user"}}}
	}
	if a, b := StepKeys("p", "s", []api.TemplateStep{files("YQ==")}), StepKeys("p", "s", []api.TemplateStep{files("Yg==")}); a[0] == b[0] {
		t.Errorf("a copy step's key does not change with its file's content")
	}
}

// TestStepDeltas: what each step changed (added, rewritten at the same
// size, removed, a directory turned into a link), recorded as deltas
// and applied in order to a copy of the base, gives the steps' tree; the
// build's stage is never carried.
func TestStepDeltas(t *testing.T) {
	testenv.RequiresRoot(t)
	tmp := t.TempDir()
	b := New(Config{CacheDir: filepath.Join(tmp, "cache"), DataDir: filepath.Join(tmp, "data")})
	write := func(root, rel, data string, mode fs.FileMode, uid int) {
		t.Helper()
		p := filepath.Join(root, rel)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(data), mode))
		must(t, os.Chown(p, uid, uid))
	}
	base := filepath.Join(tmp, "base")
	write(base, "etc/conf", "one\n", 0o644, 0)
	write(base, "opt/tool/bin/run", "#!/bin/sh\n", 0o755, 0)
	write(base, "usr/lib/mod.py", "x = 1\n", 0o644, 0)
	build := filepath.Join(tmp, "build")
	must(t, os.Mkdir(build, 0o755))
	cp(t, base, build)
	write(build, stageDir+"/files/0-0", "staged\n", 0o600, 0)
	before, err := scanRootFS(build)
	must(t, err)

	keys := []string{"00000000000000a1", "00000000000000a2"}
	write(build, "home/user/app/main.py", "print(1)\n", 0o640, 1000)
	write(build, "usr/lib/mod.py", "x = 2\n", 0o644, 0)
	must(t, os.Chtimes(filepath.Join(build, "usr/lib/mod.py"), time.Now(), time.Now().Add(time.Hour)))
	d1, now, err := b.recordStep(build, before, nil, keys[0], 1)
	must(t, err)
	must(t, os.RemoveAll(filepath.Join(build, "opt/tool")))
	must(t, os.Symlink("/usr/bin", filepath.Join(build, "opt/tool")))
	must(t, os.Remove(filepath.Join(build, "etc/conf")))
	write(build, stageDir+"/wheels-1/x.whl", "wheel\n", 0o600, 0)
	d2, _, err := b.recordStep(build, now, nil, keys[1], 2)
	must(t, err)
	if _, err := os.Stat(filepath.Join(d2, "rootfs", stageDir)); err == nil {
		t.Errorf("the stage was recorded in a step's delta")
	}
	if _, err := os.Stat(filepath.Join(d2, "rootfs/usr/lib/mod.py")); err == nil {
		t.Errorf("step 2's delta holds a file only step 1 changed")
	}
	user := stepUser{Holder: b.holderName(), Project: "p", Template: "t"}
	must(t, b.commitSteps(map[string]string{keys[0]: d1, keys[1]: d2}, keys, user))
	if n := b.cachedSteps(append(slices.Clone(keys), "00000000000000a3")); n != 2 {
		t.Fatalf("cachedSteps = %d, want 2", n)
	}

	got := filepath.Join(tmp, "got")
	must(t, os.Mkdir(got, 0o755))
	cp(t, base, got)
	if err := b.restoreSteps(context.Background(), got, keys); err != nil {
		t.Fatalf("restoreSteps: %v", err)
	}
	must(t, os.RemoveAll(filepath.Join(build, stageDir)))
	must(t, os.RemoveAll(filepath.Join(build, "var")))
	if a, b := tree(t, build), tree(t, got); a != b {
		t.Errorf("restored tree differs from the steps':\nsteps:\n%s\nrestored:\n%s", a, b)
	}
}

// TestStepBounds: a template keeps its StepEntriesPerTemplate most
// recently used entries, a project its StepEntriesPerProject; deleting a
// template (ForgetSteps) removes the entries no other template uses, and
// a sweep those of templates gone while the server was down.
func TestStepBounds(t *testing.T) {
	tmp := t.TempDir()
	b := New(Config{CacheDir: filepath.Join(tmp, "cache"), DataDir: filepath.Join(tmp, "data")})
	rootfs := filepath.Join(tmp, "rootfs")
	must(t, os.Mkdir(rootfs, 0o755))
	empty := manifest{}
	add := func(tmpl string, step int, keys ...string) {
		t.Helper()
		rec := map[string]string{}
		for _, k := range keys {
			d, _, err := b.recordStep(rootfs, empty, empty, k, step)
			must(t, err)
			rec[k] = d
		}
		must(t, b.commitSteps(rec, keys, stepUser{Holder: b.holderName(), Project: "p", Template: tmpl}))
	}
	key := func(i int) string { return fmt.Sprintf("%016x", i) }
	add("shared", 1, key(0))
	add("a", 1, key(0)) // also a's
	for i := 1; i <= StepEntriesPerTemplate+3; i++ {
		add("a", 1, key(i))
	}
	uses := func() map[string]int {
		out := map[string]int{}
		for _, u := range b.StepUses() {
			out[u.Template] = u.Entries
		}
		return out
	}
	if u := uses(); u["a"] != StepEntriesPerTemplate || u["shared"] != 1 {
		t.Errorf("entries per template = %v; want a: %d, shared: 1", u, StepEntriesPerTemplate)
	}
	if _, err := b.readEntry(key(1)); err == nil {
		t.Errorf("a's least recently used entry %s is still there", key(1))
	}
	if n := b.cachedSteps([]string{key(0)}); n != 1 {
		t.Errorf("the entry shared with another template left with a's bound")
	}
	for i := 0; i < StepEntriesPerProject+10; i++ {
		add(fmt.Sprintf("t%d", i%8), 1, key(1000+i))
	}
	if n := len(b.entries()); n != StepEntriesPerProject {
		t.Errorf("the project has %d entries; want its bound %d", n, StepEntriesPerProject)
	}

	must(t, b.ForgetSteps("p", "t0"))
	if u := uses(); u["t0"] != 0 || u["t1"] == 0 {
		t.Errorf("after deleting t0: %v; want none of t0's, t1's kept", u)
	}
	// Another server's template, of a data directory since removed.
	gone := New(Config{CacheDir: b.cfg.CacheDir, DataDir: filepath.Join(tmp, "gone")})
	d, _, err := gone.recordStep(rootfs, empty, empty, key(5000), 1)
	must(t, err)
	must(t, gone.commitSteps(map[string]string{key(5000): d}, []string{key(5000)}, stepUser{Holder: gone.holderName(), Project: "p", Template: "x", DataDir: gone.cfg.DataDir}))
	must(t, b.SweepSteps(func(project, name string) bool { return name != "t1" }))
	if u := uses(); u["t1"] != 0 || u["t2"] == 0 {
		t.Errorf("after sweeping t1 (gone): %v; want none of t1's, t2's kept", u)
	}
	if n := b.cachedSteps([]string{key(5000)}); n != 0 {
		t.Errorf("the entry of a removed data directory's template survived the sweep")
	}
}
