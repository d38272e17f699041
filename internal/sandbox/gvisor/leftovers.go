package gvisor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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
