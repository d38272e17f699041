package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/testenv"
)

// TestQEMU runs `lizard serve --runtime qemu` (software emulation here,
// KVM where the probe finds it working) and on it the README's Python
// example through the real SDK, then pause, resume and fork of a sandbox
// whose kernel holds state: each VM its own kernel, the fork on its own
// address. Bounded: one server, three VMs besides the template's.
func TestQEMU(t *testing.T) {
	s := startServer(t, "--runtime", "qemu", "--qemu-accel", qemuAccel(t))
	c := s.createProject("proj_123")
	waitQEMUTemplate(t, s)

	t.Run("PythonExample", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, testenv.Python(t), filepath.Join(testenv.RepoRoot(t), "examples", "python", "run_with_state.py"))
		cmd.Env = append(os.Environ(), "LIZARD_API_URL="+s.url, "LIZARD_API_KEY="+s.keys[c])
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("examples/python/run_with_state.py: %v\n%s", err, out)
		}
		if got, want := strings.TrimSpace(string(out)), "np.int64(6)\nZeroDivisionError"; got != want {
			t.Errorf("examples/python/run_with_state.py printed %q, want %q", got, want)
		}
	})

	t.Run("Metrics", func(t *testing.T) {
		// What the QEMU runtime samples: the QEMU process's CPU and
		// memory, and statfs / in the guest.
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		sb := newSandbox(t, c, api.CreateSandboxRequest{})
		execOK(t, c, sb.SandboxID, "bash", "-c", "head -c 16M /dev/urandom > ~/m.bin && sync")
		var ms []api.SandboxMetric
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
			var err error
			if ms, err = c.Metrics(ctx, sb.SandboxID); err != nil {
				t.Fatal(err)
			}
			if len(ms) > 0 && ms[len(ms)-1].DiskUsed >= 16<<20 {
				break
			}
		}
		if len(ms) == 0 {
			t.Fatal("no metrics within 30 s")
		}
		m := ms[len(ms)-1]
		t.Logf("sample: %+v", m)
		if m.CPUCount <= 0 || m.CPUUsedPct < 0 || m.MemUsed <= 0 || m.MemTotal <= 0 || m.DiskUsed < 16<<20 || m.DiskTotal <= m.DiskUsed {
			t.Errorf("sample %+v: want CPUs, memory used and its limit, and the 16 MiB file on the disk under its limit", m)
		}
	})

	t.Run("PauseResumeFork", func(t *testing.T) {
		ctx := context.Background()
		sb := newSandbox(t, c, api.CreateSandboxRequest{})
		run(t, c, sb.SandboxID, "python", "x = 41\nopen('/tmp/f', 'w').write('kept')")
		if p, err := c.PauseSandbox(ctx, sb.SandboxID); err != nil || p.State != api.StatePaused {
			t.Fatalf("PauseSandbox = %+v, %v; want paused", p, err)
		}
		if _, err := c.ResumeSandbox(ctx, sb.SandboxID, api.ResumeRequest{}); err != nil {
			t.Fatalf("ResumeSandbox: %v", err)
		}
		if got := strings.TrimSpace(run(t, c, sb.SandboxID, "python", "x += 1\nprint(x, open('/tmp/f').read())").Stdout); got != "42 kept" {
			t.Errorf("after resume: %q, want \"42 kept\"", got)
		}
		forks, err := c.Fork(ctx, sb.SandboxID, api.ForkRequest{Count: 1})
		if err != nil || len(forks) != 1 {
			t.Fatalf("Fork = %v, %v; want one fork", forks, err)
		}
		f := forks[0]
		t.Cleanup(func() { c.KillSandbox(context.Background(), f.SandboxID) })
		const addr = "import fcntl, socket, struct\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nprint(socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, struct.pack('256s', b'eth0'))[20:24]))"
		pa := strings.TrimSpace(run(t, c, sb.SandboxID, "python", addr).Stdout)
		fa := strings.TrimSpace(run(t, c, f.SandboxID, "python", addr).Stdout)
		if fa == "" || fa == pa {
			t.Errorf("fork's eth0 address %q, parent's %q: want its own", fa, pa)
		}
		run(t, c, f.SandboxID, "python", "x = 100")
		if got := strings.TrimSpace(run(t, c, sb.SandboxID, "python", "print(x)").Stdout); got != "42" {
			t.Errorf("parent after the fork changed its copy: %q, want 42", got)
		}
		if got := strings.TrimSpace(run(t, c, f.SandboxID, "bash", "uname -r; cat /tmp/f").Stdout); !strings.Contains(got, "cloud") || !strings.HasSuffix(got, "kept") {
			t.Errorf("fork's kernel and file: %q, want Debian's cloud kernel and \"kept\"", got)
		}
	})

	t.Run("SharedTemplateIsolated", func(t *testing.T) {
		// Two VMs restored from the template snapshot map its RAM from
		// one sealed memfd copy-on-write: what one writes, in memory or
		// on disk, the other never sees, and the snapshot is not changed.
		rams, _ := filepath.Glob(filepath.Join(s.dataDir, "templates", "interpreter-*", "ram"))
		if len(rams) != 1 {
			t.Fatalf("the template snapshot's RAM files: %v, want one", rams)
		}
		before := hashFile(t, rams[0])
		a := newSandbox(t, c, api.CreateSandboxRequest{})
		b := newSandbox(t, c, api.CreateSandboxRequest{})
		pa, pb := qemuPid(t, a.SandboxID), qemuPid(t, b.SandboxID)
		ia, ib := templateRAMInode(t, pa), templateRAMInode(t, pb)
		if ia == "" || ia != ib {
			t.Fatalf("the VMs' RAM mappings: %q and %q, want one shared template memfd", ia, ib)
		}
		token := fmt.Sprintf("lizard-%d-only-in-a", time.Now().UnixNano())
		// 64 MiB of the token in the kernel's Python, a file in the
		// guest's tmpfs (kernel memory) and one on its disk.
		run(t, c, a.SandboxID, "python", fmt.Sprintf("import os\nx = bytearray(%q.encode() * ((64 << 20) // %d))\nopen('/dev/shm/probe', 'w').write(%q)\nopen(os.path.expanduser('~/probe'), 'w').write(%q)", token, len(token), token, token))
		got := strings.TrimSpace(run(t, c, b.SandboxID, "python", "import os\nprint('x' in globals(), os.path.exists('/dev/shm/probe'), os.path.exists(os.path.expanduser('~/probe')))").Stdout)
		if got != "False False False" {
			t.Errorf("the other VM sees (x, /dev/shm/probe, ~/probe) = %s, want False False False", got)
		}
		if got := strings.TrimSpace(run(t, c, a.SandboxID, "python", "print(len(x), open('/dev/shm/probe').read() == open(os.path.expanduser('~/probe')).read())").Stdout); got != fmt.Sprintf("%d True", 64<<20/len(token)*len(token)) {
			t.Errorf("the writing VM's own state: %q", got)
		}
		// On the host: the token is in the writer's guest RAM, nowhere in
		// the other's.
		if !guestRAMHas(t, pa, []byte(token)) {
			t.Errorf("the token is not in the RAM of the VM that wrote it (QEMU %d): the probe reads the wrong memory", pa)
		}
		if guestRAMHas(t, pb, []byte(token)) {
			t.Errorf("the token written in %s is in the RAM of %s", a.SandboxID, b.SandboxID)
		}
		if after := hashFile(t, rams[0]); after != before {
			t.Errorf("the template snapshot's RAM file changed while VMs restored from it ran: %s, was %s", after, before)
		}
	})

	t.Run("RestartAndKilledVMM", func(t *testing.T) {
		// VMs outlive the server, and a VMM that dies is noticed and
		// cleaned up.
		ctx := context.Background()
		a := newSandbox(t, c, api.CreateSandboxRequest{})
		b := newSandbox(t, c, api.CreateSandboxRequest{})
		run(t, c, a.SandboxID, "python", "y = 7")
		s.restart()
		if got := strings.TrimSpace(run(t, c, a.SandboxID, "python", "print(y)").Stdout); got != "7" {
			t.Errorf("after a server restart: %q, want 7", got)
		}
		procs := hostProcs("lizard-" + b.SandboxID + "\x00")
		if len(procs) != 1 {
			t.Fatalf("QEMU processes of %s: %v, want one", b.SandboxID, procs)
		}
		syscall.Kill(procs[0].pid, syscall.SIGKILL)
		deadline := time.Now().Add(time.Minute)
		for {
			got, err := c.GetSandbox(ctx, b.SandboxID)
			if err == nil && got.State == api.StateFailed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sandbox %s after kill -9 of its QEMU: %+v, %v; want failed within a minute", b.SandboxID, got, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		for time.Now().Before(deadline) && netnsExists("lizard-"+b.SandboxID) {
			time.Sleep(200 * time.Millisecond)
		}
		if netnsExists("lizard-" + b.SandboxID) {
			t.Errorf("the network namespace of %s is left after its QEMU died", b.SandboxID)
		}
	})

	t.Run("OtherShapeBoots", func(t *testing.T) {
		// A VM restores with the memory and CPUs of its image: a create
		// asking others must boot a VM of its own shape instead.
		mem, cpus := int64(640), 2.0
		sb := newSandbox(t, c, api.CreateSandboxRequest{MemoryMb: &mem, Cpus: &cpus})
		got := strings.Fields(run(t, c, sb.SandboxID, "bash", "grep MemTotal /proc/meminfo; nproc").Stdout)
		if len(got) != 4 {
			t.Fatalf("meminfo and nproc: %q", got)
		}
		kb, _ := strconv.ParseInt(got[1], 10, 64)
		if kb > mem<<10 || kb < (mem-128)<<10 || got[3] != "2" {
			t.Errorf("a sandbox created with memoryMb %d, cpus %g sees MemTotal %s kB and %s CPUs", mem, cpus, got[1], got[3])
		}
		s.waitLog(t, 1, "sandbox running", sb.SandboxID, "source=boot")
	})

	t.Run("Adversarial", func(t *testing.T) {
		n := newNeighbour(t, c)
		bad := newSandbox(t, c, api.CreateSandboxRequest{})
		// The guest's devices: the disks (template, writable layer, host
		// files) and the init's control port are root's; code is not.
		out := runPy(t, c, bad.SandboxID, `import glob, os
res = []
for p in sorted(glob.glob('/dev/vd*') + glob.glob('/dev/vport*')):
    try:
        open(p, 'rb').close()
        res.append(p + ':opened')
    except OSError as e:
        res.append(p + ':' + type(e).__name__)
print(os.getuid(), ' '.join(res))
print(open('/proc/cmdline').read().strip())
print(sorted({l.split()[2] for l in open('/proc/mounts')} & {'9p', 'virtiofs', 'nfs', 'fuse'}))
print([l.split()[3].split(',')[0] for l in open('/proc/mounts') if l.split()[1] == '/opt/lizard/bin/lizard-agent'])`)
		t.Logf("the guest as sandbox code sees it: %s", out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 {
			t.Fatalf("probe printed %q", out)
		}
		devs := strings.Fields(lines[0])
		if devs[0] == "0" || len(devs) < 5 {
			t.Errorf("code runs as uid %s and sees devices %v; want a non-root user and three disks and the control port", devs[0], devs[1:])
		}
		for _, d := range devs[1:] {
			if !strings.HasSuffix(d, ":PermissionError") {
				t.Errorf("sandbox code opening %s; want PermissionError", d)
			}
		}
		if strings.Contains(lines[1], "LIZARD") || strings.Contains(strings.ToLower(lines[1]), "secret") {
			t.Errorf("the guest's kernel command line carries the sandbox's settings: %q", lines[1])
		}
		if lines[2] != "[]" {
			t.Errorf("host filesystems shared into the guest: %s", lines[2])
		}
		if lines[3] != "['ro']" {
			t.Errorf("the agent's mount options start %s, want ['ro']", lines[3])
		}
		// The network: the host's API without a token, another sandbox's
		// agent, the metadata address.
		for _, tc := range []struct {
			name, host string
			port       int
		}{
			{"host API through the host veth", s.hostAddr(t, bad.SandboxID), s.listenPort(t)},
			{"another VM's agent", s.guestAddr(t, n.sb.SandboxID), api.AgentPort},
			{"metadata", "169.254.169.254", 80},
		} {
			// Connecting is enough: a server that answers nothing first
			// (HTTP) must not pass for blocked.
			code := fmt.Sprintf("import socket\ntry:\n    socket.create_connection((%q, %d), timeout=3)\n    print('connected')\nexcept Exception as e:\n    print('blocked:', type(e).__name__)", tc.host, tc.port)
			if got := strings.TrimSpace(runPy(t, c, bad.SandboxID, code)); !strings.HasPrefix(got, "blocked") {
				t.Errorf("%s: connect to %s:%d = %q, want blocked", tc.name, tc.host, tc.port, got)
			}
		}
		n.check(t)
	})
}

