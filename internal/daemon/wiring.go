package daemon

// The pieces runServe wires together: the runtime backend, the agent key,
// the sandbox API's address for lizardToken sandboxes, and the gauges.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/recipe"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sandbox/gvisor"
	"github.com/lizard-build/lizard/internal/sandbox/qemu"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
	"github.com/lizard-build/lizard/internal/trace"
)

// gauges feeds the metrics read at scrape time from the store: live
// sandboxes by state (users'), the warm pool per template, address slots.
func gauges(mx *metrics.Metrics, st *store.Store, slots int) {
	live := func() []store.Sandbox {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rows, _ := st.ListSandboxes(ctx, store.Filter{LiveOnly: true})
		return rows
	}
	mx.SandboxStates(func() map[string]int {
		by := map[string]int{}
		for _, sb := range live() {
			if sb.Role == "" {
				by[sb.State]++
			}
		}
		return by
	})
	mx.WarmPool(func() map[string]int {
		by := map[string]int{}
		for _, sb := range live() {
			if sb.Role == store.RoleWarm && sb.State == "running" {
				by[sb.Template]++
			}
		}
		return by
	})
	mx.AddressPool(func() (int, int) {
		used := 0
		for _, sb := range live() {
			if sb.Slot >= 0 {
				used++
			}
		}
		return used, slots
	})
}

// secureDirs makes the data directory and the template cache root's alone
// (mode 0700), tightening them and the directories directly in them when
// they exist with looser modes: both hold files sandboxes wrote (template
// builds, volumes, overlays), which no host user but root may reach
// (docs/security.md). Every process of a sandbox that opens them runs as
// root (runsc's gofer, QEMU before it drops to its own user, which is
// handed its files open), so nothing else needs to pass.
func secureDirs(dataDir, cacheDir string) error {
	if err := template.PrivateDir(dataDir); err != nil {
		return fmt.Errorf("securing the data directory: %w", err)
	}
	entries, err := os.ReadDir(dataDir)
	if err != nil {
		return fmt.Errorf("securing the data directory: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() { // not a symbolic link: ReadDir does not follow
			if err := os.Chmod(filepath.Join(dataDir, e.Name()), 0o700); err != nil {
				return fmt.Errorf("securing the data directory: %w", err)
			}
		}
	}
	return template.Secure(cacheDir)
}

// lockDataDir takes DATA/serve.lock for the life of this process (the
// kernel drops it however the process ends): a data directory is one
// `lizard serve`'s or `lizard node`'s. A second one started on it would
// reconcile the first's sandboxes as its own, hand out address slots the
// first's new sandboxes hold, and end or pause sandboxes under it. `lizard
// admin` takes no lock: it is run beside the server.
func lockDataDir(dataDir string) (release func(), err error) {
	p := filepath.Join(dataDir, "serve.lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking the data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("locking the data directory: %w", err)
		}
		holder := "another process"
		if b, _ := os.ReadFile(p); len(strings.TrimSpace(string(b))) > 0 {
			holder = "pid " + strings.TrimSpace(string(b))
		}
		return nil, fmt.Errorf("data directory %s is in use by another lizard serve or node (%s): stop it, or give this one its own --data-dir", dataDir, holder)
	}
	// The holder's pid, for the message above; the lock, not the file, decides.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}

// loadAgentKey reads DATA/agent.key, making it the first time: the key
// each sandbox's agent secret is derived from. It must outlive restarts,
// since sandboxes do.
func loadAgentKey(dataDir string) ([]byte, error) {
	p := filepath.Join(dataDir, "agent.key")
	key, err := os.ReadFile(p)
	if err == nil && len(key) >= 32 {
		return key, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading the agent key: %w", err)
	}
	key = make([]byte, 32)
	rand.Read(key)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p, key, 0o600); err != nil {
		return nil, fmt.Errorf("writing the agent key: %w", err)
	}
	return key, nil
}

// UnrecordedAgent is where, under a data directory, Lizard 0.1.0's
// lizard-agent is kept for the paused sandboxes and snapshots it made,
// whose images record no agent (gvisor.Config.Unrecorded): an upgrade from
// 0.1.0 copies it there before replacing the binaries.
const UnrecordedAgent = "gvisor/files/0.1.0/lizard-agent"

