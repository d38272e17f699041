package node

import (
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

func TestAddSample(t *testing.T) {
	n := &Local{meters: meters{limits: Limits{CPUs: 1, MemoryBytes: 1 << 30}}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sb := store.Sandbox{ID: "a", Shape: store.Shape{CPUs: 2, MemoryBytes: 512 << 20}}
	disk := api.DiskUsage{UsedBytes: 10, TotalBytes: 100}
	// The first usage seen is only where the CPU is measured from.
	n.meters.addSample(sb, sandbox.Usage{CPU: time.Second, MemoryBytes: 7}, disk, t0)
	if got := n.meters.rings["a"].samples; len(got) != 0 {
		t.Fatalf("after the first usage: %d samples, want 0", len(got))
	}
	// 5 s of wall time, 5 s of CPU, 2 CPUs: half of them busy.
	n.meters.addSample(sb, sandbox.Usage{CPU: 6 * time.Second, MemoryBytes: 8}, disk, t0.Add(5*time.Second))
	s := n.meters.rings["a"].samples
	want := api.SandboxMetric{Timestamp: t0.Add(5 * time.Second), CPUUsedPct: 50, CPUCount: 2, MemUsed: 8, MemTotal: 512 << 20, DiskUsed: 10, DiskTotal: 100}
	if len(s) != 1 || s[0] != want {
		t.Fatalf("samples = %+v, want [%+v]", s, want)
	}
	// A sandbox of the default shape takes the node's limits.
	def := store.Sandbox{ID: "b"}
	n.meters.addSample(def, sandbox.Usage{}, disk, t0)
	n.meters.addSample(def, sandbox.Usage{CPU: time.Second}, disk, t0.Add(4*time.Second))
	if s := n.meters.rings["b"].samples; len(s) != 1 || s[0].CPUCount != 1 || s[0].MemTotal != 1<<30 || s[0].CPUUsedPct != 25 {
		t.Errorf("default-shaped sample = %+v, want 1 CPU, 1 GiB, 25%%", s)
	}
	// The ring keeps the last keepSamples, oldest first.
	for i := range keepSamples + 10 {
		n.meters.addSample(sb, sandbox.Usage{CPU: 6 * time.Second}, disk, t0.Add(time.Duration(10+i)*time.Second))
	}
	s = n.meters.rings["a"].samples
	if len(s) != keepSamples || !s[len(s)-1].Timestamp.Equal(t0.Add(time.Duration(9+keepSamples+10)*time.Second)) || !s[0].Timestamp.Before(s[1].Timestamp) {
		t.Errorf("after %d more samples: %d kept, last at %v; want %d, oldest first", keepSamples+10, len(s), s[len(s)-1].Timestamp, keepSamples)
	}
}

// TestLastDisk: an idle sandbox keeps its last disk figure, one that ran
// something, or whose figure is a minute old, is asked again.
func TestLastDisk(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	disk := api.DiskUsage{UsedBytes: 10, TotalBytes: 100}
	for _, tc := range []struct {
		name  string
		kept  bool // a probe was recorded at t0 with 1 s of CPU
		cpu   time.Duration
		after time.Duration
		want  bool
	}{
		{"never probed", false, time.Second, SampleEvery, false},
		{"idle", true, time.Second + 4*time.Millisecond, SampleEvery, true},
		{"idle just under a minute", true, time.Second + 40*time.Millisecond, diskMaxAge - time.Millisecond, true},
		{"a minute old", true, time.Second, diskMaxAge, false},
		{"ran something", true, time.Second + diskQuietCPU, SampleEvery, false},
		{"CPU counter restarted", true, time.Millisecond, SampleEvery, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &Local{}
			n.meters.addSample(store.Sandbox{ID: "a"}, sandbox.Usage{CPU: time.Second}, disk, t0)
			if tc.kept {
				n.meters.keepDisk("a", disk, time.Second, t0)
			}
			got, ok := n.meters.lastDisk("a", tc.cpu, t0.Add(tc.after))
			if ok != tc.want || (ok && got != disk) {
				t.Errorf("lastDisk = %+v, %v; want %v", got, ok, tc.want)
			}
		})
	}
	// No ring yet (the sandbox's first sample): nothing is kept.
	n := &Local{}
	n.meters.keepDisk("a", disk, time.Second, t0)
	if _, ok := n.meters.lastDisk("a", time.Second, t0); ok {
		t.Error("a disk figure kept before the sandbox's first sample")
	}
}
