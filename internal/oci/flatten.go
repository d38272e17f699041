package oci

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"
)

// Bounds on one image, whoever sent it: a registry is the user's choice,
// and so is everything it serves.
const (
	// MaxLayers is Docker's own ceiling (overlayfs stacks at most 128
	// lower directories); more is a made-up image.
	MaxLayers = 128
	// MaxBytes bounds everything the image's layers unpack to, tar
	// headers and padding included, and so a decompression bomb: it is
	// stopped when it reaches this, not when the disk is full.
	MaxBytes int64 = 8 << 30
	// MaxFiles bounds the entries of all layers together (whiteouts
	// included): a large Python image has about 100,000.
	MaxFiles = 1_000_000
)

// Limits are the bounds Flatten and Pull apply; the zero value means the
// constants above.
type Limits struct {
	Layers int
	Bytes  int64
	Files  int
}

func (l Limits) withDefaults() Limits {
	if l.Layers == 0 {
		l.Layers = MaxLayers
	}
	if l.Bytes == 0 {
		l.Bytes = MaxBytes
	}
	if l.Files == 0 {
		l.Files = MaxFiles
	}
	return l
}

// FlattenReport counts what Flatten left out or undid.
type FlattenReport struct {
	Files    int // entries written
	Bytes    int64
	Special  int // device nodes and FIFOs not made
	SetID    int // set-user-ID and set-group-ID bits not given
	Whiteout int // paths removed by whiteouts
}

// Layer opens a layer's uncompressed tar stream.
type Layer func() (io.ReadCloser, error)

