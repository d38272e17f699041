package recipe

// Steps cached by their inputs (docs/templates.md, "Steps cached by their
// inputs"), as Docker's layer cache caches them: after each step of a
// build the host records what the step changed in the build's root
// filesystem — a delta, in the layout of a published build (shared.go:
// deleted, rootfs/) with meta, what rootfs/ does not hold (metaEntry) —
// under a key made of the project, the build's base
// (a built-in base's build, or an image's digest), every earlier step and
// this one (its files' contents included). A later build of the project
// whose first k steps have the same keys copies its base, applies those k
// deltas in order and runs only the steps after them: so an edit to step
// k of n reruns steps k..n, whichever build had steps 1..k-1 before.
//
// An entry is <cache>/template-steps/<key>: entry.json (its step, size,
// when it was last used, and the templates whose builds made or used it),
// deleted, rootfs/ and meta. Entries are pure cache: removing one only makes a
// later build run its step again. They are bounded per template and per
// project (StepEntriesPerTemplate, StepEntriesPerProject,
// StepBytesPerProject: the least recently used go first, a chain's last
// steps before its first), and leave with the last template that used
// them (ForgetSteps). The cache is shared by the data directories of the
// machine as builds are: a template is named with its server's holder
// name. One file lock orders the processes: shared while a build reads
// entries (from its lookup to its copy), exclusive while entries are
// added or removed.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
)

// Bounds of the step cache. A project's entries are each one step's
// changes, not a root filesystem: a chain of 20 run steps is 20 small
// deltas; an apt or pip step's is its packages.
const (
	StepEntriesPerTemplate = 64
	StepEntriesPerProject  = 256
	StepBytesPerProject    = 8 << 30
)

// stepCacheVersion changes when what a delta holds, or what precedes the
// first step, changes: older entries are then never found.
const stepCacheVersion = "2"

// StepCache is how a build uses the step cache, which the control plane
// says: the template the build is for (its entries are that template's),
// and whether it skips the cache (every step runs; its entries replace
// the ones of the same keys).
type StepCache struct {
	Template string `json:"template"`
	Skip     bool   `json:"skip,omitempty"`
}

type stepCacheKey struct{}

// WithStepCache returns ctx carrying how the build uses the step cache.
// Without it a build neither reads nor adds entries.
func WithStepCache(ctx context.Context, s *StepCache) context.Context {
	return context.WithValue(ctx, stepCacheKey{}, s)
}

// StepCacheOf is what WithStepCache put in ctx (nil: none).
func StepCacheOf(ctx context.Context) *StepCache {
	s, _ := ctx.Value(stepCacheKey{}).(*StepCache)
	return s
}

// StepKeys are the step cache's keys of steps built on seed (what the
// root filesystem is before the first step) in projectID: key i is made
// of every step up to i, as JSON.
func StepKeys(projectID, seed string, steps []api.TemplateStep) []string {
	prev := sha256.Sum256([]byte("lizard template steps " + stepCacheVersion + "\x00" + projectID + "\x00" + seed))
	keys := make([]string, len(steps))
	for i, st := range steps {
		b, _ := json.Marshal(st)
		h := sha256.New()
		h.Write(prev[:])
		h.Write(b)
		copy(prev[:], h.Sum(nil))
		keys[i] = hex.EncodeToString(prev[:8])
	}
	return keys
}

// stepUser is a template whose builds made or used an entry.
type stepUser struct {
	Holder   string `json:"holder"` // its server's data directory (holderName)
	Project  string `json:"project"`
	Template string `json:"template"`
	// DataDir is that data directory: once it is gone (a test's, a
	// server removed), no server will delete the template.
	DataDir string `json:"dataDir,omitempty"`
}

type stepEntry struct {
	Key       string     `json:"key"`
	Step      int        `json:"step"` // 1-based
	SizeBytes int64      `json:"sizeBytes"`
	UsedAt    time.Time  `json:"usedAt"`
	Users     []stepUser `json:"users"`
}

func (b *Builder) stepDir() string { return filepath.Join(b.cfg.CacheDir, "template-steps") }

