package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sparse"
	"github.com/lizard-build/lizard/internal/version"
)

// Lizard's own files in a sandbox (sandbox.Spec.Files: the agent, the CLI)
// are bind mounts of host files, and a checkpoint does not hold them: a
// restore maps the agent's code from whatever file its mount names then.
// An upgrade replaces the binaries, and a paused sandbox restored over a
// new lizard-agent runs the old agent's memory on the new one's code — it
// never answers again, and the resume ends it and loses its image (found
// by e2e/TestUpgrade). So each file a sandbox boots with is a copy kept by
// content under Dir/files (filesDir/KEY/NAME, never changed once made), the
// runtime record names the copies, and a restore mounts the ones its image
// names: an image restores with the files it was made with, or is refused
// with ErrOtherBuild while they are missing, never lost.

// filesDir holds the kept copies: one per content of each file, made at the
// first boot with it. Each is the size of its binary (lizard-agent and
// lizard-client: about 25 MB a release); the Runtime never removes one, as
// an image may name it long after: `lizard admin check --repair` removes
// those that no image on the disk, no sandbox and no image elsewhere can
// name (leftovers.go's Named).
func (r *Runtime) filesDir() string { return filepath.Join(r.root, "files") }

// keptFile is a source's copy under filesDir, and what it was copied from,
// by the source's identity (its size and modification time), so that the
// copy is made again when the file changes.
type keptFile struct {
	size  int64
	mtime int64
	rel   string // relative to filesDir
}

// keepFiles returns files with each source replaced by its kept copy, and
// the record of the copies (target → path relative to filesDir).
func (r *Runtime) keepFiles(files []sandbox.File) ([]sandbox.File, map[string]string, error) {
	if len(files) == 0 {
		return files, nil, nil
	}
	out := make([]sandbox.File, len(files))
	rec := make(map[string]string, len(files))
	for i, f := range files {
		rel, err := r.keep(f.Source)
		if err != nil {
			return nil, nil, err
		}
		out[i] = sandbox.File{Source: filepath.Join(r.filesDir(), rel), Target: f.Target}
		rec[f.Target] = rel
	}
	return out, rec, nil
}

var keepMu sync.Mutex

// keep returns the path, relative to filesDir, of source's kept copy,
// making it if need be: KEY/NAME, KEY the version and the first 16 hex
// digits of the content's SHA-256.
func (r *Runtime) keep(source string) (string, error) {
	fi, err := os.Stat(source)
	if err != nil {
		return "", fmt.Errorf("keeping %s for sandboxes: %w", source, err)
	}
	r.mu.Lock()
	k, ok := r.kept[source]
	r.mu.Unlock()
	if ok && k.size == fi.Size() && k.mtime == fi.ModTime().UnixNano() {
		return k.rel, nil
	}
	// Held while copying: two boots of a new file copy it once.
	keepMu.Lock()
	defer keepMu.Unlock()
	sum, err := hashFile(source)
	if err != nil {
		return "", err
	}
	rel := filepath.Join(version.Version+"-"+sum, filepath.Base(source))
	dst := filepath.Join(r.filesDir(), rel)
	if _, err := os.Stat(dst); errors.Is(err, os.ErrNotExist) {
		if err := copyKept(source, dst); err != nil {
			return "", fmt.Errorf("keeping %s for sandboxes: %w", source, err)
		}
	} else if err != nil {
		return "", err
	}
	r.mu.Lock()
	r.kept[source] = keptFile{size: fi.Size(), mtime: fi.ModTime().UnixNano(), rel: rel}
	r.mu.Unlock()
	return rel, nil
}

// copyKept copies src to dst through a temporary file, so that dst, once
// there, is whole.
func copyKept(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".keep-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// restoredFiles returns spec's files for a restore of the image at imageDir
// whose record is rec: each file the record names is its kept copy, refused
// with ErrOtherBuild when that is gone. An image that records none (made
// before the record had them: Lizard 0.1.0) gets Config.Unrecorded's files
// for the targets named there, refused while such a file is missing, and
// the current ones for the others.
func (r *Runtime) restoredFiles(spec sandbox.Spec, imageDir string, rec imageRecord) ([]sandbox.File, map[string]string, error) {
	if rec.Files == nil {
		out := make([]sandbox.File, len(spec.Files))
		for i, f := range spec.Files {
			out[i] = f
			if src, ok := r.unrecorded[f.Target]; ok {
				if _, err := os.Stat(src); err != nil {
					return nil, nil, fmt.Errorf("restoring sandbox %s: %w: its image %s was made by an earlier Lizard (0.1.0 or before), which records no %s; "+
						"put that release's %s at %s to restore it, or start that release on this data directory, resume the sandbox and pause it with memory: false",
						spec.ID, sandbox.ErrOtherBuild, imageDir, f.Target, filepath.Base(f.Target), src)
				}
				out[i].Source = src
			}
		}
		// Kept as the current files are, so that its next image names
		// them whatever they were copied from.
		return r.keepFiles(out)
	}
	out := make([]sandbox.File, len(spec.Files))
	for i, f := range spec.Files {
		rel, ok := rec.Files[f.Target]
		if !ok {
			// A file the image's build did not mount: the current one.
			kf, krec, err := r.keepFiles([]sandbox.File{f})
			if err != nil {
				return nil, nil, err
			}
			out[i], rel = kf[0], krec[f.Target]
			rec.Files[f.Target] = rel
			continue
		}
		src := filepath.Join(r.filesDir(), filepath.Clean("/"+rel))
		if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
			// Not kept here (a restored backup, another node's
			// snapshot): today's file if it is the same one.
			if cur, err := r.keep(f.Source); err == nil && cur == rel {
				out[i] = sandbox.File{Source: src, Target: f.Target}
				continue
			}
		}
		if _, err := os.Stat(src); err != nil {
			return nil, nil, fmt.Errorf("restoring sandbox %s: %w: its image %s was made with %s %s, which is not kept here (%s): "+
				"restore it where it was made, or copy that file there",
				spec.ID, sandbox.ErrOtherBuild, imageDir, f.Target, rel, src)
		}
		out[i] = sandbox.File{Source: src, Target: f.Target}
	}
	return out, rec.Files, nil
}