// Flatten unpacks layers, lowest first, into target (an existing, empty
// directory), applying each layer's whiteouts to the ones below it.
//
// A layer is hostile input. Every write goes through an os.Root at
// target, which refuses any path that would leave it (`..`, absolute
// links); and before an entry is written each of its parent directories
// is checked, by Lstat from the top, to be a real directory, so no
// symbolic link is resolved at all, even one that stays inside: an entry
// below a link is refused, as a layer Docker itself writes never has
// one. Entries are never opened through an existing entry either: what
// is there is removed first and the new one made with O_EXCL. Device
// nodes and FIFOs are not made, set-id bits not given, extended
// attributes (file capabilities) never set; template.Strip, run on the
// result by the caller, is the second layer of the same rule.
func Flatten(ctx context.Context, target string, layers []Layer, lim Limits) (FlattenReport, error) {
	lim = lim.withDefaults()
	var rep FlattenReport
	if len(layers) > lim.Layers {
		return rep, errdefs.Invalidf("the image has %d layers; at most %d are allowed", len(layers), lim.Layers)
	}
	root, err := os.OpenRoot(target)
	if err != nil {
		return rep, fmt.Errorf("opening %s: %w", target, err)
	}
	defer root.Close()
	f := &flattener{root: root, lim: lim, rep: &rep, dirs: map[string]bool{}, isRoot: os.Geteuid() == 0}
	for i, open := range layers {
		if err := f.layer(ctx, i, open); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

type flattener struct {
	root   *os.Root
	lim    Limits
	rep    *FlattenReport
	read   int64 // uncompressed bytes read, all layers
	isRoot bool
	// dirs are paths checked to be real directories; cleared whenever
	// anything is removed, which could have replaced one.
	dirs map[string]bool
	// added are this layer's entries, which its opaque whiteouts keep;
	// skipped its special files, which hard links to them skip too.
	added, skipped map[string]bool
}

// countingReader counts the uncompressed bytes of all layers, and ends
// the stream at the bound.
type countingReader struct {
	r io.Reader
	f *flattener
}

var errTooBig = errors.New("too big")

func (c *countingReader) Read(p []byte) (int, error) {
	if c.f.read >= c.f.lim.Bytes {
		return 0, errTooBig
	}
	if rest := c.f.lim.Bytes - c.f.read; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := c.r.Read(p)
	c.f.read += int64(n)
	return n, err
}

func (f *flattener) layer(ctx context.Context, i int, open Layer) (err error) {
	rc, err := open()
	if err != nil {
		return fmt.Errorf("opening layer %d: %w", i+1, err)
	}
	defer rc.Close()
	defer func() {
		if errors.Is(err, errTooBig) {
			err = errdefs.Invalidf("the image unpacks to more than %d bytes (layer %d reached the bound: a decompression bomb, or an image too big for a template)", f.lim.Bytes, i+1)
		} else if err != nil {
			var e *errdefs.Error
			if !errors.As(err, &e) {
				err = fmt.Errorf("unpacking layer %d: %w", i+1, err)
			}
		}
	}()
	f.added, f.skipped = map[string]bool{}, map[string]bool{}
	tr := tar.NewReader(&countingReader{r: rc, f: f})
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		f.rep.Files++
		if f.rep.Files > f.lim.Files {
			return errdefs.Invalidf("the image has more than %d files; at most %d are allowed", f.lim.Files, f.lim.Files)
		}
		if err := f.entry(h, tr); err != nil {
			return err
		}
	}
}

// clean turns a tar name into a path relative to the root, refusing one
// that leaves it. A leading / is dropped, as Docker does.
func clean(name string) (string, error) {
	p := path.Clean("/" + name)
	if strings.Contains("/"+name+"/", "/../") || strings.ContainsRune(name, 0) {
		return "", errdefs.Invalidf("the image's entry %q has a .. component: it would leave the root filesystem", name)
	}
	if p == "/" {
		return ".", nil
	}
	return p[1:], nil
}

// parents checks that every parent directory of rel is a real directory
// (not a link), or absent; missing ones are made (0755, root's), as
// Docker does for a layer that names a file before its directory.
func (f *flattener) parents(rel string) error {
	dir := path.Dir(rel)
	if dir == "." || f.dirs[dir] {
		return nil
	}
	if err := f.parents(dir); err != nil {
		return err
	}
	fi, err := f.root.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := f.root.Mkdir(dir, 0o755); err != nil {
			return err
		}
	case err != nil:
		return err
	case fi.Mode().Type() == fs.ModeSymlink:
		return errdefs.Invalidf("the image's entry %q is below %q, a symbolic link: Lizard follows no link while unpacking an image", rel, dir)
	case !fi.IsDir():
		return errdefs.Invalidf("the image's entry %q is below %q, which is not a directory", rel, dir)
	}
	f.dirs[dir] = true
	return nil
}

// remove removes rel, whatever it is, if it is there.
func (f *flattener) remove(rel string) error {
	if _, err := f.root.Lstat(rel); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	clear(f.dirs)
	return f.root.RemoveAll(rel)
}

const (
	whPrefix = ".wh."
	whOpaque = ".wh..wh..opq"
)