// lockSteps takes the step cache's lock, shared or exclusive.
func (b *Builder) lockSteps(shared bool) (unlock func(), err error) {
	if err := template.PrivateDir(b.stepDir()); err != nil {
		return nil, fmt.Errorf("locking the step cache: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(b.stepDir(), ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking the step cache: %w", err)
	}
	how := syscall.LOCK_EX
	if shared {
		how = syscall.LOCK_SH
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking the step cache: %w", err)
	}
	return func() { f.Close() }, nil
}

func (b *Builder) readEntry(key string) (stepEntry, error) {
	var e stepEntry
	data, err := os.ReadFile(filepath.Join(b.stepDir(), key, "entry.json"))
	if err == nil {
		err = json.Unmarshal(data, &e)
	}
	return e, err
}

func (b *Builder) writeEntry(e stepEntry) error {
	data, _ := json.Marshal(e)
	p := filepath.Join(b.stepDir(), e.Key, "entry.json")
	if err := os.WriteFile(p+".tmp", data, 0o600); err != nil {
		return err
	}
	return os.Rename(p+".tmp", p)
}

// entries reads every entry of the step cache.
func (b *Builder) entries() []stepEntry {
	dirs, _ := os.ReadDir(b.stepDir())
	var out []stepEntry
	for _, d := range dirs {
		if !d.IsDir() || !ValidKey(d.Name()) {
			continue
		}
		if e, err := b.readEntry(d.Name()); err == nil && e.Key == d.Name() {
			out = append(out, e)
		}
	}
	return out
}

// cachedSteps is how many of keys' first steps the cache has, each entry
// of the chain present.
func (b *Builder) cachedSteps(keys []string) int {
	for i, k := range keys {
		if _, err := b.readEntry(k); err != nil {
			return i
		}
	}
	return len(keys)
}

// restoreSteps applies the deltas of keys, in order, to rootfs.
func (b *Builder) restoreSteps(ctx context.Context, rootfs string, keys []string) error {
	for _, k := range keys {
		dir := filepath.Join(b.stepDir(), k)
		if err := applyDelta(ctx, rootfs, dir); err != nil {
			return fmt.Errorf("applying cached step %s: %w", k, err)
		}
		if err := applyMeta(rootfs, dir); err != nil {
			return fmt.Errorf("applying cached step %s: %w", k, err)
		}
	}
	return nil
}

// fileStat is what a delta compares of an entry. The inode and its
// change time (ctime) are what make the comparison exact: every change to
// an inode — a write, even one that keeps the size and puts the old
// modification time back (touch -r, touch -d), a chmod, a chown, an
// extended attribute, a hard link made or removed — sets its ctime to
// now, and no program can set it back. The gofer writes the build's
// files as host system calls, so the host's kernel keeps the ctime. A
// rewrite is seen at no cost beyond the lstat the walk makes anyway,
// where hashing every file whose size and time are unchanged would read
// the whole root filesystem at every step.
type fileStat struct {
	mode     fs.FileMode
	uid, gid uint32
	mtime    int64
	ctime    int64
	ino      uint64
	size     int64
	rdev     uint64
	link     string
	// racy: changed less than racyWindow before its walk began, so a
	// change after it was read may have kept its ctime (a kernel's
	// timestamps advance a clock tick at a time): it counts as changed
	// at the next step, as git counts a racily clean file.
	racy bool
}

// racyWindow is more than a kernel clock tick (10 ms at HZ=100, the
// coarsest), the granularity of ctime.
const racyWindow = 50 * time.Millisecond

// sameAs reports whether s and o are the same entry, unchanged.
func (s fileStat) sameAs(o fileStat) bool {
	s.racy, o.racy = false, false
	return s == o
}

// manifest is a root filesystem's entries by path, the build's stage
// left out.
type manifest map[string]fileStat

