package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// volumeMounts are the host's mounts under dir, with their options.
func volumeMounts(t *testing.T, dir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && strings.HasPrefix(f[1], dir+"/") {
			out[f[1]] = f[3]
		}
	}
	return out
}

// TestVolumes is the life of a persistent volume: made, mounted by two
// sandboxes at once (each sees the other's writes), full at its size,
// kept across kill, pause and resume, fork (the copies share it), a
// server restart (a paused sandbox using it resumes after), refused as a
// snapshot and as a delete while mounted, and gone once deleted.
func TestVolumes(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_vol")
	ctx := context.Background()
	volDir := filepath.Join(s.dataDir, "volumes")

	v, err := c.Volumes().Create(ctx, api.CreateVolumeRequest{Name: "data", SizeMb: 32})
	if err != nil {
		t.Fatalf("Volumes().Create: %v", err)
	}
	if v.SizeMb != 32 || v.Name != "data" || !strings.HasPrefix(v.VolumeID, "vol_") {
		t.Fatalf("Volumes().Create = %+v; want data of 32 MiB", v)
	}
	if _, err := c.Volumes().Create(ctx, api.CreateVolumeRequest{Name: "data"}); !errors.Is(err, client.ErrConflict) {
		t.Errorf("Volumes().Create of a taken name: %v; want 409", err)
	}
	if vs, err := c.Volumes().List(ctx); err != nil || len(vs) != 1 || vs[0].VolumeID != v.VolumeID {
		t.Errorf("Volumes().List = %+v, %v; want data alone", vs, err)
	}
	opts := volumeMounts(t, volDir)[filepath.Join(volDir, v.VolumeID)]
	if !strings.Contains(opts, "nodev") || !strings.Contains(opts, "nosuid") {
		t.Errorf("volume mounted on the host with %q; want nodev and nosuid", opts)
	}

	mount := []api.VolumeMount{{Name: "data", Path: "/home/user/data"}}
	a := newSandbox(t, c, api.CreateSandboxRequest{Volumes: mount})
	if len(a.Volumes) != 1 || a.Volumes[0] != (api.SandboxVolume{Name: "data", Path: "/home/user/data"}) {
		t.Errorf("created sandbox's volumes = %+v; want %+v", a.Volumes, mount)
	}
	b := newSandbox(t, c, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "data", Path: "/mnt/shared"}}})
	// runsc makes a missing mount point in the root filesystem's host
	// directory, the template every sandbox shares: the runtime removes
	// it again, or every later sandbox would see an empty data/.
	if m := regexp.MustCompile(`msg="template ready" template=interpreter rootfs=(\S+)`).FindStringSubmatch(s.logs()); m == nil {
		t.Errorf("no template rootfs in the server's log")
	} else {
		for _, p := range []string{"home/user/data", "mnt/shared"} {
			if _, err := os.Lstat(filepath.Join(m[1], p)); err == nil {
				t.Errorf("the shared template gained /%s, a volume's mount point", p)
			}
		}
	}
	py(t, c, a.SandboxID, "open('/home/user/data/a.txt', 'w').write('from a')")
	if got := py(t, c, b.SandboxID, "print(open('/mnt/shared/a.txt').read())"); got != "from a" {
		t.Errorf("sandbox b read %q from the shared volume; want a's write", got)
	}
	py(t, c, b.SandboxID, "open('/mnt/shared/b.txt', 'w').write('from b')")
	if got := py(t, c, a.SandboxID, "print(open('/home/user/data/b.txt').read())"); got != "from b" {
		t.Errorf("sandbox a read %q; want b's write", got)
	}

	// The quota is the filesystem's: 32 MiB, whatever the sandbox does.
	got := py(t, c, a.SandboxID, `
import errno
try:
    with open('/home/user/data/big', 'wb') as f:
        for _ in range(64):
            f.write(b'x' * (1 << 20))
            f.flush()
    print('wrote 64 MiB')
except OSError as e:
    print('errno', errno.errorcode[e.errno])
import os
os.remove('/home/user/data/big')`)
	if got != "errno ENOSPC" {
		t.Errorf("writing 64 MiB to a 32 MiB volume: %q; want ENOSPC", got)
	}

	// Refusals while mounted, and the snapshot rule.
	if err := c.Volumes().Delete(ctx, "data"); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), a.SandboxID) {
		t.Errorf("Volumes().Delete while mounted: %v; want 409 naming the sandboxes", err)
	}
	if _, err := c.Snapshot(ctx, a.SandboxID); !errors.Is(err, client.ErrConflict) {
		t.Errorf("Snapshot of a sandbox with a volume: %v; want 409", err)
	}

	// Pause: the volume is not in the image and is attached again at
	// resume; b writes meanwhile.
	if _, err := c.PauseSandbox(ctx, a.SandboxID); err != nil {
		t.Fatalf("PauseSandbox: %v", err)
	}
	py(t, c, b.SandboxID, "open('/mnt/shared/while-paused.txt', 'w').write('b wrote while a slept')")
	if _, err := c.ResumeSandbox(ctx, a.SandboxID, api.ResumeRequest{}); err != nil {
		t.Fatalf("ResumeSandbox: %v", err)
	}
	if got := py(t, c, a.SandboxID, "print(open('/home/user/data/while-paused.txt').read())"); got != "b wrote while a slept" {
		t.Errorf("after resume a read %q; want b's write made while it was paused", got)
	}
	py(t, c, a.SandboxID, "open('/home/user/data/after-resume.txt', 'w').write('resumed')")
	if got := py(t, c, b.SandboxID, "print(open('/mnt/shared/after-resume.txt').read())"); got != "resumed" {
		t.Errorf("b read %q; want a's write after its resume (the volume re-attached)", got)
	}

	// Fork: the copies mount the same volume.
	forks, err := c.Fork(ctx, a.SandboxID, api.ForkRequest{})
	if err != nil {
		t.Fatalf("ForkSandbox: %v", err)
	}
	f := forks[0]
	t.Cleanup(func() { c.KillSandbox(context.Background(), f.SandboxID) })
	py(t, c, f.SandboxID, "open('/home/user/data/fork.txt', 'w').write('from the fork')")
	if got := py(t, c, b.SandboxID, "print(open('/mnt/shared/fork.txt').read())"); got != "from the fork" {
		t.Errorf("b read %q; want the fork's write", got)
	}

	// Kill all, then the next sandbox finds everything; pause it across
	// a server restart.
	for _, id := range []string{a.SandboxID, b.SandboxID, f.SandboxID} {
		if err := c.KillSandbox(ctx, id); err != nil {
			t.Fatalf("KillSandbox %s: %v", id, err)
		}
	}
	d := newSandbox(t, c, api.CreateSandboxRequest{Volumes: mount})
	if got := py(t, c, d.SandboxID, "import os; print(sorted(os.listdir('/home/user/data')))"); got != "['a.txt', 'after-resume.txt', 'b.txt', 'fork.txt', 'while-paused.txt']" {
		t.Errorf("the next sandbox lists %s in the volume; want every file written before", got)
	}
	if _, err := c.PauseSandbox(ctx, d.SandboxID); err != nil {
		t.Fatalf("PauseSandbox: %v", err)
	}
	// e keeps running across the restart: its volume stays mounted.
	e := newSandbox(t, c, api.CreateSandboxRequest{Volumes: mount})
	s.restart()
	py(t, c, e.SandboxID, "open('/home/user/data/across-restart.txt', 'w').write('still here')")
	if _, err := c.ResumeSandbox(ctx, d.SandboxID, api.ResumeRequest{}); err != nil {
		t.Fatalf("ResumeSandbox after a restart: %v", err)
	}
	if got := py(t, c, d.SandboxID, "print(open('/home/user/data/a.txt').read(), open('/home/user/data/across-restart.txt').read())"); got != "from a still here" {
		t.Errorf("after a restart and resume the volume holds %q; want a's file and e's, written after the restart", got)
	}
	for _, id := range []string{d.SandboxID, e.SandboxID} {
		if err := c.KillSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	// Deleted: the record, the mount and the image go.
	if err := c.Volumes().Delete(ctx, "data"); err != nil {
		t.Fatalf("Volumes().Delete once unmounted: %v", err)
	}
	if _, err := c.Volumes().Get(ctx, "data"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Volumes().Get after delete: %v; want 404", err)
	}
	if m := volumeMounts(t, volDir); len(m) != 0 {
		t.Errorf("mounts left after delete: %v", m)
	}
	if left, _ := os.ReadDir(volDir); len(left) != 0 {
		t.Errorf("files left under %s after delete: %v", volDir, left)
	}
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: mount}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("create mounting a deleted volume: %v; want 404", err)
	}
}

