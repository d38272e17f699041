// Package sandboxtest is the conformance suite every sandbox.Runtime backend
// runs, and the helpers it boots sandboxes with: a tiny root filesystem
// holding a static test server (testdata/server) that keeps a counter in
// memory, writes and reads files, allocates memory and spawns processes on
// request.
//
// The suite needs root and a real backend; it talks only to the addresses
// it gives its sandboxes (169.254.NetworkOctet.0/24, high in the link-local
// pool so it does not clash with a running server's sandboxes).
package sandboxtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/sandbox"
)

// ServerPath is where the test server sits in the root filesystem.
const ServerPath = "/server"

// BuildRootFS builds the test server with CGO_ENABLED=0 into a new
// directory that serves as a sandbox root filesystem, and returns it. The
// directory is removed when t ends.
func BuildRootFS(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := t.TempDir()
	for _, d := range []string{"proc", "dev", "sys", "tmp", "etc", "data"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "motd"), []byte("template\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(root, ServerPath), "./testdata/server")
	cmd.Dir = filepath.Dir(file)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building test server: %v\n%s", err, out)
	}
	return root
}

var (
	netSeq atomic.Uint32
	idSeq  atomic.Uint32
	runTag = randomHex(3)
)

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// NetworkOctet is the third byte of the /24 NewNetwork takes links from:
// each backend's suite its own (gVisor 250, QEMU 248), since their test
// binaries run at the same time.
var NetworkOctet byte = 250

// NewNetwork returns a /30 link not used by any other sandbox of this test
// process, in 169.254.NetworkOctet.0/24.
func NewNetwork() sandbox.Network {
	i := netSeq.Add(1) % 64
	base := netip.AddrFrom4([4]byte{169, 254, NetworkOctet, byte(4 * i)})
	return sandbox.Network{HostAddr: base.Next(), GuestAddr: base.Next().Next(), PrefixLen: 30}
}

// NewID returns a sandbox ID unique to this process run and distinctive
// enough to find the sandbox's host processes by their command line.
func NewID() string {
	return fmt.Sprintf("lzt-%s-%d", runTag, idSeq.Add(1))
}

// Spec returns a Spec that boots the test server of rootfs with a fresh ID
// and network.
func Spec(rootfs string) sandbox.Spec {
	return sandbox.Spec{
		ID:       NewID(),
		Template: sandbox.Artifact{Name: "conformance", Key: "conformance", RootFS: rootfs},
		Args:     []string{ServerPath},
		Env:      []string{"GOMAXPROCS=2"},
		Network:  NewNetwork(),
	}
}

// Addr is the test server's address in the sandbox on n.
func Addr(n sandbox.Network) string {
	return netip.AddrPortFrom(n.GuestAddr, api.AgentPort).String()
}

// Timeouts of the suite's waits: a backend slower by nature (a VM under
// software emulation) raises them before Run.
var (
	// RequestTimeout bounds one request to the test server.
	RequestTimeout = 10 * time.Second
	// ReadyTimeout bounds the wait for a created or restored sandbox's
	// test server to accept connections.
	ReadyTimeout = 15 * time.Second
)

// client never reuses connections: a checkpoint or a kill would leave
// them dead.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// Do sends one request to the test server on n and returns its body; a
// status other than 200 is an error.
func Do(n sandbox.Network, method, path string, body []byte) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+Addr(n)+path, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	return string(b), nil
}

