package gvisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/lizard-build/lizard/internal/sandbox"
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