// newRuntime starts the runtime backend --runtime names.
func newRuntime(c *serveConfig, logger *slog.Logger) (sandbox.Runtime, error) {
	switch c.Runtime {
	case "gvisor":
		// Images of 0.1.0 record no agent: they restore with that
		// release's, where the operator put it (CHANGELOG.md's Upgrading).
		rt, err := gvisor.New(gvisor.Config{Runsc: c.Runsc, Dir: filepath.Join(c.DataDir, "gvisor"), Logger: logger,
			Unrecorded: map[string]string{node.AgentPath: filepath.Join(c.DataDir, UnrecordedAgent)}})
		if err != nil {
			return nil, fmt.Errorf("starting the gVisor runtime: %w", err)
		}
		return rt, nil
	case "qemu":
		rt, err := qemu.New(context.Background(), qemu.Config{KernelDir: c.qemu.KernelDir, Init: c.qemu.Init,
			Dir: filepath.Join(c.DataDir, "qemu"), CacheDir: filepath.Join(c.CacheDir, "qemu", "images"),
			Accel: c.qemu.Accel, BootTimeout: c.qemu.BootTimeout, Logger: logger})
		if err != nil {
			return nil, fmt.Errorf("starting the QEMU runtime: %w", err)
		}
		return rt, nil
	}
	return nil, cli.Usagef("--runtime %q: want gvisor or qemu", c.Runtime)
}

// checkIdleReclaim refuses --idle-reclaim (after > 0) on a runtime or a
// host that cannot push a sandbox's memory to swap.
func checkIdleReclaim(rt sandbox.Runtime, after time.Duration) error {
	if after <= 0 {
		return nil
	}
	r, ok := rt.(sandbox.Reclaimer)
	if !ok {
		return cli.Usagef("--idle-reclaim: the %s backend cannot push a sandbox's memory to swap", rt.Name())
	}
	if err := r.CanReclaim(); err != nil {
		return fmt.Errorf("--idle-reclaim %s: %w; or leave the flag out", after, err)
	}
	return nil
}

// checkShareHeapRuntime refuses --share-heap on a runtime that cannot run
// sandboxes sharing a heap (a runsc without build/runsc/cow-4k.patch).
func checkShareHeapRuntime(ctx context.Context, rt sandbox.Runtime, share bool) error {
	if !share {
		return nil
	}
	r, ok := rt.(interface{ CanShareHeap(context.Context) error })
	if !ok {
		return cli.Usagef("--share-heap: the %s backend cannot share a template's heap; leave the flag out", rt.Name())
	}
	if err := r.CanShareHeap(ctx); err != nil {
		return fmt.Errorf("--share-heap: %w; or leave the flag out", err)
	}
	return nil
}

// sandboxAPIPort is the port the API is served on to lizardToken
// sandboxes: --sandbox-api-port, else the --listen port.
func (c *serveConfig) sandboxAPIPort(listen net.Addr) int {
	if c.policy.SandboxAPIPort != 0 {
		return c.policy.SandboxAPIPort
	}
	if a, ok := listen.(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// tokenAPI tells a lizardToken sandbox where the API is: --sandbox-api-url
// if set, else its own host address, which the sandbox listeners open.
func (c *serveConfig) tokenAPI(listen net.Addr) func(host string) ([]string, int) {
	if c.SandboxAPIURL != "" {
		return func(string) ([]string, int) { return []string{"LIZARD_API_URL=" + c.SandboxAPIURL}, 0 }
	}
	port := c.sandboxAPIPort(listen)
	return func(host string) ([]string, int) {
		return []string{"LIZARD_API_URL=http://" + net.JoinHostPort(host, strconv.Itoa(port))}, port
	}
}

// tracing starts exporting traces as the standard OTEL_* environment
// variables say (internal/trace: off unless an OTLP endpoint is named),
// as service unless OTEL_SERVICE_NAME names another. The returned func
// sends what is queued at exit, for a few seconds at most: a collector
// that is down must not hold up a stop.
func tracing(ctx context.Context, service string, mx *metrics.Metrics, logger *slog.Logger) (stop func(), err error) {
	c, err := trace.LoadConfig(os.Getenv)
	if err != nil {
		return nil, cli.Usagef("%v", err)
	}
	shutdown, err := trace.Setup(ctx, c, service, mx, logger)
	if err != nil {
		return nil, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			logger.Warn("sending the last trace spans", "err", err)
		}
	}, nil
}

// buildNode is the node as a template build needs it: recipe sits below
// the node and asks for its build sandbox in its own terms, which this
// turns into a plan with the build sandbox's limits and no network.
type buildNode struct {
	*node.Local
	limits node.Limits
}

func (n buildNode) Boot(ctx context.Context, b recipe.Boot) (string, error) {
	build := b.Build
	sb, err := n.Create(ctx, node.Plan{ProjectID: b.ProjectID, Role: b.Role, Template: b.Template,
		Limits: n.limits, Internet: false, Envs: b.Envs, Build: &build})
	return sb.ID, err
}

// The gvisor runtime names the files its images share (a --share-heap
// template's heap) to the image store, which keeps them once per content
// (shareImages); without the method, every image would upload the heap.
var _ imagestore.Shared = (*gvisor.Runtime)(nil)
