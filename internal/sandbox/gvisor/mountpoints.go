package gvisor

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/sandbox"
)

// runsc's gofer makes the mount point of a bind mount that the root
// filesystem lacks in the host directory itself — the shared template,
// which the sandbox's own writable layer covers but cannot shield here.
// A volume mounted at /home/user/data would leave an empty data/ in the
// template for every later sandbox of every project. So the mount points
// runsc is about to make are noted, and removed again once the sandbox
// runs: its gofer holds the mount in its own mount namespace, which does
// not need the directory in ours. mountPoints serialises that window, so
// that one sandbox's removal never races another's mount.
var mountPoints sync.Mutex

// missingMountPoints returns, deepest first, the directories of the
// template that runsc would make for spec's volumes and its heap
// (api.HeapMount, which no template has).
func missingMountPoints(spec sandbox.Spec) []string {
	targets := make([]string, 0, len(spec.Volumes)+1)
	for _, v := range spec.Volumes {
		targets = append(targets, v.Target)
	}
	if spec.HeapDir != "" {
		targets = append(targets, api.HeapMount)
	}
	var missing []string
	seen := map[string]bool{}
	for _, t := range targets {
		target := filepath.Clean("/" + t)
		var chain []string
		for p := target; p != "/"; p = filepath.Dir(p) {
			host := filepath.Join(spec.Template.RootFS, p)
			if _, err := os.Lstat(host); err == nil {
				break
			}
			chain = append(chain, host)
		}
		for _, p := range chain {
			if !seen[p] {
				seen[p] = true
				missing = append(missing, p)
			}
		}
	}
	// Deepest first, so that each rmdir finds its directory empty.
	slices.SortStableFunc(missing, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return missing
}

// removeMountPoints removes the directories runsc made (empty ones only:
// rmdir never removes what a sandbox could have put there).
func removeMountPoints(dirs []string) error {
	var errs []error
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
