package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
)

// TestSandboxUsageMetrics: after a CPU burn and a file write, a sandbox's
// samples show them against its limits; a paused sandbox has none.
func TestSandboxUsageMetrics(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_usage")
	cpus, mem := 1.0, int64(1024)
	sb := newSandbox(t, c, api.CreateSandboxRequest{Cpus: &cpus, MemoryMb: &mem})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id := sb.SandboxID

	execOK(t, c, id, "bash", "-c", "head -c 64M /dev/urandom > ~/disk.bin")
	// Burn one CPU for 12 s: two sampling periods at least.
	burnDone := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, id, api.ProcessRequest{Cmd: `timeout 12 bash -c 'while :; do :; done'`}, nil)
		burnDone <- err
	}()
	if err := <-burnDone; err != nil {
		t.Fatal(err)
	}
	burnEnded := time.Now()
	// Two samples after the burn: the idle ones to compare with.
	var ms []api.SandboxMetric
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		var err error
		if ms, err = c.Metrics(ctx, id); err != nil {
			t.Fatal(err)
		}
		if n := len(ms); n >= 4 && ms[n-2].Timestamp.After(burnEnded.Add(time.Second)) {
			break
		}
	}
	t.Logf("samples: %+v", ms)
	var busy, idle api.SandboxMetric
	for _, m := range ms {
		if m.Timestamp.Before(burnEnded) && m.CPUUsedPct > busy.CPUUsedPct {
			busy = m
		}
		if m.Timestamp.After(burnEnded.Add(time.Second)) {
			idle = m
		}
	}
	// The machine's other load decides how much of its CPU the burn
	// gets (a quarter of one on a busy 2-core machine): the check is that
	// the burn shows, against the idle sandbox after it.
	if busy.CPUUsedPct < 10 || idle.Timestamp.IsZero() || busy.CPUUsedPct < 5*idle.CPUUsedPct || busy.CPUUsedPct > 150 {
		t.Fatalf("CPU during the burn %.1f%%, after it %.1f%%; want at least 10%% and 5 times more during", busy.CPUUsedPct, idle.CPUUsedPct)
	}
	if busy.CPUCount != 1 {
		t.Errorf("cpuCount %g, want 1", busy.CPUCount)
	}
	if busy.MemTotal != 1024<<20 || busy.MemUsed <= 0 || busy.MemUsed > busy.MemTotal {
		t.Errorf("memUsed %d of memTotal %d; want 0 < used <= 1 GiB", busy.MemUsed, busy.MemTotal)
	}
	if busy.DiskTotal < 1<<30 || busy.DiskUsed < 64<<20 || busy.DiskUsed > busy.DiskTotal {
		t.Errorf("diskUsed %d of diskTotal %d; want the 64 MiB file counted, under the 2 GiB layer", busy.DiskUsed, busy.DiskTotal)
	}
	for i := 1; i < len(ms); i++ {
		if d := ms[i].Timestamp.Sub(ms[i-1].Timestamp); d < 4*time.Second || d > 7*time.Second {
			t.Errorf("samples %d and %d are %v apart, want about 5 s", i-1, i, d)
		}
	}

	// Paused: its samples are dropped at the next round.
	if _, err := c.PauseSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(15 * time.Second); ; time.Sleep(time.Second) {
		ms, err := c.Metrics(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("a paused sandbox still has %d samples 15 s after its pause", len(ms))
		}
	}
	if _, err := c.Metrics(ctx, "nosuchsandbox"); err == nil {
		t.Error("Metrics of a made-up sandbox succeeded, want 404")
	}
}