// WaitReady waits until the test server on n accepts TCP connections.
func WaitReady(n sandbox.Network, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", Addr(n), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("test server at %s not reachable after %s: %w", Addr(n), timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Procs returns the host processes whose command line contains s.
func Procs(s string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// suite is one run of the conformance tests against one backend.
type suite struct {
	newRuntime func(t *testing.T) sandbox.Runtime
	rootfs     string
}

// Run runs the conformance suite. newRuntime returns a runtime for one
// subtest; it may register cleanups that check for leftovers the suite
// cannot see (the runtime's own directories).
func Run(t *testing.T, newRuntime func(t *testing.T) sandbox.Runtime) {
	s := &suite{newRuntime: newRuntime, rootfs: BuildRootFS(t)}
	t.Run("Lifecycle", s.testLifecycle)
	t.Run("DuplicateID", s.testDuplicateID)
	t.Run("KillUnknown", s.testKillUnknown)
	t.Run("KillConcurrent", s.testKillConcurrent)
	t.Run("BrokenRootFS", s.testBrokenRootFS)
	t.Run("MemoryLimit", s.testMemoryLimit)
	t.Run("MemoryRunawayProcess", s.testMemoryRunawayProcess)
	t.Run("PidsLimit", s.testPidsLimit)
	t.Run("DiskLimit", s.testDiskLimit)
	t.Run("DiskLimitRestored", s.testDiskLimitRestored)
	t.Run("TwoIsolated", s.testTwoIsolated)
	t.Run("ForkFromCheckpoint", s.testFork)
	t.Run("ForkOverlapped", s.testForkOverlapped)
	t.Run("CheckpointStopRestore", s.testCheckpointStopRestore)
	t.Run("RestoreBadImage", s.testRestoreBadImage)
}

// create boots spec and registers its Kill as a cleanup.
func (s *suite) create(t *testing.T, rt sandbox.Runtime, spec sandbox.Spec) {
	t.Helper()
	t.Cleanup(func() {
		if err := rt.Kill(context.Background(), spec.ID); err != nil {
			t.Errorf("cleanup: Kill(%s): %v", spec.ID, err)
		}
	})
	if err := rt.Create(context.Background(), spec); err != nil {
		t.Fatalf("Create(%s): %v", spec.ID, err)
	}
	if err := WaitReady(spec.Network, ReadyTimeout); err != nil {
		t.Fatal(err)
	}
}

func (s *suite) restore(t *testing.T, rt sandbox.Runtime, spec sandbox.Spec, image string) {
	t.Helper()
	t.Cleanup(func() {
		if err := rt.Kill(context.Background(), spec.ID); err != nil {
			t.Errorf("cleanup: Kill(%s): %v", spec.ID, err)
		}
	})
	if err := rt.Restore(context.Background(), spec, image); err != nil {
		t.Fatalf("Restore(%s): %v", spec.ID, err)
	}
	if err := WaitReady(spec.Network, ReadyTimeout); err != nil {
		t.Fatal(err)
	}
}

func mustDo(t *testing.T, n sandbox.Network, method, path string, body []byte) string {
	t.Helper()
	got, err := Do(n, method, path, body)
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, n.GuestAddr, err)
	}
	return got
}

func wantBody(t *testing.T, n sandbox.Network, method, path, want string) {
	t.Helper()
	if got := mustDo(t, n, method, path, nil); got != want {
		t.Errorf("%s %s on %s = %q, want %q", method, path, n.GuestAddr, got, want)
	}
}

