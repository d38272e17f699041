package imagestore

// Shared files (docs/storage.md "Shared files"). With --share-heap every
// image of a sandbox holds its template's heap (~142 MB of address space,
// ~72 MB of data) so that it restores on any node; sent in each image's
// tar, every durable pause of every sandbox of the template would upload
// the same 72 MB again. The runtime, which knows which of an image's
// files are the same in many images (Shared), names them; Put keeps each
// once per content under shared/SHA256, uploading it only if the bucket
// lacks it, and the image's manifest names it where its tar leaves it
// out. Get puts it in place before the tar: a hard link of the node's own
// copy when it has one (nothing downloaded), else the object, whose
// content must hash to the name.
//
// A shared object is sealed as an image is (seal.go), its additional
// data binding its key, so one copied under another content's key does
// not open; it begins with its random ID in clear, from which its stream
// key is derived: two nodes uploading the same content at once never seal
// under one key and nonce, and whichever upload the bucket keeps opens.
// An ID altered in the bucket derives another key, and nothing opens.
//
// Deleting an image leaves its shared objects: other images name them.
// `lizard admin check --repair` lists those no manifest names and removes
// them (UnusedShared): at most one object per distinct content (a
// template build's heap) per bucket. An upload checks its shared objects
// again once its manifest is published (uploadMissing), so a removal
// racing it costs a second upload, not the image.

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Shared is what a runtime tells the store of the files its images share
// (the gvisor runtime implements it, without importing this package).
type Shared interface {
	// SharedFiles returns the files of the image directory dir that
	// are kept once per content, by slash-separated path relative to
	// dir, each with the hex SHA-256 of its bytes; none for an image
	// without such files.
	SharedFiles(dir string) (map[string]string, error)
	// KeptFile returns the path of this node's own copy of the content
	// whose SHA-256 is sum (hex), "" if it has none. The copy is linked
	// into an image as it is: it is the node's own, never the bucket's.
	KeptFile(sum string) string
}

// SharedFile is a file of an image kept once per content.
type SharedFile struct {
	Path   string `json:"path"`   // slash-separated, relative to the image directory
	SHA256 string `json:"sha256"` // hex, of the file's bytes
}

// check refuses a file a manifest could not name: one outside the image,
// a sum that is not one.
func (f SharedFile) check() error {
	if f.Path == "" || path.Clean(f.Path) != f.Path || !filepath.IsLocal(filepath.FromSlash(f.Path)) {
		return fmt.Errorf("shared file %q leaves the image", f.Path)
	}
	if b, err := hex.DecodeString(f.SHA256); err != nil || len(b) != sha256.Size || strings.ToLower(f.SHA256) != f.SHA256 {
		return fmt.Errorf("shared file %q has no SHA-256 (%q)", f.Path, f.SHA256)
	}
	return nil
}

// sharedPrefix is the bucket's folder of shared objects.
const sharedPrefix = "shared/"

func sharedKey(sum string) string { return sharedPrefix + sum }

// Share has the store keep the files sh names once per content.
func (s *Store) Share(sh Shared) { s.shared = sh }

// putShared uploads the shared files of image directory dir the bucket
// lacks, and returns them all and the bytes it uploaded.
func (s *Store) putShared(ctx context.Context, dir string) ([]SharedFile, int64, error) {
	if s.shared == nil {
		return nil, 0, nil
	}
	byPath, err := s.shared.SharedFiles(dir)
	if err != nil {
		return nil, 0, err
	}
	var files []SharedFile
	for p, sum := range byPath {
		f := SharedFile{Path: p, SHA256: sum}
		if err := f.check(); err != nil {
			return nil, 0, err
		}
		files = append(files, f)
	}
	slices.SortFunc(files, func(a, b SharedFile) int { return strings.Compare(a.Path, b.Path) })
	uploaded, err := s.uploadMissing(ctx, dir, files)
	if err != nil {
		return nil, 0, err
	}
	return files, uploaded, nil
}

// uploadMissing uploads the shared objects of files (in image directory
// dir) the bucket lacks, and returns the bytes it uploaded. Put calls it
// before the image's upload and again once its manifest is published: a
// removal of unused objects (UnusedShared) that listed the manifests
// before that one took its objects, since nothing named them yet. After
// the second call that race is left only the removal's few milliseconds
// between its listing and its deletes, where it was the image's whole
// upload before.
func (s *Store) uploadMissing(ctx context.Context, dir string, files []SharedFile) (int64, error) {
	var uploaded int64
	for _, f := range files {
		key := sharedKey(f.SHA256)
		keys, err := s.b.List(ctx, key)
		if err != nil {
			return uploaded, fmt.Errorf("looking for shared object %s: %w", key, err)
		}
		if slices.Contains(keys, key) {
			continue
		}
		n, err := s.putSharedObject(ctx, key, filepath.Join(dir, filepath.FromSlash(f.Path)))
		uploaded += n
		if err != nil {
			return uploaded, err
		}
	}
	return uploaded, nil
}

// putSharedObject uploads file p as shared object key: its random ID,
// then the sealed tar of its one entry (holes kept as in an image).
func (s *Store) putSharedObject(ctx context.Context, key, p string) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, fmt.Errorf("uploading shared object %s: %w", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("uploading shared object %s: %w", key, err)
	}
	return s.putSharedWith(ctx, key, func(tw *tar.Writer) error {
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name, hdr.Uname, hdr.Gname, hdr.Format = sharedEntry, "", "", tar.FormatPAX
		return writeFileEntry(tw, hdr, f)
	})
}

