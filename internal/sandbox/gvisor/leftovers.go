package gvisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/version"
)

// What `lizard admin check` needs of a Runtime it does not start: whose a
// sandbox's machine-wide names are, and its cgroups, by ID alone.

// Owner is the Runtime directory sandbox id's owner record names (the Dir
// of the Runtime that made its machine-wide names, absolute), or "" when
// there is no record: no Runtime on this machine claims them.
func Owner(id string) string {
	b, err := os.ReadFile(filepath.Join(OwnersDir, id))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Owners are the IDs of the owner records that name the Runtime directory
// dir.
func Owners(dir string) ([]string, error) {
	ents, err := os.ReadDir(OwnersDir)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		if Owner(e.Name()) == dir {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// Cgroups are the cgroup directories of sandbox id that exist, under
// every controller (v1) or the unified hierarchy (v2).
func Cgroups(id string) []string {
	dirs, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", cgroupPath(id)))
	if d := filepath.Join(cgroupRoot, cgroupPath(id)); isDir(d) {
		dirs = append(dirs, d)
	}
	return dirs
}

// RemoveLeftovers removes sandbox id's cgroups and, when it names dir,
// its owner record: what of a sandbox outlives it when its Runtime's
// process died, besides its network (netns.Remove).
func RemoveLeftovers(ctx context.Context, dir, id string) error {
	if err := removeCgroups(ctx, id); err != nil {
		return err
	}
	if Owner(id) == dir {
		if err := os.Remove(filepath.Join(OwnersDir, id)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// What the Runtime in dir keeps for images and sandboxes (runsc.go,
// files.go), for `lizard admin check` to list the ones nothing names.

// KeptBuilds are the runsc builds the Runtime in dir keeps (KeptRunsc).
func KeptBuilds(dir string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(dir, "runsc"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && ValidBuild(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// CurrentBuild is the build of the runsc the last Runtime started in dir
// ran with, "" if none recorded.
func CurrentBuild(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "runsc", currentName))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// currentName, under the runsc directory, names the build New last ran.
const currentName = "current"

// KeptFiles are the directories of copies of Lizard's files the Runtime in
// dir keeps (files.go: VERSION-HASH, each a file's content, and heap-HASH,
// a template's shared heap), by name; a
// directory of another form was put there by an operator (0.1.0's agent,
// Config.Unrecorded) and is not listed.
func KeptFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(dir, "files"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if _, sum, ok := strings.Cut(e.Name(), "-"); e.IsDir() && ok && len(sum) == 16 {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// FilesKey is the directory, under the files directory, that a copy of
// the file at path has (files.go's keep).
func FilesKey(path string) (string, error) {
	sum, err := hashFile(path)
	if err != nil {
		return "", err
	}
	return version.Version + "-" + sum, nil
}

// Named are the runsc builds and kept file directories (Lizard's files and
// shared heaps) that the images in
// images (directories holding a runtime record, or none) and the sandboxes
// of the Runtime in dir name. An image or sandbox without a record names
// none (made by Lizard 0.1.0: the current build and Config.Unrecorded's
// files restore it). A record it cannot read is an error: what it names is
// unknown.
func Named(dir string, images []string) (builds, files map[string]bool, err error) {
	builds, files = map[string]bool{}, map[string]bool{}
	paths := make([]string, 0, len(images))
	for _, img := range images {
		paths = append(paths, filepath.Join(img, imageRecordName))
	}
	boxes, _ := filepath.Glob(filepath.Join(dir, "sandboxes", "*", recordName))
	for _, p := range append(paths, boxes...) {
		rec, err := readRecord(p)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading the runtime record %s: %w", p, err)
		}
		if rec.Runsc != "" {
			builds[rec.Runsc] = true
		}
		for _, rel := range rec.Files {
			key, _, _ := strings.Cut(filepath.ToSlash(filepath.Clean(rel)), "/")
			files[key] = true
		}
		if rec.Heap != "" {
			key, _, _ := strings.Cut(filepath.ToSlash(filepath.Clean(rec.Heap)), "/")
			files[key] = true
		}
	}
	return builds, files, nil
}

// LinkImageHeaps makes the heap each image in images holds (a template's
// shared heap, lizard-heap/heap: files.go) a hard link of the kept copy
// its record names in the Runtime directory dir (files/heap-HASH), where
// both are there and are not one file already. A backup copies each image
// apart (cp -a), which makes every image's heap a file of its own, ~72 MB
// on disk each, where the data directory had links of one kept copy; the
// backup and its restore link them again. Same size is all it checks:
// both are copies of this data directory's own files, and a restore
// that keeps an image's heap checks its content itself.
func LinkImageHeaps(dir string, images []string) error {
	for _, img := range images {
		rec, err := readRecord(filepath.Join(img, imageRecordName))
		if err != nil || rec.Heap == "" {
			continue
		}
		kept := filepath.Join(dir, "files", filepath.Base(filepath.Clean("/"+rec.Heap)), api.HeapFile)
		own := filepath.Join(img, imageHeapName, api.HeapFile)
		k, err := os.Stat(kept)
		if err != nil {
			continue
		}
		o, err := os.Stat(own)
		if err != nil || os.SameFile(k, o) || k.Size() != o.Size() {
			continue
		}
		tmp := own + ".link"
		os.Remove(tmp)
		if err := os.Link(kept, tmp); err != nil {
			return fmt.Errorf("linking the heap of image %s: %w", img, err)
		}
		if err := os.Rename(tmp, own); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("linking the heap of image %s: %w", img, err)
		}
	}
	return nil
}
