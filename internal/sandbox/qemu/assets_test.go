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
