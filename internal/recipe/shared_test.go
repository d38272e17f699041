package recipe

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/imagestore/disk"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
	"github.com/lizard-build/lizard/internal/testenv"
)

// TestExportApply: a build's difference from its base, through the image
// store (owners, modes, the sticky bit and times kept), applied to a copy
// of the base, gives the build's tree; and it holds only what changed.
func TestExportApply(t *testing.T) {
	testenv.RequiresRoot(t)
	tmp := t.TempDir()
	base := filepath.Join(tmp, "base")
	write := func(root, rel, data string, mode fs.FileMode, uid int) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	write(base, "usr/lib/python/mod.py", "x = 1\n", 0o644, 0)
	write(base, "usr/lib/python/big.bin", strings.Repeat("b", 1<<20), 0o644, 0)
	write(base, "etc/gone.conf", "old\n", 0o644, 0)
	write(base, "opt/tool/bin/run", "#!/bin/sh\n", 0o755, 0)
	write(base, "home/user/.profile", "PATH=$PATH\n", 0o644, 1000)
	must(t, os.Symlink("python", filepath.Join(base, "usr/lib/py")))
	must(t, os.Mkdir(filepath.Join(base, "tmp"), 0o755))
	must(t, os.Chmod(filepath.Join(base, "tmp"), 0o777|fs.ModeSticky))

	build := filepath.Join(tmp, "build")
	must(t, os.Mkdir(build, 0o755))
	cp(t, base, build)
	write(build, "home/user/data/hello.txt", "hello\n", 0o640, 1000)
	write(build, "usr/lib/python/mod.py", "x = 2\n", 0o644, 0) // same size
	must(t, os.Remove(filepath.Join(build, "etc/gone.conf")))
	must(t, os.RemoveAll(filepath.Join(build, "opt/tool")))
	must(t, os.Symlink("/usr/bin", filepath.Join(build, "opt/tool"))) // a directory became a link
	must(t, os.Remove(filepath.Join(build, "usr/lib/py")))
	must(t, os.Symlink("python3", filepath.Join(build, "usr/lib/py")))

	exported := filepath.Join(tmp, "exported")
	must(t, os.Mkdir(exported, 0o700))
	if err := Export(build, sandbox.Artifact{Name: "base", Key: "base-1", RootFS: base}, exported); err != nil {
		t.Fatalf("Export: %v", err)
	}
	if _, err := os.Stat(filepath.Join(exported, "rootfs/usr/lib/python/big.bin")); err == nil {
		t.Errorf("an unchanged file was exported")
	}
	deleted, _ := os.ReadFile(filepath.Join(exported, "deleted"))
	if got, want := strings.ReplaceAll(string(deleted), "\x00", " "), "etc/gone.conf opt/tool "; got != want {
		t.Errorf("deleted = %q; want %q", got, want)
	}

	st := imagestore.New(&disk.Bucket{Root: filepath.Join(tmp, "store")}, testImageKey(t))
	ctx := context.Background()
	if _, err := st.Put(ctx, ImageName("k"), exported); err != nil {
		t.Fatal(err)
	}
	fetched := filepath.Join(tmp, "fetched")
	if _, err := st.Get(ctx, ImageName("k"), fetched); err != nil {
		t.Fatal(err)
	}
	got := filepath.Join(tmp, "got")
	must(t, os.Mkdir(got, 0o755))
	if err := apply(ctx, base, fetched, got); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if a, b := tree(t, build), tree(t, got); a != b {
		t.Errorf("applied tree differs from the build:\nbuild:\n%s\napplied:\n%s", a, b)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func cp(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", from+"/.", to+"/").CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
}

// tree describes every entry under root: type and mode, owner, content
// or link target, and a file's time.
func tree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		fmt.Fprintf(&b, "%s %v %d:%d", rel, fi.Mode(), st.Uid, st.Gid)
		switch {
		case fi.Mode().IsRegular():
			data, _ := os.ReadFile(p)
			fmt.Fprintf(&b, " %q %d", data[:min(len(data), 16)], fi.ModTime().UnixNano())
		case fi.Mode().Type() == fs.ModeSymlink:
			l, _ := os.Readlink(p)
			fmt.Fprintf(&b, " -> %s", l)
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestApplyHostile: a published build is whatever the image store holds.
// Applied on a base whose copy has links to absolute paths (var/run ->
// /run, etc/alternatives/*), which name the host's files, it must not
// remove, write or chmod anything outside the root filesystem it makes.
func TestApplyHostile(t *testing.T) {
	testenv.RequiresRoot(t)
	tmp := t.TempDir()
	host := filepath.Join(tmp, "host")
	must(t, os.MkdirAll(filepath.Join(host, "run"), 0o700))
	victim := filepath.Join(host, "run", "victim")
	must(t, os.WriteFile(victim, []byte("host"), 0o600))
	base := filepath.Join(tmp, "base")
	must(t, os.MkdirAll(filepath.Join(base, "var"), 0o755))
	must(t, os.MkdirAll(filepath.Join(base, "etc"), 0o755))
	must(t, os.Symlink(filepath.Join(host, "run"), filepath.Join(base, "var/run")))
	must(t, os.Symlink(victim, filepath.Join(base, "etc/alt")))

	for _, tc := range []struct {
		name    string
		deleted string
		files   map[string]string // under rootfs/; a name ending in / is a directory, "->x" a link to x
		ok      bool
	}{
		{name: "deleted below a link", deleted: "var/run/victim"},
		{name: "deleted out of the tree", deleted: "../host/run/victim"},
		{name: "file over a link", files: map[string]string{"etc/alt": "pwned"}},
		{name: "directory over a link", files: map[string]string{"var/run/": "", "var/run/victim2": "pwned"}},
		{name: "link changed", files: map[string]string{"etc/alt": "->/usr/bin/python3"}, ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			must(t, os.WriteFile(victim, []byte("host"), 0o600))
			img := t.TempDir()
			must(t, os.WriteFile(filepath.Join(img, "deleted"), []byte(tc.deleted), 0o600))
			must(t, os.MkdirAll(filepath.Join(img, "rootfs/var"), 0o755))
			must(t, os.MkdirAll(filepath.Join(img, "rootfs/etc"), 0o755))
			for _, name := range []string{"var/run/", "var/run/victim2", "etc/alt"} { // parents first
				data, ok := tc.files[name]
				p := filepath.Join(img, "rootfs", name)
				switch {
				case !ok:
				case strings.HasSuffix(name, "/"):
					must(t, os.Mkdir(p, 0o777))
				case strings.HasPrefix(data, "->"):
					must(t, os.Symlink(data[2:], p))
				default:
					must(t, os.WriteFile(p, []byte(data), 0o4755))
				}
			}
			got := t.TempDir()
			err := apply(context.Background(), base, img, got)
			if tc.ok && err != nil || !tc.ok && !errors.Is(err, imagestore.ErrCorrupt) {
				t.Errorf("apply: %v; want ok %v, else ErrCorrupt", err, tc.ok)
			}
			ents, _ := os.ReadDir(filepath.Join(host, "run"))
			fi, _ := os.Stat(filepath.Join(host, "run"))
			if b, _ := os.ReadFile(victim); string(b) != "host" || len(ents) != 1 || fi.Mode().Perm() != 0o700 {
				t.Fatalf("apply touched the host: victim %q, %v, mode %v", b, ents, fi.Mode())
			}
		})
	}
}

// TestSweepUnused: at a node's start, a build in its cache that no
// template row, live sandbox (of any node) or snapshot refers to is
// removed; one with a row, or referred to by a paused sandbox or a
// snapshot, is kept.
func TestSweepUnused(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	must(t, st.CreateProject(ctx, "p1", time.Now()))
	cache := t.TempDir()
	s := &Shared{Builder: New(Config{CacheDir: cache, Store: st}), Log: slog.New(slog.DiscardHandler)}
	const (
		row    = "00000000000000a1"
		paused = "00000000000000a2"
		snap   = "00000000000000a3"
		none   = "00000000000000a4"
		ended  = "00000000000000a5"
		warm   = "00000000000000a6"
	)
	for _, k := range []string{row, paused, snap, none, ended, warm} {
		must(t, os.MkdirAll(filepath.Join(cache, "templates", LayerKey(k), "rootfs"), 0o700))
	}
	must(t, st.Templates().Put(ctx, store.Template{ProjectID: "p1", Name: "t", Key: row, Base: "default", Recipe: "{}", CreatedAt: time.Now()}))
	addrs := func(int) (string, string) { return "10.0.0.1", "10.0.0.2" }
	now := time.Now()
	mk := func(id, key, role string) {
		t.Helper()
		// On another node: the rules are the cluster's, not this node's.
		sb := store.Sandbox{ID: id, ProjectID: "p1", Template: template.Ref("t", key), State: "running", CreatedAt: now, Role: role}
		must(t, st.OnNode("n2").CreateSandbox(ctx, &sb, 10, addrs))
	}
	mk("sb-paused", paused, "")
	must(t, st.PauseSandbox(ctx, "sb-paused", "/data/images/sb-paused", nil, now, true))
	mk("sb-ended", ended, "")
	must(t, st.EndSandbox(ctx, "sb-ended", "killed", "", now))
	mk("sb-warm", warm, "warm")
	must(t, st.CreateSnapshot(ctx, store.Snapshot{ID: "sn-1", ProjectID: "p1", SandboxID: "sb-ended", Template: template.Ref("t", snap),
		CreatedAt: now, ImageDir: "n2:/data/snapshots/sn-1"}))

	if err := s.SweepUnused(ctx, st); err != nil {
		t.Fatalf("SweepUnused: %v", err)
	}
	for k, kept := range map[string]bool{row: true, paused: true, snap: true, none: false, ended: false, warm: false} {
		_, err := os.Stat(filepath.Join(cache, "templates", LayerKey(k)))
		if got := err == nil; got != kept {
			t.Errorf("build %s kept %v (%v); want %v", k, got, err, kept)
		}
	}
}

// testImageKey is an image store key for a test.
func testImageKey(t *testing.T) *imagestore.Key {
	secret := make([]byte, 32)
	rand.Read(secret)
	k, err := imagestore.NewKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
