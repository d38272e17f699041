package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/lizard-build/lizard/internal/sandbox"
)

var _ sandbox.Reclaimer = (*Runtime)(nil)

// A sandbox's guest memory is the Sentry's memory file, a memfd: shmem,
// which the host can only reclaim into swap. So a squeeze needs swap on,
// and a memory cgroup that reclaims on request: memory.reclaim under
// cgroup v2, memory.force_empty under v1. force_empty reclaims all it can
// without touching the limit; lowering memory.limit_in_bytes would do the
// same, but leaves a window at the low limit in which an allocation meets
// the memory guard's OOM handling (memguard.go) and a process is ended.
const (
	reclaimV1 = "memory.force_empty"
	reclaimV2 = "memory.reclaim"
)

// CanReclaim implements sandbox.Reclaimer.
func (r *Runtime) CanReclaim() error { return canReclaim(cgroupRoot, "/proc/swaps") }

// canReclaim says why the host whose cgroups are mounted at root and whose
// swap devices swaps lists cannot squeeze a sandbox, or nil.
func canReclaim(root, swaps string) error {
	if _, err := reclaimFile(root); err != nil {
		return err
	}
	return sandbox.CheckSwap(swaps, "a sandbox's memory is shared memory (its Sentry's memory file), which only swap can take")
}

// reclaimFile is the file of a sandbox's memory cgroup that reclaims on
// request under root: v2's memory.reclaim, else v1's memory.force_empty.
func reclaimFile(root string) (string, error) {
	if _, err := os.Stat(filepath.Join(root, reclaimV2)); err == nil {
		return reclaimV2, nil
	}
	// The root of v1's memory hierarchy has no force_empty; a child has.
	if _, err := os.Stat(filepath.Join(root, "memory", "memory.limit_in_bytes")); err == nil {
		return reclaimV1, nil
	}
	return "", fmt.Errorf("no memory cgroup that reclaims on request at %s: want cgroup v2 with memory.reclaim (Linux 5.19 or later) or cgroup v1's memory controller", root)
}

// Reclaim implements sandbox.Reclaimer: it pushes what it can of sandbox
// id's memory out to swap, synchronously (a quarter to two seconds of
// this process's CPU for an idle interpreter sandbox). The sandbox runs on
// and faults back in only the pages it touches.
func (r *Runtime) Reclaim(ctx context.Context, id string) error {
	if err := sandbox.CheckID(id); err != nil {
		return fmt.Errorf("reclaiming memory: %w: %v", sandbox.ErrNotFound, err)
	}
	if err := squeeze(cgroupRoot, cgroupPath(id)); err != nil {
		return fmt.Errorf("reclaiming memory of sandbox %s: %w", id, err)
	}
	return nil
}

// squeeze reclaims what it can of cgroup path (under root, in whichever
// hierarchy reclaimFile finds).
func squeeze(root, path string) error {
	file, err := reclaimFile(root)
	if err != nil {
		return err
	}
	var dir, amount string
	switch file {
	case reclaimV2:
		dir = filepath.Join(root, path)
		// All of it: the kernel reclaims what it can and says EAGAIN
		// if that was less, which is what is expected of a sandbox
		// that runs.
		b, err := os.ReadFile(filepath.Join(dir, "memory.current"))
		if err != nil {
			return notFound(err)
		}
		amount = strings.TrimSpace(string(b))
		// No memory guard holds memory + swap to the limit under v2
		// (memguard.go is v1's): swap is held to the memory limit
		// instead, so that a sandbox squeezed again and again holds at
		// most twice its limit, not the host's whole swap.
		if limit, err := os.ReadFile(filepath.Join(dir, "memory.max")); err == nil && strings.TrimSpace(string(limit)) != "max" {
			if err := os.WriteFile(filepath.Join(dir, "memory.swap.max"), limit, 0); err != nil {
				return fmt.Errorf("bounding the sandbox's swap: %w", notFound(err))
			}
		}
	default:
		dir = filepath.Join(root, "memory", path)
		amount = "0"
	}
	err = os.WriteFile(filepath.Join(dir, file), []byte(amount), 0)
	if errors.Is(err, syscall.EAGAIN) {
		return nil
	}
	return notFound(err)
}

// notFound makes a missing cgroup sandbox.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %v", sandbox.ErrNotFound, err)
	}
	return err
}
