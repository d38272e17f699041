package recipe

// Custom templates in a cluster (docs/cluster.md): the node that builds a
// template publishes it to the image store, and any other node fetches it
// on its first create from it. What is published is the build's
// difference from its base template, which every node has built itself:
// the entries the recipe added or changed, and the paths it removed — a
// few megabytes where the whole root filesystem is most of a gigabyte.
//
// An image "templates/<key>" is a directory of
//
//	base      JSON: the base template's name and key (none: a build on
//	          an image, published whole)
//	deleted   the base's paths the build removed (or turned into another
//	          type), NUL-separated
//	rootfs/   the entries the build added or changed, with their parents
//
// A fetching node copies its own build of the base, removes the deleted
// paths, and copies rootfs/ over it, into its template cache.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
)

// ImageName is the image store's name of build key.
func ImageName(key string) string { return "templates/" + key }

// KeyOfImage is the build key of image store name, if it is a template's.
func KeyOfImage(name string) (string, bool) {
	key, ok := strings.CutPrefix(name, "templates/")
	return key, ok && key != ""
}

// ValidKey reports whether key is a build key as Key makes them: 16 hex
// digits. A key names directories on a node's disk and objects in the
// image store; the node's internal API takes one from the wire.
func ValidKey(key string) bool {
	if len(key) != 16 {
		return false
	}
	for _, c := range key {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// baseFile records what a published build was made on.
type baseFile struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// Shared is a cluster node's custom templates: built here by Builder,
// whose CacheDir is the node's own, and published to Images; or fetched
// from Images into that cache. Images nil: the node's disk is all there
// is (a cluster of one node).
type Shared struct {
	Builder *Builder
	Images  *imagestore.Store
	Cache   *imagestore.Cache
	Log     *slog.Logger
}

// Build builds projectID's r (key Key(projectID, r, base's key)) and publishes it unless the
// image store holds it already.
func (s *Shared) Build(ctx context.Context, projectID string, r api.TemplateRecipe, key string, emit func(api.TemplateBuildEvent)) (Result, error) {
	// A build on an image (r.From, pinned by the api process, which keyed
	// it) has no base the other nodes hold: it is published whole, as the
	// difference from an empty base.
	var base sandbox.Artifact
	if r.From == "" {
		var err error
		if base, err = s.Builder.Base(ctx, r.Base); err != nil {
			return Result{}, fmt.Errorf("waiting for base template %s: %w", r.Base, err)
		}
		if got := Key(projectID, r, base.Key); got != key {
			return Result{}, &errdefs.Error{Kind: errdefs.ErrUnavailable,
				Msg: fmt.Sprintf("this node's base template %s is another build (%s) than the api process keyed the recipe on: run one Lizard version on every api and node process", r.Base, base.Key)}
		}
	}
	res, err := s.Builder.Build(ctx, projectID, r, key, emit)
	if err != nil || s.Images == nil {
		return res, err
	}
	// A build the store holds but that does not open with this node's
	// key (stored unsealed by an older Lizard, or altered) is published
	// again over it.
	if _, err := s.Images.Stat(ctx, ImageName(key)); err == nil {
		return res, nil
	} else if !errors.Is(err, imagestore.ErrNotFound) && !errors.Is(err, imagestore.ErrTampered) {
		return Result{}, storeAway(err)
	}
	emit(api.TemplateBuildEvent{Type: api.BuildEventLog, Text: "publishing the build to the image store"})
	begin := time.Now()
	dir, err := os.MkdirTemp(filepath.Join(s.Builder.cfg.CacheDir, "templates"), ".export-")
	if err != nil {
		return Result{}, fmt.Errorf("publishing template build %s: %w", key, err)
	}
	defer os.RemoveAll(dir)
	if r.From != "" {
		empty, err := os.MkdirTemp(filepath.Join(s.Builder.cfg.CacheDir, "templates"), ".export-base-")
		if err != nil {
			return Result{}, fmt.Errorf("publishing template build %s: %w", key, err)
		}
		defer os.RemoveAll(empty)
		base = sandbox.Artifact{RootFS: empty} // no name: an image's
	}
	if err := Export(res.RootFS, base, dir); err != nil {
		return Result{}, fmt.Errorf("publishing template build %s: %w", key, err)
	}
	m, err := s.Images.Put(ctx, ImageName(key), dir)
	if err != nil {
		return Result{}, storeAway(err)
	}
	s.Log.Info("template build published to the image store", "key", key, "size_bytes", m.Size, "took", time.Since(begin).Round(time.Millisecond))
	return res, nil
}

func storeAway(err error) error {
	return &errdefs.Error{Kind: errdefs.ErrUnavailable, Cause: err,
		Msg: "the image store did not take the template's build; retry when it is back (the node's log says why)"}
}

// Artifact returns custom template reference ref's build: from the
// node's cache, else fetched from the image store. A download that fails
// its checksum is fetched once more; a build missing or corrupt in the
// store is reported lost (ErrUnavailable, saying so), as is one the store
// could not serve.
func (s *Shared) Artifact(ctx context.Context, ref string) (sandbox.Artifact, error) {
	a, err := s.Builder.Artifact(ref)
	if err == nil || s.Images == nil {
		return a, err
	}
	name, key, _ := template.SplitRef(ref)
	if !ValidKey(key) {
		return a, errdefs.Invalidf("%q is not a custom template reference", ref)
	}
	var dir string
	var release func()
	for try := 0; ; try++ {
		dir, release, err = s.Cache.Get(ctx, ImageName(key))
		if err == nil {
			break
		}
		if (errors.Is(err, imagestore.ErrCorrupt) || imagestore.Reason(err) == "tampered") && try == 0 && ctx.Err() == nil {
			s.Log.Warn("a template build from the image store failed its check; fetching it again", "key", key, "err", err)
			continue
		}
		if ctx.Err() != nil {
			return a, ctx.Err()
		}
		if imagestore.IsLost(err) {
			return a, &errdefs.Error{Kind: errdefs.ErrUnavailable, Cause: err,
				Msg: fmt.Sprintf("template %q is lost from the image store (missing, corrupt, or failing its authentication): build it again (POST /v1/templates)", name)}
		}
		return a, &errdefs.Error{Kind: errdefs.ErrUnavailable, Cause: err,
			Msg: fmt.Sprintf("the image store did not serve template %q; retry when it is back", name)}
	}
	defer release()
	if err := s.importBuild(ctx, key, dir); err != nil {
		return a, err
	}
	return s.Builder.Artifact(ref)
}

// importBuild makes build key in the node's cache from published image dir.
func (s *Shared) importBuild(ctx context.Context, key, dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "base"))
	var bf baseFile
	if err == nil {
		err = json.Unmarshal(b, &bf)
	}
	if err != nil {
		return fmt.Errorf("reading the base of template build %s: %w", key, err)
	}
	var base sandbox.Artifact
	if bf.Name == "" {
		// Built on an image: published whole, applied on nothing.
		empty, err := os.MkdirTemp(filepath.Join(s.Builder.cfg.CacheDir, "templates"), ".import-base-")
		if err != nil {
			return fmt.Errorf("unpacking template build %s: %w", key, err)
		}
		defer os.RemoveAll(empty)
		base.RootFS = empty
	} else if base, err = s.Builder.Base(ctx, bf.Name); err != nil {
		return fmt.Errorf("waiting for base template %s: %w", bf.Name, err)
	} else if base.Key != bf.Key {
		return &errdefs.Error{Kind: errdefs.ErrUnavailable,
			Msg: fmt.Sprintf("the template was built on %s, and this node's base template is %s: run one Lizard version on every node", bf.Key, base.Key)}
	}
	begin := time.Now()
	_, err = template.EnsureLayer(ctx, s.Builder.cfg.CacheDir, LayerKey(key), io.Discard, func(ctx context.Context, rootfs string) error {
		return apply(ctx, base.RootFS, dir, rootfs)
	})
	if err != nil {
		return fmt.Errorf("unpacking template build %s: %w", key, err)
	}
	s.Log.Info("template build fetched from the image store", "key", key, "took", time.Since(begin).Round(time.Millisecond))
	return nil
}

