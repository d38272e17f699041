package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/testenv"
)

// TestIdleReclaim: `lizard serve --idle-reclaim` on a host without swap
// refuses to start, saying so and what to do; with swap (the operator's
// step, docs/operations.md; on a host without it, zram swap the test takes
// for itself: zramSwap), an idle sandbox's memory goes to swap, and the
// sandbox answers correctly afterwards with its kernel's variables and
// imports intact.
func TestIdleReclaim(t *testing.T) {
	testenv.RequiresRoot(t)
	if refusedWithoutSwap(t) && !zramSwap(t) {
		return
	}

	s := startServer(t, "--idle-reclaim", "2s")
	c := s.createProject("proj_reclaim")
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ms(300_000)})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer c.KillSandbox(ctx, sb.SandboxID)
	run(t, c, sb.SandboxID, "python", "import pandas as pd\nkept = {'answer': 41 + 1}\ndf = pd.DataFrame({'a': range(10)})")

	// Idle for 2 s, then squeezed within the next sweep (every second).
	waitSwapped(t, s, "sandbox "+sb.SandboxID, 32<<20, 90*time.Second, func() int64 { return cgroupSwap(t, sb.SandboxID) })
	keptAfterSqueeze(t, c, sb.SandboxID)

	// Adversarial: swap is no room past the memory limit. A 512 MiB
	// sandbox (its kernel ~90 MiB) fills 300 MiB, goes idle and is
	// squeezed, then fills 300 MiB more: both blocks never live at once.
	small, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ms(300_000), MemoryMb: ms(512)})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer c.KillSandbox(ctx, small.SandboxID)
	run(t, c, small.SandboxID, "python", fill300MiB("first")+"len(first) >> 20")
	waitSwapped(t, s, "sandbox "+small.SandboxID, 250<<20, 90*time.Second, func() int64 { return cgroupSwap(t, small.SandboxID) })
	ectx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ex, err := c.Execute(ectx, small.SandboxID, api.ExecuteRequest{Code: fill300MiB("second") + "(len(first) + len(second)) >> 20", Language: "python"}, nil)
	if err == nil && ex.Error == nil {
		t.Errorf("a 512 MiB sandbox held 300 MiB in swap and 300 MiB more in RAM: %+v; want the second block refused (its memory guard ends the kernel)", ex.Results)
	} else {
		t.Logf("the second 300 MiB of a squeezed 512 MiB sandbox: %v %+v", err, ex.Error)
	}
}

// refusedWithoutSwap reports whether this host has no swap, after checking
// that `lizard serve --idle-reclaim` with flags then refuses to start,
// saying so and what to do: on such a host the refusal is what is tested.
func refusedWithoutSwap(t *testing.T, flags ...string) bool {
	t.Helper()
	swaps, err := os.ReadFile("/proc/swaps")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(strings.TrimSpace(string(swaps)), "\n") > 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := takePool(t)
	defer releasePool(pool)
	args := append([]string{"serve", "--listen", freeAddr(t), "--data-dir", t.TempDir(), "--cache-dir", cacheDir(),
		"--address-pool", fmt.Sprintf("169.254.%d.0/24", pool), "--egress=none", "--metrics-listen="}, flags...)
	out, err := exec.CommandContext(ctx, testenv.Binary(t, "lizard"), append(args, "--idle-reclaim", "1m")...).CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("lizard serve %s --idle-reclaim 1m on a host without swap: %v; want it to refuse to start\n%s", strings.Join(flags, " "), err, out)
	}
	for _, want := range []string{"--idle-reclaim", "no swap turned on", "docs/operations.md"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
	t.Log("this host has no swap: lizard serve --idle-reclaim refused to start, as it must")
	return true
}

// zramSwap turns swap on for the rest of the test on /dev/zram0 (2 GiB,
// compressed in RAM) when the host has the device unused, so that the
// squeeze is tested on a host whose operator set up no swap, as CI's;
// the test's log says so, and its end turns the swap off and resets the
// device, after the servers it started are gone. It reports false, with
// the reason logged, where there is no such device or it is in use.
func zramSwap(t *testing.T) bool {
	t.Helper()
	const dev, sys = "/dev/zram0", "/sys/block/zram0"
	if _, err := os.Stat(sys); err != nil {
		exec.Command("modprobe", "zram").Run() // a module not loaded yet; the check below says if it failed
	}
	if b, err := os.ReadFile(sys + "/disksize"); err != nil || strings.TrimSpace(string(b)) != "0" {
		t.Logf("no unused %s (%v, disksize %q): only the refusal is tested", dev, err, b)
		return false
	}
	if err := os.WriteFile(sys+"/disksize", []byte("2G"), 0o644); err != nil {
		t.Fatalf("sizing %s: %v", dev, err)
	}
	reset := func() {
		if err := os.WriteFile(sys+"/reset", []byte("1"), 0o644); err != nil {
			t.Errorf("resetting %s: %v", dev, err)
		}
	}
	if out, err := exec.Command("mkswap", dev).CombinedOutput(); err != nil {
		reset()
		t.Fatalf("mkswap %s: %v %s", dev, err, out)
	}
	if out, err := exec.Command("swapon", dev).CombinedOutput(); err != nil {
		reset()
		t.Fatalf("swapon %s: %v %s", dev, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("swapoff", dev).CombinedOutput(); err != nil {
			t.Errorf("swapoff %s: %v %s", dev, err, out)
		}
		reset()
	})
	t.Logf("swap turned on for this test: %s, 2 GiB (turned off and reset at its end)", dev)
	return true
}

