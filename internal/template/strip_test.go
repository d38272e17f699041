package template

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/internal/testenv"
)

// capV2 is a valid security.capability value (VFS_CAP_REVISION_2,
// effective, CAP_NET_RAW permitted): what `setcap cap_net_raw+ep` writes.
var capV2 = []byte{0x01, 0x00, 0x00, 0x02, 0x00, 0x20, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

// TestStrip is part of the adversarial template suite: what a hostile
// build can leave in a root filesystem, and what Strip must make of it.
// Every case builds its own tree; out is a directory outside it, which
// Strip must never touch, however the tree points at it.
func TestStrip(t *testing.T) {
	testenv.RequiresRoot(t) // device nodes, chown-free setuid files, capabilities
	mode := func(p string) fs.FileMode {
		st, err := os.Lstat(p)
		if err != nil {
			return 0
		}
		return st.Mode()
	}
	// Modes are Unix's, set with chmod(2): os.Chmod would drop 0o4000.
	file := func(p string, m uint32) error {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o600); err != nil {
			return err
		}
		return unix.Chmod(p, m)
	}
	gone := func(p string) string {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Sprintf("%s is still there (%v): want it removed", p, mode(p))
		}
		return ""
	}
	is := func(p string, want fs.FileMode) string {
		if got := mode(p); got != want {
			return fmt.Sprintf("%s has mode %v; want %v", p, got, want)
		}
		return ""
	}
	tests := []struct {
		name  string
		make  func(root, out string) error
		check func(root, out string) string
		count StripReport
	}{
		{"setuid file", func(root, _ string) error { return file(root+"/usr/local/bin/cat", 0o4755) },
			func(root, _ string) string { return is(root+"/usr/local/bin/cat", 0o755) }, StripReport{SetID: 1}},
		{"setgid file", func(root, _ string) error { return file(root+"/usr/bin/wall", 0o2755) },
			func(root, _ string) string { return is(root+"/usr/bin/wall", 0o755) }, StripReport{SetID: 1}},
		{"setuid and setgid, not executable", func(root, _ string) error { return file(root+"/x", 0o6600) },
			func(root, _ string) string { return is(root+"/x", 0o600) }, StripReport{SetID: 1}},
		{"setgid directory, setuid file in it", func(root, _ string) error {
			if err := os.Mkdir(root+"/var", 0o755); err != nil {
				return err
			}
			if err := os.Mkdir(root+"/var/mail", 0o700); err != nil {
				return err
			}
			if err := unix.Chmod(root+"/var/mail", 0o2775); err != nil {
				return err
			}
			return file(root+"/var/mail/deep/su", 0o4711)
		}, func(root, _ string) string {
			// deep inherited the set-group-ID bit of its parent.
			return is(root+"/var/mail", fs.ModeDir|0o775) + is(root+"/var/mail/deep", fs.ModeDir|0o755) + is(root+"/var/mail/deep/su", 0o711)
		}, StripReport{SetID: 3}},
		{"setuid root directory", func(root, _ string) error { return unix.Chmod(root, 0o4755) },
			func(root, _ string) string { return is(root, fs.ModeDir|0o755) }, StripReport{SetID: 1}},
		{"sticky directory is kept", func(root, _ string) error {
			if err := os.Mkdir(root+"/tmp", 0o700); err != nil {
				return err
			}
			return unix.Chmod(root+"/tmp", 0o1777)
		}, func(root, _ string) string { return is(root+"/tmp", fs.ModeDir|fs.ModeSticky|0o777) }, StripReport{}},
		{"symlink to a setuid file outside", func(root, out string) error {
			if err := file(out+"/passwd", 0o4755); err != nil {
				return err
			}
			return os.Symlink(out+"/passwd", root+"/passwd")
		}, func(root, out string) string {
			return is(out+"/passwd", fs.ModeSetuid|0o755) + is(root+"/passwd", fs.ModeSymlink|0o777)
		}, StripReport{}},
		{"symlink to a directory outside", func(root, out string) error {
			if err := file(out+"/bin/sudo", 0o4755); err != nil {
				return err
			}
			if err := unix.Mknod(out+"/bin/null", unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
				return err
			}
			return os.Symlink(out+"/bin", root+"/bin")
		}, func(root, out string) string {
			if _, err := os.Lstat(out + "/bin/null"); err != nil {
				return "the device node outside the tree, behind a link, was removed"
			}
			return is(out+"/bin/sudo", fs.ModeSetuid|0o755) + is(root+"/bin", fs.ModeSymlink|0o777)
		}, StripReport{}},
		{"relative symlink up and out", func(root, out string) error {
			if err := file(out+"/su", 0o4755); err != nil {
				return err
			}
			rel, err := filepath.Rel(root+"/etc", out)
			if err != nil {
				return err
			}
			if err := os.Mkdir(root+"/etc", 0o755); err != nil {
				return err
			}
			return os.Symlink(rel, root+"/etc/up")
		}, func(_, out string) string { return is(out+"/su", fs.ModeSetuid|0o755) }, StripReport{}},
		{"device nodes", func(root, _ string) error {
			if err := os.Mkdir(root+"/dev", 0o755); err != nil {
				return err
			}
			if err := unix.Mknod(root+"/dev/null", unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
				return err
			}
			return unix.Mknod(root+"/dev/vda", unix.S_IFBLK|0o660, int(unix.Mkdev(254, 0)))
		}, func(root, _ string) string {
			return gone(root+"/dev/null") + gone(root+"/dev/vda") + is(root+"/dev", fs.ModeDir|0o755)
		}, StripReport{Special: 2}},
		{"fifo", func(root, _ string) error { return unix.Mkfifo(root+"/fifo", 0o666) },
			func(root, _ string) string { return gone(root + "/fifo") }, StripReport{Special: 1}},
		{"socket", func(root, _ string) error {
			l, err := net.Listen("unix", root+"/sock")
			if err != nil {
				return err
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			return l.Close()
		}, func(root, _ string) string { return gone(root + "/sock") }, StripReport{Special: 1}},
		{"file capabilities", func(root, _ string) error {
			if err := file(root+"/ping", 0o755); err != nil {
				return err
			}
			return unix.Setxattr(root+"/ping", capXattr, capV2, 0)
		}, func(root, _ string) string {
			if _, err := unix.Getxattr(root+"/ping", capXattr, make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
				return fmt.Sprintf("%s still has capabilities (%v)", root+"/ping", err)
			}
			return is(root+"/ping", 0o755)
		}, StripReport{Caps: 1}},
		{"plain files untouched", func(root, _ string) error {
			return errors.Join(file(root+"/etc/passwd", 0o644), file(root+"/usr/bin/ls", 0o755), file(root+"/etc/shadow", 0o640))
		}, func(root, _ string) string {
			return is(root+"/etc/passwd", 0o644) + is(root+"/usr/bin/ls", 0o755) + is(root+"/etc/shadow", 0o640)
		}, StripReport{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, out := filepath.Join(t.TempDir(), "rootfs"), t.TempDir()
			if err := os.Mkdir(root, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := tt.make(root, out); err != nil {
				t.Fatalf("making the tree: %v", err)
			}
			rep, err := Strip(root)
			if err != nil {
				t.Fatalf("Strip = %v", err)
			}
			if msg := tt.check(root, out); msg != "" {
				t.Error(msg)
			}
			if rep != tt.count {
				t.Errorf("Strip reported %+v; want %+v", rep, tt.count)
			}
		})
	}
}

// TestStripRefusesALinkedRoot: a root that is itself a link is not
// followed either.
func TestStripRefusesALinkedRoot(t *testing.T) {
	out := t.TempDir()
	if err := os.WriteFile(out+"/su", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(out+"/su", 0o4755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "rootfs")
	if err := os.Symlink(out, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Strip(link); err == nil {
		t.Error("Strip of a symbolic link = nil; want an error")
	}
	if st, _ := os.Stat(out + "/su"); st.Mode()&fs.ModeSetuid == 0 {
		t.Error("Strip followed the root link and cleared a setuid bit outside")
	}
}

// TestEnsureLayerStrips: a custom build (EnsureLayer) is published
// stripped, into a cache no other user may enter, and a failed strip
// publishes nothing.
func TestEnsureLayerStrips(t *testing.T) {
	testenv.RequiresRoot(t)
	cache := filepath.Join(t.TempDir(), "cache")
	rootfs, err := EnsureLayer(context.Background(), cache, "custom-strip", nil, func(ctx context.Context, rootfs string) error {
		if err := os.WriteFile(rootfs+"/su", nil, 0o600); err != nil {
			return err
		}
		if err := unix.Chmod(rootfs+"/su", 0o4755); err != nil {
			return err
		}
		return unix.Mkfifo(rootfs+"/fifo", 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(rootfs + "/su"); err != nil || st.Mode() != 0o755 {
		t.Errorf("published /su: %v, %v; want mode 0755", st.Mode(), err)
	}
	if _, err := os.Lstat(rootfs + "/fifo"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("published /fifo: %v; want it removed", err)
	}
	for _, d := range []string{cache, cache + "/templates", filepath.Dir(rootfs)} {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, %v; want 0700", d, st.Mode(), err)
		}
	}
	if st, err := os.Stat(rootfs); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("%s: %v, %v; want 0755, as / is in the sandbox", rootfs, st.Mode(), err)
	}
}

// TestSecure: a cache an older Lizard (or an operator) left open, owned by
// another user, is shut; a shared sticky directory is refused.
func TestSecure(t *testing.T) {
	testenv.RequiresRoot(t)
	cache := filepath.Join(t.TempDir(), "cache")
	build := filepath.Join(cache, "templates", "interpreter-abc")
	if err := os.MkdirAll(filepath.Join(build, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.Chmod(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(cache, "templates", "link")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{cache, filepath.Join(cache, "templates"), build} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(cache, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := Secure(cache); err != nil {
		t.Fatalf("Secure = %v", err)
	}
	for _, d := range []string{cache, filepath.Join(cache, "templates"), build} {
		st, err := os.Stat(d)
		if err != nil || st.Mode().Perm() != 0o700 || st.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
			t.Errorf("%s: %v, %v; want root's, 0700", d, st.Mode(), err)
		}
	}
	if st, _ := os.Stat(filepath.Join(build, "rootfs")); st.Mode().Perm() != 0o755 {
		t.Errorf("a build's rootfs became %v; want it kept 0755", st.Mode())
	}
	if st, _ := os.Stat(outside); st.Mode().Perm() != 0o755 {
		t.Errorf("a directory a link in the cache points to became %v; want it untouched", st.Mode())
	}

	shared := t.TempDir()
	if err := unix.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := Secure(shared); err == nil {
		t.Errorf("Secure(%s, sticky) = nil; want it refused", shared)
	}
	if st, _ := os.Stat(shared); st.Mode().Perm() != 0o777 {
		t.Errorf("the shared directory became %v; want it untouched", st.Mode())
	}
}