// sharedEntry names a shared object's one tar entry.
const sharedEntry = "file"

// putSharedWith uploads what write writes to a tar as shared object key,
// returning the bytes uploaded.
func (s *Store) putSharedWith(ctx context.Context, key string, write func(*tar.Writer) error) (int64, error) {
	id := make([]byte, 32)
	rand.Read(id)
	aead, err := s.key.stream(key, id)
	if err != nil {
		return 0, err
	}
	pr, pw := io.Pipe()
	cw := &countWriter{w: pw}
	go func() {
		_, err := cw.Write(id)
		if err == nil {
			sw := newSealer(cw, aead, key)
			tw := tar.NewWriter(sw)
			if err = write(tw); err == nil {
				err = tw.Close()
			}
			if err == nil {
				err = sw.Close()
			}
		}
		pw.CloseWithError(err)
	}()
	err = s.b.Put(ctx, key, pr)
	pr.CloseWithError(errors.New("upload ended"))
	if err != nil {
		// Nothing to remove: both backends make an object whole or
		// not at all, and the key may be another node's good upload.
		return 0, fmt.Errorf("uploading shared object %s: %w", key, err)
	}
	return cw.n, nil
}

// getShared puts shared file f into the image being unpacked at tmp:
// a link of the node's own copy, else downloaded, opened and hashed.
func (s *Store) getShared(ctx context.Context, f SharedFile, tmp string) error {
	dst := filepath.Join(tmp, filepath.FromSlash(f.Path))
	// tmp is new and this store's: nothing of the image is in it yet.
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	if s.shared != nil {
		if kept := s.shared.KeptFile(f.SHA256); kept != "" && os.Link(kept, dst) == nil {
			return nil
		}
	}
	key := sharedKey(f.SHA256)
	rc, err := s.b.Get(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%w: it names shared object %s, which the store no longer holds", ErrCorrupt, key)
	}
	if err != nil {
		return fmt.Errorf("downloading shared object %s: %w", key, err)
	}
	defer rc.Close()
	id := make([]byte, 32)
	if _, err := io.ReadFull(rc, id); err != nil {
		if ctx.Err() == nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
			err = ErrTampered
		}
		return fmt.Errorf("downloading shared object %s: %w: it ends before its ID", key, err)
	}
	aead, err := s.key.stream(key, id)
	if err != nil {
		return err
	}
	stage := tmp + "-shared-" + randomID() // beside tmp, a ".part-" the cache removes after a crash
	defer os.RemoveAll(stage)
	if err := unpackSealed(ctx, rc, aead, key, stage); err != nil {
		return fmt.Errorf("downloading shared object %s: %w", key, err)
	}
	got := filepath.Join(stage, sharedEntry)
	sum, err := hashFile(got)
	if err != nil {
		return fmt.Errorf("downloading shared object %s: %w: %v", key, ErrCorrupt, err)
	}
	if sum != f.SHA256 {
		return fmt.Errorf("downloading shared object %s: %w: its content's SHA-256 is %s", key, ErrCorrupt, sum)
	}
	return os.Rename(got, dst)
}

// hashFile is the hex SHA-256 of regular file p's bytes.
func hashFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", filepath.Base(p))
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// HashFile is the hex SHA-256 of file p's bytes, as SharedFile names it.
func HashFile(p string) (string, error) { return hashFile(p) }

// UnusedShared returns the shared objects no image's manifest names.
// A manifest that does not open (but one from before sealing, which
// names none) is an error: it may name any. An upload under way may have
// put its shared object, or found it, and not yet its manifest: Put
// uploads the object again if it is gone once the manifest is published,
// which leaves a removal only the moments between this listing and its
// deletes to hit an upload that publishes meanwhile (its image is then
// refused as corrupt where it is read from the store). Best run while no
// node uploads to the store (`lizard admin check --repair`, every node
// stopped).
func (s *Store) UnusedShared(ctx context.Context) ([]string, error) {
	objs, err := s.b.List(ctx, sharedPrefix)
	if err != nil || len(objs) == 0 {
		return nil, err
	}
	keys, err := s.b.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("listing the images: %w", err)
	}
	named := map[string]bool{}
	for _, k := range keys {
		name, ok := strings.CutSuffix(k, "/manifest.json")
		if !ok {
			continue
		}
		m, err := s.Stat(ctx, name)
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnsealed) {
			continue // deleted since the listing; from before any was shared
		}
		if err != nil {
			return nil, fmt.Errorf("listing the shared objects no image names: image %s: %w", name, err)
		}
		for _, f := range m.Shared {
			named[sharedKey(f.SHA256)] = true
		}
	}
	var out []string
	for _, k := range objs {
		if !named[k] {
			out = append(out, k)
		}
	}
	return out, nil
}

// RemoveShared removes shared object key (one UnusedShared listed).
func (s *Store) RemoveShared(ctx context.Context, key string) error {
	if !strings.HasPrefix(key, sharedPrefix) || checkName(key) != nil {
		return fmt.Errorf("%q is not a shared object", key)
	}
	if err := s.b.Delete(ctx, key); err != nil {
		return fmt.Errorf("removing shared object %s: %w", key, err)
	}
	return nil
}
