package qemu

import "testing"

// TestRollupMemory: a VM's memory is what it has resident and in swap, and
// the template pages other VMs map too are told apart, so that the node
// does not squeeze an idle VM again for pages a squeeze leaves in RAM.
func TestRollupMemory(t *testing.T) {
	// An idle VM restored from a template, after a squeeze (the shape of
	// one read here: 16 VMs of one template).
	const rollup = `55d4c0a00000-7ffd3a5f7000 ---p 00000000 00:00 0                          [rollup]
Rss:              162340 kB
Pss:               25700 kB
Pss_Dirty:          9012 kB
Pss_Anon:           8100 kB
Pss_File:           3500 kB
Pss_Shmem:         14100 kB
Shared_Clean:     140120 kB
Shared_Dirty:       3000 kB
Private_Clean:      1220 kB
Private_Dirty:     18000 kB
Referenced:       162340 kB
Anonymous:          8100 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:              21100 kB
SwapPss:           21100 kB
Locked:                0 kB
`
	mem, swap, shared := rollupMemory(rollup)
	if want := int64(162340+21100) << 10; mem != want {
		t.Errorf("memory = %d; want Rss + Swap = %d", mem, want)
	}
	if want := int64(21100) << 10; swap != want {
		t.Errorf("swap = %d; want %d", swap, want)
	}
	if want := int64(140120+3000) << 10; shared != want {
		t.Errorf("shared = %d; want Shared_Clean + Shared_Dirty = %d", shared, want)
	}
	if own := mem - swap - shared; own != int64(1220+18000)<<10 {
		t.Errorf("resident of its own = %d; want the private pages, %d", own, int64(1220+18000)<<10)
	}
}
