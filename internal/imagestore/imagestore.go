// Package imagestore keeps checkpoint images (paused sandboxes, snapshots)
// where they outlive the node that made them (docs/storage.md). An image
// is a directory of files; the store holds it as one tar stream under a
// name, sealed: encrypted and authenticated with a key the bucket does
// not hold (seal.go).
//
// A Bucket is the backend — a directory (package disk) or S3-compatible
// object storage (package s3) — and holds plain objects. Store lays images
// over it so that a half-written upload is never used: the sealed tar goes
// to a key of its own (name/data-<random>.img), and only once it is whole
// is the manifest (name/manifest.json) written, naming that object, its
// size and the image's random ID, under a MAC. A reader goes through the
// manifest, so it sees the previous image or the new one, never a part;
// an image that does not open with the node's key is refused with
// ErrTampered, and nothing of it is unpacked into place.
//
// A file the runtime names as shared (Shared: a --share-heap template's
// heap, the same ~72 MB in every image of every sandbox of the template)
// is kept once per content, under shared/SHA256, sealed the same way; an
// image's manifest names it and its tar leaves it out (shared.go).
package imagestore

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/internal/sparse"
)

var (
	// ErrNotFound: no image (no manifest) under that name.
	ErrNotFound = errors.New("image not found in the image store")
	// ErrCorrupt: an image's bytes do not match its manifest (a truncated
	// or altered object).
	// ErrCorrupt: an image that opened with the node's key holds what
	// no node writes (an entry out of the image, a device): written by a
	// holder of the key, through a fault of its own.
	ErrCorrupt = errors.New("image in the image store is corrupt")
)

// Bucket is an object store backend. Keys are slash-separated paths
// relative to the bucket's own prefix.
type Bucket interface {
	// Put stores r's bytes, of unknown length, under key, streaming them.
	Put(ctx context.Context, key string, r io.Reader) error
	// Get opens key's bytes; ErrNotFound (wrapped) if absent.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Delete removes key; an absent key is not an error.
	Delete(ctx context.Context, key string) error
	// List returns the keys under prefix.
	List(ctx context.Context, prefix string) ([]string, error)
	// Check tells whether the bucket can be used (it exists, the
	// credentials are good), naming the setting at fault.
	Check(ctx context.Context) error
	// String names the bucket for logs (never its credentials).
	String() string
}

// Manifest is an image's commit record.
type Manifest struct {
	Object  string    `json:"object"` // key of the sealed tar stream
	ID      string    `json:"id"`     // hex, 32 random bytes: the image's stream key is derived from it
	Size    int64     `json:"size"`   // bytes of the sealed object
	Created time.Time `json:"created"`
	// Shared are the image's files kept once per content (shared.go),
	// which its tar leaves out; none in an image of a Lizard before.
	Shared []SharedFile `json:"shared,omitempty"`
	// SharedUploaded is the bytes of shared objects the Put that
	// returned the manifest uploaded (none when the store had them).
	SharedUploaded int64 `json:"-"`
}

// Store keeps images in a Bucket, sealed with a Key.
type Store struct {
	b      Bucket
	key    *Key
	shared Shared // nil: no file is shared
}

// New returns a store over b sealing and opening images with key.
func New(b Bucket, key *Key) *Store { return &Store{b: b, key: key} }

// Bucket is the store's backend.
func (s *Store) Bucket() Bucket { return s.b }

// KeyID names the key images are sealed with (a hash that says nothing of it).
func (s *Store) KeyID() string { return s.key.ID() }

func manifestKey(name string) string { return name + "/manifest.json" }

// checkName refuses names that would escape their prefix.
func checkName(name string) error {
	if name == "" || path.Clean(name) != name || strings.HasPrefix(name, "/") || strings.HasPrefix(name, "..") || strings.Contains(name, "/../") {
		return fmt.Errorf("invalid image name %q", name)
	}
	return nil
}

// Put uploads directory dir as image name, replacing what name held once
// the upload is whole.
func (s *Store) Put(ctx context.Context, name, dir string) (Manifest, error) {
	if err := checkName(name); err != nil {
		return Manifest{}, err
	}
	shared, uploaded, err := s.putShared(ctx, dir)
	if err != nil {
		return Manifest{}, fmt.Errorf("uploading image %s: %w", name, err)
	}
	skip := map[string]bool{}
	for _, f := range shared {
		skip[f.Path] = true
	}
	m, err := s.put(ctx, name, shared, func(w io.Writer) error { return writeTar(w, dir, skip) })
	if err != nil {
		return m, err
	}
	again, err := s.uploadMissing(ctx, dir, shared)
	m.SharedUploaded = uploaded + again
	if err != nil {
		return m, fmt.Errorf("uploading image %s: %w", name, err)
	}
	return m, nil
}