// The template's shared heap (sandbox.Spec.HeapDir) is a mount too, and a
// checkpoint holds only the pages the sandbox wrote: the rest of its
// kernel's heap faults in from the file after a restore. So an image is
// restored only with that very file, byte for byte, and it must outlive
// the template build's directory. Its first checkpoint keeps it by content
// as the files above are (filesDir/heap-HASH/api.HeapFile, never changed
// once made; a directory, as the mount is of one), the records of the
// sandbox and of its images name the copy, and every restore mounts it:
// one file, so the restores of a template share its pages in the host's
// page cache.
//
// Every image holds the file too (imageHeapName, a hard link of the kept
// copy where they share a filesystem), so that it restores on a node
// that never kept it: moved through the image store, a backup restored
// elsewhere. Such a restore keeps the image's copy first, once its
// content is the one the record names, and mounts that.

// imageHeapName is the directory in an image holding its heap
// (api.HeapFile).
const imageHeapName = "lizard-heap"

// keepSandboxHeap returns sandbox id's record rec with its heap kept: a
// created sandbox's heap directory (rec.HeapDir) is kept at its first
// checkpoint and its record rewritten to name the copy, so that its later
// images name it too. An image's record names the copy alone.
func (r *Runtime) keepSandboxHeap(id string, rec imageRecord) (imageRecord, error) {
	if rec.HeapDir == "" {
		return rec, nil
	}
	if rec.Heap == "" {
		rel, err := r.keepHeap(rec.HeapDir, "")
		if err != nil {
			return rec, err
		}
		rec.Heap = rel
		b, _ := json.Marshal(rec)
		if err := os.WriteFile(filepath.Join(r.dir(id), recordName), b, 0o600); err != nil {
			return rec, fmt.Errorf("writing runtime record: %w", err)
		}
	}
	rec.HeapDir = ""
	return rec, nil
}

// errHeapContent: a heap's content is not the one its name says.
var errHeapContent = errors.New("the heap's content is not the one its image's record names")