func scanRootFS(rootfs string) (manifest, error) {
	m := manifest{}
	racy := time.Now().Add(-racyWindow).UnixNano()
	err := filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == rootfs {
			return err
		}
		rel, _ := filepath.Rel(rootfs, p)
		if rel == stageDir {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		s := fileStat{mode: fi.Mode(), uid: st.Uid, gid: st.Gid, mtime: fi.ModTime().UnixNano(),
			ctime: st.Ctim.Nano(), ino: st.Ino, size: fi.Size(), rdev: st.Rdev}
		s.racy = s.ctime >= racy
		if fi.Mode().Type() == fs.ModeSymlink {
			s.link, _ = os.Readlink(p)
		}
		if fi.IsDir() {
			s.size = 0 // a directory's size says nothing a delta carries
		}
		m[rel] = s
		return nil
	})
	return m, err
}

// special reports whether mode is a device node's, a FIFO's or a
// socket's: an entry a delta holds as metadata, not as the entry itself.
func special(mode fs.FileMode) bool {
	return mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0
}

// metaEntry is what a delta's rootfs/ does not hold of one of its
// entries, in the delta's file meta (JSON, a list in path order). The
// step cache is root's and 0700, and the template cache's second layer
// (template.Strip) holds there too: no file in it is set-id, has
// capabilities or is a device node. What a step made of those is
// written down here and made again only in the build's own root
// filesystem, as the step had made it.
type metaEntry struct {
	Path string `json:"path"`
	// Mode is the entry's st_mode, given when it is special or has a
	// set-user-ID or set-group-ID bit.
	Mode uint32 `json:"mode,omitempty"`
	// A special entry's owner, device number, modification time, and
	// the path in this delta it is a hard link of (if any).
	UID   uint32 `json:"uid,omitempty"`
	GID   uint32 `json:"gid,omitempty"`
	Rdev  uint64 `json:"rdev,omitempty"`
	Mtime int64  `json:"mtime,omitempty"`
	Link  string `json:"link,omitempty"`
	// Xattrs are every extended attribute of the entry (capabilities,
	// ACLs, user.*).
	Xattrs map[string][]byte `json:"xattrs,omitempty"`
}

// writeDelta writes into dir (empty) what changed from before to now in
// rootfs: the paths removed (or turned into another type), the entries
// added or changed with their parents (hard links among them linked),
// and their metadata rootfs/ does not carry (metaEntry).
func writeDelta(rootfs string, before, now manifest, dir string) error {
	if err := writeDeleted(before, now, dir); err != nil {
		return err
	}
	out := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(out, 0o755); err != nil {
		return err
	}
	changed := make([]string, 0)
	for p, s := range now {
		if b, ok := before[p]; !ok || b.racy || !b.sameAs(s) {
			changed = append(changed, p)
		}
	}
	sort.Strings(changed) // parents before their entries
	metas := map[string]*metaEntry{}
	linked := map[uint64]string{} // inode → its first path in the delta
	for _, rel := range changed {
		if err := copyChanged(rootfs, out, rel, metas, linked); err != nil {
			return err
		}
	}
	return writeMeta(rootfs, out, dir, metas)
}

// writeDeleted writes dir's deleted: the paths of before that now lacks
// or has as another type, none below another.
func writeDeleted(before, now manifest, dir string) error {
	var deleted []string
	for p, s := range before {
		if n, ok := now[p]; !ok || n.mode.Type() != s.mode.Type() {
			deleted = append(deleted, p)
		}
	}
	sort.Strings(deleted)
	var buf strings.Builder
	gone := map[string]bool{}
	for _, p := range deleted {
		gone[p] = true
		if under(p, gone) {
			continue // below a deleted directory: gone with it
		}
		buf.WriteString(p)
		buf.WriteByte(0)
	}
	return os.WriteFile(filepath.Join(dir, "deleted"), []byte(buf.String()), 0o600)
}

