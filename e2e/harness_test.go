// Package e2e tests Lizard end to end: the real `lizard serve` binary with
// real gVisor sandboxes, driven through the public Go client. The tests need
// root, `make build` and the template; `make test` provides all three.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sandbox/gvisor"
	"github.com/lizard-build/lizard/internal/sandbox/qemu"
	"github.com/lizard-build/lizard/internal/template"
	"github.com/lizard-build/lizard/internal/testenv"
	"github.com/lizard-build/lizard/internal/volume"
)

// Each running test server gets a /24 of its own from 169.254.176.0 to
// 169.254.235.0, so servers side by side never share an address. The range
// is clear of the bench (169.254.160.0/20), the SDK suites (169.254.236.0/22,
// 169.254.244.0/22), the runtime suite (169.254.250.0/23) and the metadata
// /24 169.254.169.0. A pool is reused once its server and sandboxes are gone.
//
// Pools are held machine-wide (testenv.TakePool).
var (
	poolMu    sync.Mutex
	poolFrees = map[int]func(){}
)

func takePool(t *testing.T) int {
	n, release, err := testenv.TakePool()
	if err != nil {
		t.Fatal(err)
	}
	poolMu.Lock()
	poolFrees[n] = release
	poolMu.Unlock()
	return n
}

func releasePool(n int) {
	poolMu.Lock()
	defer poolMu.Unlock()
	if release := poolFrees[n]; release != nil {
		release()
		delete(poolFrees, n)
	}
}

// server is one running `lizard serve` process.
type server struct {
	t       *testing.T
	bin     string
	dataDir string
	pool    int // the third byte of the server's 169.254.x.0/24
	url     string
	listen  string
	cmd     *exec.Cmd
	log     *bytes.Buffer
	done    chan struct{}
	keys    map[*client.Client]string // the API key each client was made with
	runsc   string
	args    []string // more lizard serve flags, after the harness's
	// role is the command run: "" for serve, or "node" (a cluster's node,
	// cluster_test.go), which takes serve's flags and env (LIZARD_*).
	role string
	env  []string
	// dbURL and name: a node's database and its name there, where its
	// sandboxes' rows are (dbSandboxes).
	dbURL, name string
	// pids are the server's processes so far that were not killed
	// (kill9): a stopped server may leave no spare network of them.
	pids []int
}

func cacheDir() string {
	if d := os.Getenv("LIZARD_CACHE_DIR"); d != "" {
		return d
	}
	return template.DefaultCacheDir
}

// startServer starts `lizard serve` with args on a free loopback port with
// a fresh data directory and returns once /v1/health answers. The server
// and every sandbox it still has are ended when the test finishes.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	return startServerIn(t, t.TempDir(), args...)
}

// startServerIn is startServer with the data directory dataDir, which the
// caller made (and removes).
func startServerIn(t *testing.T, dataDir string, args ...string) *server {
	t.Helper()
	return startServerBin(t, testenv.Binary(t, "lizard"), dataDir, args...)
}

// startServerBin is startServerIn with the lizard binary bin: another
// build's (TestUpgrade's earlier release), with its lizard-agent beside it.
func startServerBin(t *testing.T, bin, dataDir string, args ...string) *server {
	t.Helper()
	testenv.RequiresRoot(t)
	s := &server{t: t, bin: bin, dataDir: dataDir, pool: takePool(t), args: args}
	testenv.Binary(t, "lizard-agent")
	testenv.Binary(t, "lizard-client")
	s.runsc = testenv.Binary(t, "runsc")
	s.listen = freeAddr(t)
	s.url = "http://" + s.listen
	s.start()
	t.Cleanup(s.shutdown)
	return s
}

