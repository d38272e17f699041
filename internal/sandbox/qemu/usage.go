package qemu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/lizard-build/lizard/internal/sandbox"
)

var _ sandbox.Meter = (*Runtime)(nil)

// clockTick is the unit of /proc/<pid>/stat's CPU times: USER_HZ, 100 on
// every Linux this runs on.
const clockTick = 10 * time.Millisecond

// Usage implements sandbox.Meter from the VM's QEMU process: its CPU time
// (the guest's vCPUs and the device emulation), and its memory: resident
// (the guest's RAM as far as the guest has touched it — page cache inside
// the guest included, since the host cannot tell it apart — TCG's code
// and QEMU's own) and in swap (what an idle squeeze, reclaim.go, or the
// host's memory pressure pushed there).
func (r *Runtime) Usage(ctx context.Context, id string) (sandbox.Usage, error) {
	if err := sandbox.CheckID(id); err != nil {
		return sandbox.Usage{}, fmt.Errorf("reading usage: %w: %v", sandbox.ErrNotFound, err)
	}
	pid, ok := r.qemuProc(id)
	if !ok {
		return sandbox.Usage{}, fmt.Errorf("reading usage of sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return sandbox.Usage{}, fmt.Errorf("reading usage of sandbox %s: %w", id, err)
	}
	// Fields after the command name, which is in parentheses and may
	// hold anything: f[0] is field 3, utime and stime are 14 and 15.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return sandbox.Usage{}, fmt.Errorf("reading usage of sandbox %s: short /proc stat", id)
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	u := sandbox.Usage{CPU: time.Duration(utime+stime) * clockTick}
	// smaps_rollup, not status: its Swap counts the guest RAM's pages in
	// swap, which are shared memory (a memfd) and not in status's VmSwap.
	rollup, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return sandbox.Usage{}, fmt.Errorf("reading usage of sandbox %s: %w", id, err)
	}
	u.MemoryBytes, u.SwapBytes, u.SharedBytes = rollupMemory(string(rollup))
	return u, nil
}

// rollupMemory reads a smaps_rollup: the memory resident or in swap, the
// part in swap, and the part resident that other processes map too —
// Shared_Clean and Shared_Dirty, the template's RAM pages other VMs map,
// which a squeeze (reclaim.go) leaves in RAM.
func rollupMemory(rollup string) (memory, swap, shared int64) {
	for line := range strings.Lines(rollup) {
		k, v, _ := strings.Cut(line, ":")
		kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		switch k {
		case "Rss":
			memory += kb << 10
		case "Swap":
			memory += kb << 10
			swap = kb << 10
		case "Shared_Clean", "Shared_Dirty":
			shared += kb << 10
		}
	}
	return memory, swap, shared
}