// Remove drops build key: from the node's cache, and from the image store.
func (s *Shared) Remove(ctx context.Context, key string) error {
	if !ValidKey(key) {
		return errdefs.Invalidf("%q is not a template build's key", key)
	}
	err := template.RemoveLayer(s.Builder.cfg.CacheDir, LayerKey(key))
	if s.Images != nil {
		if derr := s.Images.Delete(ctx, ImageName(key)); derr != nil {
			err = errors.Join(err, derr)
		}
	}
	return err
}

// SweepUnused removes, at the node's start, the builds in its cache that
// nothing refers to (Uses, the rules the API removes a deleted
// template's build by) — which a template deleted while the node was down left here. st is the
// cluster's whole database, not the node's scoped handle. The image store
// is left alone: the deletion removed the build there, or something
// still refers to it.
func (s *Shared) SweepUnused(ctx context.Context, st *store.Store) error {
	// The step cache's entries of templates deleted meanwhile go too.
	serr := s.Builder.SweepStepsOf(ctx, st)
	dirs, _ := filepath.Glob(filepath.Join(s.Builder.cfg.CacheDir, "templates", LayerKey("*")))
	if len(dirs) == 0 {
		return serr
	}
	used, err := Uses(ctx, st)
	if err != nil {
		return err
	}
	errs := []error{serr}
	for _, d := range dirs {
		key := strings.TrimPrefix(filepath.Base(d), LayerKey(""))
		if _, ok := used[key]; !ValidKey(key) || ok {
			continue
		}
		if err := template.RemoveLayer(s.Builder.cfg.CacheDir, LayerKey(key)); err != nil {
			errs = append(errs, err)
			continue
		}
		os.RemoveAll(s.Builder.holders(key))
		s.Log.Info("removed a template build no template, sandbox or snapshot refers to (its template was deleted while this node was down)", "key", key)
	}
	return errors.Join(errs...)
}

