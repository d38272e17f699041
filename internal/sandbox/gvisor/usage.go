package gvisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lizard-build/lizard/internal/sandbox"
)

var _ sandbox.Meter = (*Runtime)(nil)

// Usage implements sandbox.Meter from the sandbox's host cgroup, which
// holds the Sentry, its systrap stubs and the gofer: CPU is their CPU time
// (cpuacct), memory what the guard weighs against the limit (pressure:
// anonymous memory and shmem, the Sentry's memory file, in memory or in
// swap; not the page cache of its disk, which the host reclaims).
func (r *Runtime) Usage(ctx context.Context, id string) (sandbox.Usage, error) {
	if err := sandbox.CheckID(id); err != nil {
		return sandbox.Usage{}, fmt.Errorf("reading usage: %w: %v", sandbox.ErrNotFound, err)
	}
	cpu, err := os.ReadFile(filepath.Join(cgroupRoot, "cpuacct", cgroupPath(id), "cpuacct.usage"))
	if os.IsNotExist(err) {
		return sandbox.Usage{}, fmt.Errorf("reading usage of sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	if err != nil {
		return sandbox.Usage{}, fmt.Errorf("reading usage of sandbox %s: %w", id, err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(cpu)), 10, 64)
	if err != nil {
		return sandbox.Usage{}, fmt.Errorf("reading usage of sandbox %s: cpuacct.usage: %w", id, err)
	}
	mem, swap := memoryStat(memoryCgroup(id))
	return sandbox.Usage{CPU: time.Duration(ns), MemoryBytes: mem, SwapBytes: swap}, nil
}

// pressure is a memory cgroup's memory the host cannot reclaim: anonymous
// memory and shmem, not the page cache; what of it is in swap counts too,
// or a sandbox squeezed while idle (--idle-reclaim), or by the host's own
// pressure, could grow past its limit by what it had in swap.
func pressure(cgroup string) int64 {
	n, _ := memoryStat(cgroup)
	return n
}

// memoryStat reads a v1 memory cgroup's pressure and the part of it in
// swap (memory.stat's rss, shmem and swap; swap is 0, or not there,
// without swap accounting).
func memoryStat(cgroup string) (pressure, swap int64) {
	b, err := os.ReadFile(filepath.Join(cgroup, "memory.stat"))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		x, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "rss", "shmem":
			pressure += x
		case "swap":
			pressure += x
			swap += x
		}
	}
	return pressure, swap
}