// AssertGone checks that nothing of sandbox id is left on the host: the
// runtime does not know it, no network namespace or host veth, none of
// pids alive, no cgroup.
func AssertGone(t *testing.T, rt sandbox.Runtime, id string, pids []int) {
	t.Helper()
	ctx := context.Background()
	if st, err := rt.State(ctx, id); err == nil || !isNotFound(err) {
		t.Errorf("State(%s) after removal = %q, %v; want ErrNotFound", id, st, err)
	}
	ids, err := rt.List(ctx)
	if err != nil {
		t.Errorf("List: %v", err)
	}
	if slices.Contains(ids, id) {
		t.Errorf("List() = %v after removal, still has %s", ids, id)
	}
	// The network may go a moment after Kill returns (Runtime.Kill).
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		out, _ := exec.Command("ip", "netns", "list").Output()
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == netns.Name(id) {
				left = append(left, "ip netns list still shows "+netns.Name(id))
			}
		}
		if _, err := os.Lstat(netns.Path(id)); err == nil {
			left = append(left, "network namespace file "+netns.Path(id)+" still exists")
		}
		if exec.Command("ip", "link", "show", netns.VethName(id)).Run() == nil {
			left = append(left, "host veth "+netns.VethName(id)+" of "+id+" still exists")
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("10 s after its removal: %s", strings.Join(left, "; "))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Processes may take a moment to be reaped after Kill returns;
	// Kill promises they are gone, so no waiting here.
	for _, pid := range pids {
		if alive(pid) {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			t.Errorf("process %d of %s still running: %s", pid, id, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}))
		}
	}
	if left := Procs(id); len(left) > 0 {
		t.Errorf("processes mentioning %s still running: %v", id, left)
	}
	if m, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", "lizard", id)); len(m) > 0 {
		t.Errorf("cgroups of %s still exist: %v", id, m)
	}
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, sandbox.ErrNotFound) }

func (s *suite) testLifecycle(t *testing.T) {
	rt := s.newRuntime(t)
	ctx := context.Background()
	spec := Spec(s.rootfs)
	before := listDir(t, s.rootfs)

	start := time.Now()
	s.create(t, rt, spec)
	t.Logf("Create until the server answers: %s", time.Since(start))

	wantBody(t, spec.Network, "GET", "/", "1")
	wantBody(t, spec.Network, "GET", "/", "2")
	if got := mustDo(t, spec.Network, "GET", "/addrs", nil); !strings.Contains(got, spec.Network.GuestAddr.String()+"/") {
		t.Errorf("sandbox addresses = %q, want %s among them", got, spec.Network.GuestAddr)
	}
	// Writes land in the sandbox's own layer, not in the shared template.
	mustDo(t, spec.Network, "PUT", "/file?path=/data/hello", []byte("hello"))
	mustDo(t, spec.Network, "PUT", "/file?path=/etc/motd", []byte("sandbox"))
	wantBody(t, spec.Network, "GET", "/file?path=/data/hello", "hello")
	wantBody(t, spec.Network, "GET", "/file?path=/etc/motd", "sandbox")
	if after := listDir(t, s.rootfs); after != before {
		t.Errorf("template root filesystem changed by the sandbox:\nbefore: %s\nafter:  %s", before, after)
	}

	st, err := rt.State(ctx, spec.ID)
	if err != nil || st != sandbox.Running {
		t.Errorf("State = %q, %v; want %q", st, err, sandbox.Running)
	}
	ids, err := rt.List(ctx)
	if err != nil || !slices.Contains(ids, spec.ID) {
		t.Errorf("List() = %v, %v; want it to contain %s", ids, err, spec.ID)
	}
	pids := Procs(spec.ID)
	if len(pids) == 0 {
		t.Errorf("found no host processes mentioning %s while it runs", spec.ID)
	}

	start = time.Now()
	if err := rt.Kill(ctx, spec.ID); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	t.Logf("Kill: %s", time.Since(start))
	AssertGone(t, rt, spec.ID, pids)
	if _, err := Do(spec.Network, "GET", "/count", nil); err == nil {
		t.Errorf("sandbox still answers after Kill")
	}
}

func (s *suite) testDuplicateID(t *testing.T) {
	rt := s.newRuntime(t)
	spec := Spec(s.rootfs)
	s.create(t, rt, spec)
	mustDo(t, spec.Network, "GET", "/", nil)

	dup := spec
	dup.Network = NewNetwork()
	err := rt.Create(context.Background(), dup)
	if !errors.Is(err, sandbox.ErrExists) {
		t.Errorf("Create of a used ID: got %v, want ErrExists", err)
	}
	err = rt.Restore(context.Background(), dup, t.TempDir())
	if err == nil {
		t.Errorf("Restore into a used ID: got nil error")
	}
	// The failed attempts must not have hurt the first sandbox.
	wantBody(t, spec.Network, "GET", "/", "2")
	if st, err := rt.State(context.Background(), spec.ID); st != sandbox.Running {
		t.Errorf("State after duplicate Create = %q, %v; want running", st, err)
	}
}