// dropPartWait bounds the removal of a failed upload's object: the upload
// that failed may have been cancelled (a node stopping) against a store
// that stalls, and what fails to go is only space.
const dropPartWait = time.Minute

// dropPart removes key, the object of an upload that failed, best-effort,
// even when ctx was cancelled, within dropPartWait.
func (s *Store) dropPart(ctx context.Context, key string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropPartWait)
	defer cancel()
	s.b.Delete(ctx, key)
}

// put uploads what write writes as image name, sealed.
func (s *Store) put(ctx context.Context, name string, shared []SharedFile, write func(io.Writer) error) (Manifest, error) {
	id := make([]byte, 32)
	rand.Read(id)
	aead, err := s.key.stream(name, id)
	if err != nil {
		return Manifest{}, err
	}
	m := Manifest{Object: name + "/data-" + randomID() + ".img", ID: hex.EncodeToString(id), Created: time.Now().UTC(), Shared: shared}
	pr, pw := io.Pipe()
	cw := &countWriter{w: pw}
	sw := newSealer(cw, aead, name)
	go func() {
		err := write(sw)
		if err == nil {
			err = sw.Close()
		}
		pw.CloseWithError(err)
	}()
	err = s.b.Put(ctx, m.Object, pr)
	pr.CloseWithError(errors.New("upload ended")) // stops the writer if Put returned early
	if err != nil {
		s.dropPart(ctx, m.Object)
		return Manifest{}, fmt.Errorf("uploading image %s: %w", name, err)
	}
	m.Size = cw.n
	body, _ := json.Marshal(m)
	env, _ := json.Marshal(envelope{Format: format, KeyID: s.key.ID(), Manifest: body, MAC: hex.EncodeToString(s.key.manifestMAC(name, body))})
	if err := s.b.Put(ctx, manifestKey(name), bytes.NewReader(env)); err != nil {
		s.dropPart(ctx, m.Object)
		return Manifest{}, fmt.Errorf("publishing image %s: %w", name, err)
	}
	// Older versions are unreachable now: remove them (best effort; a
	// reader that read the old manifest just before fails with
	// ErrNotFound and reads again).
	if keys, err := s.b.List(ctx, name+"/data-"); err == nil {
		for _, k := range keys {
			if k != m.Object {
				s.b.Delete(ctx, k)
			}
		}
	}
	return m, nil
}

// Stat returns image name's manifest; ErrNotFound if there is none,
// ErrTampered if it does not authenticate with the store's key.
func (s *Store) Stat(ctx context.Context, name string) (Manifest, error) {
	if err := checkName(name); err != nil {
		return Manifest{}, err
	}
	rc, err := s.b.Get(ctx, manifestKey(name))
	if err != nil {
		return Manifest{}, fmt.Errorf("reading the manifest of image %s: %w", name, err)
	}
	defer rc.Close()
	var env struct {
		envelope
		SHA256 string `json:"sha256"` // an unsealed manifest's
	}
	if err := json.NewDecoder(io.LimitReader(rc, 1<<16)).Decode(&env); err != nil {
		return Manifest{}, fmt.Errorf("reading the manifest of image %s: %w: %v", name, ErrTampered, err)
	}
	switch {
	case env.Format == "" && env.SHA256 != "":
		return Manifest{}, fmt.Errorf("image %s: %w; it is refused (docs/storage.md#images-from-before-sealing)", name, ErrUnsealed)
	case env.Format != format:
		return Manifest{}, fmt.Errorf("image %s: %w: its manifest is of format %q, not %q", name, ErrTampered, env.Format, format)
	case env.KeyID != s.key.ID():
		// The ID is not authenticated: it only words the refusal.
		return Manifest{}, fmt.Errorf("image %s: %w (%s), and this node holds image key %s: give every node the same secrets key (docs/storage.md#sealing)", name, ErrWrongKey, env.KeyID, s.key.ID())
	}
	mac, err := hex.DecodeString(env.MAC)
	if err != nil || !hmac.Equal(mac, s.key.manifestMAC(name, env.Manifest)) {
		return Manifest{}, fmt.Errorf("image %s: %w: its manifest's MAC does not match (rewritten, or another image's)", name, ErrTampered)
	}
	var m Manifest
	if err := json.Unmarshal(env.Manifest, &m); err != nil {
		return Manifest{}, fmt.Errorf("reading the manifest of image %s: %w", name, err)
	}
	// Put names the object name/data-<random>.img; the MAC says this
	// store's key wrote it, which a check costs nothing to back.
	if rest, ok := strings.CutPrefix(m.Object, name+"/data-"); !ok || strings.Contains(rest, "/") || checkName(m.Object) != nil {
		return Manifest{}, fmt.Errorf("reading the manifest of image %s: %w: it names object %q, not one of its own", name, ErrCorrupt, m.Object)
	}
	if id, err := hex.DecodeString(m.ID); err != nil || len(id) != 32 {
		return Manifest{}, fmt.Errorf("reading the manifest of image %s: %w: its ID %q is not 32 bytes of hex", name, ErrCorrupt, m.ID)
	}
	for _, f := range m.Shared {
		if err := f.check(); err != nil {
			return Manifest{}, fmt.Errorf("reading the manifest of image %s: %w: %v", name, ErrCorrupt, err)
		}
	}
	return m, nil
}