// shutdown stops the server for good and ends every sandbox its runtime
// still has: the server's own (template builder, warm pool) and any a test
// could not kill through the API (a rate limit, a server it had stopped).
// Without it such sandboxes would outlive their deleted data directory.
func (s *server) shutdown() {
	s.stop()
	ctx := context.Background()
	var rt sandbox.Runtime
	var err error
	if slices.Contains(s.args, "qemu") {
		// TCG: listing and killing VMs needs no probe of KVM.
		rt, err = qemu.New(ctx, qemu.Config{KernelDir: filepath.Join(cacheDir(), "qemu", "kernel"),
			Init: testenv.Binary(s.t, "lizard-vminit"), Dir: filepath.Join(s.dataDir, "qemu"),
			CacheDir: filepath.Join(cacheDir(), "qemu", "images"), Accel: qemu.AccelTCG})
	} else {
		rt, err = gvisor.New(gvisor.Config{Runsc: s.runsc, Dir: filepath.Join(s.dataDir, "gvisor"), SpareNetworks: -1})
	}
	if err != nil {
		s.t.Errorf("opening the server's runtime to clean up: %v", err)
		return
	}
	ids, err := rt.List(ctx)
	if err != nil {
		s.t.Errorf("listing sandboxes left behind: %v", err)
	}
	clean := err == nil
	for _, id := range ids {
		s.t.Logf("ending sandbox %s, still running when the test ended", id)
		if err := rt.Kill(ctx, id); err != nil {
			s.t.Errorf("ending sandbox %s left behind: %v", id, err)
			clean = false
		}
	}
	// Volumes still mounted (a sandbox used them when the server
	// stopped): unmounted, so that removing the data directory never
	// reaches into a mount.
	if err := (&volume.Manager{Dir: filepath.Join(s.dataDir, "volumes")}).UnmountAll(nil); err != nil {
		s.t.Errorf("unmounting volumes left behind: %v", err)
	}
	if clean {
		releasePool(s.pool)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (s *server) start() {
	t := s.t
	t.Helper()
	s.log = &bytes.Buffer{}
	role := "serve"
	if s.role != "" {
		role = s.role
	}
	s.cmd = exec.Command(s.bin, role, "--listen", s.listen, "--data-dir", s.dataDir,
		"--cache-dir", cacheDir(), "--address-pool", fmt.Sprintf("169.254.%d.0/24", s.pool))
	// No internet egress unless a test asks for it: tests never send a
	// packet off this machine.
	s.cmd.Args = append(s.cmd.Args, "--egress=none")
	// No metrics listener unless a test asks for one (TestMetrics): test
	// servers must not hold the default port a real server wants.
	s.cmd.Args = append(s.cmd.Args, "--metrics-listen=")
	s.cmd.Args = append(s.cmd.Args, s.args...)
	if s.env != nil {
		s.cmd.Env = append(os.Environ(), s.env...)
	}
	s.cmd.Stdout = &lockedWriter{w: s.log}
	s.cmd.Stderr = s.cmd.Stdout
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting lizard serve: %v", err)
	}
	s.pids = append(s.pids, s.cmd.Process.Pid)
	s.done = make(chan struct{})
	go func() { s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(10 * time.Minute) // the first start may build the template
	for {
		resp, err := http.Get(s.url + "/v1/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-s.done:
			t.Fatalf("lizard %s exited early: %v\n%s", role, s.cmd.ProcessState, s.logs())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("lizard %s did not become healthy\n%s", role, s.logs())
		}
	}
}

// stopWait is how long stop waits for a server to end before killing it:
// the server's own bounds, with room. It waits up to server.ShutdownTimeout
// (10 s) for requests in flight, then up to 30 s for the warm pool and the
// runtime's removals under way (daemon's stopNode); a kill within those cuts
// short a stop that keeps to them, and leaves what it was removing. Stops
// take under a second (TestChaos's, three at once beside the QEMU suite,
// load average 28: at most 1.5 s), so a kill means a stop that hung.
const stopWait = 45 * time.Second

// stop ends the server gracefully (SIGTERM) and waits for it. Sandboxes are
// left running, as a restart must find them.
func (s *server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(stopWait):
		// Said, as what the kill leaves behind (a network being removed)
		// would otherwise read as the failure's cause.
		s.t.Logf("lizard did not stop within %s of SIGTERM; killing it. Its log's tail:\n%s", stopWait, tail(s.logs(), 30))
		// Killed, its spare networks are left for the next start's sweep.
		s.pids = slices.DeleteFunc(s.pids, func(p int) bool { return p == s.cmd.Process.Pid })
		s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

func (s *server) restart() {
	s.stop()
	s.start()
}

func (s *server) logs() string { return s.log.String() }

// logged reports whether the server's log holds part within 10 s. A line
// the server wrote before answering a request can reach s.log after the
// answer: os/exec copies the process's output from a pipe in a goroutine
// of its own, which a loaded machine may run late (TestClusterTemplates
// once read the log a moment before its line was copied).
func (s *server) logged(part string) bool {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if strings.Contains(s.logs(), part) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// createProject makes a project with the admin command and returns a client
// holding its key.
func (s *server) createProject(id string) *client.Client {
	t := s.t
	t.Helper()
	out, err := exec.Command(s.bin, "admin", "create-project", "--data-dir", s.dataDir, "--id", id, "--json").Output()
	if err != nil {
		t.Fatalf("admin create-project: %v", err)
	}
	var p struct{ ProjectID, APIKey string }
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatalf("admin create-project printed %q: %v", out, err)
	}
	if p.ProjectID != id || !strings.HasPrefix(p.APIKey, "lz_") {
		t.Fatalf("admin create-project = %+v, want project %s and a lz_ key", p, id)
	}
	c := s.client(p.APIKey)
	if s.keys == nil {
		s.keys = map[*client.Client]string{}
	}
	s.keys[c] = p.APIKey
	return c
}

func (s *server) client(key string) *client.Client {
	c, err := client.New(client.Config{BaseURL: s.url, APIKey: key})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// lockedWriter lets the server's stdout and stderr share one buffer.
type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