func (s *suite) testKillUnknown(t *testing.T) {
	rt := s.newRuntime(t)
	ctx := context.Background()
	for _, id := range []string{NewID(), "no-such-sandbox", "Not A Valid ID/.."} {
		if err := rt.Kill(ctx, id); err != nil {
			t.Errorf("Kill(%q) of an unknown sandbox = %v, want nil", id, err)
		}
		if _, err := rt.State(ctx, id); !isNotFound(err) {
			t.Errorf("State(%q) of an unknown sandbox = %v, want ErrNotFound", id, err)
		}
	}
	if err := rt.Checkpoint(ctx, NewID(), t.TempDir(), true); !isNotFound(err) {
		t.Errorf("Checkpoint of an unknown sandbox = %v, want ErrNotFound", err)
	}
}

func (s *suite) testKillConcurrent(t *testing.T) {
	rt := s.newRuntime(t)
	spec := Spec(s.rootfs)
	s.create(t, rt, spec)
	pids := Procs(spec.ID)

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = rt.Kill(context.Background(), spec.ID) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent Kill %d: %v", i, err)
		}
	}
	AssertGone(t, rt, spec.ID, pids)
}

func (s *suite) testBrokenRootFS(t *testing.T) {
	rt := s.newRuntime(t)
	tests := []struct {
		name string
		edit func(*sandbox.Spec)
	}{
		{"missing program", func(sp *sandbox.Spec) { sp.Args = []string{"/no/such/program"} }},
		{"missing rootfs", func(sp *sandbox.Spec) { sp.Template.RootFS = filepath.Join(t.TempDir(), "nothing") }},
		{"rootfs is a file", func(sp *sandbox.Spec) { sp.Template.RootFS = filepath.Join(s.rootfs, ServerPath) }},
	}
	for _, tt := range tests {
		spec := Spec(s.rootfs)
		tt.edit(&spec)
		err := rt.Create(context.Background(), spec)
		if err == nil {
			t.Errorf("%s: Create succeeded, want an error", tt.name)
			rt.Kill(context.Background(), spec.ID)
			continue
		}
		t.Logf("%s: Create: %v", tt.name, err)
		AssertGone(t, rt, spec.ID, nil)
	}
}

func (s *suite) testMemoryLimit(t *testing.T) {
	rt := s.newRuntime(t)
	spec := Spec(s.rootfs)
	spec.Limits.MemoryBytes = 256 << 20
	s.create(t, rt, spec)
	pids := Procs(spec.ID)

	// Well under the limit works...
	wantBody(t, spec.Network, "POST", "/alloc?mb=64", "allocated 64 MiB")
	// ...past it does not: the allocation fails or the sandbox is killed.
	// A killed sandbox sends no reset, so watch its state rather than wait
	// for the request to time out.
	type result struct {
		body string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		got, err := Do(spec.Network, "POST", "/alloc?mb=1024", nil)
		done <- result{got, err}
	}()
	bound := max(30*time.Second, RequestTimeout)
	deadline := time.After(bound)
wait:
	for {
		select {
		case r := <-done:
			if r.err == nil && r.body == "allocated 1024 MiB" {
				t.Fatalf("allocating 1 GiB in a sandbox limited to 256 MiB succeeded")
			}
			t.Logf("allocating past the limit: %q, %v", r.body, r.err)
			break wait
		case <-time.After(50 * time.Millisecond):
			if st, err := rt.State(context.Background(), spec.ID); err != nil || st != sandbox.Running {
				t.Logf("allocating past the limit: sandbox now %q, %v", st, err)
				break wait
			}
		case <-deadline:
			t.Fatalf("allocating 1 GiB in a sandbox limited to 256 MiB neither failed nor stopped it in %s", bound)
		}
	}

	// The host and its other sandboxes are unharmed.
	other := Spec(s.rootfs)
	s.create(t, rt, other)
	wantBody(t, other.Network, "GET", "/", "1")

	if err := rt.Kill(context.Background(), spec.ID); err != nil {
		t.Fatalf("Kill after OOM: %v", err)
	}
	AssertGone(t, rt, spec.ID, pids)
}