// copyChanged copies changed entry rel of rootfs into out (a delta's
// rootfs/) with its parents, or writes it into metas when it is special.
// linked has the first path in out of each inode with hard links.
func copyChanged(rootfs, out, rel string, metas map[string]*metaEntry, linked map[uint64]string) error {
	p := filepath.Join(rootfs, rel)
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := copyParents(rootfs, out, rel); err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(out, rel)); err == nil {
		return nil // copied as a parent already
	}
	// Hard links: every path of an inode a step changed is in the delta
	// (a link made or removed changes the inode's ctime), and cp keeps
	// the links among what it copies.
	st := fi.Sys().(*syscall.Stat_t)
	first, isLink := linked[st.Ino]
	if !isLink && !fi.IsDir() && st.Nlink > 1 {
		linked[st.Ino] = rel
	}
	switch {
	case special(fi.Mode()):
		x, err := xattrs(p)
		if err != nil {
			return fmt.Errorf("reading the extended attributes of %s: %w", rel, err)
		}
		metas[rel] = &metaEntry{Path: rel, Mode: st.Mode, UID: st.Uid, GID: st.Gid, Rdev: st.Rdev,
			Mtime: fi.ModTime().UnixNano(), Xattrs: x}
		if isLink {
			metas[rel].Link = first
		}
		return nil
	case isLink:
		return os.Link(filepath.Join(out, first), filepath.Join(out, rel))
	}
	return copyEntry(p, filepath.Join(out, rel), fi)
}

// writeMeta writes dir's meta: metas (the special entries) and the
// set-id bits and extended attributes of out's entries; and gives out's
// directories their times and out itself the root's owner and mode.
func writeMeta(rootfs, out, dir string, metas map[string]*metaEntry) error {
	// Every entry of rootfs/ (parents too): its set-id bits and extended
	// attributes, which copyEntry leaves out; and its time, which a
	// directory's entries copied into it changed.
	err := filepath.WalkDir(out, func(q string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(out, q)
		p := filepath.Join(rootfs, rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		x, err := xattrs(p)
		if err != nil {
			return fmt.Errorf("reading the extended attributes of %s: %w", rel, err)
		}
		if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 || len(x) > 0 {
			metas[rel] = &metaEntry{Path: rel, Xattrs: x}
			if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
				metas[rel].Mode = st.Mode
			}
		}
		if rel == "." {
			// The root itself, which cp copies onto the build's.
			if err := os.Chown(out, int(st.Uid), int(st.Gid)); err != nil {
				return err
			}
			if err := os.Chmod(out, fi.Mode()&(fs.ModePerm|fs.ModeSticky)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := keepDirTimes(rootfs, out); err != nil {
		return err
	}
	list := make([]*metaEntry, 0, len(metas))
	for _, m := range metas {
		list = append(list, m)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Path < list[j].Path })
	data, err := json.Marshal(list)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "meta"), data, 0o600)
}

// under reports whether one of p's parents is in gone.
func under(p string, gone map[string]bool) bool {
	for q := filepath.Dir(p); q != "."; q = filepath.Dir(q) {
		if gone[q] {
			return true
		}
	}
	return false
}

// xattrs reads the extended attributes of p, never following a link.
func xattrs(p string) (map[string][]byte, error) {
	names := make([]byte, 1024)
	for {
		n, err := unix.Llistxattr(p, names)
		switch {
		case errors.Is(err, unix.ERANGE):
			names = make([]byte, 2*len(names))
			continue
		case errors.Is(err, unix.ENOTSUP):
			return nil, nil
		case err != nil:
			return nil, err
		}
		names = names[:n]
		break
	}
	var out map[string][]byte
	for _, name := range strings.Split(string(names), "\x00") {
		if name == "" {
			continue
		}
		v := make([]byte, 256)
		for {
			n, err := unix.Lgetxattr(p, name, v)
			if errors.Is(err, unix.ERANGE) {
				v = make([]byte, 2*len(v))
				continue
			}
			if errors.Is(err, unix.ENODATA) {
				break // removed meanwhile
			}
			if err != nil {
				return nil, err
			}
			if out == nil {
				out = map[string][]byte{}
			}
			out[name] = v[:n]
			break
		}
	}
	return out, nil
}

// keepDirTimes gives every directory of out (a delta's rootfs/) the
// times of its counterpart in rootfs: copying entries into it changed
// its own.
func keepDirTimes(rootfs, out string) error {
	return filepath.WalkDir(out, func(q string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, q)
		fi, err := os.Lstat(filepath.Join(rootfs, rel))
		if err != nil {
			return err
		}
		return os.Chtimes(q, fi.ModTime(), fi.ModTime())
	})
}