// TestVolumesAdversarial: what a sandbox puts in a volume, or asks for at
// create, never reaches the host: bad names and paths are refused,
// symlinks resolve inside the sandbox, device nodes cannot be made (and
// the host mount would not honour them), and the host's files next to
// the volume stay out of reach.
func TestVolumesAdversarial(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_voladv")
	ctx := context.Background()
	for _, name := range []string{"../etc", "a/b", "..", "UPPER", "", strings.Repeat("x", 64)} {
		if _, err := c.Volumes().Create(ctx, api.CreateVolumeRequest{Name: name}); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("Volumes().Create(%q): %v; want 400", name, err)
		}
	}
	for _, mb := range []int64{1, 1 << 30} {
		if _, err := c.Volumes().Create(ctx, api.CreateVolumeRequest{Name: "big", SizeMb: mb}); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("Volumes().Create of %d MiB: %v; want 400", mb, err)
		}
	}
	if _, err := c.Volumes().Create(ctx, api.CreateVolumeRequest{Name: "v", SizeMb: 16}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/home/user/../../etc", "relative", "/", "/proc/x", "/opt/lizard/bin", "/tmp", "/etc", "/home/user/data/", "/home//user"} {
		_, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "v", Path: p}}})
		if !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("mount at %q: %v; want 400", p, err)
		}
	}
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "../../v", Path: "/mnt/v"}}}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("mount of volume ../../v: %v; want 400", err)
	}
	// Another project's volume of the same name is not this one's.
	other := s.createProject("proj_voladv2")
	if _, err := other.CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "v", Path: "/mnt/v"}}}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("another project mounting v: %v; want 404", err)
	}

	// The CLI: create, list, delete.
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(s.bin, args...)
		cmd.Env = append(os.Environ(), "LIZARD_API_URL="+s.url, "LIZARD_API_KEY="+s.keys[c])
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("lizard %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	cli("volume", "create", "clivol", "--size-mb", "16")
	if out := cli("volume", "list"); !strings.Contains(out, "clivol") || !strings.Contains(out, "16 MiB") {
		t.Errorf("lizard volume list = %q; want clivol of 16 MiB", out)
	}
	cli("volume", "delete", "clivol")

	secret := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(secret, []byte("HOST-SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(s.dataDir, "lizard.db")
	sb := newSandbox(t, c, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "v", Path: "/home/user/v"}}})
	got := py(t, c, sb.SandboxID, `
import os, stat
d = '/home/user/v'
os.symlink(`+pyQuote(secret)+`, d + '/to-secret')
os.symlink('../../../../../../../../`+strings.TrimPrefix(db, "/")+`', d + '/to-db')
os.symlink('/etc/hostname', d + '/to-etc')
out = []
for name in ('to-secret', 'to-db'):
    try:
        out.append(name + ':' + open(d + '/' + name, 'rb').read(16).decode('latin1'))
    except OSError as e:
        out.append(name + ':' + type(e).__name__)
out.append('etc:' + open(d + '/to-etc').read().strip())
try:
    os.mknod(d + '/null', 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    out.append('mknod:made')
except OSError as e:
    out.append('mknod:' + type(e).__name__)
try:
    os.link('/etc/passwd', d + '/passwd-link')
    out.append('link:made')
except OSError as e:
    out.append('link:' + type(e).__name__)
print(' '.join(out))`)
	t.Logf("inside the sandbox: %s", got)
	if strings.Contains(got, "HOST-SECRET") || strings.Contains(got, "SQLite") {
		t.Fatalf("a symlink in the volume reached the host's files: %s", got)
	}
	if !strings.Contains(got, "to-secret:FileNotFoundError") || !strings.Contains(got, "to-db:FileNotFoundError") || !strings.Contains(got, "etc:lizard") {
		t.Errorf("symlinks in the volume: %s; want host paths not found and /etc/hostname the sandbox's own", got)
	}
	if strings.Contains(got, "mknod:made") || strings.Contains(got, "link:made") {
		t.Errorf("device node or cross-filesystem hard link made in the volume: %s", got)
	}
	// Through the files API too: the agent resolves paths in the sandbox.
	if rc, err := c.ReadFile(ctx, sb.SandboxID, "/home/user/v/to-secret"); err == nil {
		b := make([]byte, 64)
		n, _ := rc.Read(b)
		rc.Close()
		if strings.Contains(string(b[:n]), "HOST-SECRET") {
			t.Fatalf("the files API read the host's file through a symlink in a volume")
		}
	}
	// The host never follows what the sandbox put there: the links are
	// links on the host side too, pointing at paths the server never opens.
	v, _ := c.Volumes().Get(ctx, "v")
	if fi, err := os.Lstat(filepath.Join(s.dataDir, "volumes", v.VolumeID, "to-secret")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("host view of the link: %v %v; want a symlink left as it is", fi, err)
	}
	if err := c.KillSandbox(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if err := c.Volumes().Delete(ctx, "v"); err != nil {
		t.Errorf("Volumes().Delete: %v", err)
	}
	if b, _ := os.ReadFile(secret); string(b) != "HOST-SECRET" {
		t.Errorf("the host file changed: %q", b)
	}
}

func pyQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }

// apiError is err's API error, or a failure of the test.
func apiError(t *testing.T, what string, err error) *client.Error {
	t.Helper()
	var ae *client.Error
	if !errors.As(err, &ae) {
		t.Fatalf("%s: %v; want an API error", what, err)
	}
	return ae
}

// sameFile reports whether the sandbox's file at path has the host file
// host's SHA-256.
func sameFile(t *testing.T, c *client.Client, id, path, host string) bool {
	t.Helper()
	b, err := os.ReadFile(host)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	got := py(t, c, id, "import hashlib; print(hashlib.sha256(open("+pyQuote(path)+", 'rb').read()).hexdigest())")
	return got == hex.EncodeToString(sum[:])
}

// TestVolumesAdversarialPaths: a volume is refused, with a 400 that names
// the path, where it would hide what the sandbox's system or Lizard
// needs — a volume at /opt held a lizard/bin/lizard-agent of the caller's,
// which ran as root — and at paths that are not clean. Paths that only
// resemble reserved ones work, and so does the user's home.
func TestVolumesAdversarialPaths(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_volpaths")
	ctx := context.Background()
	for _, name := range []string{"v", "w"} {
		if _, err := c.Volumes().Create(ctx, api.CreateVolumeRequest{Name: name, SizeMb: 16}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/opt", "/", "/opt/lizard/..", "/opt/lizard/../lizard", "/opt/lizard/.", "//opt/lizard", "/opt/lizard/",
		"/usr/local", "/home/user/../../opt", "/opt/lizard/bin/lizard-agent", "/usr/local/bin/lizard", "/mnt/a\nb",
		"/mnt/" + strings.Repeat("x", 300)} {
		_, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "v", Path: p}}})
		if !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("mount at %q: %v; want 400", p, err)
			continue
		}
		if msg := apiError(t, "mount at "+p, err).Message; !strings.Contains(msg, fmt.Sprintf("%q", p)) {
			t.Errorf("mount at %q: message %q does not name the path", p, msg)
		}
	}

	agent := filepath.Join(filepath.Dir(s.bin), "lizard-agent")
	sb := newSandbox(t, c, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "v", Path: "/optx"}, {Name: "w", Path: "/home/user/opt"}}})
	py(t, c, sb.SandboxID, "open('/optx/a', 'w').write('x'); open('/home/user/opt/b', 'w').write('y')")
	if got := execOK(t, c, sb.SandboxID, "id", "-u"); strings.TrimSpace(got) != "1000" {
		t.Errorf("code runs as uid %q; want 1000", got)
	}
	if !sameFile(t, c, sb.SandboxID, "/opt/lizard/bin/lizard-agent", agent) {
		t.Errorf("the sandbox's /opt/lizard/bin/lizard-agent is not the host's agent")
	}
	if err := c.KillSandbox(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}

	// The home itself: the volume is the home, the agent still answers.
	home := newSandbox(t, c, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "v", Path: "/home/user"}}})
	if got := py(t, c, home.SandboxID, "import os; print(os.getcwd(), sorted(f for f in os.listdir('.') if not f.startswith('.')))"); got != "/home/user ['a']" {
		t.Errorf("a sandbox with a volume at /home/user: %q; want the volume as its working directory", got)
	}
	if err := c.KillSandbox(ctx, home.SandboxID); err != nil {
		t.Fatal(err)
	}
}