// testMemoryRunawayProcess checks that a process allocating past the
// sandbox's memory limit dies alone: the sandbox, its first process's
// memory and its files stay, and it can do the same again.
func (s *suite) testMemoryRunawayProcess(t *testing.T) {
	rt := s.newRuntime(t)
	spec := Spec(s.rootfs)
	spec.Limits.MemoryBytes = 256 << 20
	s.create(t, rt, spec)
	mustDo(t, spec.Network, "GET", "/", nil)
	mustDo(t, spec.Network, "PUT", "/file?path=/data/kept", []byte("kept"))

	if got := mustDo(t, spec.Network, "POST", "/child-alloc?mb=32", nil); got != "exited 0" {
		t.Fatalf("a child allocating 32 MiB under a 256 MiB limit: %q, want exited 0", got)
	}
	for i := range 2 {
		begin := time.Now()
		got, err := Do(spec.Network, "POST", "/child-alloc?mb=2048", nil)
		t.Logf("a child allocating 2 GiB under a 256 MiB limit (%d): %q, %v after %s", i, got, err, time.Since(begin))
		if err != nil {
			t.Fatalf("the sandbox did not survive a runaway child: %v", err)
		}
		if got == "exited 0" {
			t.Fatalf("a child allocated 2 GiB under a 256 MiB limit")
		}
		if st, err := rt.State(context.Background(), spec.ID); st != sandbox.Running {
			t.Fatalf("State after a runaway child = %q, %v; want running", st, err)
		}
		wantBody(t, spec.Network, "GET", "/count", "1")
		wantBody(t, spec.Network, "GET", "/file?path=/data/kept", "kept")
	}
}

func (s *suite) testPidsLimit(t *testing.T) {
	rt := s.newRuntime(t)
	spec := Spec(s.rootfs)
	spec.Limits.Pids = 128
	s.create(t, rt, spec)

	if got := mustDo(t, spec.Network, "POST", "/spawn?n=5", nil); got != "5" {
		t.Fatalf("spawning 5 processes under a limit of 128 started %s", got)
	}
	got, err := Do(spec.Network, "POST", "/spawn?n=300", nil)
	if err == nil {
		if n, _ := strconv.Atoi(got); n >= 300 {
			t.Errorf("spawning 300 processes under a limit of 128 started %d, want fewer", n)
		}
	}
	t.Logf("spawning 300 processes under a limit of 128: %q, %v", got, err)
}

func (s *suite) testDiskLimit(t *testing.T) {
	rt := s.newRuntime(t)
	spec := Spec(s.rootfs)
	spec.Limits.DiskBytes = 64 << 20
	s.create(t, rt, spec)
	assertDiskLimit(t, spec)
}