// Get downloads image name into directory dir, which must not exist:
// the image is unpacked beside it and renamed into place only once its
// manifest and every chunk opened with the store's key, to the marked
// last one, and its shared files are in place with the content the
// manifest names, so dir is whole and authentic, or absent.
func (s *Store) Get(ctx context.Context, name, dir string) (Manifest, error) {
	m, err := s.Stat(ctx, name)
	if err != nil {
		return m, err
	}
	id, _ := hex.DecodeString(m.ID)
	aead, err := s.key.stream(name, id)
	if err != nil {
		return m, err
	}
	rc, err := s.b.Get(ctx, m.Object)
	if err != nil {
		return m, fmt.Errorf("downloading image %s: %w", name, err)
	}
	defer rc.Close()
	tmp := fmt.Sprintf("%s.part-%s", dir, randomID())
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return m, fmt.Errorf("downloading image %s: %w", name, err)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return m, fmt.Errorf("downloading image %s: %w", name, err)
	}
	// The shared files go first, so that no entry of the tar (a link
	// where one goes) is under them: one there is refused as twice.
	for _, f := range m.Shared {
		if err := s.getShared(ctx, f, tmp); err != nil {
			os.RemoveAll(tmp)
			return m, fmt.Errorf("downloading image %s: %w", name, err)
		}
	}
	// A byte past the manifest's size is enough to know the object is
	// not the image: an endless or oversized object is not read on.
	cr := &countReader{r: io.LimitReader(rc, m.Size+1)}
	err = unpackSealed(ctx, cr, aead, name, tmp)
	if err == nil && cr.n != m.Size {
		err = fmt.Errorf("%w: its object is %d bytes, the manifest says %d", ErrTampered, cr.n, m.Size)
	}
	if err == nil {
		err = os.Rename(tmp, dir)
	}
	if err != nil {
		os.RemoveAll(tmp)
		return m, fmt.Errorf("downloading image %s: %w", name, err)
	}
	return m, nil
}

// unpackSealed unpacks the tar sealed under name in r into dir, reading r
// to its end: the tar's end-of-archive blocks may be followed by padding,
// and the last chunk must open, marked so. Its error says which failed:
// ctx, the opener (its failure is the cause of whatever the tar reader
// made of it: ErrTampered...), or a tar this node will not unpack
// (broken, an entry twice), which a holder of the key wrote: ErrCorrupt.
func unpackSealed(ctx context.Context, r io.Reader, aead cipher.AEAD, name, dir string) error {
	op := newOpener(r, aead, name)
	err := readTar(op, dir)
	if err == nil {
		_, err = io.Copy(io.Discard, op)
	}
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case op.err != nil:
		return op.err
	case err != nil && !errors.Is(err, ErrCorrupt) && !localFault(err):
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return err
}

// Delete removes image name: its manifest first, so that no reader starts
// on what goes next.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := s.b.Delete(ctx, manifestKey(name)); err != nil {
		return fmt.Errorf("deleting image %s: %w", name, err)
	}
	keys, err := s.b.List(ctx, name+"/")
	if err != nil {
		return fmt.Errorf("deleting image %s: %w", name, err)
	}
	var errs []error
	for _, k := range keys {
		errs = append(errs, s.b.Delete(ctx, k))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("deleting image %s: %w", name, err)
	}
	return nil
}