// applyMeta makes what step delta dir's meta says of its entries in
// rootfs, to which applyDelta applied the delta: its special entries,
// set-id bits and extended attributes (and removes the extended
// attributes its directories no longer have). It is the step cache's own
// (root's, written by this host): an image's delta has none.
func applyMeta(rootfs, dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "meta"))
	if err != nil {
		return err
	}
	var list []metaEntry
	if err := json.Unmarshal(data, &list); err != nil {
		return err
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	want := map[string]map[string][]byte{}
	retime := map[string]bool{} // directories a special entry was made in
	for _, m := range list {
		want[m.Path] = m.Xattrs
		if err := applyMetaEntry(root, m); err != nil {
			return fmt.Errorf("%s: %w", m.Path, err)
		}
		if special(fileMode(m.Mode)) {
			retime[filepath.Dir(m.Path)] = true
		}
	}
	changes := filepath.Join(dir, "rootfs")
	err = filepath.WalkDir(changes, func(q string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(changes, q)
		return inDir(root, rel, func(dirfd int, base string) error {
			p := "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + base
			have, err := xattrs(p)
			if err != nil {
				return err
			}
			for name := range have {
				if _, ok := want[rel][name]; !ok {
					if err := unix.Lremovexattr(p, name); err != nil {
						return fmt.Errorf("%s: %w", rel, err)
					}
				}
			}
			if !retime[rel] {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			t := unix.NsecToTimespec(fi.ModTime().UnixNano())
			return unix.UtimesNanoAt(dirfd, base, []unix.Timespec{t, t}, unix.AT_SYMLINK_NOFOLLOW)
		})
	})
	if err != nil {
		return fmt.Errorf("restoring the extended attributes and times of directories: %w", err)
	}
	return nil
}

// applyMetaEntry makes m in root.
func applyMetaEntry(root *os.Root, m metaEntry) error {
	if m.Path != "." && !filepath.IsLocal(m.Path) || m.Link != "" && !filepath.IsLocal(m.Link) {
		return errors.New("not a path within the root filesystem")
	}
	if err := dirsAbove(root, m.Path); err != nil {
		return err
	}
	return inDir(root, m.Path, func(dirfd int, base string) error {
		if special(fileMode(m.Mode)) {
			if err := root.Remove(m.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if m.Link != "" {
				return inDir(root, m.Link, func(fromfd int, from string) error {
					return unix.Linkat(fromfd, from, dirfd, base, 0)
				})
			}
			if err := unix.Mknodat(dirfd, base, m.Mode, int(m.Rdev)); err != nil {
				return err
			}
			if err := unix.Fchownat(dirfd, base, int(m.UID), int(m.GID), unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return err
			}
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if m.Mode != 0 {
				return errors.New("a link with a mode")
			}
		} else if m.Mode != 0 {
			// After the owner (a chown clears set-id bits); mknod's
			// mode went through the umask.
			if err := unix.Fchmodat(dirfd, base, m.Mode&0o7777, 0); err != nil {
				return err
			}
		}
		p := "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + base
		names := slices.Sorted(maps.Keys(m.Xattrs))
		for _, name := range names {
			// After the owner too: a chown drops capabilities.
			if err := unix.Lsetxattr(p, name, m.Xattrs[name], 0); err != nil {
				return fmt.Errorf("setting extended attribute %s: %w", name, err)
			}
		}
		if special(fileMode(m.Mode)) {
			t := unix.NsecToTimespec(m.Mtime)
			return unix.UtimesNanoAt(dirfd, base, []unix.Timespec{t, t}, unix.AT_SYMLINK_NOFOLLOW)
		}
		return nil
	})
}

// inDir calls f with a descriptor of rel's directory in root and rel's
// name in it ("." for the root itself).
func inDir(root *os.Root, rel string, f func(dirfd int, base string) error) error {
	d, err := root.Open(filepath.Dir(rel))
	if err != nil {
		return err
	}
	defer d.Close()
	return f(int(d.Fd()), filepath.Base(rel))
}

// fileMode is st_mode's type as an fs.FileMode's.
func fileMode(mode uint32) fs.FileMode {
	switch mode & unix.S_IFMT {
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	}
	return 0
}

// recordStep writes step n's delta (before → rootfs now) under key into a
// temporary directory of the step cache, returned for commitSteps, and
// rootfs's manifest now.
// now nil: read it.
func (b *Builder) recordStep(rootfs string, before, now manifest, key string, n int) (string, manifest, error) {
	if now == nil {
		var err error
		if now, err = scanRootFS(rootfs); err != nil {
			return "", nil, fmt.Errorf("reading what step %d changed: %w", n, err)
		}
	}
	if err := template.PrivateDir(b.stepDir()); err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp(b.stepDir(), ".tmp-"+key+"-")
	if err != nil {
		return "", nil, err
	}
	if err := writeDelta(rootfs, before, now, dir); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("recording what step %d changed: %w", n, err)
	}
	e := stepEntry{Key: key, Step: n, SizeBytes: template.DiskUsage(dir)}
	data, _ := json.Marshal(e)
	if err := os.WriteFile(filepath.Join(dir, "entry.json"), data, 0o600); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return dir, now, nil
}

// commitSteps puts the recorded entries (temporary directories by key)
// in place, replacing entries of the same keys, marks every entry of
// keys used now by template user, and applies the bounds.
func (b *Builder) commitSteps(recorded map[string]string, keys []string, user stepUser) error {
	unlock, err := b.lockSteps(false)
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	for key, dir := range recorded {
		// A replaced entry's templates keep it (a skipCache build's
		// replaces what another template used too).
		old, oerr := b.readEntry(key)
		final := filepath.Join(b.stepDir(), key)
		if err := os.RemoveAll(final); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.Rename(dir, final); err != nil {
			errs = append(errs, err)
			continue
		}
		if e, err := b.readEntry(key); oerr == nil && err == nil {
			e.Users = old.Users
			errs = append(errs, b.writeEntry(e))
		}
	}
	now := time.Now().UTC()
	for _, k := range keys {
		e, err := b.readEntry(k)
		if err != nil {
			break // the chain ends here
		}
		e.UsedAt = now
		if !slices.Contains(e.Users, user) {
			e.Users = append(e.Users, user)
		}
		if err := b.writeEntry(e); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, b.boundSteps(user))
	return errors.Join(errs...)
}

// boundSteps applies the bounds to user's template and project, the
// least recently used first, a chain's later steps before its earlier
// ones (which the later ones need). Called with the lock held.
func (b *Builder) boundSteps(user stepUser) error {
	all := b.entries()
	sort.Slice(all, func(i, j int) bool {
		if !all[i].UsedAt.Equal(all[j].UsedAt) {
			return all[i].UsedAt.Before(all[j].UsedAt)
		}
		return all[i].Step > all[j].Step
	})
	var errs []error
	var mine []int
	for i, e := range all {
		if slices.Contains(e.Users, user) {
			mine = append(mine, i)
		}
	}
	gone := map[string]bool{}
	for _, i := range mine[:max(0, len(mine)-StepEntriesPerTemplate)] {
		e := &all[i]
		e.Users = slices.DeleteFunc(e.Users, func(u stepUser) bool { return u == user })
		if len(e.Users) == 0 {
			gone[e.Key] = true
			errs = append(errs, os.RemoveAll(filepath.Join(b.stepDir(), e.Key)))
		} else {
			errs = append(errs, b.writeEntry(*e))
		}
	}
	inProject := func(e stepEntry) bool {
		return slices.ContainsFunc(e.Users, func(u stepUser) bool { return u.Holder == user.Holder && u.Project == user.Project })
	}
	var count int
	var bytes int64
	for _, e := range all {
		if !gone[e.Key] && inProject(e) {
			count++
			bytes += e.SizeBytes
		}
	}
	for _, e := range all {
		if count <= StepEntriesPerProject && bytes <= StepBytesPerProject {
			break
		}
		if gone[e.Key] || !inProject(e) {
			continue
		}
		gone[e.Key] = true
		count--
		bytes -= e.SizeBytes
		errs = append(errs, os.RemoveAll(filepath.Join(b.stepDir(), e.Key)))
	}
	return errors.Join(errs...)
}

// ForgetSteps drops template name of projectID, on this server, from the
// step cache: the entries no other template uses leave it. A deleted
// template's entries go with it.
func (b *Builder) ForgetSteps(projectID, name string) error {
	return b.forgetSteps(func(u stepUser) bool {
		return u.Holder == b.holderName() && u.Project == projectID && u.Template == name
	})
}

// forgetSteps drops the users gone says of from every entry, and removes
// the entries left without one.
func (b *Builder) forgetSteps(gone func(stepUser) bool) error {
	if _, err := os.Stat(b.stepDir()); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	unlock, err := b.lockSteps(false)
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	for _, e := range b.entries() {
		n := len(e.Users)
		e.Users = slices.DeleteFunc(e.Users, gone)
		switch {
		case len(e.Users) == 0:
			errs = append(errs, os.RemoveAll(filepath.Join(b.stepDir(), e.Key)))
		case len(e.Users) != n:
			errs = append(errs, b.writeEntry(e))
		}
	}
	return errors.Join(errs...)
}

// StepUse is a template of this server's data directory that step cache
// entries were made or used by.
type StepUse struct {
	Project, Template string
	Entries           int
	Bytes             int64
}

// StepUses lists the templates of this server that the step cache's
// entries name, each with its entries' count and size.
func (b *Builder) StepUses() []StepUse {
	by := map[[2]string]*StepUse{}
	var out []StepUse
	for _, e := range b.entries() {
		for _, u := range e.Users {
			if u.Holder != b.holderName() {
				continue
			}
			k := [2]string{u.Project, u.Template}
			if by[k] == nil {
				by[k] = &StepUse{Project: u.Project, Template: u.Template}
			}
			by[k].Entries++
			by[k].Bytes += e.SizeBytes
		}
	}
	for _, u := range by {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Project+"/"+out[i].Template < out[j].Project+"/"+out[j].Template
	})
	return out
}

