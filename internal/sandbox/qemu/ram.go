package qemu

// Guest RAM shared between VMs restored from one checkpoint.
//
// A VM booted from scratch keeps its RAM in a memfd QEMU maps shared, so
// that a checkpoint can copy the RAM into the image as a plain file and
// migrate only the devices (QEMU's x-ignore-shared capability skips RAM
// mapped shared). A VM restored from such an image maps a sealed memfd
// holding that file copy-on-write (share=off): the pages it only reads
// are one copy in host memory for every VM restored from the image, and
// what it writes is its own. This is Kata Containers' VM templating.
//
// The memfd is sealed against writes, truncation and hole punching
// because QEMU 7.2 opens a RAM file read-write even to map it privately
// (its rom= option came later): a VMM taken over by its guest could
// otherwise rewrite the memory of every VM restored after it. A file on
// disk cannot be sealed, which is why restores do not map the image's
// file directly.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lizard-build/lizard/internal/sparse"
	"golang.org/x/sys/unix"
)

const (
	// ramFD is the descriptor QEMU inherits the guest's RAM memfd on
	// (the first of cmd.ExtraFiles) and maps by /proc/self/fd/3.
	ramFD = 3
	// ramName names a booted VM's RAM memfd (seen in /proc/PID/fd as
	// "/memfd:lizard-ram (deleted)").
	ramName = "lizard-ram"
	// imageRAM is the checkpoint's copy of a booted VM's RAM.
	imageRAM = "ram"
	// imageRAMName begins the name of an image's sealed RAM memfd,
	// which restored VMs map copy-on-write ("/memfd:lizard-image-ram:
	// IMAGE (deleted)" in /proc/PID/maps).
	imageRAMName = "lizard-image-ram:"
	// keepShared is how many images' sealed RAM a Runtime holds for
	// restores: the templates' images are restored again and again;
	// the memfds of those dropped live on in the VMs mapping them.
	keepShared = 4
)

// newRAM returns an empty memfd of size bytes for a booted VM's RAM.
func newRAM(size int64) (*os.File, error) {
	fd, err := unix.MemfdCreate(ramName, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("making the guest's RAM: %w", err)
	}
	f := os.NewFile(uintptr(fd), ramName)
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("sizing the guest's RAM: %w", err)
	}
	return f, nil
}

// ramArgs are QEMU's arguments for a guest RAM of size bytes in the
// memfd it inherits on ramFD, shared for a booted VM, copy-on-write for
// a restored one.
func ramArgs(size int64, shared bool) []string {
	share := "off"
	if shared {
		share = "on"
	}
	return []string{"-object", fmt.Sprintf("memory-backend-file,id=mem,size=%dM,mem-path=/proc/self/fd/%d,share=%s", size>>20, ramFD, share)}
}

// copyRAMOut copies the RAM of the VM whose QEMU is pid (stopped) into
// path, leaving holes for pages that are zero.
func copyRAMOut(pid int, path string, size int64) error {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return fmt.Errorf("finding the VM's RAM: %w", err)
	}
	for _, e := range fds {
		p := fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())
		if l, _ := os.Readlink(p); !strings.HasPrefix(l, "/memfd:"+ramName+" ") {
			continue
		}
		src, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("opening the VM's RAM: %w", err)
		}
		defer src.Close()
		dst, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		if err := sparse.CopyFile(dst, src, size); err != nil {
			dst.Close()
			return fmt.Errorf("copying the VM's RAM: %w", err)
		}
		return dst.Close()
	}
	return errors.New("finding the VM's RAM: QEMU holds no " + ramName + " memfd")
}

// sharedRAM holds the sealed memfds of images' RAM for restores, the
// most recently used keepShared of them; a VM keeps its own descriptor,
// so one dropped here lives on as long as the VMs mapping it.
type sharedRAM struct {
	// mu is held while an image loads: restores of it wait for it, and
	// the first restore after a template snapshot pays for it once.
	mu      sync.Mutex
	entries map[string]*ramEntry // by image RAM file path
}

type ramEntry struct {
	f       *os.File
	modTime time.Time
	size    int64
	used    time.Time
}

// get returns a descriptor of a sealed memfd holding the image RAM file
// path, loading it on first use; the caller closes it.
func (s *sharedRAM) get(path string) (*os.File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries == nil {
		s.entries = map[string]*ramEntry{}
	}
	e := s.entries[path]
	if e != nil && (!e.modTime.Equal(fi.ModTime()) || e.size != fi.Size()) {
		// Another image now has this path (a pause taken again).
		e.f.Close()
		delete(s.entries, path)
		e = nil
	}
	if e == nil {
		f, err := loadSealed(path)
		if err != nil {
			return nil, err
		}
		e = &ramEntry{f: f, modTime: fi.ModTime(), size: fi.Size()}
		s.entries[path] = e
		for len(s.entries) > keepShared {
			s.dropOldest()
		}
	}
	e.used = time.Now()
	fd, err := unix.FcntlInt(e.f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("passing on the image's shared RAM: %w", err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

func (s *sharedRAM) dropOldest() {
	var oldest string
	for p, e := range s.entries {
		if oldest == "" || e.used.Before(s.entries[oldest].used) {
			oldest = p
		}
	}
	s.entries[oldest].f.Close()
	delete(s.entries, oldest)
}

// close lets go of every memfd held (VMs keep theirs).
func (s *sharedRAM) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, e := range s.entries {
		e.f.Close()
		delete(s.entries, p)
	}
}

// loadSealed copies the RAM file path into a new memfd and seals it
// against any change.
func loadSealed(path string) (*os.File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate(imageRAMName+filepath.Base(filepath.Dir(path)), unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("making the image's shared RAM: %w", err)
	}
	f := os.NewFile(uintptr(fd), path)
	if err := sparse.CopyFile(f, src, fi.Size()); err != nil {
		f.Close()
		return nil, fmt.Errorf("loading the image's RAM: %w", err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		f.Close()
		return nil, fmt.Errorf("sealing the image's shared RAM: %w", err)
	}
	// The memfd is the copy restores use: the file's pages in the page
	// cache would be a second one.
	_ = unix.Fadvise(int(src.Fd()), 0, 0, unix.FADV_DONTNEED)
	return f, nil
}
