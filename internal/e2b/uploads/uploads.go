// Package uploads keeps the file archives E2B's Template SDK uploads for
// a template's copy steps (Template().copy(...)): one tar (gzipped or
// not) per project and files hash, the key the SDK computes over the
// files it copies and asks the server about before it uploads
// (GET /templates/{id}/files/{hash}: "present" skips the upload).
//
// An archive is checked as it is taken — a tar of regular files,
// directories and symbolic links under relative, clean names, within the
// bounds — so that a build never meets one it cannot use, and what a
// project uploaded is never seen by another: the key is the project and
// the hash, and a hash is only a name (Verify checks it against the files
// when a build names them). Archives are bounded per upload, per project
// and per node, and leave the store when unused for TTL.
package uploads

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"
)

// Limits bound the store.
type Limits struct {
	// MaxBytes bounds one archive, as uploaded and its files' contents
	// once unpacked: a copy's files become a template recipe's files,
	// which hold recipe.MaxFileBytes in all.
	MaxBytes int64
	// MaxEntries bounds the entries of one archive.
	MaxEntries int
	// MaxProjectBytes and MaxNodeBytes bound the archives kept, of one
	// project and of all.
	MaxProjectBytes int64
	MaxNodeBytes    int64
	// TTL is how long an archive no build or upload has used is kept.
	TTL time.Duration
}

// DefaultLimits are the store's bounds under `lizard serve`.
var DefaultLimits = Limits{
	MaxBytes:        16 << 20,
	MaxEntries:      10_000,
	MaxProjectBytes: 256 << 20,
	MaxNodeBytes:    2 << 30,
	TTL:             24 * time.Hour,
}

// Store holds archives in a directory: <dir>/<project>/<hash>.tar.
type Store struct {
	dir    string
	limits Limits
	now    func() time.Time

	// mu orders the admission of archives against the bounds: an
	// archive is written aside first, then admitted under mu.
	mu sync.Mutex
}

// Open returns the store in dir, made (0700) if missing; archives left
// half-written by an earlier process are removed.
func Open(dir string, limits Limits) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("making the upload store %s: %w", dir, err)
	}
	tmps, _ := filepath.Glob(filepath.Join(dir, "*", ".upload-*"))
	for _, t := range tmps {
		os.Remove(t)
	}
	return &Store{dir: dir, limits: limits, now: time.Now}, nil
}

var (
	hashRe    = regexp.MustCompile(`^[0-9a-f]{64}$`)
	projectRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
)

// ValidHash checks a files hash as E2B's SDKs make it: SHA-256, hex.
func ValidHash(hash string) error {
	if !hashRe.MatchString(hash) {
		return errdefs.Invalidf("files hash %q: want the 64 lower-case hex digits of SHA-256, as E2B's SDKs compute it", hash)
	}
	return nil
}

func (s *Store) path(project, hash string) (string, error) {
	if !projectRe.MatchString(project) {
		return "", fmt.Errorf("project ID %q cannot name a directory", project)
	}
	if err := ValidHash(hash); err != nil {
		return "", err
	}
	return filepath.Join(s.dir, project, hash+".tar"), nil
}

// Has reports whether project has uploaded hash (and it has not
// expired); one that is there is kept for another TTL.
func (s *Store) Has(project, hash string) bool {
	p, err := s.path(project, hash)
	if err != nil {
		return false
	}
	fi, err := os.Stat(p)
	if err != nil || s.now().Sub(fi.ModTime()) > s.limits.TTL {
		return false
	}
	now := s.now()
	os.Chtimes(p, now, now)
	return true
}

// Put takes project's archive for hash from body, replacing one there
// (a forced upload). An archive over a bound, or not one a copy can use,
// is refused with nothing kept.
func (s *Store) Put(project, hash string, body io.Reader) error {
	p, err := s.path(project, hash)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".upload-*")
	if err != nil {
		return fmt.Errorf("storing an upload: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	n, err := io.Copy(f, io.LimitReader(body, s.limits.MaxBytes+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("receiving an upload: %w", err)
	}
	if n > s.limits.MaxBytes {
		return &errdefs.Error{Kind: errdefs.ErrTooLarge, Msg: fmt.Sprintf("the upload is over %d bytes, the most one copy's files may be (a template's files are bounded so): copy less, or fetch large data at run time",
			s.limits.MaxBytes)}
	}
	if _, err := s.read(tmp); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep()
	projectBytes, nodeBytes := s.usage(project, p)
	switch {
	case projectBytes+n > s.limits.MaxProjectBytes:
		return &errdefs.Error{Kind: errdefs.ErrTooLarge, Msg: fmt.Sprintf("project %s keeps %d bytes of uploaded template files, and %d more would pass its bound of %d: they leave %s after their last use",
			project, projectBytes, n, s.limits.MaxProjectBytes, s.limits.TTL)}
	case nodeBytes+n > s.limits.MaxNodeBytes:
		return &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: fmt.Sprintf("this server keeps %d bytes of uploaded template files, its most (%d): try again later", nodeBytes, s.limits.MaxNodeBytes)}
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("storing an upload: %w", err)
	}
	return nil
}