// SweepSteps drops from the step cache this server's templates that
// exists says are gone (deleted while it was down) and the templates of
// data directories that no longer exist, and removes the temporary
// entries of builds that died (older than the longest build).
func (b *Builder) SweepSteps(exists func(project, name string) bool) error {
	left, _ := filepath.Glob(filepath.Join(b.stepDir(), ".tmp-*"))
	for _, d := range left {
		if fi, err := os.Stat(d); err == nil && time.Since(fi.ModTime()) > b.cfg.Timeout+time.Minute {
			os.RemoveAll(d)
		}
	}
	return b.forgetSteps(func(u stepUser) bool {
		if u.Holder == b.holderName() {
			return !exists(u.Project, u.Template)
		}
		return u.DataDir != "" && gone(u.DataDir)
	})
}

// done is how many of the build's first steps its root filesystem has
// before the build sandbox runs any: a resumed template build's, or the
// step cache's.
func (bd *build) done() int { return max(bd.resume.Steps, bd.restored) }

// lookupSteps keys the build's steps and finds how many of the first
// ones the step cache has; when more than a resumed template build has,
// they are restored instead (holding the cache's lock until then). The
// cache is best-effort: a failure to read it runs every step.
func (bd *build) lookupSteps() error {
	if bd.cache == nil || len(bd.steps) == 0 {
		return nil
	}
	// The seed is what the root filesystem is before the first step: a
	// built-in base's build, or a pinned image prepared for Lizard with
	// the working directory and user the recipe ends with (makeWorkdir).
	seed := "base " + bd.r.Base + " " + bd.base.Key
	if bd.r.From != "" {
		own := settings(bd.r, bd.steps)
		seed = "image " + bd.r.From + " " + own.Workdir + " " + own.User
	}
	bd.stepKeys = StepKeys(bd.project, seed, bd.steps)
	if bd.cache.Skip {
		return nil
	}
	unlock, err := bd.b.lockSteps(true)
	if err != nil {
		bd.log.Error("reading the step cache; every step runs", "err", err)
		return nil
	}
	hit := bd.b.cachedSteps(bd.stepKeys)
	if hit == 0 || hit <= bd.resume.Steps {
		unlock()
		return nil
	}
	bd.resume, bd.resumeRoot = Resume{}, ""
	bd.restored, bd.unlockRead = hit, unlock
	return nil
}

