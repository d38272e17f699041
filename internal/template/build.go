package template

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/internal/deathsig"
)

// The interpreter template's Debian base. The Debian mirror is fetched over
// plain HTTP: apt verifies every package against the signed Release file.
const (
	debianSuite   = "trixie" // serves Python 3.13
	debianMirror  = "http://deb.debian.org/debian"
	debianVariant = "minbase"
)

// recipeDir is where a build puts the recipe's files inside the rootfs; it is
// removed before the build is moved into place.
const recipeDir = "tmp/lizard-recipe"

// hostPath is the PATH of build commands, on the host and in the chroot.
const hostPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// chrootScript runs a command inside a rootfs with /proc and /dev/shm mounted.
// It is run by `unshare --mount --propagation private`, so the mounts exist
// only in that private mount namespace and vanish with its last process, even
// when the build is killed: nothing can be left mounted in the cache, and no
// host /dev or /proc is ever bind-mounted where a cleanup could delete it.
// The /dev nodes debootstrap creates (null, zero, urandom, ...) are enough.
const chrootScript = `set -e
mount -t proc proc "$0/proc"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$0/dev/shm"
exec chroot "$0" "$@"`

// isolate runs a command in private mount and PID namespaces. With
// --kill-child, killing unshare kills the namespace's init and so every
// process of the build, daemons and double forks included.
var isolate = []string{"unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child", "--"}

// interpreterBuild builds the interpreter template: a cached debootstrap base
// layer, copied and then set up by the recipe's setup.sh, stage by stage.
type interpreterBuild struct {
	cacheDir string
	recipe   fs.FS
	p        *progress
}

const interpreterSteps = 6

func (b *interpreterBuild) build(ctx context.Context, rootfs string) error {
	stop := b.p.heartbeat()
	defer stop()
	b.p.Printf("building template %s (a few minutes, once per recipe)", Default)
	if err := checkHostTools(); err != nil {
		return err
	}

	b.p.Step(1, interpreterSteps, fmt.Sprintf("debootstrap Debian %s base system", debianSuite))
	base, err := b.ensureBase(ctx)
	if err != nil {
		return err
	}

	b.p.Step(2, interpreterSteps, "configuring system (copying base, user, hostname, mount points)")
	if err := run(ctx, b.p, "cp", buildEnv(), "cp", "-a", "--reflink=auto", base+"/.", rootfs+"/"); err != nil {
		return fmt.Errorf("copying base system: %w", err)
	}
	env, err := b.prepare(rootfs)
	if err != nil {
		return fmt.Errorf("preparing rootfs: %w", err)
	}
	if err := b.stage(ctx, rootfs, env, "system"); err != nil {
		return err
	}

	b.p.Step(3, interpreterSteps, "installing Python packages ("+b.topPackages()+")")
	if err := b.stage(ctx, rootfs, env, "python"); err != nil {
		return err
	}

	b.p.Step(4, interpreterSteps, "installing R with IRkernel and Java (JDK 21, the JShell harness)")
	if err := b.stage(ctx, rootfs, env, "kernels"); err != nil {
		return err
	}

	b.p.Step(5, interpreterSteps, "installing Node 22, precompiling Python, trimming")
	for _, s := range []string{"node", "finish"} {
		if err := b.stage(ctx, rootfs, env, s); err != nil {
			return err
		}
	}

	b.p.Step(6, interpreterSteps, "verifying")
	if err := b.stage(ctx, rootfs, env, "verify"); err != nil {
		return err
	}
	for _, p := range []string{recipeDir, "etc/resolv.conf"} {
		if err := os.RemoveAll(filepath.Join(rootfs, p)); err != nil {
			return fmt.Errorf("removing build files: %w", err)
		}
	}
	b.p.Printf("built template %s in %ds, %d MB", Default, b.p.elapsed(), diskUsage(rootfs)>>20)
	return nil
}

// ensureBase returns the cached debootstrap layer, building it if needed. It
// has its own hash so that changing Python packages does not redo debootstrap.
func (b *interpreterBuild) ensureBase(ctx context.Context) (string, error) {
	files, err := fs.Sub(b.recipe, "base")
	if err != nil {
		return "", err
	}
	hash, err := recipeHash(files, "suite="+debianSuite, "mirror="+debianMirror, "variant="+debianVariant)
	if err != nil {
		return "", fmt.Errorf("hashing base recipe: %w", err)
	}
	key := "base-" + hash[:12]
	if isBuilt(filepath.Join(b.cacheDir, "templates", key)) {
		b.p.Printf("using cached base system %s", key)
	}
	return ensureLayer(ctx, b.cacheDir, key, b.p, func(ctx context.Context, rootfs string) error {
		pkgs, err := readList(files, "packages.txt")
		if err != nil {
			return err
		}
		args := append(append([]string{}, isolate[1:]...), "debootstrap",
			"--variant="+debianVariant, "--include="+strings.Join(pkgs, ","),
			debianSuite, rootfs, debianMirror)
		if err := run(ctx, b.p, "debootstrap", buildEnv(), isolate[0], args...); err != nil {
			return fmt.Errorf("running debootstrap: %w", err)
		}
		return nil
	})
}

