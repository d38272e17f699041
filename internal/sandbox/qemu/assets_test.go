package qemu

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/testenv"
)

// prune keeps the newest images of a kind and leaves other files alone.
func TestPrune(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	for i, name := range []string{"files-0000000000000001.img", "files-0000000000000002.img", "files-0000000000000003.img", "files-none.img", "template-0000000000000001.img"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		at := now.Add(time.Duration(i) * time.Minute)
		os.Chtimes(p, at, at)
	}
	if err := prune(dir, "files-????????????????.img", 2); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	want := []string{"files-0000000000000002.img", "files-0000000000000003.img", "files-none.img", "template-0000000000000001.img"}
	if !slices.Equal(got, want) {
		t.Errorf("after prune: %v, want %v", got, want)
	}
}

// The guest's modules come with what they depend on, each after its
// dependencies, as the kernel's own .modinfo says.
func TestLoadOrder(t *testing.T) {
	_, modDir, err := findKernel(kernelDir(t))
	if err != nil {
		if testenv.Strict() {
			t.Fatalf("LIZARD_TEST_STRICT=1 but %v", err)
		}
		t.Skip(err)
	}
	order, _, err := loadOrder(modDir, modules)
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, m := range order {
		pos[m] = i
	}
	for _, pair := range [][2]string{{"virtio_ring", "virtio"}, {"virtio", "virtio_pci"}, {"failover", "net_failover"}, {"net_failover", "virtio_net"}} {
		a, oka := pos[pair[0]]
		b, okb := pos[pair[1]]
		if !oka || !okb || a > b {
			t.Errorf("load order %v: want %s before %s", order, pair[0], pair[1])
		}
	}
}

// kernelStub keeps a bzImage's boot sector and setup (setup_sects, 0
// meaning 4) and a page, and refuses what has no boot header.
func TestKernelStub(t *testing.T) {
	bz := func(size int, sects byte) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(i)
		}
		b[0x1f1] = sects
		copy(b[0x202:], "HdrS")
		return b
	}
	for _, tc := range []struct {
		name   string
		kernel []byte
		want   int // stub length; 0: refused
	}{
		{"39 setup sectors", bz(1<<20, 39), 40*512 + 4096},
		{"setup_sects 0 means 4", bz(1<<20, 0), 5*512 + 4096},
		{"shorter than its setup", bz(40*512, 39), 0},
		{"no boot header", make([]byte, 1<<20), 0},
		{"empty", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := kernelStub(tc.kernel)
			if tc.want == 0 {
				if err == nil {
					t.Fatalf("stub of %d bytes, want refused", len(got))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want || !slices.Equal(got, tc.kernel[:tc.want]) {
				t.Errorf("stub of %d bytes, want the kernel's first %d", len(got), tc.want)
			}
		})
	}
}