// TestVolumesAdversarialBounds: a project's volumes are bounded in number
// and in size added up, and the disk it is promised (sandboxes' diskMb
// and volumes) too: each refusal is a 429 that names the bound and how
// to make room, and a delete makes it.
func TestVolumesAdversarialBounds(t *testing.T) {
	s := startServer(t, "--max-volumes-per-project", "2", "--max-volume-total-mb", "128", "--disk-mb", "512", "--max-disk-per-project-mb", "600")
	c := s.createProject("proj_volbounds")
	ctx := context.Background()
	mk := func(name string, mb int64) error {
		_, err := c.Volumes().Create(ctx, api.CreateVolumeRequest{Name: name, SizeMb: mb})
		return err
	}
	refused := func(what string, err error, words ...string) {
		t.Helper()
		if !errors.Is(err, client.ErrRateLimited) {
			t.Errorf("%s: %v; want 429", what, err)
			return
		}
		for _, w := range words {
			if msg := apiError(t, what, err).Message; !strings.Contains(msg, w) {
				t.Errorf("%s: message %q; want it to say %q", what, msg, w)
			}
		}
	}
	// A sandbox of 512 MiB, then volumes within 600 MiB promised.
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	for _, name := range []string{"a", "b"} {
		if err := mk(name, 16); err != nil {
			t.Fatal(err)
		}
	}
	refused("a third volume", mk("c", 16), "2 volumes", "--max-volumes-per-project", "delete one")
	if err := c.Volumes().Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	refused("volumes of 144 MiB in all", mk("b", 128), "--max-volume-total-mb", "delete a volume")
	refused("a volume past the disk promised", mk("b", 112), "528 MiB", "--max-disk-per-project-mb", "kill sandboxes or delete volumes")
	if err := mk("b", 72); err != nil {
		t.Fatalf("a volume filling the disk promised exactly, after a delete: %v", err)
	}
	if vs, err := c.Volumes().List(ctx); err != nil || len(vs) != 2 {
		t.Errorf("Volumes().List = %d, %v; want 2", len(vs), err)
	}
	_, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	refused("a second sandbox of 512 MiB", err, "600 MiB", "--max-disk-per-project-mb", "kill sandboxes or delete volumes")
	_, err = c.Fork(ctx, sb.SandboxID, api.ForkRequest{})
	refused("a fork of 512 MiB", err, "--max-disk-per-project-mb")
	if err := c.KillSandbox(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	next := newSandbox(t, c, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "a", Path: "/home/user/a"}}})
	py(t, c, next.SandboxID, "open('/home/user/a/x', 'w').write('fits')")
}