// Held names the image store names of the builds in the node's cache.
func (s *Shared) Held() []string {
	dirs, _ := filepath.Glob(filepath.Join(s.Builder.cfg.CacheDir, "templates", LayerKey("*")))
	var out []string
	for _, d := range dirs {
		key := strings.TrimPrefix(filepath.Base(d), LayerKey(""))
		if _, built := template.LayerRootFS(s.Builder.cfg.CacheDir, LayerKey(key)); built {
			out = append(out, ImageName(key))
		}
	}
	return out
}

// Export writes into dir (empty) the difference of build rootfs from
// base's: see the package's layout above. An entry is changed when its
// type, mode, owner, size, modification time or link target differ; a
// recipe that rewrites a file keeping its size and its time to the
// nanosecond is not seen (its own template then differs between nodes).
// No link is followed: a directory the build made a link (or a file) is
// deleted and its replacement copied.
func Export(rootfs string, base sandbox.Artifact, dir string) error {
	b, _ := json.Marshal(baseFile{Name: base.Name, Key: base.Key})
	if err := os.WriteFile(filepath.Join(dir, "base"), b, 0o600); err != nil {
		return err
	}
	out := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(out, 0o755); err != nil {
		return err
	}
	var deleted bytes.Buffer
	// Removed: the base's paths absent (or of another type) in the build,
	// walked only below directories that are directories in both.
	err := filepath.WalkDir(base.RootFS, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == base.RootFS {
			return err
		}
		rel, _ := filepath.Rel(base.RootFS, p)
		fi, err := os.Lstat(filepath.Join(rootfs, rel))
		switch {
		case errors.Is(err, fs.ErrNotExist) || err == nil && fi.Mode().Type() != d.Type():
			deleted.WriteString(rel)
			deleted.WriteByte(0)
			if d.IsDir() {
				return filepath.SkipDir
			}
		case err != nil:
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("comparing the build with its base: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "deleted"), deleted.Bytes(), 0o600); err != nil {
		return err
	}
	// Added and changed; below a directory the base lacks, everything.
	err = filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == rootfs {
			return err
		}
		rel, _ := filepath.Rel(rootfs, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() && !fi.IsDir() && fi.Mode().Type() != fs.ModeSymlink {
			return nil // Strip left none; nothing a sandbox reads
		}
		if !changed(p, fi, filepath.Join(base.RootFS, rel)) {
			return nil
		}
		if err := copyParents(rootfs, out, rel); err != nil {
			return err
		}
		return copyEntry(p, filepath.Join(out, rel), fi)
	})
	if err != nil {
		return fmt.Errorf("copying what the build changed: %w", err)
	}
	return nil
}

// changed reports whether build entry p (fi) differs from the base's at
// bp. A base path whose parent is not a directory in the base is never
// reached: Export walks the build below directories, and a directory of
// the build that is a link in the base is itself changed (its type).
func changed(p string, fi fs.FileInfo, bp string) bool {
	bi, err := os.Lstat(bp)
	if err != nil || bi.Mode() != fi.Mode() {
		return true
	}
	bs, s := bi.Sys().(*syscall.Stat_t), fi.Sys().(*syscall.Stat_t)
	if bs.Uid != s.Uid || bs.Gid != s.Gid || !bi.ModTime().Equal(fi.ModTime()) {
		return true
	}
	switch {
	case fi.Mode().IsRegular():
		return bi.Size() != fi.Size()
	case fi.Mode().Type() == fs.ModeSymlink:
		a, _ := os.Readlink(p)
		b, _ := os.Readlink(bp)
		return a != b
	}
	return false
}

// copyParents makes rel's parent directories in out, with the build's
// modes and owners.
func copyParents(rootfs, out, rel string) error {
	parent := filepath.Dir(rel)
	if parent == "." {
		return nil
	}
	if _, err := os.Lstat(filepath.Join(out, parent)); err == nil {
		return nil
	}
	if err := copyParents(rootfs, out, parent); err != nil {
		return err
	}
	fi, err := os.Lstat(filepath.Join(rootfs, parent))
	if err != nil {
		return err
	}
	return copyEntry(filepath.Join(rootfs, parent), filepath.Join(out, parent), fi)
}

// copyEntry copies entry src (fi: a directory, a regular file or a
// link) to dst, with its mode, owner and modification time; a directory
// without its entries.
func copyEntry(src, dst string, fi fs.FileInfo) error {
	st := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.IsDir():
		if err := os.Mkdir(dst, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	case fi.Mode().Type() == fs.ModeSymlink:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dst); err != nil {
			return err
		}
		if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
		t := unix.NsecToTimespec(fi.ModTime().UnixNano())
		return unix.UtimesNanoAt(unix.AT_FDCWD, dst, []unix.Timespec{t, t}, unix.AT_SYMLINK_NOFOLLOW)
	default:
		in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer in.Close()
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, in)
		if err = errors.Join(err, f.Close()); err != nil {
			return err
		}
	}
	if err := os.Chown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := os.Chmod(dst, fi.Mode()&(fs.ModePerm|fs.ModeSticky)); err != nil {
		return err
	}
	return os.Chtimes(dst, fi.ModTime(), fi.ModTime())
}

