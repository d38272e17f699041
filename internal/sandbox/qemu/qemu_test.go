package qemu

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sandbox/sandboxtest"
	"github.com/lizard-build/lizard/internal/testenv"
)

// KernelDir is where tests find the guest kernel: LIZARD_QEMU_KERNEL_DIR,
// else the cache's qemu/kernel (make qemu-kernel).
func kernelDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("LIZARD_QEMU_KERNEL_DIR"); d != "" {
		return d
	}
	cache := os.Getenv("LIZARD_CACHE_DIR")
	if cache == "" {
		cache = "/var/cache/lizard"
	}
	return filepath.Join(cache, "qemu", "kernel")
}

var (
	initOnce sync.Once
	initBin  string
	initErr  error
)

// guestInit builds lizard-vminit once per test binary.
func guestInit(t testing.TB) string {
	t.Helper()
	initOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lizard-vminit-")
		if err != nil {
			initErr = err
			return
		}
		initBin = filepath.Join(dir, "lizard-vminit")
		cmd := exec.Command("go", "build", "-trimpath", "-o", initBin, "./cmd/lizard-vminit")
		cmd.Dir = testenv.RepoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			initErr = err
			initBin = string(out)
		}
	})
	if initErr != nil {
		t.Fatalf("building lizard-vminit: %v: %s", initErr, initBin)
	}
	return initBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if initBin != "" {
		os.RemoveAll(filepath.Dir(initBin))
	}
	os.Exit(code)
}

// newTestRuntime returns a Runtime in a fresh directory (its image cache
// shared by the test binary's runtimes) and checks, when the test ends,
// that its sandboxes left nothing.
func newTestRuntime(t *testing.T, cache string) *Runtime {
	t.Helper()
	testenv.RequiresRoot(t)
	kd := kernelDir(t)
	if _, _, err := findKernel(kd); err != nil {
		if testenv.Strict() {
			t.Fatalf("LIZARD_TEST_STRICT=1 but %v", err)
		}
		t.Skip(err)
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		if testenv.Strict() {
			t.Fatalf("LIZARD_TEST_STRICT=1 but no QEMU: %v (make qemu)", err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	r, err := New(context.Background(), Config{KernelDir: kd, Init: guestInit(t), Dir: dir, CacheDir: cache,
		Accel: os.Getenv("LIZARD_QEMU_ACCEL"), Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ents, _ := os.ReadDir(r.boxDir); len(ents) > 0 {
			t.Errorf("sandbox directories left in %s: %v", r.boxDir, ents)
		}
	})
	return r
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func TestConformance(t *testing.T) {
	// Under software emulation a program touching hundreds of MiB (the
	// runaway cases) takes seconds; give every wait six times gVisor's.
	sandboxtest.RequestTimeout, sandboxtest.ReadyTimeout = time.Minute, 90*time.Second
	sandboxtest.NetworkOctet = 248
	cache := t.TempDir()
	sandboxtest.Run(t, func(t *testing.T) sandbox.Runtime { return newTestRuntime(t, cache) })
}

// TestConfined checks what a VMM taken over by its guest would hold: QEMU
// runs as an unprivileged user of its own (not another sandbox's), under a
// seccomp filter, inside an empty root, in the sandbox's network namespace.
func TestConfined(t *testing.T) {
	r := newTestRuntime(t, t.TempDir())
	rootfs := sandboxtest.BuildRootFS(t)
	sandboxtest.NetworkOctet = 248
	ctx := context.Background()
	var specs []sandbox.Spec
	for range 2 {
		spec := sandboxtest.Spec(rootfs)
		t.Cleanup(func() { r.Kill(ctx, spec.ID) })
		if err := r.Create(ctx, spec); err != nil {
			t.Fatal(err)
		}
		specs = append(specs, spec)
	}
	uids := map[string]bool{}
	for _, spec := range specs {
		pid, ok := r.qemuProc(spec.ID)
		if !ok {
			t.Fatalf("no QEMU for %s", spec.ID)
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		fields := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				fields[k] = strings.TrimSpace(v)
			}
		}
		uid := strings.Fields(fields["Uid"])
		if len(uid) < 4 || slices.Contains(uid, "0") {
			t.Errorf("QEMU of %s runs with uids %v, want none of them root", spec.ID, uid)
		} else {
			uids[uid[0]] = true
		}
		if fields["Seccomp"] != "2" {
			t.Errorf("QEMU of %s: Seccomp %q, want 2 (a filter)", spec.ID, fields["Seccomp"])
		}
		if fields["CapEff"] != "0000000000000000" {
			t.Errorf("QEMU of %s has capabilities %s", spec.ID, fields["CapEff"])
		}
		if root, err := os.Readlink(fmt.Sprintf("/proc/%d/root", pid)); err != nil || root != r.emptyDir() {
			t.Errorf("QEMU of %s has root %q (%v), want the empty %s", spec.ID, root, err, r.emptyDir())
		}
		if ents, _ := os.ReadDir(r.emptyDir()); len(ents) > 0 {
			t.Errorf("QEMU's root %s is not empty: %v", r.emptyDir(), ents)
		}
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
		// The host's namespace is init's: this process's main thread may
		// be parked in a namespace that package netns made on it.
		host, _ := os.Readlink("/proc/1/ns/net")
		if ns == "" || ns == host {
			t.Errorf("QEMU of %s runs in the host's network namespace (%s)", spec.ID, ns)
		}
	}
	if len(uids) != 2 {
		t.Errorf("two sandboxes' QEMUs run as users %v, want two different ones", uids)
	}
}

// TestHeapDirRefused: a VM has no shared heap (sandbox.Spec.HeapDir); a
// Spec with one is refused, saying so, before anything is made.
func TestHeapDirRefused(t *testing.T) {
	r := newTestRuntime(t, t.TempDir())
	spec := sandboxtest.Spec(sandboxtest.BuildRootFS(t))
	spec.HeapDir = t.TempDir()
	err := r.Create(context.Background(), spec)
	if err == nil {
		r.Kill(context.Background(), spec.ID)
		t.Fatal("a sandbox with a heap dir was created")
	}
	if !strings.Contains(err.Error(), "--share-heap") {
		t.Errorf("error %q does not name --share-heap", err)
	}
}