// assertDiskLimit checks that the sandbox on spec sees a root filesystem of
// its disk limit and cannot write past it, in / or in /tmp.
func assertDiskLimit(t *testing.T, spec sandbox.Spec) {
	t.Helper()
	n := spec.Network
	want := spec.Limits.DiskBytes
	if got, err := strconv.ParseInt(mustDo(t, n, "GET", "/statfs?path=/", nil), 10, 64); err != nil || got < want*9/10 || got > want {
		t.Errorf("size of / in a sandbox with a %d MiB disk = %d bytes (%v), want about %d", want>>20, got, err, want)
	}
	small := bytes.Repeat([]byte("x"), 16<<20)
	mustDo(t, n, "PUT", "/file?path=/data/small", small)
	big := bytes.Repeat([]byte("y"), int(want)*2)
	for _, path := range []string{"/data/big", "/tmp/big"} {
		if _, err := Do(n, "PUT", "/file?path="+path, big); err == nil {
			t.Errorf("writing %d MiB to %s under a %d MiB disk limit succeeded", len(big)>>20, path, want>>20)
		} else {
			t.Logf("writing past the disk limit to %s: %v", path, err)
		}
		// What was written is removed, so the next path starts with room.
		mustDo(t, n, "PUT", "/file?path="+path, nil)
	}
}

// testDiskLimitRestored checks that the disk limit holds on a sandbox
// restored from a checkpoint (fork, resume): a Restore under the
// checkpoint's limit keeps it, and one asking for another limit either
// gives that limit or fails with ErrImage, leaving nothing.
func (s *suite) testDiskLimitRestored(t *testing.T) {
	rt := s.newRuntime(t)
	ctx := context.Background()
	a := Spec(s.rootfs)
	a.Limits.DiskBytes = 64 << 20
	s.create(t, rt, a)
	image := filepath.Join(t.TempDir(), "image")
	if err := rt.Checkpoint(ctx, a.ID, image, true); err != nil {
		t.Fatal(err)
	}

	b := Spec(s.rootfs)
	b.Limits.DiskBytes = a.Limits.DiskBytes
	s.restore(t, rt, b, image)
	assertDiskLimit(t, b)

	for _, disk := range []int64{32 << 20, 256 << 20} {
		c := Spec(s.rootfs)
		c.Limits.DiskBytes = disk
		err := rt.Restore(ctx, c, image)
		if err != nil {
			if !errors.Is(err, sandbox.ErrImage) {
				t.Errorf("Restore of a %d MiB-disk image with %d MiB = %v, want success or ErrImage", a.Limits.DiskBytes>>20, disk>>20, err)
			}
			t.Logf("Restore with another disk limit: %v", err)
			AssertGone(t, rt, c.ID, nil)
			continue
		}
		t.Cleanup(func() { rt.Kill(ctx, c.ID) })
		if err := WaitReady(c.Network, ReadyTimeout); err != nil {
			t.Fatal(err)
		}
		assertDiskLimit(t, c)
	}
}

func (s *suite) testTwoIsolated(t *testing.T) {
	rt := s.newRuntime(t)
	a, b := Spec(s.rootfs), Spec(s.rootfs)
	s.create(t, rt, a)
	s.create(t, rt, b)
	if a.Network.GuestAddr == b.Network.GuestAddr {
		t.Fatalf("both sandboxes have address %s", a.Network.GuestAddr)
	}
	for range 3 {
		mustDo(t, a.Network, "GET", "/", nil)
	}
	mustDo(t, b.Network, "GET", "/", nil)
	wantBody(t, a.Network, "GET", "/count", "3")
	wantBody(t, b.Network, "GET", "/count", "1")

	mustDo(t, a.Network, "PUT", "/file?path=/data/only-a", []byte("a"))
	if got, err := Do(b.Network, "GET", "/file?path=/data/only-a", nil); err == nil {
		t.Errorf("sandbox b reads a file written in a: %q", got)
	}
	addrs := mustDo(t, b.Network, "GET", "/addrs", nil)
	if strings.Contains(addrs, a.Network.GuestAddr.String()+"/") || !strings.Contains(addrs, b.Network.GuestAddr.String()+"/") {
		t.Errorf("sandbox b's addresses = %q, want %s and not %s", addrs, b.Network.GuestAddr, a.Network.GuestAddr)
	}

	ids, err := rt.List(context.Background())
	if err != nil || !slices.Contains(ids, a.ID) || !slices.Contains(ids, b.ID) {
		t.Errorf("List() = %v, %v; want %s and %s", ids, err, a.ID, b.ID)
	}
	// Killing one leaves the other running.
	pa := Procs(a.ID)
	if err := rt.Kill(context.Background(), a.ID); err != nil {
		t.Fatal(err)
	}
	AssertGone(t, rt, a.ID, pa)
	wantBody(t, b.Network, "GET", "/count", "1")
}