func netnsExists(name string) bool {
	_, err := os.Stat(filepath.Join("/var/run/netns", name))
	return err == nil
}

func hashFile(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// qemuAccel checks that this machine has what the QEMU backend needs (the
// guest kernel and init, QEMU) and returns the accelerator to ask for:
// $LIZARD_QEMU_ACCEL, else auto.
func qemuAccel(t *testing.T) string {
	t.Helper()
	testenv.Binary(t, "lizard-vminit")
	if m, _ := filepath.Glob(filepath.Join(cacheDir(), "qemu", "kernel", "boot", "vmlinuz-*")); len(m) == 0 {
		t.Fatalf("no guest kernel under %s: run make qemu", filepath.Join(cacheDir(), "qemu", "kernel"))
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatalf("no QEMU: %v (make qemu)", err)
	}
	if accel := os.Getenv("LIZARD_QEMU_ACCEL"); accel != "" {
		return accel
	}
	return "auto"
}

// waitQEMUTemplate waits for s's template snapshot. Under emulation the
// template sandbox's Python imports take tens of seconds, more on a
// loaded machine: waitLog's 3 minutes are gVisor's.
func waitQEMUTemplate(t *testing.T, s *server) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Minute); !regexp.MustCompile(`template snapshot (made|found)`).MatchString(s.logs()); {
		if time.Now().After(deadline) {
			t.Fatalf("no template snapshot in 10 minutes:\n%s", s.logs())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// qemuPid is the pid of sandbox id's QEMU.
func qemuPid(t *testing.T, id string) int {
	t.Helper()
	procs := hostProcs("lizard-" + id + "\x00")
	if len(procs) != 1 {
		t.Fatalf("QEMU processes of %s: %v, want one", id, procs)
	}
	return procs[0].pid
}

// templateRAM is the line of /proc/PID/maps mapping a restored VM's RAM:
// the image's sealed memfd.
func templateRAM(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 6 && strings.HasPrefix(f[5], "/memfd:lizard-image-ram:") {
			return f
		}
	}
	t.Fatalf("QEMU %d maps no template RAM:\n%s", pid, b)
	return nil
}

// templateRAMInode names the memfd a VM's RAM maps (device and inode).
func templateRAMInode(t *testing.T, pid int) string {
	f := templateRAM(t, pid)
	return f[3] + " " + f[4]
}

// guestRAMHas says whether the guest RAM of the VM whose QEMU is pid holds
// b in a page the guest has touched (read from /proc/PID/mem where
// /proc/PID/pagemap says a page is present, so that reading does not
// fault in the rest).
func guestRAMHas(t *testing.T, pid int, b []byte) bool {
	t.Helper()
	f := templateRAM(t, pid)
	var lo, hi uint64
	if _, err := fmt.Sscanf(f[0], "%x-%x", &lo, &hi); err != nil {
		t.Fatalf("parsing %q: %v", f[0], err)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	pm, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer pm.Close()
	const page = 4096
	entries := make([]byte, (hi-lo)/page*8)
	if _, err := pm.ReadAt(entries, int64(lo/page*8)); err != nil {
		t.Fatalf("reading QEMU %d's pagemap: %v", pid, err)
	}
	buf := make([]byte, page+len(b))
	for i := uint64(0); i < (hi-lo)/page; i++ {
		if binary.LittleEndian.Uint64(entries[i*8:])>>63 == 0 {
			continue
		}
		n, _ := mem.ReadAt(buf, int64(lo+i*page))
		if bytes.Contains(buf[:n], b) {
			return true
		}
	}
	return false
}