// localFault reports whether err is this node's disk failing, not the
// image.
func localFault(err error) bool {
	for _, e := range []error{syscall.ENOSPC, syscall.EDQUOT, syscall.EIO, syscall.EROFS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func randomID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// writeTar writes the regular files, directories and symlinks under dir
// but those of skip (slash-separated paths relative to dir).
func writeTar(w io.Writer, dir string, skip map[string]bool) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." || skip[filepath.ToSlash(rel)] {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !fi.Mode().IsRegular() && !fi.IsDir() {
			return nil // sockets, fifos: nothing a restore reads
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		// Owners travel by number (a template's /home/user is the
		// sandbox user's), never by name, which differs between hosts.
		hdr.Uname, hdr.Gname = "", ""
		// PAX: times to the nanosecond (Python checks a module's cache
		// by its source's time).
		hdr.Format = tar.FormatPAX
		if !fi.Mode().IsRegular() {
			return tw.WriteHeader(hdr)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return writeFileEntry(tw, hdr, f)
	})
	if err != nil {
		return fmt.Errorf("packing %s: %w", dir, err)
	}
	return tw.Close()
}

// A file with holes (a template's shared heap: 142 MB of address space,
// ~72 MB of data) goes as its data alone: an entry of type typeHoles, its
// size in the PAX record holesSize, its data a map (a big-endian count,
// then each extent's offset and length) followed by the extents' bytes,
// which readTar writes at their offsets, leaving the rest holes. tar has
// sparse files (GNU.sparse.*), but Go's archive/tar writes none, and a
// type of its own is one readTar of a Lizard before it refuses as unknown
// (ErrCorrupt) instead of unpacking the data run together. A file without
// holes is a plain entry, as every image's before.
const (
	typeHoles = 'H' // POSIX leaves 'A'-'Z' to vendors; none uses 'H'
	holesSize = "LIZARD.holes.size"
)

// maxExtents bounds a typeHoles map (16 bytes an extent), read whole
// before the data: a heap has a few thousand.
const maxExtents = 1 << 20

// writeFileEntry writes regular file f's entry: typeHoles if it has
// holes, else plain.
func writeFileEntry(tw *tar.Writer, hdr *tar.Header, f *os.File) error {
	ext, err := sparse.Extents(f, hdr.Size)
	if err != nil || (len(ext) == 1 && ext[0] == sparse.Extent{Off: 0, Len: hdr.Size}) || hdr.Size == 0 {
		// No holes, or a filesystem that cannot tell: all of it.
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		_, err = io.CopyN(tw, f, hdr.Size)
		return err
	}
	m := binary.BigEndian.AppendUint64(nil, uint64(len(ext)))
	data := int64(0)
	for _, e := range ext {
		m = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(m, uint64(e.Off)), uint64(e.Len))
		data += e.Len
	}
	h := *hdr
	h.Typeflag = typeHoles
	h.PAXRecords = map[string]string{holesSize: strconv.FormatInt(hdr.Size, 10)}
	h.Size = int64(len(m)) + data
	if err := tw.WriteHeader(&h); err != nil {
		return err
	}
	if _, err := tw.Write(m); err != nil {
		return err
	}
	for _, e := range ext {
		if _, err := io.Copy(tw, io.NewSectionReader(f, e.Off, e.Len)); err != nil {
			return err
		}
	}
	return nil
}

// writeHoles writes a typeHoles entry's file at p: its extents at their
// offsets, the rest holes. The map is checked before anything is written:
// extents in order, apart, inside the file, and the data the entry's size
// says; so the file takes on disk no more than the entry's bytes.
func writeHoles(root *os.Root, p string, hdr *tar.Header, r io.Reader, mode fs.FileMode) error {
	size, err := strconv.ParseInt(hdr.PAXRecords[holesSize], 10, 64)
	if err != nil || size < 0 {
		return fmt.Errorf("%w: entry %q has no size (%s %q)", ErrCorrupt, hdr.Name, holesSize, hdr.PAXRecords[holesSize])
	}
	var count [8]byte
	if _, err := io.ReadFull(r, count[:]); err != nil {
		return fmt.Errorf("%w: entry %q: its map: %v", ErrCorrupt, hdr.Name, err)
	}
	n := binary.BigEndian.Uint64(count[:])
	if n > maxExtents || n > uint64(hdr.Size-8)/16 {
		return fmt.Errorf("%w: entry %q maps %d extents in %d bytes", ErrCorrupt, hdr.Name, n, hdr.Size)
	}
	m := make([]byte, 16*n)
	if _, err := io.ReadFull(r, m); err != nil {
		return fmt.Errorf("%w: entry %q: its map: %v", ErrCorrupt, hdr.Name, err)
	}
	ext := make([]sparse.Extent, n)
	end, data := int64(0), int64(0)
	for i := range ext {
		off, l := binary.BigEndian.Uint64(m[16*i:]), binary.BigEndian.Uint64(m[16*i+8:])
		if off < uint64(end) || l > uint64(size) || off > uint64(size)-l {
			return fmt.Errorf("%w: entry %q: extent %d (%d bytes at %d) overlaps another or leaves its %d bytes", ErrCorrupt, hdr.Name, i, l, off, size)
		}
		ext[i] = sparse.Extent{Off: int64(off), Len: int64(l)}
		end, data = int64(off+l), data+int64(l)
	}
	if data != hdr.Size-8-int64(len(m)) {
		return fmt.Errorf("%w: entry %q maps %d bytes of data and holds %d", ErrCorrupt, hdr.Name, data, hdr.Size-8-int64(len(m)))
	}
	f, err := root.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	for _, e := range ext {
		if _, err = f.Seek(e.Off, io.SeekStart); err != nil {
			break
		}
		if _, err = io.CopyN(f, r, e.Len); err != nil {
			break
		}
	}
	if err == nil {
		err = f.Truncate(size)
	}
	return errors.Join(err, f.Close())
}