// waitSwapped waits until swapped says what (a sandbox, a VM) has at least
// least bytes in swap, failing the test after within.
func waitSwapped(t *testing.T, s *server, what string, least int64, within time.Duration, swapped func() int64) {
	t.Helper()
	n := swapped()
	for deadline := time.Now().Add(within); n < least; n = swapped() {
		if time.Now().After(deadline) {
			t.Fatalf("%s idle for %s has %d bytes in swap; want it squeezed (at least %d MiB)\n%s", what, within, n, least>>20, tail(s.logs(), 30))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("%s squeezed: %d MiB in swap", what, n>>20)
}

// keptAfterSqueeze checks that sandbox id, squeezed, still has the
// variable and the DataFrame its test made before (kept, df) and pandas.
func keptAfterSqueeze(t *testing.T, c *client.Client, id string) {
	t.Helper()
	begin := time.Now()
	got := run(t, c, id, "python", "kept['answer']")
	t.Logf("first run after the squeeze: %s", time.Since(begin))
	if len(got.Results) != 1 || got.Results[0].Data != "42" {
		t.Errorf("a variable after the squeeze: %+v; want 42", got)
	}
	got = run(t, c, id, "python", "int(df['a'].sum() + pd.DataFrame({'b': [1, 2]})['b'].sum())")
	if len(got.Results) != 1 || got.Results[0].Data != "48" {
		t.Errorf("pandas after the squeeze: %+v; want 48", got)
	}
}

// fill300MiB is Python that makes name a 300 MiB bytearray, every page
// written.
func fill300MiB(name string) string {
	return name + " = bytearray(300 << 20)\n" + name + "[::4096] = b'\\x01' * (300 << 8)\n"
}

// cgroupSwap is what sandbox id's memory cgroup has in swap: memory.stat's
// swap under cgroup v1, memory.swap.current under v2.
func cgroupSwap(t *testing.T, id string) int64 {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/lizard", id, "memory.swap.current")); err == nil {
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
	f, err := os.Open(filepath.Join("/sys/fs/cgroup/memory/lizard", id, "memory.stat"))
	if err != nil {
		t.Fatalf("reading sandbox %s's memory cgroup: %v", id, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var n int64
		if _, err := fmt.Sscanf(sc.Text(), "swap %d", &n); err == nil {
			return n
		}
	}
	return 0
}

// TestIdleReclaimQEMU: the same for `lizard serve --runtime qemu`, whose
// VMs have no memory cgroup: without swap it refuses to start, saying so;
// with swap (the operator's, or zramSwap's) an idle VM's QEMU has its private memory
// — TCG's translated code, QEMU's heap, the guest's own pages — paged out
// (process_madvise), and the VM answers correctly afterwards with its
// kernel's variables and imports intact.
func TestIdleReclaimQEMU(t *testing.T) {
	testenv.RequiresRoot(t)
	accel := qemuAccel(t)
	if refusedWithoutSwap(t, "--runtime", "qemu", "--qemu-accel", accel) && !zramSwap(t) {
		return
	}

	s := startServer(t, "--runtime", "qemu", "--qemu-accel", accel, "--idle-reclaim", "2s")
	c := s.createProject("proj_reclaim")
	waitQEMUTemplate(t, s)
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer c.KillSandbox(ctx, sb.SandboxID)
	run(t, c, sb.SandboxID, "python", "import pandas as pd\nkept = {'answer': 41 + 1}\ndf = pd.DataFrame({'a': range(10)})")
	pid := qemuPid(t, sb.SandboxID)

	// Idle for 2 s, then squeezed within the next sweeps (every second):
	// most of TCG's ~35 MiB of code is enough to tell.
	waitSwapped(t, s, "VM "+sb.SandboxID, 24<<20, 2*time.Minute, func() int64 { return vmSwap(t, pid) })
	keptAfterSqueeze(t, c, sb.SandboxID)

	// Adversarial: swap is no room past the memory limit. A 512 MiB VM
	// (a shape of its own: it boots) fills 300 MiB, goes idle and is
	// squeezed, then fills 300 MiB more: the guest has 512 MiB of RAM
	// whether its pages are in the host's RAM or its swap.
	small, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ms(600_000), MemoryMb: ms(512)})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer c.KillSandbox(ctx, small.SandboxID)
	run(t, c, small.SandboxID, "python", fill300MiB("first")+"len(first) >> 20")
	spid := qemuPid(t, small.SandboxID)
	waitSwapped(t, s, "VM "+small.SandboxID, 250<<20, 2*time.Minute, func() int64 { return vmSwap(t, spid) })
	ectx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	ex, err := c.Execute(ectx, small.SandboxID, api.ExecuteRequest{Code: fill300MiB("second") + "(len(first) + len(second)) >> 20", Language: "python"}, nil)
	if err == nil && ex.Error == nil {
		t.Errorf("a 512 MiB VM held 300 MiB in swap and 300 MiB more in RAM: %+v; want the second block refused", ex.Results)
	} else {
		t.Logf("the second 300 MiB of a squeezed 512 MiB VM: %v %+v", err, ex.Error)
	}
}

// vmSwap is what process pid (a VM's QEMU) has in swap: smaps_rollup's
// Swap, which counts the guest RAM's shared memory in swap too.
func vmSwap(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		t.Fatalf("reading QEMU %d's memory: %v", pid, err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "Swap:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