// TestVolumesAdversarialHostDisk: volumes are sparse, so any size would
// be made at once; a volume the disk of the data directory could not
// hold, beside what the server keeps free, is refused with a 507 that
// says so, and nothing is left.
func TestVolumesAdversarialHostDisk(t *testing.T) {
	s := startServer(t, "--max-volume-mb", "16777216", "--max-volume-total-mb", "0", "--max-disk-per-project-mb", "0")
	c := s.createProject("proj_voldisk")
	var fs unix.Statfs_t
	if err := unix.Statfs(s.dataDir, &fs); err != nil {
		t.Fatal(err)
	}
	mb := int64(fs.Bavail)*fs.Bsize>>20 + 1024
	_, err := c.Volumes().Create(context.Background(), api.CreateVolumeRequest{Name: "huge", SizeMb: mb})
	if err == nil {
		c.Volumes().Delete(context.Background(), "huge")
		t.Fatalf("a volume of %d MiB on a disk with less free: made", mb)
	}
	ae := apiError(t, "a volume larger than the free disk", err)
	if ae.Status != http.StatusInsufficientStorage || !errors.Is(err, client.ErrDiskFull) || !strings.Contains(ae.Message, "--min-free-disk-mb") {
		t.Errorf("a volume of %d MiB on a disk with less free: %v; want 507 naming --min-free-disk-mb", mb, err)
	}
	if left, _ := filepath.Glob(filepath.Join(s.dataDir, "volumes", "*")); len(left) != 0 {
		t.Errorf("left under the volumes directory: %v", left)
	}
	if vs, err := c.Volumes().List(context.Background()); err != nil || len(vs) != 0 {
		t.Errorf("Volumes().List = %+v, %v; want none recorded", vs, err)
	}
}

