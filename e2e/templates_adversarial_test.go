package e2e

// The adversarial template suite (issue 20, 1 and 5): what a template
// build leaves on the host, checked from the host. No host user but root
// may reach a file a sandbox wrote, and nothing a build leaves may be a
// privilege should one ever reach it (docs/security.md, "Custom template
// builds"). Recipe paths are checked in internal/recipe's tests, the
// stripping walk in internal/template's.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/template"
)

// Host users that are not root: nobody, and the first user account, who
// owned the interpreter template's /home/user.
var hostUsers = []int{65534, 1000}

// asHostUser runs args on the host as uid (and its gid), without
// supplementary groups, and returns its output.
func asHostUser(uid int, args ...string) (string, error) {
	full := append([]string{fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups", "--"}, args...)
	out, err := exec.Command("setpriv", full...).CombinedOutput()
	return string(out), err
}

// unreachable checks that no host user but root can list, enter, read,
// write or run what is at each path.
func unreachable(t *testing.T, paths ...string) {
	t.Helper()
	for _, uid := range hostUsers {
		for _, p := range paths {
			st, err := os.Lstat(p)
			if err != nil {
				t.Errorf("%s: %v", p, err)
				continue
			}
			var tries [][]string
			switch {
			case st.IsDir():
				tries = [][]string{{"ls", "-a", p}, {"touch", filepath.Join(p, ".e2e-planted")}, {"sh", "-c", `cd "$1"`, "sh", p}}
			case st.Mode()&0o111 != 0:
				// Run by a shell: setpriv itself execs its command
				// before its capabilities are gone, so it would reach
				// the file where the user could not.
				tries = [][]string{{"cat", p}, {"sh", "-c", `exec "$1"`, "sh", p}}
			default:
				tries = [][]string{{"cat", p}, {"sh", "-c", `: >>"$1"`, "sh", p}}
			}
			for _, args := range tries {
				if out, err := asHostUser(uid, args...); err == nil {
					t.Errorf("host uid %d ran %q: it succeeded (%.120q); want it refused", uid, args, out)
				} else if strings.Contains(out, "euid=0") {
					t.Errorf("host uid %d ran %s as root: %s", uid, p, out)
				}
			}
		}
	}
	// Nothing was planted by a check that should have failed.
	for _, p := range paths {
		os.Remove(filepath.Join(p, ".e2e-planted"))
	}
}

// noPrivileges walks rootfs (never following a link) and reports every
// set-id file or directory, device node, FIFO and socket in it.
func noPrivileges(t *testing.T, rootfs string) {
	t.Helper()
	var bad []string
	err := filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info() // lstat
		if err != nil {
			return err
		}
		m := info.Mode()
		if m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
			bad = append(bad, fmt.Sprintf("%s %v", strings.TrimPrefix(p, rootfs), m))
		}
		return nil
	})
	if err != nil {
		t.Errorf("walking %s: %v", rootfs, err)
	}
	if len(bad) > 0 {
		t.Errorf("%s holds %d set-id files, device nodes, FIFOs or sockets; want none:\n%s", rootfs, len(bad), strings.Join(bad, "\n"))
	}
}

