package gvisor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/sandbox"
)

const (
	noSwap  = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
	oneSwap = noSwap + "/dev/zram0                              partition\t8388604\t\t0\t\t-2\n"
)

// fakeCgroups makes a cgroup mount of the given version with sandbox
// cgroup /lizard/sb in it, as runsc leaves it, and a /proc/swaps of
// swaps; it returns the mount, the sandbox's memory cgroup and the swaps
// file.
func fakeCgroups(t *testing.T, version int, swaps string) (root, sb, swapsFile string) {
	t.Helper()
	root = t.TempDir()
	write := func(path, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	switch version {
	case 1:
		write(filepath.Join(root, "memory", "memory.limit_in_bytes"), "9223372036854771712\n")
		sb = filepath.Join(root, "memory", "lizard", "sb")
		write(filepath.Join(sb, "memory.force_empty"), "")
	case 2:
		write(filepath.Join(root, "memory.reclaim"), "")
		sb = filepath.Join(root, "lizard", "sb")
		write(filepath.Join(sb, "memory.current"), "98643968\n")
		write(filepath.Join(sb, "memory.reclaim"), "")
		write(filepath.Join(sb, "memory.max"), "536870912\n")
		write(filepath.Join(sb, "memory.swap.max"), "max\n")
	}
	swapsFile = filepath.Join(t.TempDir(), "swaps")
	write(swapsFile, swaps)
	return root, sb, swapsFile
}

// TestSqueeze: under cgroup v1 the squeeze writes 0 to the sandbox's
// memory.force_empty, under v2 its whole memory.current to memory.reclaim
// after holding its swap to its memory limit; a sandbox whose cgroup is
// gone is sandbox.ErrNotFound.
func TestSqueeze(t *testing.T) {
	for _, tc := range []struct {
		version    int
		file, want string
	}{
		{1, "memory.force_empty", "0"},
		{2, "memory.reclaim", "98643968"},
	} {
		root, sb, _ := fakeCgroups(t, tc.version, oneSwap)
		if err := squeeze(root, cgroupPath("sb")); err != nil {
			t.Fatalf("v%d: squeeze: %v", tc.version, err)
		}
		if b, _ := os.ReadFile(filepath.Join(sb, tc.file)); string(b) != tc.want {
			t.Errorf("v%d: %s = %q; want %q", tc.version, tc.file, b, tc.want)
		}
		if b, _ := os.ReadFile(filepath.Join(sb, "memory.swap.max")); tc.version == 2 && string(b) != "536870912\n" {
			t.Errorf("v2: memory.swap.max = %q; want the memory limit, 536870912", b)
		}
		if err := squeeze(root, cgroupPath("gone")); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("v%d: squeeze of a sandbox without a cgroup: %v; want ErrNotFound", tc.version, err)
		}
	}
}

// TestCanReclaim: a host is refused without a memory cgroup that
// reclaims on request, or without swap, with a message saying what to
// do.
func TestCanReclaim(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version int
		swaps   string
		want    string // in the error; "" for none
	}{
		{"v1 with swap", 1, oneSwap, ""},
		{"v2 with swap", 2, oneSwap, ""},
		{"v1 without swap", 1, noSwap, "no swap turned on"},
		{"v2 without swap", 2, noSwap, "no swap turned on"},
		{"no memory cgroup", 0, oneSwap, "no memory cgroup that reclaims on request"},
		{"a swap of size 0", 1, noSwap + "/dev/zram0 partition 0 0 -2\n", "no swap turned on"},
	} {
		root, _, swaps := fakeCgroups(t, tc.version, tc.swaps)
		err := canReclaim(root, swaps)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v; want nil", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v; want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// TestMemoryStatCountsSwap: what a sandbox has in swap counts against its
// limit (pressure) and is told apart (Usage.SwapBytes), or a squeezed
// sandbox could grow past its limit by what it had swapped.
func TestMemoryStatCountsSwap(t *testing.T) {
	dir := t.TempDir()
	stat := "cache 77070336\nrss 28672\nrss_huge 0\nshmem 41644032\nmapped_file 41205760\nswap 54325248\n"
	if err := os.WriteFile(filepath.Join(dir, "memory.stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	p, swap := memoryStat(dir)
	if want := int64(28672 + 41644032 + 54325248); p != want || swap != 54325248 {
		t.Errorf("memoryStat = %d, %d; want %d, %d", p, swap, want, 54325248)
	}
}

// TestGuardLimitHoldsSwap: with swap accounting the guard's limit is
// memory+swap's too, so that swap is no room past it; without, only the
// memory limit is written.
func TestGuardLimitHoldsSwap(t *testing.T) {
	for _, accounted := range []bool{true, false} {
		dir := t.TempDir()
		files := []string{"memory.limit_in_bytes"}
		if accounted {
			files = append(files, "memory.memsw.limit_in_bytes")
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("9223372036854771712\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		g := &guard{cgroup: dir}
		if err := g.setLimit(640 << 20); err != nil {
			t.Fatalf("setLimit: %v", err)
		}
		for _, f := range files {
			if b, _ := os.ReadFile(filepath.Join(dir, f)); string(b) != "671088640" {
				t.Errorf("swap accounted %v: %s = %q; want 671088640", accounted, f, b)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); !accounted && err == nil {
			t.Errorf("without swap accounting, setLimit made memory.memsw.limit_in_bytes")
		}
	}
}