// usage sums the archives kept, of project and of all, but for the one
// at replaced (which an upload replaces).
func (s *Store) usage(project, replaced string) (projectBytes, nodeBytes int64) {
	filepath.WalkDir(s.dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || p == replaced || strings.HasPrefix(d.Name(), ".upload-") {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		nodeBytes += fi.Size()
		if filepath.Base(filepath.Dir(p)) == project {
			projectBytes += fi.Size()
		}
		return nil
	})
	return projectBytes, nodeBytes
}

// Sweep removes archives unused for TTL.
func (s *Store) Sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep()
}

func (s *Store) sweep() {
	now := s.now()
	filepath.WalkDir(s.dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".upload-") {
			return nil
		}
		if fi, err := d.Info(); err == nil && now.Sub(fi.ModTime()) > s.limits.TTL {
			os.Remove(p)
		}
		return nil
	})
}

// Entry is one entry of an archive.
type Entry struct {
	// Name is its path in the archive, relative and clean ("folder/a.txt").
	Name string
	Type byte // tar.TypeReg, tar.TypeDir or tar.TypeSymlink
	Mode int64
	// Content is a regular file's; Linkname a symbolic link's target.
	Content  []byte
	Linkname string
}

// Read returns the entries of project's archive hash, in its order.
func (s *Store) Read(project, hash string) ([]Entry, error) {
	p, err := s.path(project, hash)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return nil, &errdefs.Error{Kind: errdefs.ErrInvalid, Msg: fmt.Sprintf("no files uploaded with hash %s in project %s (or they expired after %s unused): build again, which uploads them", hash, project, s.limits.TTL)}
	}
	now := s.now()
	os.Chtimes(p, now, now)
	return s.read(p)
}

// read parses the archive at p, gzipped or not, refusing what a copy
// cannot take: names that are absolute or climb out (..), entries other
// than files, directories and symbolic links (hard links, devices), more
// than MaxEntries, or contents past MaxBytes once unpacked.
func (s *Store) read(p string) ([]Entry, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, bad("its gzip header: %v", err)
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(r)
	var out []Entry
	var total int64
	seen := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, bad("not a tar archive (%v)", err)
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if len(out) == s.limits.MaxEntries {
			return nil, bad("more than %d entries", s.limits.MaxEntries)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name == "" || path.IsAbs(name) || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") || strings.ContainsRune(name, 0) {
			return nil, bad("entry %q: want a relative path inside the copy, without .. or /", h.Name)
		}
		if seen[name] {
			return nil, bad("entry %q is given twice", name)
		}
		seen[name] = true
		e := Entry{Name: name, Type: h.Typeflag, Mode: h.Mode & 0o7777}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeRegA:
			e.Type = tar.TypeReg
			if total += h.Size; total > s.limits.MaxBytes {
				return nil, &errdefs.Error{Kind: errdefs.ErrTooLarge, Msg: fmt.Sprintf("the upload's files hold more than %d bytes once unpacked, the most one copy may", s.limits.MaxBytes)}
			}
			if e.Content, err = io.ReadAll(io.LimitReader(tr, h.Size)); err != nil || int64(len(e.Content)) != h.Size {
				return nil, bad("entry %q is cut short", name)
			}
		case tar.TypeDir:
		case tar.TypeSymlink:
			if h.Linkname == "" || strings.ContainsRune(h.Linkname, 0) || len(h.Linkname) > 4096 {
				return nil, bad("symbolic link %q has no usable target", name)
			}
			e.Linkname = h.Linkname
		default:
			return nil, bad("entry %q is of tar type %q: a copy takes regular files, directories and symbolic links (hard links, devices and FIFOs are refused)", name, h.Typeflag)
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, bad("it holds no files")
	}
	return out, nil
}

func bad(format string, args ...any) error {
	return &errdefs.Error{Kind: errdefs.ErrInvalid, Msg: "the uploaded archive cannot be copied: " + fmt.Sprintf(format, args...)}
}

// FilesHash is the hash E2B's SDKs compute for copy(src, dest) of the
// files an archive of theirs holds (calculate_files_hash): SHA-256 over
// "COPY src dest", then each file in the archive's order — its path, its
// mode with the file type bits (st_mode, in decimal), its size but for a
// directory, and a regular file's bytes or a link's target. The server
// can so check that an archive is the files a build's copy step names.
// (JavaScript's SDK, to 2.51 at least, hashes a directory's size on the
// user's disk too, which no archive records: its copies of whole
// directories cannot be checked, and so are refused.)
func FilesHash(src, dest string, entries []Entry) string {
	h := sha256.New()
	io.WriteString(h, "COPY "+src+" "+dest)
	for _, e := range entries {
		io.WriteString(h, e.Name)
		switch e.Type {
		case tar.TypeDir:
			io.WriteString(h, strconv.FormatInt(0o040000|e.Mode, 10))
		case tar.TypeSymlink:
			io.WriteString(h, strconv.FormatInt(0o120777, 10))
			io.WriteString(h, strconv.Itoa(len(e.Linkname)))
			io.WriteString(h, e.Linkname)
		default:
			io.WriteString(h, strconv.FormatInt(0o100000|e.Mode, 10))
			io.WriteString(h, strconv.Itoa(len(e.Content)))
			h.Write(e.Content)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