// readTar unpacks r into dir, refusing entries that would land outside
// it. An image comes from the store, which another node, a corrupt object
// or whoever can write the bucket made, and the node unpacks it as root:
// every write goes through an os.Root on dir (no path, link or ".."
// resolves outside it), an entry below a link the image itself made is
// refused, as are hard links, devices, fifos and GNU sparse files (a few
// bytes of header standing for terabytes of zeros: written out by
// archive/tar; typeHoles's holes stay holes), and set-ID bits are
// dropped.
//
// dir is made if absent; it may hold the image's shared files already.
func readTar(r io.Reader, dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	var dirs []dirMode
	links := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			for i := len(dirs) - 1; i >= 0; i-- {
				d := dirs[i]
				if err := errors.Join(root.Chmod(d.path, d.mode), root.Chtimes(d.path, d.mtime, d.mtime)); err != nil {
					return err
				}
			}
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(hdr.Name)
		if name == "." || !filepath.IsLocal(filepath.FromSlash(name)) {
			return fmt.Errorf("%w: entry %q leaves the image", ErrCorrupt, hdr.Name)
		}
		if under := linkAbove(links, name); under != "" {
			return fmt.Errorf("%w: entry %q is below link %q", ErrCorrupt, hdr.Name, under)
		}
		for k := range hdr.PAXRecords {
			if strings.HasPrefix(k, "GNU.sparse.") {
				return fmt.Errorf("%w: entry %q is a sparse file", ErrCorrupt, hdr.Name)
			}
		}
		p := filepath.FromSlash(name)
		// Permissions and the sticky bit (a root filesystem's /tmp);
		// never set-ID bits, which would be a privilege on this host.
		mode := hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSticky)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if fi, err := root.Lstat(p); err == nil && !fi.IsDir() {
				return fmt.Errorf("%w: directory %q is already another entry", ErrCorrupt, hdr.Name)
			}
			err = root.MkdirAll(p, 0o700)
			if err == nil {
				dirs = append(dirs, dirMode{p, mode, hdr.ModTime})
			}
		case tar.TypeSymlink:
			err = root.Symlink(hdr.Linkname, p)
			links[name] = true
		case tar.TypeReg, typeHoles:
			if hdr.Typeflag == typeHoles {
				err = writeHoles(root, p, hdr, tr, mode.Perm())
			} else {
				err = writeFile(root, p, tr, mode.Perm())
			}
			if err == nil {
				err = root.Chmod(p, mode) // past the umask
			}
			if err == nil {
				err = root.Chtimes(p, hdr.ModTime, hdr.ModTime)
			}
		default:
			return fmt.Errorf("%w: entry %q is of unknown type %c", ErrCorrupt, hdr.Name, hdr.Typeflag)
		}
		if err == nil && (hdr.Uid != 0 || hdr.Gid != 0) {
			err = root.Lchown(p, hdr.Uid, hdr.Gid)
		}
		if err != nil {
			return err
		}
	}
}

// linkAbove returns the parent of slash-separated name that is one of
// links, if any.
func linkAbove(links map[string]bool, name string) string {
	for i := range len(name) {
		if name[i] == '/' && links[name[:i]] {
			return name[:i]
		}
	}
	return ""
}

// dirMode is a directory's mode, set once its entries are written: a
// read-only directory is filled first.
type dirMode struct {
	path  string
	mode  fs.FileMode
	mtime time.Time
}

func writeFile(root *os.Root, p string, r io.Reader, mode fs.FileMode) error {
	f, err := root.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close())
}