func (bd *build) unlockSteps() {
	if bd.unlockRead != nil {
		bd.unlockRead()
		bd.unlockRead = nil
	}
}

// recording reports whether the steps this build runs are cached: each
// entry needs the chain before it, which a build resumed from a
// template's build (whose earlier steps are not entries) lacks.
func (bd *build) recording() bool {
	return bd.cache != nil && bd.cache.Template != "" && len(bd.stepKeys) > 0 && bd.resume.Steps == 0 && !bd.recordOff
}

// recordStep records what step n (0-based) changed since before in the
// step cache, and returns the root filesystem's manifest now. A failure
// stops the recording, not the build.
func (bd *build) recordStep(ctx context.Context, id, rootfs string, before manifest, n int) manifest {
	var err error
	var now manifest
	if k, _ := kind(bd.steps[n]); k == kindEnv || k == kindUser {
		now = before // a setting: nothing on the disk changes
	} else {
		// The sandbox writes the host's files through its gofer; sync
		// has every write there before the host reads them.
		code, serr := runProcess(ctx, bd.b.cfg.Node.Agents(), id, api.ProcessRequest{Args: []string{"sync"}, Cwd: "/"}, func(string, string) {})
		if err = serr; err == nil && code != 0 {
			err = fmt.Errorf("sync: exit status %d", code)
		}
		// Past racyWindow, what the step wrote last is not racy, so not
		// copied again into the next step's delta.
		time.Sleep(racyWindow)
	}
	var dir string
	if err == nil {
		dir, now, err = bd.b.recordStep(rootfs, before, now, bd.stepKeys[n], n+1)
	}
	if err != nil {
		if ctx.Err() == nil {
			bd.log.Error("recording a step in the step cache; the later steps are not cached", "step", n+1, "err", err)
		}
		bd.recordOff = true
		return nil
	}
	bd.recorded[bd.stepKeys[n]] = dir
	return now
}

// commitSteps puts the entries of the steps the build ran in the step
// cache, and marks the chain it used and made as its template's.
func (bd *build) commitSteps() {
	defer func() {
		for _, d := range bd.recorded {
			os.RemoveAll(d) // left by a failed commit
		}
	}()
	if bd.cache == nil || bd.cache.Template == "" || len(bd.stepKeys) == 0 {
		return
	}
	user := stepUser{Holder: bd.b.holderName(), Project: bd.project, Template: bd.cache.Template, DataDir: bd.b.cfg.DataDir}
	if err := bd.b.commitSteps(bd.recorded, bd.stepKeys, user); err != nil {
		bd.log.Error("adding the build's steps to the step cache", "err", err)
	}
}

// SweepStepsOf is SweepSteps with the templates st records (a cluster's
// whole database for a node): run at a server's start.
func (b *Builder) SweepStepsOf(ctx context.Context, st *store.Store) error {
	tmpls, err := st.Templates().List(ctx, "")
	if err != nil {
		return err
	}
	have := map[[2]string]bool{}
	for _, t := range tmpls {
		have[[2]string{t.ProjectID, t.Name}] = true
	}
	return b.SweepSteps(func(project, name string) bool { return have[[2]string{project, name}] })
}