// TestAdversarialTemplateBuild builds a recipe that leaves the host all it
// can: a copy of id(1) made setuid root, a setgid one, a setuid one of the
// sandbox user's, a setgid directory, device nodes (if gVisor lets it make
// them), a FIFO, a socket and a link to /etc/shadow. The server's data
// directory was made 0755 beforehand, as an operator might. From the host:
// nobody and uid 1000 can reach neither the data directory, the template
// cache, the build nor its files (they cannot run the setuid copy as
// root); root finds no set-id file or special file in the build; the link
// is left as a link and /etc/shadow as it was. A sandbox of the template
// still boots, and its user is not root by the copy either.
func TestAdversarialTemplateBuild(t *testing.T) {
	// A data directory where host users can reach it, as an operator might
	// make one: the server must shut it at start.
	dataDir, err := os.MkdirTemp("", "lizard-e2e-open-data-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dataDir) })
	if err := os.Mkdir(filepath.Join(dataDir, "volumes"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dataDir, filepath.Join(dataDir, "volumes")} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var shadow syscall.Stat_t
	if err := syscall.Stat("/etc/shadow", &shadow); err != nil {
		t.Fatal(err)
	}

	s := startServerIn(t, dataDir)
	c := s.createProject("proj_evil_tpl")
	ctx := context.Background()
	nonce := make([]byte, 6)
	rand.Read(nonce)
	req := api.BuildTemplateRequest{Name: "e2e-evil", Recipe: api.TemplateRecipe{
		Files: []api.TemplateFile{{Path: "/home/user/nonce", Content: base64.StdEncoding.EncodeToString([]byte(hex.EncodeToString(nonce)))}},
		Run: []api.TemplateCommand{
			{Cmd: `cp /usr/bin/id /usr/local/bin/e2e-suid && chmod 4755 /usr/local/bin/e2e-suid
cp /usr/bin/id /usr/local/bin/e2e-sgid && chown root:shadow /usr/local/bin/e2e-sgid && chmod 2755 /usr/local/bin/e2e-sgid
mkdir -p /opt/e2e/sgid-dir && chmod 2777 /opt/e2e/sgid-dir
mknod /opt/e2e/null c 1 3 && echo made-char-device || echo char-device-refused
mknod /opt/e2e/vda b 254 0 && echo made-block-device || echo block-device-refused
mkfifo /opt/e2e/fifo
python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("/opt/e2e/sock")'
ln -s /etc/shadow /opt/e2e/shadow
ls -la /usr/local/bin /opt/e2e`},
			{Cmd: "cp /usr/bin/id /home/user/e2e-suid && chmod 4755 /home/user/e2e-suid", User: "user"},
		},
	}}
	tpl, _, _, err := buildTemplate(t, c, req)
	if err != nil {
		t.Fatalf("building the template: %v\n%s", err, s.logs())
	}
	build := filepath.Join(cacheDir(), "templates", "custom-"+tpl.Key)
	rootfs := filepath.Join(build, "rootfs")

	// As root: nothing in the build is a privilege.
	noPrivileges(t, rootfs)
	for _, p := range []string{"usr/local/bin/e2e-suid", "usr/local/bin/e2e-sgid", "home/user/e2e-suid"} {
		if st, err := os.Lstat(filepath.Join(rootfs, p)); err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o755 {
			t.Errorf("/%s in the build: %v, %v; want the copy kept as a plain 0755 file", p, st, err)
		}
	}
	if target, err := os.Readlink(filepath.Join(rootfs, "opt/e2e/shadow")); err != nil || target != "/etc/shadow" {
		t.Errorf("the build's link to /etc/shadow = %q, %v; want it left a link", target, err)
	}
	var now syscall.Stat_t
	if err := syscall.Stat("/etc/shadow", &now); err != nil || now.Mode != shadow.Mode || now.Uid != shadow.Uid || now.Gid != shadow.Gid {
		t.Errorf("the host's /etc/shadow changed: mode %o uid %d gid %d, was %o %d %d", now.Mode, now.Uid, now.Gid, shadow.Mode, shadow.Uid, shadow.Gid)
	}

	// As nobody and uid 1000: nothing of it, nor of the data directory.
	unreachable(t, cacheDir(), filepath.Join(cacheDir(), "templates"), build, rootfs,
		filepath.Join(rootfs, "usr/local/bin/e2e-suid"), filepath.Join(rootfs, "home/user/e2e-suid"),
		filepath.Join(rootfs, "tmp"), filepath.Join(rootfs, "etc/passwd"),
		dataDir, filepath.Join(dataDir, "volumes"), filepath.Join(dataDir, "gvisor"))
	for _, d := range []string{cacheDir(), filepath.Join(cacheDir(), "templates"), build, dataDir, filepath.Join(dataDir, "volumes"), filepath.Join(dataDir, "gvisor")} {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o700 || st.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s: %v, %v; want a directory of root's, 0700", d, st.Mode(), err)
		}
	}

	// The template still boots; in it the copies are not set-id either.
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "e2e-evil"})
	if err != nil {
		t.Fatalf("creating a sandbox of the stripped template: %v\n%s", err, s.logs())
	}
	res, err := c.Exec(ctx, sb.SandboxID, api.ProcessRequest{Cmd: "/usr/local/bin/e2e-suid -u; cat /home/user/nonce; ls /opt/e2e; test -c /dev/null && echo dev-null-ok"}, nil)
	if want := "1000\n" + hex.EncodeToString(nonce) + "sgid-dir\nshadow\ndev-null-ok\n"; err != nil || res.Stdout != want {
		t.Errorf("in a sandbox of the template: %+v, %v; want stdout %q", res, err, want)
	}
	if err := c.KillSandbox(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if err := c.Templates().Delete(ctx, "e2e-evil"); err != nil {
		t.Fatalf("deleting the template: %v", err)
	}
	if left := cacheEntries(tpl.Key); len(left) > 0 {
		t.Errorf("the deleted template's build is still in the cache: %v", left)
	}
	s.stopAndExpectNothingLeft(t)
}

// TestAdversarialTemplateInterpreter checks the interpreter template, built
// on the host by debootstrap and its recipe, from the host: no set-id file
// (Debian ships gpasswd, unix_chkpwd, ...) nor device node in it, and
// neither nobody nor uid 1000, whose uid owns the template's /home/user and
// venv, can reach it to plant a file another project's sandbox would see.
func TestAdversarialTemplateInterpreter(t *testing.T) {
	rootfs, err := template.Ensure(context.Background(), cacheDir(), template.Default, nil)
	if err != nil {
		t.Fatalf("building the interpreter template: %v", err)
	}
	noPrivileges(t, rootfs)
	unreachable(t, cacheDir(), filepath.Join(cacheDir(), "templates"), filepath.Dir(rootfs), rootfs,
		filepath.Join(rootfs, "home/user"), filepath.Join(rootfs, "opt/lizard/venv"), filepath.Join(rootfs, "opt/lizard/venv/bin/python3"),
		filepath.Join(rootfs, "tmp"), filepath.Join(rootfs, "var/tmp"), filepath.Join(rootfs, "run/lock"),
		filepath.Join(rootfs, "usr/bin/gpasswd"), filepath.Join(rootfs, "etc/passwd"))
	// The sandbox user still owns its home and venv in the template.
	for _, p := range []string{"home/user", "opt/lizard/venv"} {
		if st, err := os.Stat(filepath.Join(rootfs, p)); err != nil || st.Sys().(*syscall.Stat_t).Uid != 1000 {
			t.Errorf("/%s in the template: %v; want it the sandbox user's (uid 1000)", p, err)
		}
	}
}
