package qemu

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSharedRAM checks the image RAM restored VMs map: loaded without
// the zero pages, sealed against every change a VMM holding it could
// try, writable copy-on-write in a private mapping that leaves the file
// and other mappings as they were, and reloaded when the image changes.
func TestSharedRAM(t *testing.T) {
	const size = 64 << 20
	path := filepath.Join(t.TempDir(), imageRAM)
	src, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	page := bytes.Repeat([]byte("lizard!!"), 512)
	for _, off := range []int64{0, 8 << 20, size - 4096} {
		if _, err := src.WriteAt(page, off); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := src.WriteAt(make([]byte, 1<<20), 16<<20); err != nil { // zeros, written
		t.Fatal(err)
	}
	src.Close()

	var s sharedRAM
	defer s.close()
	f, err := s.get(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != size || st.Blocks*512 != 3*4096 {
		t.Errorf("loaded RAM: size %d with %d bytes allocated, want %d with the 3 non-zero pages", st.Size, st.Blocks*512, size)
	}

	for _, tc := range []struct {
		name string
		try  func() error
	}{
		{"write", func() error { _, err := f.WriteAt([]byte("x"), 0); return err }},
		{"write through a reopened path", func() error {
			g, err := os.OpenFile("/proc/self/fd/"+strconv.FormatUint(uint64(f.Fd()), 10), os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer g.Close()
			_, err = g.WriteAt([]byte("x"), 0)
			return err
		}},
		{"truncate", func() error { return f.Truncate(0) }},
		{"grow", func() error { return f.Truncate(2 * size) }},
		{"punch a hole", func() error {
			return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 4096)
		}},
		{"map shared writable", func() error {
			m, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err == nil {
				unix.Munmap(m)
			}
			return err
		}},
	} {
		if err := tc.try(); err == nil {
			t.Errorf("%s of the sealed RAM: no error, want it refused", tc.name)
		}
	}

	a, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatalf("mapping the sealed RAM copy-on-write, as QEMU does: %v", err)
	}
	defer unix.Munmap(a)
	b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	copy(a[8<<20:], "written by VM a")
	if !bytes.Equal(b[8<<20:8<<20+4096], page) {
		t.Errorf("another mapping sees %q, want the image's page", b[8<<20:8<<20+16])
	}
	got := make([]byte, 4096)
	if _, err := f.ReadAt(got, 8<<20); err != nil || !bytes.Equal(got, page) {
		t.Errorf("the memfd after a private write: %q, %v; want the image's page", got[:16], err)
	}

	// The same image again: the same memfd. A new image at the path: a new one.
	g, err := s.get(path)
	if err != nil {
		t.Fatal(err)
	}
	same := sameFile(t, f, g)
	g.Close()
	if !same {
		t.Error("a second restore of an unchanged image got another memfd, want the shared one")
	}
	if err := os.WriteFile(path, page, 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := s.get(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if sameFile(t, f, h) {
		t.Error("a restore of a rewritten image got the old image's memfd")
	}
}

func sameFile(t *testing.T, a, b *os.File) bool {
	t.Helper()
	fa, err := a.Stat()
	if err != nil {
		t.Fatal(err)
	}
	fb, err := b.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(fa, fb)
}