// keepHeap returns the path, relative to filesDir, of the kept copy of the
// heap directory dir (its api.HeapFile alone), making it if need be; with
// want set, only if that is its name (errHeapContent otherwise).
func (r *Runtime) keepHeap(dir, want string) (string, error) {
	src := filepath.Join(dir, api.HeapFile)
	keepMu.Lock()
	defer keepMu.Unlock()
	sum, err := hashFile(src)
	if err != nil {
		return "", fmt.Errorf("keeping the heap %s: %w", src, err)
	}
	rel := "heap-" + sum
	if want != "" && rel != want {
		return "", fmt.Errorf("keeping the heap %s: %w: it is %s, the record names %s", src, errHeapContent, rel, want)
	}
	dst := filepath.Join(r.filesDir(), rel)
	if _, err := os.Stat(dst); err == nil {
		return rel, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if err := os.MkdirAll(r.filesDir(), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(r.filesDir(), ".keep-*")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := linkOrCopy(src, filepath.Join(tmp, api.HeapFile)); err != nil {
		return "", fmt.Errorf("keeping the heap %s: %w", src, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", fmt.Errorf("keeping the heap %s: %w", src, err)
	}
	return rel, nil
}

// linkOrCopy makes dst the file src: a hard link where both are on one
// filesystem (no space, and one file in the page cache), otherwise a copy
// that keeps its holes (a heap is 142 MB of address space, half of it
// zero pages the dump left out).
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	return copySparse(src, dst)
}

// imageHeap puts the kept heap rel into the image at imageDir
// (imageHeapName), so that the image restores where it is not kept.
func (r *Runtime) imageHeap(imageDir, rel string) error {
	dir := filepath.Join(imageDir, imageHeapName)
	os.RemoveAll(dir) // an earlier checkpoint's into the same directory
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if err := linkOrCopy(filepath.Join(r.filesDir(), rel, api.HeapFile), filepath.Join(dir, api.HeapFile)); err != nil {
		return fmt.Errorf("putting the heap %s into the image: %w", rel, err)
	}
	return nil
}

// SharedFiles implements the image store's Shared (imagestore/shared.go):
// an image's heap is its template's, the same in every image of every
// sandbox of the template, so the store keeps it once per content
// rather than in each image's upload (~72 MB a durable pause). It is
// named by the SHA-256 of the kept copy, hashed once per copy (never
// changed once made).
func (r *Runtime) SharedFiles(imageDir string) (map[string]string, error) {
	rec, err := readRecord(filepath.Join(imageDir, imageRecordName))
	if errors.Is(err, os.ErrNotExist) || (err == nil && rec.Heap == "") {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p := path.Join(imageHeapName, api.HeapFile)
	if _, err := os.Lstat(filepath.Join(imageDir, p)); errors.Is(err, os.ErrNotExist) {
		return nil, nil // an image from before images held the heap
	}
	rel := filepath.Base(filepath.Clean("/" + rec.Heap))
	if sum, ok := r.heapSums.Load(rel); ok {
		return map[string]string{p: sum.(string)}, nil
	}
	src := filepath.Join(r.filesDir(), rel, api.HeapFile)
	if _, err := os.Stat(src); err != nil {
		src = filepath.Join(imageDir, p)
	}
	sum, err := sha256File(src)
	if err != nil {
		return nil, err
	}
	if "heap-"+sum[:16] != rel {
		return nil, fmt.Errorf("image %s: %w: its heap is heap-%s, its record names %s", imageDir, errHeapContent, sum[:16], rel)
	}
	r.heapSums.Store(rel, sum)
	return map[string]string{p: sum}, nil
}

// KeptFile implements the image store's Shared: this node's kept copy of
// the heap whose SHA-256 is sum, linked into an image fetched from the
// store instead of downloading it.
func (r *Runtime) KeptFile(sum string) string {
	if len(sum) != 64 {
		return ""
	}
	rel := "heap-" + sum[:16]
	if known, ok := r.heapSums.Load(rel); ok && known != sum {
		return ""
	}
	p := filepath.Join(r.filesDir(), rel, api.HeapFile)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// copySparse copies src to a new file dst, leaving its all-zero pages
// holes.
func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o444)
	if err != nil {
		return err
	}
	if err := sparse.CopyFile(out, in, fi.Size()); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// restoredHeap is the heap directory a restore of the image at imageDir
// whose record is rec mounts: its kept copy, kept first from the image's
// own where this node has none (refused with ErrImage if that is not the
// content the record names), refused with ErrOtherBuild when neither is
// there; a fork's parent not checkpointed before has its heap directory
// still (rec.HeapDir); "" for none.
func (r *Runtime) restoredHeap(id, imageDir string, rec imageRecord) (string, error) {
	if rec.Heap == "" {
		return rec.HeapDir, nil
	}
	rel := filepath.Base(filepath.Clean("/" + rec.Heap))
	dir := filepath.Join(r.filesDir(), rel)
	_, err := os.Stat(filepath.Join(dir, api.HeapFile))
	if err == nil {
		return dir, nil
	}
	own := filepath.Join(imageDir, imageHeapName)
	if _, oerr := os.Stat(filepath.Join(own, api.HeapFile)); oerr != nil {
		return "", fmt.Errorf("restoring sandbox %s: %w: its image %s maps its template's heap from %s, which is not kept here (%v) and which the image does not hold "+
			"(made before images held it): restore it where it was made, or copy that directory from there to %s",
			id, sandbox.ErrOtherBuild, imageDir, rec.Heap, err, r.filesDir())
	}
	if _, err := r.keepHeap(own, rel); errors.Is(err, errHeapContent) {
		return "", fmt.Errorf("restoring sandbox %s: %w: its image %s holds a heap other than the one its record names (%v); "+
			"the image was altered after it was made: restore another image of the sandbox, or create it again", id, sandbox.ErrImage, imageDir, err)
	} else if err != nil {
		return "", fmt.Errorf("restoring sandbox %s: %w", id, err)
	}
	r.log.Info("kept the heap an image holds", "sandbox_id", id, "image", imageDir, "heap", rel)
	return dir, nil
}

// CanShareHeap reports whether this Runtime's runsc can run a sandbox with
// a heap directory: it must take --lizard-copy-written-pages
// (build/runsc/cow-4k.patch), without which such a sandbox does not start.
func (r *Runtime) CanShareHeap(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, r.runsc, "flags").CombinedOutput()
	if err != nil {
		return fmt.Errorf("asking runsc %s for its flags: %w: %s", r.runsc, err, bytes.TrimSpace(out[max(len(out)-512, 0):]))
	}
	if !bytes.Contains(out, []byte("-lizard-copy-written-pages")) {
		return fmt.Errorf("runsc %s has no --lizard-copy-written-pages (build/runsc/cow-4k.patch), which a sandbox sharing its template's heap needs: build it with make runsc", r.runsc)
	}
	return nil
}
