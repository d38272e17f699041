package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/lizard-build/lizard/internal/sandbox"
)

var _ sandbox.Prioritizer = (*Runtime)(nil)

// Foreground implements sandbox.Prioritizer: the sandbox's cgroup gets the
// kernel's default CPU share (cpu.shares under cgroup v1, cpu.weight under
// v2), which runsc set lower for a sandbox started in the background.
func (r *Runtime) Foreground(ctx context.Context, id string) error {
	if err := sandbox.CheckID(id); err != nil {
		return fmt.Errorf("raising CPU share: %w: %v", sandbox.ErrNotFound, err)
	}
	err := os.WriteFile(filepath.Join(cgroupRoot, "cpu", cgroupPath(id), "cpu.shares"), []byte(strconv.Itoa(foregroundShares)), 0)
	if errors.Is(err, os.ErrNotExist) {
		err = os.WriteFile(filepath.Join(cgroupRoot, cgroupPath(id), "cpu.weight"), []byte("100"), 0)
	}
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("raising CPU share of sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("raising CPU share of sandbox %s: %w", id, err)
	}
	return nil
}