// prepare puts the recipe, the host's DNS configuration and the host's CA
// bundle into the rootfs for the build (all removed before it is cached), and
// returns the environment of the setup stages.
func (b *interpreterBuild) prepare(rootfs string) ([]string, error) {
	dir := filepath.Join(rootfs, recipeDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	err := fs.WalkDir(b.recipe, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == "." {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, path), 0o755)
		}
		data, err := fs.ReadFile(b.recipe, path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, path), data, 0o755)
	})
	if err != nil {
		return nil, err
	}
	env := buildEnv()
	env = append(env, "HOME=/root", "DEBIAN_FRONTEND=noninteractive",
		"PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_COLOR=1", "PYTHONUNBUFFERED=1")

	// The chroot shares the host's network, so it resolves names like the host.
	resolv, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return nil, fmt.Errorf("reading host DNS configuration: %w", err)
	}
	if err := replaceFile(filepath.Join(rootfs, "etc/resolv.conf"), resolv); err != nil {
		return nil, fmt.Errorf("writing DNS configuration: %w", err)
	}
	// Trust what the host trusts: where HTTPS goes through an inspecting proxy,
	// its CA is in the host's bundle and not in the rootfs's.
	if ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		if err := os.WriteFile(filepath.Join(dir, "host-ca.crt"), ca, 0o644); err != nil {
			return nil, err
		}
		env = append(env, "PIP_CERT=/"+recipeDir+"/host-ca.crt")
	}
	return env, nil
}

// stage runs one stage of the recipe's setup.sh inside the rootfs.
func (b *interpreterBuild) stage(ctx context.Context, rootfs string, env []string, name string) error {
	if err := runChroot(ctx, b.p, name, env, rootfs, "/bin/sh", "/"+recipeDir+"/setup.sh", name); err != nil {
		return fmt.Errorf("running setup stage %s: %w", name, err)
	}
	return nil
}

// topPackages names the first few top-level Python packages, for progress.
func (b *interpreterBuild) topPackages() string {
	names, err := readList(b.recipe, "requirements.in")
	if err != nil || len(names) == 0 {
		return "requirements.txt"
	}
	for i, n := range names {
		names[i] = strings.FieldsFunc(n, func(r rune) bool { return strings.ContainsRune("<>=!~ ;[", r) })[0]
	}
	if len(names) > 6 {
		names = append(names[:6], "...")
	}
	return strings.Join(names, ", ")
}

// runChroot runs a command inside rootfs (see chrootScript).
func runChroot(ctx context.Context, p *progress, tag string, env []string, rootfs string, args ...string) error {
	full := append(append([]string{}, isolate[1:]...), "/bin/sh", "-c", chrootScript, rootfs)
	return run(ctx, p, tag, env, isolate[0], append(full, args...)...)
}

// run runs a command in its own process group, forwarding its output to
// progress. Cancelling ctx kills the whole group.
func run(ctx context.Context, p *progress, tag string, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out := p.lineWriter(tag)
	errOut := out.split()
	cmd.Stdout, cmd.Stderr = out, errOut
	// If this process dies, so does the build (and, through unshare
	// --kill-child, everything it started).
	err := deathsig.Run(cmd)
	out.Flush()
	errOut.Flush()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if tail := out.Tail(); tail != "" {
			return fmt.Errorf("%s: %w; last output:\n%s", name, err, tail)
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// buildEnv is a clean environment for build commands: nothing of the
// caller's leaks into the template (pip settings of the host, say) except
// its proxy settings, which the downloads may need.
func buildEnv() []string {
	env := []string{"PATH=" + hostPath, "LANG=C.UTF-8"}
	for _, k := range []string{"http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// checkHostTools fails early, with the fix, when the host lacks a tool.
func checkHostTools() error {
	for _, tool := range []string{"debootstrap", "unshare", "chroot", "cp"} {
		if _, err := lookPath(tool); err != nil {
			return fmt.Errorf("building templates needs %s, which is not installed: run `make deps` (or apt-get install debootstrap)", tool)
		}
	}
	return nil
}

// lookPath searches hostPath too: debootstrap is in /usr/sbin, which a
// non-login PATH may lack.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range filepath.SplitList(hostPath) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// readList reads a file of names, one a line, without comments and blanks.
func readList(files fs.FS, path string) ([]string, error) {
	data, err := fs.ReadFile(files, path)
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line != "" {
			out = append(out, line)
		}
	}
	return out, nil
}

// replaceFile writes path anew. It removes what was there first, because in a
// rootfs a symlink (resolv.conf often is one) would point into the host.
func replaceFile(path string, data []byte) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// diskUsage sums the sizes of the files below dir, for the build summary.
func diskUsage(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