// apply makes rootfs (empty) from a copy of baseRootFS with published
// image dir applied: its deleted paths removed, its rootfs/ copied over.
//
// The image is whatever the store holds (another node's export, a
// corrupt object, or one written by whoever can write the bucket), and
// the base's copy has links to absolute paths (var/run -> /run,
// etc/alternatives/*), which on this host name the host's files. So no
// deleted path may pass through a link, and before cp(1) copies rootfs/
// over, every directory of it must be a directory of the copy, and each
// other entry's counterpart is removed: cp writes through a link it finds
// where it copies a file. An Export names a type change as deleted, so
// none of this refuses one.
func apply(ctx context.Context, baseRootFS, dir, rootfs string) error {
	if out, err := exec.CommandContext(ctx, "cp", "-a", baseRootFS+"/.", rootfs+"/").CombinedOutput(); err != nil {
		return fmt.Errorf("copying the base template: %w: %s", err, bytes.TrimSpace(out))
	}
	return applyDelta(ctx, rootfs, dir)
}

// applyDelta applies the difference in dir (deleted, rootfs/: an
// image's, or a cached step's) to rootfs, checked as apply says.
func applyDelta(ctx context.Context, rootfs, dir string) error {
	deleted, err := os.ReadFile(filepath.Join(dir, "deleted"))
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, rel := range strings.Split(string(deleted), "\x00") {
		if rel == "" {
			continue
		}
		if !filepath.IsLocal(rel) {
			return fmt.Errorf("%w: deleted path %q leaves the root filesystem", imagestore.ErrCorrupt, rel)
		}
		if err := dirsAbove(root, rel); err != nil {
			return err
		}
		if err := root.RemoveAll(rel); err != nil {
			return err
		}
	}
	changes := filepath.Join(dir, "rootfs")
	err = filepath.WalkDir(changes, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == changes {
			return err
		}
		// Walked top down: every parent of rel was checked a
		// directory of the copy, or is absent from it.
		rel, _ := filepath.Rel(changes, p)
		fi, err := root.Lstat(rel)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			return err
		case d.Type() != fi.Mode().Type():
			return fmt.Errorf("%w: %q changes an entry's type without deleting it", imagestore.ErrCorrupt, rel)
		case d.IsDir():
			return nil
		}
		return root.Remove(rel)
	})
	if err != nil {
		return fmt.Errorf("checking the template's changes: %w", err)
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", changes+"/.", rootfs+"/").CombinedOutput(); err != nil {
		return fmt.Errorf("copying the template's changes: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// dirsAbove fails unless every parent of rel in root is a directory, not
// a link.
func dirsAbove(root *os.Root, rel string) error {
	for p := filepath.Dir(rel); p != "."; p = filepath.Dir(p) {
		fi, err := root.Lstat(p)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: deleted path %q is below %q, not a directory", imagestore.ErrCorrupt, rel, p)
		}
	}
	return nil
}
