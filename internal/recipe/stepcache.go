package recipe

// Steps cached by their inputs (docs/templates.md, "Steps cached by their
// inputs"), as Docker's layer cache caches them: after each step of a
// build the host records what the step changed in the build's root
// filesystem — a delta, in the layout of a published build (shared.go:
// deleted, rootfs/) — under a key made of the project, the build's base
// (a built-in base's build, or an image's digest), every earlier step and
// this one (its files' contents included). A later build of the project
// whose first k steps have the same keys copies its base, applies those k
// deltas in order and runs only the steps after them: so an edit to step
// k of n reruns steps k..n, whichever build had steps 1..k-1 before.
//
// An entry is <cache>/template-steps/<key>: entry.json (its step, size,
// when it was last used, and the templates whose builds made or used it),
// deleted and rootfs/. Entries are pure cache: removing one only makes a
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
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

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
const stepCacheVersion = "1"

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
		if err := applyDelta(ctx, rootfs, filepath.Join(b.stepDir(), k)); err != nil {
			return fmt.Errorf("applying cached step %s: %w", k, err)
		}
	}
	return nil
}

// fileStat is what a delta compares of an entry, as changed does.
type fileStat struct {
	mode     fs.FileMode
	uid, gid uint32
	mtime    int64
	size     int64
	link     string
}

// manifest is a root filesystem's entries (directories, regular files
// and links) by path, the build's stage left out.
type manifest map[string]fileStat

func scanRootFS(rootfs string) (manifest, error) {
	m := manifest{}
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
		if !fi.Mode().IsRegular() && !fi.IsDir() && fi.Mode().Type() != fs.ModeSymlink {
			return nil // never carried: Strip removes them from a build
		}
		st := fi.Sys().(*syscall.Stat_t)
		s := fileStat{mode: fi.Mode(), uid: st.Uid, gid: st.Gid, mtime: fi.ModTime().UnixNano(), size: fi.Size()}
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

// writeDelta writes into dir (empty) what changed from before to now in
// rootfs: the paths removed (or turned into another type), and the
// entries added or changed with their parents.
func writeDelta(rootfs string, before, now manifest, dir string) error {
	var deleted []string
	for p, s := range before {
		if n, ok := now[p]; !ok || n.mode.Type() != s.mode.Type() {
			deleted = append(deleted, p)
		}
	}
	sort.Strings(deleted)
	var buf strings.Builder
	var last string
	for _, p := range deleted {
		if last != "" && strings.HasPrefix(p, last+"/") {
			continue // below a deleted directory: gone with it
		}
		buf.WriteString(p)
		buf.WriteByte(0)
		last = p
	}
	if err := os.WriteFile(filepath.Join(dir, "deleted"), []byte(buf.String()), 0o600); err != nil {
		return err
	}
	out := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(out, 0o755); err != nil {
		return err
	}
	changed := make([]string, 0)
	for p, s := range now {
		if b, ok := before[p]; !ok || b != s {
			changed = append(changed, p)
		}
	}
	sort.Strings(changed) // parents before their entries
	for _, rel := range changed {
		p := filepath.Join(rootfs, rel)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := copyParents(rootfs, out, rel); err != nil {
			return err
		}
		if _, err := os.Lstat(filepath.Join(out, rel)); err == nil {
			continue // copied as a parent already
		}
		if err := copyEntry(p, filepath.Join(out, rel), fi); err != nil {
			return err
		}
	}
	return nil
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