func (f *flattener) entry(h *tar.Header, r io.Reader) error {
	rel, err := clean(h.Name)
	if err != nil {
		return err
	}
	dir, base := path.Dir(rel), path.Base(rel)
	if strings.HasPrefix(base, whPrefix) {
		if err := f.parents(rel); err != nil {
			return err
		}
		if base == whOpaque {
			return f.opaque(dir)
		}
		name := strings.TrimPrefix(base, whPrefix)
		gone := path.Join(dir, name)
		if name == "" || name == "." || name == ".." {
			return errdefs.Invalidf("the image's whiteout %q names no entry of its directory", h.Name)
		}
		f.rep.Whiteout++
		return f.remove(gone)
	}
	if rel == "." {
		return nil // the root itself: its mode is the template's, not the image's
	}
	if err := f.parents(rel); err != nil {
		return err
	}
	mode := os.FileMode(h.Mode) & (fs.ModePerm)
	if h.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	if h.Mode&0o6000 != 0 {
		f.rep.SetID++
	}
	switch h.Typeflag {
	case tar.TypeDir:
		fi, err := f.root.Lstat(rel)
		if err != nil || !fi.IsDir() {
			if err := f.remove(rel); err != nil {
				return err
			}
			if err := f.root.Mkdir(rel, 0o700); err != nil {
				return err
			}
		}
	case tar.TypeReg, tar.TypeRegA:
		if err := f.remove(rel); err != nil {
			return err
		}
		out, err := f.root.OpenFile(rel, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		n, err := io.Copy(out, r)
		if err = errors.Join(err, out.Close()); err != nil {
			return err
		}
		f.rep.Bytes += n
	case tar.TypeSymlink:
		if err := f.remove(rel); err != nil {
			return err
		}
		// The target is a string for the sandbox to resolve in its own
		// root; nothing here ever follows it.
		if err := f.root.Symlink(h.Linkname, rel); err != nil {
			return err
		}
		f.added[rel] = true
		return f.chown(rel, h, true)
	case tar.TypeLink:
		return f.link(h, rel)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		// Not made: a device node would be a door to the host's device
		// should a host user reach the tree, and the sandbox's /dev is
		// gVisor's own. What was there goes, as Docker would replace it.
		if err := f.remove(rel); err != nil {
			return err
		}
		f.skipped[rel] = true
		f.rep.Special++
		return nil
	default:
		return nil // PAX global headers, GNU long-name records (read by tar) and the like
	}
	f.added[rel] = true
	if err := f.chown(rel, h, false); err != nil {
		return err
	}
	if err := f.root.Chmod(rel, mode); err != nil {
		return err
	}
	if h.Typeflag != tar.TypeDir && !h.ModTime.IsZero() {
		return f.root.Chtimes(rel, time.Time{}, h.ModTime)
	}
	return nil
}

// link makes rel a hard link to the entry h names, which must be in the
// root below real directories only, and not a directory.
func (f *flattener) link(h *tar.Header, rel string) error {
	target, err := clean(h.Linkname)
	if err != nil {
		return err
	}
	if f.skipped[target] {
		f.skipped[rel] = true
		f.rep.Special++
		return nil
	}
	if err := f.parents(target); err != nil {
		return err
	}
	fi, err := f.root.Lstat(target)
	if err != nil {
		return errdefs.Invalidf("the image's hard link %q names %q, which is not there", h.Name, h.Linkname)
	}
	if fi.IsDir() {
		return errdefs.Invalidf("the image's hard link %q names a directory, %q", h.Name, h.Linkname)
	}
	if target == rel {
		return nil
	}
	if err := f.remove(rel); err != nil {
		return err
	}
	// linkat(2) without AT_SYMLINK_FOLLOW: a link to a symbolic link
	// is a second name of the link, never of what it points at.
	if err := f.root.Link(target, rel); err != nil {
		return err
	}
	f.added[rel] = true
	return nil // the inode's owner and mode are its first name's
}

// chown gives rel the image's owner (only root can, and only root runs
// the server; a test as another user keeps its own).
func (f *flattener) chown(rel string, h *tar.Header, link bool) error {
	if !f.isRoot {
		return nil
	}
	if link {
		return f.root.Lchown(rel, h.Uid, h.Gid)
	}
	return f.root.Chown(rel, h.Uid, h.Gid)
}

// opaque empties dir of what lower layers put there (this layer's
// entries stay: the whiteout may come after them in the tar).
func (f *flattener) opaque(dir string) error {
	fi, err := f.root.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return errdefs.Invalidf("the image's opaque whiteout is in %q, which is not a directory", dir)
	}
	d, err := f.root.Open(dir)
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		p := path.Join(dir, n)
		if !f.added[p] {
			f.rep.Whiteout++
			if err := f.remove(p); err != nil {
				return err
			}
			continue
		}
		// A directory this layer names again hides what lower layers
		// put in it too.
		if fi, err := f.root.Lstat(p); err == nil && fi.IsDir() {
			if err := f.opaque(p); err != nil {
				return err
			}
		}
	}
	return nil
}