func (s *suite) testFork(t *testing.T) {
	rt := s.newRuntime(t)
	ctx := context.Background()
	a := Spec(s.rootfs)
	s.create(t, rt, a)
	for range 5 {
		mustDo(t, a.Network, "GET", "/", nil)
	}
	mustDo(t, a.Network, "PUT", "/file?path=/data/f", []byte("before"))
	mustDo(t, a.Network, "POST", "/alloc?mb=16", nil)

	image := filepath.Join(t.TempDir(), "image")
	start := time.Now()
	if err := rt.Checkpoint(ctx, a.ID, image, true); err != nil {
		t.Fatalf("Checkpoint(leaveRunning=true): %v", err)
	}
	t.Logf("Checkpoint (leave running): %s", time.Since(start))
	if st, err := rt.State(ctx, a.ID); st != sandbox.Running {
		t.Fatalf("State after Checkpoint(leaveRunning=true) = %q, %v; want running", st, err)
	}
	wantBody(t, a.Network, "GET", "/", "6")

	b := Spec(s.rootfs)
	start = time.Now()
	s.restore(t, rt, b, image)
	t.Logf("Restore until the server answers: %s", time.Since(start))

	// The fork carries on from the checkpoint, on its own address...
	wantBody(t, b.Network, "GET", "/", "6")
	wantBody(t, b.Network, "GET", "/file?path=/data/f", "before")
	if got := mustDo(t, b.Network, "GET", "/addrs", nil); !strings.Contains(got, b.Network.GuestAddr.String()+"/") {
		t.Errorf("fork's addresses = %q, want %s", got, b.Network.GuestAddr)
	}
	// ...and from then on the two diverge.
	wantBody(t, a.Network, "GET", "/", "7")
	wantBody(t, a.Network, "GET", "/", "8")
	wantBody(t, b.Network, "GET", "/count", "6")
	mustDo(t, b.Network, "PUT", "/file?path=/data/f", []byte("fork"))
	wantBody(t, a.Network, "GET", "/file?path=/data/f", "before")
	wantBody(t, b.Network, "GET", "/file?path=/data/f", "fork")

	for _, sp := range []sandbox.Spec{a, b} {
		pids := Procs(sp.ID)
		if err := rt.Kill(ctx, sp.ID); err != nil {
			t.Errorf("Kill(%s): %v", sp.ID, err)
		}
		AssertGone(t, rt, sp.ID, pids)
	}
}

// testForkOverlapped: a runtime that sets a fork's copy up during its
// parent's checkpoint (sandbox.ForkRestorer) restores the checkpoint's
// state, not an earlier one, and a copy whose checkpoint fails leaves
// nothing. A runtime without it passes trivially: the node then restores
// after the checkpoint.
func (s *suite) testForkOverlapped(t *testing.T) {
	rt := s.newRuntime(t)
	fr, ok := rt.(sandbox.ForkRestorer)
	if !ok {
		t.Logf("%s restores forks after the checkpoint", rt.Name())
		return
	}
	ctx := context.Background()
	a := Spec(s.rootfs)
	s.create(t, rt, a)
	mustDo(t, a.Network, "PUT", "/file?path=/data/f", []byte("at the checkpoint"))

	image := filepath.Join(t.TempDir(), "image")
	b := Spec(s.rootfs)
	t.Cleanup(func() { rt.Kill(context.Background(), b.ID) })
	checkpointed := make(chan error, 1)
	waited := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- fr.RestoreFork(ctx, b, a.ID, image, func(ctx context.Context) error {
			close(waited)
			return <-checkpointed
		})
	}()
	select {
	case <-waited: // set up, and waiting for the image
	case err := <-done:
		t.Fatalf("RestoreFork ended before waiting for the image: %v", err)
	}
	err := rt.Checkpoint(ctx, a.ID, image, true)
	checkpointed <- err
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("RestoreFork: %v", err)
	}
	if err := WaitReady(b.Network, ReadyTimeout); err != nil {
		t.Fatal(err)
	}
	wantBody(t, b.Network, "GET", "/file?path=/data/f", "at the checkpoint")

	// A checkpoint that fails: the copy set up for it is removed.
	c := Spec(s.rootfs)
	err = fr.RestoreFork(ctx, c, a.ID, filepath.Join(t.TempDir(), "never"), func(context.Context) error {
		return errors.New("checkpoint failed")
	})
	if err == nil || !strings.Contains(err.Error(), "checkpoint failed") {
		t.Errorf("RestoreFork whose checkpoint failed = %v, want that error", err)
	}
	AssertGone(t, rt, c.ID, nil)
}