// TestVolumesAdversarialContent: what a sandbox, or root anywhere, leaves
// in a volume — a planted agent, symlinks to /etc and /opt/lizard, FIFOs,
// a setuid-root program and a device node planted from the host — gives
// the next sandbox that mounts it neither root nor a broken start: its
// agent is Lizard's, its code runs as the sandbox user, and even a volume
// whose root its owner made unreadable mounts as the home.
func TestVolumesAdversarialContent(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_volcontent")
	ctx := context.Background()
	v, err := c.Volumes().Create(ctx, api.CreateVolumeRequest{Name: "v", SizeMb: 16})
	if err != nil {
		t.Fatal(err)
	}
	a := newSandbox(t, c, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "v", Path: "/home/user/data"}}})
	got := py(t, c, a.SandboxID, `
import os, shutil, stat
d = '/home/user/data'
os.makedirs(d + '/lizard/bin')
with open(d + '/lizard/bin/lizard-agent', 'w') as f:
    f.write('#!/bin/sh\necho pwned >> /etc/passwd\n')
os.chmod(d + '/lizard/bin/lizard-agent', 0o755)
os.symlink('/etc', d + '/etc-link')
os.symlink('/opt/lizard', d + '/opt-lizard')
os.mkfifo(d + '/fifo')
shutil.copy('/usr/bin/id', d + '/id')
out = []
try:
    os.mknod(d + '/mem', 0o666 | stat.S_IFCHR, os.makedev(1, 1))
    out.append('mknod:made')
except OSError as e:
    out.append('mknod:' + type(e).__name__)
print(' '.join(out))`)
	if got != "mknod:PermissionError" {
		t.Errorf("mknod as the sandbox user: %s; want PermissionError", got)
	}
	if err := c.KillSandbox(ctx, a.SandboxID); err != nil {
		t.Fatal(err)
	}
	// What root could leave there: a setuid-root program, and a device
	// node of the host's memory, readable by all.
	host := filepath.Join(s.dataDir, "volumes", v.VolumeID)
	if err := os.Chown(filepath.Join(host, "id"), 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(host, "id"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(host, "mem"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 1))); err != nil {
		t.Fatal(err)
	}
	// gVisor keeps a FIFO made inside to the sandbox; one made on the
	// host is a real one.
	if err := unix.Mkfifo(filepath.Join(host, "fifo-host"), 0o666); err != nil {
		t.Fatal(err)
	}

	// Mounted at /opt/lizard's look-alikes: the volume's lizard/ is only
	// the volume's.
	agent := filepath.Join(filepath.Dir(s.bin), "lizard-agent")
	b := newSandbox(t, c, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "v", Path: "/home/user/opt"}}})
	if !sameFile(t, c, b.SandboxID, "/opt/lizard/bin/lizard-agent", agent) {
		t.Errorf("the sandbox's agent binary is not the host's")
	}
	got = py(t, c, b.SandboxID, `
import os, subprocess
d = '/home/user/opt'
out = ['euid:' + subprocess.run([d + '/id', '-u'], capture_output=True, text=True).stdout.strip()]
for name, fn in (('environ', lambda: open('/proc/1/environ', 'rb').read()),
                 ('passwd', lambda: open('/etc/passwd', 'a').write('x')),
                 ('etc-link', lambda: open(d + '/etc-link/passwd', 'a').write('x')),
                 ('opt-link', lambda: open(d + '/opt-lizard/bin/lizard-agent', 'wb').write(b'x')),
                 ('mem', lambda: open(d + '/mem', 'rb').read(16)),
                 ('fifo', lambda: os.close(os.open(d + '/fifo-host', os.O_RDONLY | os.O_NONBLOCK)))):
    try:
        fn()
        out.append(name + ':ok')
    except OSError as e:
        out.append(name + ':' + type(e).__name__)
print(' '.join(out))`)
	t.Logf("the next sandbox: %s", got)
	for _, want := range []string{"euid:1000", "environ:PermissionError", "passwd:PermissionError", "etc-link:PermissionError"} {
		if !strings.Contains(got, want) {
			t.Errorf("the next sandbox: %s; want %s", got, want)
		}
	}
	for _, bad := range []string{"opt-link:ok", "mem:ok"} {
		if strings.Contains(got, bad) {
			t.Errorf("the next sandbox: %s; want no %s", got, bad)
		}
	}
	if err := c.KillSandbox(ctx, b.SandboxID); err != nil {
		t.Fatal(err)
	}

	// Its owner shuts the volume's root; mounted as the home, the
	// sandbox still starts and answers.
	if err := os.Chmod(host, 0); err != nil {
		t.Fatal(err)
	}
	h, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "v", Path: "/home/user"}}})
	if err != nil {
		t.Fatalf("a sandbox whose home is a volume shut by its owner: %v; want it made", err)
	}
	t.Cleanup(func() { c.KillSandbox(context.Background(), h.SandboxID) })
	res, err := c.Exec(ctx, h.SandboxID, api.ProcessRequest{Args: []string{"id", "-u"}, Cwd: "/"}, nil)
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "1000" {
		t.Errorf("id -u in it: %+v, %v; want 1000", res, err)
	}
	if err := c.KillSandbox(ctx, h.SandboxID); err != nil {
		t.Fatal(err)
	}
	if err := c.Volumes().Delete(ctx, "v"); err != nil {
		t.Errorf("Volumes().Delete: %v", err)
	}
}
