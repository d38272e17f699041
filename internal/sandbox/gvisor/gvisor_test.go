package gvisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sandbox/sandboxtest"
	"github.com/lizard-build/lizard/internal/testenv"
)

// newTestRuntime returns a Runtime in a fresh directory and checks, when
// the test ends, that its sandboxes left nothing there.
func newTestRuntime(t *testing.T) *Runtime {
	t.Helper()
	testenv.RequiresRoot(t)
	runsc := testenv.Runsc(t)
	dir := t.TempDir()
	r, err := New(Config{Runsc: runsc, Dir: dir, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the suite's Kill cleanups, so it runs after them.
	t.Cleanup(func() {
		if ents, _ := os.ReadDir(r.boxDir); len(ents) > 0 {
			t.Errorf("sandbox directories left in %s: %v", r.boxDir, ents)
		}
		if m, _ := filepath.Glob(filepath.Join(r.stateDir, "*.state")); len(m) > 0 {
			t.Errorf("runsc state left: %v", m)
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
	sandboxtest.Run(t, func(t *testing.T) sandbox.Runtime { return newTestRuntime(t) })
}

// TestLeftoversFound checks that a new Runtime over the same directory (a
// restarted server) finds and removes a running sandbox and a half-made one
// (a crash after its network was made).
func TestLeftoversFound(t *testing.T) {
	r1 := newTestRuntime(t)
	ctx := context.Background()
	spec := sandboxtest.Spec(sandboxtest.BuildRootFS(t))
	t.Cleanup(func() { r1.Kill(ctx, spec.ID) })
	if err := r1.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	half := sandboxtest.NewID()
	t.Cleanup(func() { r1.Kill(ctx, half) })
	if err := os.Mkdir(r1.dir(half), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := netns.Create(half, netns.Link{HostAddr: netip.MustParseAddr("169.254.251.249"), GuestAddr: netip.MustParseAddr("169.254.251.250"), PrefixLen: 30}); err != nil {
		t.Fatal(err)
	}

	r2, err := New(Config{Runsc: r1.runsc, Dir: filepath.Dir(r1.stateDir)})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := r2.List(ctx)
	if err != nil || !slices.Contains(ids, spec.ID) || !slices.Contains(ids, half) {
		t.Fatalf("List() of a new Runtime = %v, %v; want %s and %s", ids, err, spec.ID, half)
	}
	if st, err := r2.State(ctx, spec.ID); st != sandbox.Running {
		t.Errorf("State(%s) from a new Runtime = %q, %v; want running", spec.ID, st, err)
	}
	if st, err := r2.State(ctx, half); st != sandbox.Stopped {
		t.Errorf("State of a half-made sandbox = %q, %v; want stopped", st, err)
	}
	pids := sandboxtest.Procs(spec.ID)
	for _, id := range []string{spec.ID, half} {
		if err := r2.Kill(ctx, id); err != nil {
			t.Errorf("Kill(%s): %v", id, err)
		}
		sandboxtest.AssertGone(t, r2, id, pids)
	}
}

// TestKilledBehindItsBack checks that a sandbox whose processes were
// killed outside the runtime (kill -9, the OOM killer) reads as stopped,
// although runsc's state file still says running, and is cleaned up.
func TestKilledBehindItsBack(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	spec := sandboxtest.Spec(sandboxtest.BuildRootFS(t))
	t.Cleanup(func() { r.Kill(ctx, spec.ID) })
	if err := r.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	pids := sandboxtest.Procs(spec.ID)
	if len(pids) == 0 {
		t.Fatal("no processes found for the sandbox")
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := r.State(ctx, spec.ID)
		if st == sandbox.Stopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("State after kill -9 = %q, %v; want stopped", st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := r.Kill(ctx, spec.ID); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	sandboxtest.AssertGone(t, r, spec.ID, pids)
}

// TestForeground: a sandbox started in the background has a small CPU
// share in its cgroup until Foreground gives it the default; an unknown
// sandbox is ErrNotFound.
func TestForeground(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	spec := sandboxtest.Spec(sandboxtest.BuildRootFS(t))
	spec.Background = true
	t.Cleanup(func() { r.Kill(ctx, spec.ID) })
	if err := r.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	shares := filepath.Join(cgroupRoot, "cpu", cgroupPath(spec.ID), "cpu.shares")
	if b, err := os.ReadFile(shares); err != nil || strings.TrimSpace(string(b)) != "64" {
		t.Errorf("cpu.shares in the background = %q, %v; want 64", b, err)
	}
	if err := r.Foreground(ctx, spec.ID); err != nil {
		t.Fatalf("Foreground: %v", err)
	}
	if b, err := os.ReadFile(shares); err != nil || strings.TrimSpace(string(b)) != "1024" {
		t.Errorf("cpu.shares in the foreground = %q, %v; want 1024", b, err)
	}
	for _, id := range []string{"no-such-sandbox", "../escape"} {
		if err := r.Foreground(ctx, id); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("Foreground(%q) = %v; want ErrNotFound", id, err)
		}
	}
}

// TestStateDuringKill: State asked again and again while the sandbox is
// being killed (a call's watcher does this) neither crashes nor leaves a
// memory guard behind. A bench run once hit the window (State guarding a
// sandbox whose cgroup was going, the guard's error path dereferencing
// nil); this loop rarely does, so it checks the outcome, not the window.
func TestStateDuringKill(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	rootfs := sandboxtest.BuildRootFS(t)
	for i := 0; i < 3; i++ {
		spec := sandboxtest.Spec(rootfs)
		t.Cleanup(func() { r.Kill(ctx, spec.ID) })
		if err := r.Create(ctx, spec); err != nil {
			t.Fatal(err)
		}
		r.unwatch(spec.ID) // State must find it unguarded, as after a restart
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
					r.State(ctx, spec.ID)
				}
			}
		}()
		if err := r.Kill(ctx, spec.ID); err != nil {
			t.Fatalf("Kill: %v", err)
		}
		close(stop)
		<-done
		r.mu.Lock()
		g := r.guards[spec.ID]
		r.mu.Unlock()
		if g != nil {
			t.Errorf("a memory guard is left for killed sandbox %s", spec.ID)
			r.unwatch(spec.ID)
		}
	}
}

// TestForeignNamespace checks that a lizard-* namespace another Runtime
// made (no sandbox directory here) is neither listed nor removed.
func TestForeignNamespace(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	id := sandboxtest.NewID()
	t.Cleanup(func() { netns.Remove(id) })
	if err := netns.Create(id, netns.Link{HostAddr: netip.MustParseAddr("169.254.251.245"), GuestAddr: netip.MustParseAddr("169.254.251.246"), PrefixLen: 30}); err != nil {
		t.Fatal(err)
	}
	if ids, err := r.List(ctx); err != nil || slices.Contains(ids, id) {
		t.Errorf("List() = %v, %v; want no %s", ids, err, id)
	}
	if _, err := r.State(ctx, id); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("State(%s) = %v, want ErrNotFound", id, err)
	}
	if err := r.Kill(ctx, id); err != nil {
		t.Errorf("Kill(%s) = %v, want nil", id, err)
	}
	if !netns.Exists(id) {
		t.Errorf("Kill(%s) removed another Runtime's namespace", id)
	}
	spec := sandboxtest.Spec(sandboxtest.BuildRootFS(t))
	spec.ID = id
	if err := r.Create(ctx, spec); !errors.Is(err, sandbox.ErrExists) {
		t.Errorf("Create over another Runtime's namespace = %v, want ErrExists", err)
	}
	if !netns.Exists(id) {
		t.Errorf("failed Create removed another Runtime's namespace")
	}
}

// TestPrefixIDs checks IDs that are prefixes of each other, which runsc on
// its own treats as ambiguous.
func TestPrefixIDs(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	rootfs := sandboxtest.BuildRootFS(t)
	a := sandboxtest.Spec(rootfs)
	b := sandboxtest.Spec(rootfs)
	b.ID = a.ID + "0"
	for _, sp := range []sandbox.Spec{a, b} {
		t.Cleanup(func() { r.Kill(ctx, sp.ID) })
		if err := r.Create(ctx, sp); err != nil {
			t.Fatalf("Create(%s): %v", sp.ID, err)
		}
	}
	for _, sp := range []sandbox.Spec{a, b} {
		if st, err := r.State(ctx, sp.ID); st != sandbox.Running {
			t.Errorf("State(%s) = %q, %v; want running", sp.ID, st, err)
		}
	}
	if err := r.Kill(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if st, err := r.State(ctx, b.ID); st != sandbox.Running {
		t.Errorf("State(%s) after killing %s = %q, %v; want running", b.ID, a.ID, st, err)
	}
}

func TestOCISpec(t *testing.T) {
	base := sandbox.Spec{
		ID:       "sbx-1",
		Template: sandbox.Artifact{Name: "interpreter", Key: "abc", RootFS: "/var/cache/lizard/templates/abc/rootfs"},
		Args:     []string{"/usr/local/bin/lizard-agent"},
		Env:      []string{"A=1"},
		Network:  sandbox.Network{HostAddr: netip.MustParseAddr("169.254.128.1"), GuestAddr: netip.MustParseAddr("169.254.128.2"), PrefixLen: 30},
	}
	tests := []struct {
		name       string
		layout     layout
		edit       func(*sandbox.Spec)
		wantMemory int64
		wantPids   int64
		wantQuota  int64  // 0: no CPU limit
		wantShares uint64 // 0: none set, the kernel's default
		wantPath   string
		wantMounts map[string]string // destination -> type
		wantBinds  map[string][]string
		noMounts   []string
	}{
		{
			name:       "defaults",
			layout:     currentLayout,
			edit:       func(*sandbox.Spec) {},
			wantMemory: 1 << 30, wantPids: 1024,
			wantPath: defaultPath,
			// /tmp is a bind that runsc covers with a disk-backed layer.
			wantMounts: map[string]string{"/proc": "proc", "/dev": "tmpfs", "/dev/pts": "devpts", "/sys": "sysfs", "/dev/shm": "tmpfs", "/tmp": "bind"},
			wantBinds:  map[string][]string{"/dev/shm": {"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}, "/tmp": {"rbind", "rw", "nosuid", "nodev"}},
		},
		{
			name:       "first layout, for images without a record",
			layout:     layoutTmpfs,
			edit:       func(*sandbox.Spec) {},
			wantMemory: 1 << 30, wantPids: 1024,
			wantPath:   defaultPath,
			wantMounts: map[string]string{"/proc": "proc", "/dev": "tmpfs", "/dev/pts": "devpts", "/sys": "sysfs", "/tmp": "tmpfs", "/dev/shm": "tmpfs"},
			wantBinds:  map[string][]string{"/dev/shm": {"nosuid", "noexec", "nodev", "mode=1777"}},
		},
		{
			name:       "the pids cgroup leaves room for the guest's own process limit",
			layout:     currentLayout,
			edit:       func(s *sandbox.Spec) { s.Limits.Processes = 512 },
			wantMemory: 1 << 30, wantPids: 512*hostTasksPerProcess + hostTasksReserve,
			wantPath: defaultPath,
		},
		{
			name:   "limits, PATH and files",
			layout: currentLayout,
			edit: func(s *sandbox.Spec) {
				s.Limits = sandbox.Limits{MemoryBytes: 512 << 20, Pids: 64, CPUs: 1.5}
				s.Env = append(s.Env, "PATH=/bin")
				s.Files = []sandbox.File{{Source: "/srv/a", Target: "/mnt/a"}, {Source: "/srv/b", Target: "/mnt/b"}}
			},
			wantMemory: 512 << 20, wantPids: 64, wantQuota: 150_000,
			wantPath:   "PATH=/bin",
			wantMounts: map[string]string{"/mnt/a": "bind", "/mnt/b": "bind"},
			wantBinds:  map[string][]string{"/mnt/a": {"rbind", "ro"}, "/mnt/b": {"rbind", "ro"}},
		},
		{
			name:       "in the background, a small CPU share",
			layout:     currentLayout,
			edit:       func(s *sandbox.Spec) { s.Background = true },
			wantMemory: 1 << 30, wantPids: 1024, wantShares: backgroundShares,
			wantPath: defaultPath,
		},
		{
			name:       "in the background with a CPU limit",
			layout:     currentLayout,
			edit:       func(s *sandbox.Spec) { s.Background, s.Limits.CPUs = true, 1 },
			wantMemory: 1 << 30, wantPids: 1024, wantQuota: 100_000, wantShares: backgroundShares,
			wantPath: defaultPath,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := base
			sp.Env = slices.Clone(base.Env)
			tt.edit(&sp)
			got := ociSpec(sp, "/var/run/netns/lizard-sbx-1", "/srv/empty", tt.layout)

			if got.Root.Path != sp.Template.RootFS || got.Root.Readonly {
				t.Errorf("root = %+v, want %s writable (for the overlay)", got.Root, sp.Template.RootFS)
			}
			if !slices.Equal(got.Process.Args, sp.Args) || got.Process.Cwd != "/" || got.Process.User.UID != 0 {
				t.Errorf("process args %v cwd %q uid %d, want %v / 0", got.Process.Args, got.Process.Cwd, got.Process.User.UID, sp.Args)
			}
			if !slices.Contains(got.Process.Env, "A=1") || !slices.Contains(got.Process.Env, tt.wantPath) {
				t.Errorf("env = %v, want A=1 and %s", got.Process.Env, tt.wantPath)
			}
			if n := len(slices.DeleteFunc(slices.Clone(got.Process.Env), func(e string) bool { return !strings.HasPrefix(e, "PATH=") })); n != 1 {
				t.Errorf("env has %d PATH entries, want 1: %v", n, got.Process.Env)
			}
			if m := *got.Linux.Resources.Memory.Limit; m != tt.wantMemory {
				t.Errorf("memory limit = %d, want %d", m, tt.wantMemory)
			}
			if p := got.Linux.Resources.Pids.Limit; p != tt.wantPids {
				t.Errorf("pids limit = %d, want %d", p, tt.wantPids)
			}
			cpu := got.Linux.Resources.CPU
			switch {
			case tt.wantQuota == 0 && cpu != nil && cpu.Quota != nil:
				t.Errorf("CPU = %+v, want no limit", cpu)
			case tt.wantQuota != 0 && (cpu == nil || cpu.Quota == nil || *cpu.Quota != tt.wantQuota || *cpu.Period != 100_000):
				t.Errorf("CPU = %+v, want quota %d per 100000", cpu, tt.wantQuota)
			}
			switch {
			case tt.wantShares == 0 && cpu != nil && cpu.Shares != nil:
				t.Errorf("CPU shares = %d, want none set", *cpu.Shares)
			case tt.wantShares != 0 && (cpu == nil || cpu.Shares == nil || *cpu.Shares != tt.wantShares):
				t.Errorf("CPU = %+v, want shares %d", cpu, tt.wantShares)
			}
			if got.Linux.CgroupsPath != "/lizard/sbx-1" {
				t.Errorf("cgroupsPath = %q, want /lizard/sbx-1", got.Linux.CgroupsPath)
			}
			i := slices.IndexFunc(got.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.NetworkNamespace })
			if i < 0 || got.Linux.Namespaces[i].Path != "/var/run/netns/lizard-sbx-1" {
				t.Errorf("namespaces = %+v, want network at /var/run/netns/lizard-sbx-1", got.Linux.Namespaces)
			}
			for dest, typ := range tt.wantMounts {
				j := slices.IndexFunc(got.Mounts, func(m specs.Mount) bool { return m.Destination == dest })
				if j < 0 || got.Mounts[j].Type != typ {
					t.Errorf("mount %s: got %+v, want type %s", dest, got.Mounts, typ)
					continue
				}
				if want, ok := tt.wantBinds[dest]; ok && !slices.Equal(got.Mounts[j].Options, want) {
					t.Errorf("mount %s options = %v, want %v", dest, got.Mounts[j].Options, want)
				}
			}
			for _, dest := range tt.noMounts {
				if slices.ContainsFunc(got.Mounts, func(m specs.Mount) bool { return m.Destination == dest }) {
					t.Errorf("mounts = %+v, want none at %s", got.Mounts, dest)
				}
			}
		})
	}
}

func TestContainerIDNotPrefix(t *testing.T) {
	tests := []struct{ a, b string }{{"a", "a1"}, {"sbx-1", "sbx-10"}, {"x", "x-y"}}
	for _, tt := range tests {
		if ca, cb := containerID(tt.a), containerID(tt.b); strings.HasPrefix(cb, ca) {
			t.Errorf("containerID(%q) = %q is a prefix of containerID(%q) = %q", tt.a, ca, tt.b, cb)
		}
	}
}

// TestCreateInterrupted cancels Create at points from its first step to
// the sandbox's start, and calls Close right after the cancel, as a
// stopping server does: once Close returns, nothing of the sandbox may be
// left, whichever step the cancel hit.
func TestCreateInterrupted(t *testing.T) {
	rootfs := sandboxtest.BuildRootFS(t)
	for _, after := range []time.Duration{0, time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			r := newTestRuntime(t)
			spec := sandboxtest.Spec(rootfs)
			t.Cleanup(func() { r.Kill(context.Background(), spec.ID) })
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- r.Create(ctx, spec) }()
			time.Sleep(after)
			cancel()
			// Close may run before Create has even locked the ID.
			time.Sleep(time.Duration(rand.IntN(2)) * time.Millisecond)
			cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
			defer ccancel()
			if err := r.Close(cctx); err != nil {
				t.Fatalf("Close: %v", err)
			}
			// A Create under way when Close was called has removed all it
			// made by now (it may not have returned yet); one not yet
			// begun fails with ErrClosed, having made nothing.
			select {
			case err := <-errc:
				if err == nil {
					// The create won the race: a sandbox made in full
					// is its caller's to kill.
					t.Logf("Create finished before the cancel")
					if err := r.Kill(context.Background(), spec.ID); err != nil {
						t.Fatal(err)
					}
				} else {
					t.Logf("Create: %v", err)
				}
			default:
				sandboxtest.AssertGone(t, r, spec.ID, nil)
				if err := <-errc; err == nil {
					t.Errorf("Create succeeded after Close returned")
				} else {
					t.Logf("Create: %v", err)
				}
			}
			sandboxtest.AssertGone(t, r, spec.ID, nil)
			assertNoOwner(t, spec.ID)
			if err := r.Create(context.Background(), sandboxtest.Spec(rootfs)); !errors.Is(err, ErrClosed) {
				t.Errorf("Create after Close = %v, want ErrClosed", err)
			}
		})
	}
}

func assertNoOwner(t *testing.T, id string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(OwnersDir, id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("owner record of %s: %v, want none", id, err)
	}
	if out, _ := exec.Command("nft", "list", "tables").Output(); strings.Contains(string(out), netns.TableName(id)+"\n") {
		t.Errorf("nft table %s still exists", netns.TableName(id))
	}
}

// TestOrphansRemoved checks that a new Runtime removes the namespace,
// veth, rules and processes of a sandbox whose runtime directory was
// deleted before its removal ended (a server stopped during start-up,
// its data then removed), and leaves alone the running sandbox of a live
// Runtime, though both are machine-wide names it did not make.
func TestOrphansRemoved(t *testing.T) {
	ctx := context.Background()
	rootfs := sandboxtest.BuildRootFS(t)
	live := newTestRuntime(t)
	kept := sandboxtest.Spec(rootfs)
	t.Cleanup(func() { live.Kill(ctx, kept.ID) })
	if err := live.Create(ctx, kept); err != nil {
		t.Fatal(err)
	}

	testenv.RequiresRoot(t)
	gone, err := New(Config{Runsc: testenv.Runsc(t), Dir: filepath.Join(t.TempDir(), "gone")})
	if err != nil {
		t.Fatal(err)
	}
	orphan := sandboxtest.Spec(rootfs)
	t.Cleanup(func() { netns.Remove(orphan.ID); os.Remove(filepath.Join(OwnersDir, orphan.ID)) })
	if err := gone.Create(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	pids := sandboxtest.Procs(orphan.ID)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if err := os.RemoveAll(gone.root); err != nil {
		t.Fatal(err)
	}
	if !netns.Exists(orphan.ID) {
		t.Fatal("the orphan's namespace is already gone; the test proves nothing")
	}

	r := newTestRuntime(t)
	if netns.Exists(orphan.ID) {
		t.Errorf("a new Runtime left the orphan's namespace or veth")
	}
	assertNoOwner(t, orphan.ID)
	sandboxtest.AssertGone(t, r, orphan.ID, pids)
	// Its address is free again.
	again := sandboxtest.Spec(rootfs)
	again.Network = orphan.Network
	t.Cleanup(func() { r.Kill(ctx, again.ID) })
	if err := r.Create(ctx, again); err != nil {
		t.Fatalf("Create on the orphan's address: %v", err)
	}
	if err := sandboxtest.WaitReady(again.Network, 15*time.Second); err != nil {
		t.Error(err)
	}

	if st, err := live.State(ctx, kept.ID); st != sandbox.Running {
		t.Errorf("a live Runtime's sandbox after another Runtime started: %q, %v; want running", st, err)
	}
	if _, err := os.Stat(filepath.Join(OwnersDir, kept.ID)); err != nil {
		t.Errorf("owner record of a live sandbox: %v", err)
	}
}

// TestFrozenLeftover checks a guard that died with the guest frozen (its
// server killed while it ended a runaway): the guard of the next Runtime
// thaws the guest, and Kill removes the freezer cgroup left below the
// sandbox's.
func TestFrozenLeftover(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	spec := sandboxtest.Spec(sandboxtest.BuildRootFS(t))
	spec.Limits.MemoryBytes = 256 << 20
	t.Cleanup(func() { r.Kill(ctx, spec.ID) })
	if err := r.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := sandboxtest.WaitReady(spec.Network, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	g := r.guards[spec.ID]
	r.mu.Unlock()
	if g == nil {
		t.Fatal("the sandbox has no memory guard")
	}
	if _, err := g.freeze(); err != nil {
		t.Fatalf("freeze: %v", err)
	}
	_, frozen := freezerDirs(spec.ID)
	if !isDir(frozen) {
		t.Fatalf("no freezer cgroup %s after freeze", frozen)
	}
	r.unwatch(spec.ID) // the guard dies; the guest stays frozen

	r2, err := New(Config{Runsc: r.runsc, Dir: r.root})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := r2.State(ctx, spec.ID); st != sandbox.Running {
		t.Fatalf("State from a new Runtime = %q, %v; want running", st, err)
	}
	if isDir(frozen) {
		t.Errorf("the new Runtime's guard left the guest frozen in %s", frozen)
	}
	if _, err := sandboxtest.Do(spec.Network, "GET", "/count", nil); err != nil {
		t.Errorf("the sandbox does not answer after the thaw: %v", err)
	}

	// Frozen again, and killed so.
	r2.mu.Lock()
	g2 := r2.guards[spec.ID]
	r2.mu.Unlock()
	if g2 == nil {
		t.Fatal("the new Runtime does not guard the sandbox")
	}
	if _, err := g2.freeze(); err != nil {
		t.Fatalf("freeze: %v", err)
	}
	pids := sandboxtest.Procs(spec.ID)
	if err := r2.Kill(ctx, spec.ID); err != nil {
		t.Fatalf("Kill of a frozen sandbox: %v", err)
	}
	sandboxtest.AssertGone(t, r2, spec.ID, pids)
	if m, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", "lizard", spec.ID)); len(m) > 0 {
		t.Errorf("cgroups left: %v", m)
	}
}

// TestVolumesLayout: a sandbox with volumes gets them as bare writable
// binds (no --overlay2 layer over them, which would keep writes from the
// host), a layer on the root alone, and a bounded tmpfs /tmp; Lizard's
// own files are mounted after the volumes, so that none covers them.
func TestVolumesLayout(t *testing.T) {
	spec := sandbox.Spec{ID: "v", Template: sandbox.Artifact{RootFS: "/r"}, Args: []string{"/a"},
		Volumes: []sandbox.Volume{{Source: "/data/volumes/vol_x", Target: "/home/user/data"}},
		Files:   []sandbox.File{{Source: "/bin/lizard-agent", Target: "/opt/lizard/bin/lizard-agent"}}}
	order := func(lay layout) []string {
		var out []string
		for _, m := range ociSpec(spec, "/run/netns/x", "/tmp/x", lay).Mounts {
			if m.Type == "bind" && m.Destination != "/tmp" {
				out = append(out, m.Destination)
			}
		}
		return out
	}
	if got, want := order(layoutVolumesFirst), []string{"/home/user/data", "/opt/lizard/bin/lizard-agent"}; !slices.Equal(got, want) {
		t.Errorf("binds of a new sandbox with volumes, in order: %v; want %v (the agent last)", got, want)
	}
	// Images taken with layoutVolumes restore into their own order.
	if got, want := order(layoutVolumes), []string{"/opt/lizard/bin/lizard-agent", "/home/user/data"}; !slices.Equal(got, want) {
		t.Errorf("binds of a layoutVolumes image, in order: %v; want %v", got, want)
	}
	s := ociSpec(spec, "/run/netns/x", "/tmp/x", layoutVolumesFirst)
	var vol, tmp *specs.Mount
	for i, m := range s.Mounts {
		switch m.Destination {
		case "/home/user/data":
			vol = &s.Mounts[i]
		case "/tmp":
			tmp = &s.Mounts[i]
		}
	}
	if vol == nil || vol.Type != "bind" || vol.Source != "/data/volumes/vol_x" || !slices.Contains(vol.Options, "rw") || !slices.Contains(vol.Options, "nodev") {
		t.Errorf("volume mount = %+v; want a writable nodev bind of the volume", vol)
	}
	if tmp == nil || tmp.Type != "tmpfs" || !slices.Contains(tmp.Options, tmpSize) {
		t.Errorf("/tmp = %+v; want a tmpfs of %s", tmp, tmpSize)
	}
	for _, lay := range []layout{layoutVolumes, layoutVolumesFirst} {
		if got := overlayArg("/o", 1<<20, lay); !strings.HasPrefix(got, "--overlay2=root:") {
			t.Errorf("overlayArg(%d) = %s; want the root's layer alone", lay, got)
		}
	}
	if got := overlayArg("/o", 1<<20, layoutBounded); !strings.HasPrefix(got, "--overlay2=all:") {
		t.Errorf("overlayArg(layoutBounded) = %s; want every writable mount's", got)
	}
}

// TestSeccompPrecompiled checks that bin/runsc's Sentry and gofer install
// seccomp filters precompiled at build time, on a create and on a restore,
// under the flags this runtime gives runsc. A runsc built by `go install`
// has none and builds both filters at every start (~40 ms of the Sentry's
// CPU per restore); `make runsc` precompiles them (build/runsc/build.sh).
// runsc's debug log names the path taken.
func TestSeccompPrecompiled(t *testing.T) {
	testenv.RequiresRoot(t)
	logs := t.TempDir()
	wrapper := filepath.Join(t.TempDir(), "runsc")
	script := fmt.Sprintf("#!/bin/sh\nexec %s --debug --debug-log=%s/ \"$@\"\n", testenv.Runsc(t), logs)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LIZARD_RUNSC", wrapper)
	r := newTestRuntime(t)
	ctx := context.Background()
	rootfs := sandboxtest.BuildRootFS(t)

	a := sandboxtest.Spec(rootfs)
	t.Cleanup(func() { r.Kill(ctx, a.ID) })
	if err := r.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := sandboxtest.WaitReady(a.Network, sandboxtest.ReadyTimeout); err != nil {
		t.Fatal(err)
	}
	image := filepath.Join(t.TempDir(), "image")
	if err := r.Checkpoint(ctx, a.ID, image, true); err != nil {
		t.Fatal(err)
	}
	restoreReady(ctx, t, r, rootfs, image)

	for _, proc := range []string{"boot", "gofer"} {
		files, _ := filepath.Glob(filepath.Join(logs, "*."+proc+".txt"))
		// One from the create, one from the restore.
		if len(files) != 2 {
			t.Fatalf("%d %s logs in %s, want 2", len(files), proc, logs)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			log := string(b)
			if strings.Contains(log, "No precompiled program found") || !strings.Contains(log, "Loaded precompiled seccomp instructions") {
				i := strings.Index(log, "precompiled")
				t.Errorf("%s (%s) did not install a precompiled seccomp filter; its log says: %.300s", proc, filepath.Base(f), log[max(i-100, 0):])
			}
		}
	}
}

// TestRestorePagesWritten: a restore loads the checkpoint's pages into the
// Sentry's memory file by pwrite(2)s from a mapping of the pages file
// (build/runsc/pages-write.patch; runsc's own reads went into the memory
// file's mapping, faulting in, zeroing and mapping every page before the copy
// overwrote it), two reads per CPU at a time (pages-reader-parallel.patch;
// runsc's 128 raised the Sentry's GOMAXPROCS by as many). The restored
// sandbox answering is the check that the pages arrived.
func TestRestorePagesWritten(t *testing.T) {
	testenv.RequiresRoot(t)
	logs := t.TempDir()
	wrapper := filepath.Join(t.TempDir(), "runsc")
	script := fmt.Sprintf("#!/bin/sh\nexec %s --debug --debug-log=%s/ \"$@\"\n", testenv.Runsc(t), logs)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LIZARD_RUNSC", wrapper)
	r := newTestRuntime(t)
	ctx := context.Background()
	rootfs := sandboxtest.BuildRootFS(t)

	a := sandboxtest.Spec(rootfs)
	t.Cleanup(func() { r.Kill(ctx, a.ID) })
	if err := r.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := sandboxtest.WaitReady(a.Network, sandboxtest.ReadyTimeout); err != nil {
		t.Fatal(err)
	}
	image := filepath.Join(t.TempDir(), "image")
	if err := r.Checkpoint(ctx, a.ID, image, true); err != nil {
		t.Fatal(err)
	}
	created, _ := filepath.Glob(filepath.Join(logs, "*.boot.txt"))
	restoreReady(ctx, t, r, rootfs, image)

	all, _ := filepath.Glob(filepath.Join(logs, "*.boot.txt"))
	boot := slices.DeleteFunc(all, func(f string) bool { return slices.Contains(created, f) })
	if len(boot) != 1 {
		t.Fatalf("boot logs of the restore: %v, want one", boot)
	}
	var log string
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(log, "Async page loading completed"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the restore's pages did not finish loading in 30 s; its log ends: %.500s", log[max(len(log)-500, 0):])
		}
		data, err := os.ReadFile(boot[0])
		if err != nil {
			t.Fatal(err)
		}
		log = string(data)
	}
	if !strings.Contains(log, "lizard: pages file: loads of") {
		i := strings.Index(log, "Async page loading started")
		t.Errorf("the restore's Sentry did not load its pages by writes; its log says: %.300s", log[max(i, 0):])
	}
	want := fmt.Sprintf("lizard: pages file: %d reads at a time", min(128, max(2*runtime.NumCPU(), 4)))
	if !strings.Contains(log, want) {
		t.Errorf("the restore's Sentry log has no %q", want)
	}
}

// restoreReady restores image as a new sandbox of rootfs, killed when t
// ends, and waits until its agent answers.
func restoreReady(ctx context.Context, t *testing.T, r *Runtime, rootfs, image string) sandbox.Spec {
	t.Helper()
	spec := sandboxtest.Spec(rootfs)
	t.Cleanup(func() { r.Kill(ctx, spec.ID) })
	if err := r.Restore(ctx, spec, image); err != nil {
		t.Fatal(err)
	}
	if err := sandboxtest.WaitReady(spec.Network, sandboxtest.ReadyTimeout); err != nil {
		t.Fatal(err)
	}
	return spec
}