func (s *suite) testCheckpointStopRestore(t *testing.T) {
	rt := s.newRuntime(t)
	ctx := context.Background()
	spec := Spec(s.rootfs)
	s.create(t, rt, spec)
	for range 3 {
		mustDo(t, spec.Network, "GET", "/", nil)
	}
	mustDo(t, spec.Network, "PUT", "/file?path=/data/kept", []byte("kept"))
	mustDo(t, spec.Network, "PUT", "/file?path=/tmp/kept", []byte("tmp kept"))
	pids := Procs(spec.ID)

	image := filepath.Join(t.TempDir(), "image")
	start := time.Now()
	if err := rt.Checkpoint(ctx, spec.ID, image, false); err != nil {
		t.Fatalf("Checkpoint(leaveRunning=false): %v", err)
	}
	t.Logf("Checkpoint (stop): %s", time.Since(start))
	AssertGone(t, rt, spec.ID, pids)

	start = time.Now()
	s.restore(t, rt, spec, image)
	t.Logf("Restore same ID until the server answers: %s", time.Since(start))
	wantBody(t, spec.Network, "GET", "/count", "3")
	wantBody(t, spec.Network, "GET", "/", "4")
	wantBody(t, spec.Network, "GET", "/file?path=/data/kept", "kept")
	wantBody(t, spec.Network, "GET", "/file?path=/tmp/kept", "tmp kept")
	if st, err := rt.State(ctx, spec.ID); st != sandbox.Running {
		t.Errorf("State after Restore = %q, %v; want running", st, err)
	}
}

func (s *suite) testRestoreBadImage(t *testing.T) {
	rt := s.newRuntime(t)
	corrupt := t.TempDir()
	for _, name := range []string{"checkpoint.img", "pages.img", "pages_meta.img"} {
		if err := os.WriteFile(filepath.Join(corrupt, name), []byte("not a checkpoint image"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		image string
	}{
		{"missing", filepath.Join(t.TempDir(), "nothing")},
		{"empty", t.TempDir()},
		{"corrupt", corrupt},
	}
	for _, tt := range tests {
		spec := Spec(s.rootfs)
		err := rt.Restore(context.Background(), spec, tt.image)
		if !errors.Is(err, sandbox.ErrImage) {
			t.Errorf("%s image: Restore = %v, want ErrImage", tt.name, err)
		}
		if err == nil {
			rt.Kill(context.Background(), spec.ID)
		}
		AssertGone(t, rt, spec.ID, nil)
	}
}

// listDir describes every file under dir with its size and mode.
func listDir(t *testing.T, dir string) string {
	t.Helper()
	var sb strings.Builder
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		fmt.Fprintf(&sb, "%s:%d:%v:%d ", strings.TrimPrefix(p, dir), fi.Size(), fi.Mode(), fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sb.String()
}
