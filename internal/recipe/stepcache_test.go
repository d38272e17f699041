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

	"golang.org/x/sys/unix"

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
	// Entries changed within racyWindow of a walk count as changed at
	// the next step (TestStepDeltaExact): past it, a delta holds only
	// its step's changes.
	time.Sleep(racyWindow)
	before, err := scanRootFS(build)
	must(t, err)

	keys := []string{"00000000000000a1", "00000000000000a2"}
	write(build, "home/user/app/main.py", "print(1)\n", 0o640, 1000)
	write(build, "usr/lib/mod.py", "x = 2\n", 0o644, 0)
	must(t, os.Chtimes(filepath.Join(build, "usr/lib/mod.py"), time.Now(), time.Now().Add(time.Hour)))
	time.Sleep(racyWindow)
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

// TestStepDeltaExact: for each kind of change a step makes, the step's
// delta applied to a copy of the tree before it gives exactly the tree
// after it — every entry's type, mode (set-id and sticky bits included),
// owner, size, content, link target, device number, extended attributes,
// hard links and time — and the delta's own files are never set-id,
// capable or special (template.Strip's second layer holds in the step
// cache too).
func TestStepDeltaExact(t *testing.T) {
	testenv.RequiresRoot(t)
	file := func(root, rel, data string) {
		t.Helper()
		p := filepath.Join(root, rel)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(data), 0o644))
	}
	epoch := time.Unix(0, 0)
	// security.capability, version 2: cap_net_bind_service, effective.
	capNetBind := []byte{1, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	cases := []struct {
		name string
		base func(root string) // the tree before the step
		// now: made just before the walk before the step, within a
		// clock tick of the step's own change.
		now  func(root string)
		step func(root string)
	}{
		{name: "set-id and sticky bits",
			base: func(r string) {
				file(r, "bin/tool", "#!/bin/sh\n")
				file(r, "bin/group", "g")
				must(t, os.MkdirAll(r+"/srv/shared", 0o755))
			},
			step: func(r string) {
				must(t, os.Chmod(r+"/bin/tool", 0o755|fs.ModeSetuid))
				must(t, os.Chmod(r+"/bin/group", 0o755|fs.ModeSetgid))
				must(t, os.Chmod(r+"/srv/shared", 0o777|fs.ModeSticky|fs.ModeSetgid))
				file(r, "bin/new", "new")
				must(t, os.Chmod(r+"/bin/new", 0o4711))
			}},
		{name: "device nodes, a FIFO and a socket",
			base: func(r string) { must(t, os.MkdirAll(r+"/dev", 0o755)) },
			step: func(r string) {
				must(t, unix.Mknod(r+"/dev/null", unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
				must(t, unix.Mknod(r+"/dev/loop9", unix.S_IFBLK|0o660, int(unix.Mkdev(7, 9))))
				must(t, os.Lchown(r+"/dev/loop9", 0, 6))
				must(t, unix.Mkfifo(r+"/run-fifo", 0o620))
				must(t, unix.Mknod(r+"/sock", unix.S_IFSOCK|0o755, 0))
				must(t, os.Link(r+"/run-fifo", r+"/fifo-link"))
			}},
		{name: "a special file changed and removed",
			base: func(r string) {
				must(t, unix.Mkfifo(r+"/fifo", 0o600))
				must(t, unix.Mkfifo(r+"/gone", 0o600))
			},
			step: func(r string) { must(t, os.Chmod(r+"/fifo", 0o640)); must(t, os.Remove(r+"/gone")) }},
		{name: "rewritten at the same size and time",
			base: func(r string) { file(r, "etc/same", "AAAA"); must(t, os.Chtimes(r+"/etc/same", epoch, epoch)) },
			step: func(r string) { file(r, "etc/same", "BBBB"); must(t, os.Chtimes(r+"/etc/same", epoch, epoch)) }},
		{name: "rewritten within the timestamp granularity",
			now:  func(r string) { file(r, "etc/same", "AAAA"); must(t, os.Chtimes(r+"/etc/same", epoch, epoch)) },
			step: func(r string) { file(r, "etc/same", "BBBB"); must(t, os.Chtimes(r+"/etc/same", epoch, epoch)) }},
		{name: "hard links made and removed",
			base: func(r string) {
				file(r, "a/one", "one")
				file(r, "a/two", "two")
				must(t, os.Link(r+"/a/two", r+"/a/two-link"))
			},
			step: func(r string) {
				must(t, os.Link(r+"/a/one", r+"/b-one"))
				file(r, "c/new", "new")
				must(t, os.Link(r+"/c/new", r+"/c/new-link"))
				must(t, os.Remove(r+"/a/two-link"))
			}},
		{name: "links made, retargeted and re-owned",
			base: func(r string) { must(t, os.Symlink("/etc/hostname", r+"/link")); must(t, os.Symlink("x", r+"/owned")) },
			step: func(r string) {
				must(t, os.Remove(r+"/link"))
				must(t, os.Symlink("/etc/passwd", r+"/link"))
				must(t, os.Lchown(r+"/owned", 1000, 1000))
				must(t, os.Symlink("../etc", r+"/new"))
			}},
		{name: "extended attributes and capabilities",
			base: func(r string) {
				file(r, "bin/ping", "ping")
				must(t, os.MkdirAll(r+"/var/d", 0o755))
				must(t, unix.Lsetxattr(r+"/var/d", "user.old", []byte("1"), 0))
				file(r, "var/f", "f")
				must(t, unix.Lsetxattr(r+"/var/f", "user.old", []byte("1"), 0))
			},
			step: func(r string) {
				must(t, unix.Lsetxattr(r+"/bin/ping", "security.capability", capNetBind, 0))
				must(t, unix.Lsetxattr(r+"/bin/ping", "user.note", []byte("v"), 0))
				must(t, unix.Lremovexattr(r+"/var/d", "user.old"))
				must(t, unix.Lsetxattr(r+"/var/f", "trusted.x", []byte("t"), 0))
			}},
		{name: "owner alone, mode alone",
			base: func(r string) {
				file(r, "home/f", "f")
				file(r, "home/g", "g")
				must(t, os.MkdirAll(r+"/home/d", 0o755))
			},
			step: func(r string) {
				must(t, os.Chown(r+"/home/f", 1000, 1000))
				must(t, os.Chmod(r+"/home/g", 0o600))
				must(t, os.Chown(r+"/home/d", 1000, 0))
				must(t, os.Chmod(r+"/", 0o751))
			}},
		{name: "files and directories deleted",
			base: func(r string) {
				file(r, "opt/tool/bin/run", "run")
				file(r, "opt/tool.conf", "conf") // sorts between opt/tool and opt/tool/...
				file(r, "opt/tool-2/x", "x")
				file(r, "opt/keep", "keep")
			},
			step: func(r string) {
				must(t, os.RemoveAll(r+"/opt/tool"))
				must(t, os.Remove(r+"/opt/tool.conf"))
				must(t, os.RemoveAll(r+"/opt/tool-2"))
			}},
		{name: "a directory replaced by a file, a file by a directory",
			base: func(r string) { file(r, "srv/dir/x", "x"); file(r, "srv/file", "f") },
			step: func(r string) {
				must(t, os.RemoveAll(r+"/srv/dir"))
				file(r, "srv/dir", "now a file")
				must(t, os.Remove(r+"/srv/file"))
				file(r, "srv/file/y", "now a directory")
			}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmp := t.TempDir()
			b := New(Config{CacheDir: filepath.Join(tmp, "cache"), DataDir: filepath.Join(tmp, "data")})
			base := filepath.Join(tmp, "base")
			build := filepath.Join(tmp, "build")
			must(t, os.Mkdir(base, 0o755))
			must(t, os.Mkdir(build, 0o755))
			if c.base != nil {
				c.base(base)
			}
			cp(t, base, build)
			if c.now != nil {
				c.now(build)
				cp(t, build, base) // the restored build's tree before the step
			}
			before, err := scanRootFS(build)
			must(t, err)
			if c.now != nil && !before["etc/same"].racy {
				// (A kernel with fine-grained timestamps gives the
				// rewrite a ctime of its own as well.)
				t.Errorf("a file changed just before the walk is not racy: its rewrite in the same clock tick would be missed")
			}
			c.step(build)
			key := fmt.Sprintf("%016x", 0xc0+i)
			dir, _, err := b.recordStep(build, before, nil, key, 1)
			must(t, err)
			must(t, b.commitSteps(map[string]string{key: dir}, []string{key}, stepUser{Holder: b.holderName(), Project: "p", Template: "t"}))
			// What the step cache holds is no privilege on the host.
			filepath.WalkDir(filepath.Join(b.stepDir(), key), func(p string, d fs.DirEntry, err error) error {
				must(t, err)
				fi, err := d.Info()
				must(t, err)
				x, _ := xattrs(p)
				if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 || special(fi.Mode()) || x["security.capability"] != nil {
					t.Errorf("the step cache holds %s, %v %v", p, fi.Mode(), x)
				}
				return nil
			})

			got := filepath.Join(tmp, "got")
			must(t, os.Mkdir(got, 0o755))
			cp(t, base, got)
			must(t, b.restoreSteps(context.Background(), got, []string{key}))
			if diff := testenv.TreeDiff(testenv.TreeManifest(t, build, true), testenv.TreeManifest(t, got, true)); diff != "" {
				t.Errorf("the restored tree differs from the step's (the step's, then the restored):\n%s", diff)
			}
		})
	}
}
