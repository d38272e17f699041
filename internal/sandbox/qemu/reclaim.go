package qemu

// Idle memory to swap (the node's --idle-reclaim) for a VM. A QEMU process
// has no memory cgroup of its own (it runs in the server's), so a squeeze
// is process_madvise(2) with MADV_PAGEOUT over its private mappings, from
// a pidfd: the kernel takes the pages at once, to swap, as a cgroup's
// reclaim would. What an idle TCG VM restored from a template holds
// privately (~67 MiB, docs/performance.md): TCG's translated code (~35
// MiB, one anonymous mapping), QEMU's own heap and threads (~15 MiB,
// anonymous) and the guest RAM's copy-on-write pages (~10 MiB, in the
// private mapping of the template's sealed memfd). In that last mapping
// the kernel skips the template pages other VMs map too (it pages out no
// page mapped by more than one process), so what is shared stays shared;
// a template page only this VM maps goes to swap with the rest. A VM
// that booted (a shape of its own) has its RAM in a memfd of its own,
// all of it paged out likewise.
//
// No limit moves: the guest has the RAM it was given (-m) and TCG its
// buffer, in RAM or in swap, never more, so swap is no way past a
// sandbox's memory limit (under gVisor the memory guard counts swap for
// the same reason).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/internal/sandbox"
)

var _ sandbox.Reclaimer = (*Runtime)(nil)

// CanReclaim implements sandbox.Reclaimer: swap on, and a kernel with
// process_madvise(MADV_PAGEOUT) (Linux 5.10 or later).
func (r *Runtime) CanReclaim() error {
	if err := canPageOut(); err != nil {
		return err
	}
	return sandbox.CheckSwap("/proc/swaps", "a VM's idle memory (TCG's translated code, QEMU's heap, the guest's own pages) goes nowhere else")
}

// canPageOut says why this kernel cannot page out another process's
// memory, or nil: it pages out one page of this process's own, as a
// squeeze would a VM's.
func canPageOut() error {
	page, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("probing process_madvise: %w", err)
	}
	defer unix.Munmap(page)
	page[0] = 1
	pidfd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return fmt.Errorf("pidfd_open (Linux 5.3 or later, needed to page out an idle VM's memory): %w", err)
	}
	defer unix.Close(pidfd)
	if err := pageOut(pidfd, uintptr(unsafe.Pointer(&page[0])), uintptr(len(page))); err != nil {
		return fmt.Errorf("process_madvise(MADV_PAGEOUT) (Linux 5.10 or later, needed to page out an idle VM's memory): %w", err)
	}
	return nil
}

// Reclaim implements sandbox.Reclaimer: it pages out sandbox id's QEMU's
// private memory (privateRanges), synchronously. The VM runs on and faults
// back in only the pages it touches.
func (r *Runtime) Reclaim(ctx context.Context, id string) error {
	if err := sandbox.CheckID(id); err != nil {
		return fmt.Errorf("reclaiming memory: %w: %v", sandbox.ErrNotFound, err)
	}
	pid, ok := r.qemuProc(id)
	if !ok {
		return fmt.Errorf("reclaiming memory of sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("reclaiming memory of sandbox %s: %w: %v", id, sandbox.ErrNotFound, err)
	}
	defer unix.Close(pidfd)
	// The pidfd holds on to process pid from here: that it is still this
	// VM's QEMU (not a process that took the number since) is checked
	// after it was opened.
	if again, ok := r.qemuProc(id); !ok || again != pid {
		return fmt.Errorf("reclaiming memory of sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	ranges, err := privateRanges(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return fmt.Errorf("reclaiming memory of sandbox %s: %w", id, err)
	}
	for _, m := range ranges {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err := pageOut(pidfd, m.start, m.end-m.start)
		switch {
		case errors.Is(err, syscall.ESRCH):
			return fmt.Errorf("reclaiming memory of sandbox %s: %w: its QEMU ended", id, sandbox.ErrNotFound)
		case errors.Is(err, syscall.ENOMEM), errors.Is(err, syscall.EINVAL):
			// Unmapped or remapped since the maps were read.
		case err != nil:
			return fmt.Errorf("reclaiming memory of sandbox %s: process_madvise: %w", id, err)
		}
	}
	return nil
}

type mapping struct{ start, end uintptr }

// privateRanges reads a process's maps file and returns what a squeeze
// pages out: its mappings that may hold memory of its own — anonymous
// private ones (TCG's code buffer, the heap, threads' stacks and malloc's
// arenas) and the guest's RAM (a booted VM's memfd, a restored VM's
// copy-on-write mapping of its image's) —
// and none of the files it maps (libraries, firmware: the same pages for
// every VM), the kernel's own ([vdso], [vvar]) or what it cannot access.
func privateRanges(maps string) ([]mapping, error) {
	f, err := os.Open(maps)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %v", sandbox.ErrNotFound, err)
		}
		return nil, err
	}
	defer f.Close()
	var out []mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode [path]
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		perms := fields[1]
		path := strings.Join(fields[5:], " ")
		switch {
		case len(perms) < 4 || perms[:3] == "---":
			continue
		case strings.HasPrefix(path, "/memfd:"+ramName+" "), strings.HasPrefix(path, "/memfd:"+imageRAMName):
			// The guest's RAM: a booted VM's own memfd, which its
			// QEMU alone maps (shared), or a restored VM's
			// copy-on-write mapping of its image's.
		case perms[3] == 'p' && (path == "" || path == "[heap]" || path == "[stack]"):
		default:
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("reading %s: bad line %q", maps, sc.Text())
		}
		out = append(out, mapping{uintptr(start), uintptr(end)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", maps, err)
	}
	return out, nil
}

// iovec is struct iovec with the address as a number: it is another
// process's, not a Go pointer.
type iovec struct{ base, len uintptr }

// pageOut is process_madvise(pidfd, [start, start+n), MADV_PAGEOUT).
func pageOut(pidfd int, start, n uintptr) error {
	iov := iovec{start, n}
	_, _, errno := unix.Syscall6(unix.SYS_PROCESS_MADVISE, uintptr(pidfd), uintptr(unsafe.Pointer(&iov)), 1, unix.MADV_PAGEOUT, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
