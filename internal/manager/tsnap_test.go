package manager

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

// shapedEnv is a manager with pause and snapshots (a data directory), the
// internet on by default and room to ask for other limits.
func shapedEnv(t *testing.T, mutate ...func(*Config)) *env {
	t.Helper()
	bin := t.TempDir()
	for _, f := range []string{"lizard-agent", "lizard", "runsc"} {
		if err := os.WriteFile(filepath.Join(bin, f), []byte(f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return newEnv(t, append([]func(*Config){func(c *Config) {
		c.DataDir = t.TempDir()
		c.AgentBinary, c.LizardBinary = filepath.Join(bin, "lizard-agent"), filepath.Join(bin, "lizard")
		c.RuntimeBinary = filepath.Join(bin, "runsc")
		c.Limits = sandbox.Limits{MemoryBytes: 512 << 20, CPUs: 1, DiskBytes: 1 << 30}
		c.Policy.MaxLimits = sandbox.Limits{MemoryBytes: 1 << 30, CPUs: 2, DiskBytes: 2 << 30}
		c.Policy.Internet = true
		c.NoTemplateSnapshots = true
	}}, mutate...)...)
}

func wantShape(t *testing.T, what string, spec sandbox.Spec, memory int64, internet bool) {
	t.Helper()
	if spec.Limits.MemoryBytes != memory || spec.Network.Internet != internet || spec.Limits.CPUs != 1 {
		t.Errorf("%s: limits %+v, internet %v; want memory %d, 1 CPU, internet %v", what, spec.Limits, spec.Network.Internet, memory, internet)
	}
}

// TestRestoresKeepShape checks that resume, snapshot restores and forks
// run with the limits and egress the sandbox was created with.
func TestRestoresKeepShape(t *testing.T) {
	e := shapedEnv(t)
	ctx := context.Background()
	no := false
	sb, err := e.m.Create(ctx, "p1", api.CreateSandboxRequest{MemoryMb: ms(256), AllowInternet: &no})
	if err != nil {
		t.Fatal(err)
	}
	const mem = 256 << 20
	wantShape(t, "boot", e.rt.creates()[0], mem, false)
	row, _ := e.st.GetSandbox(ctx, sb.SandboxID)
	if want := (store.Shape{MemoryBytes: mem, CPUs: 1, DiskBytes: 1 << 30, Recorded: true}); row.Shape != want {
		t.Errorf("recorded shape = %+v, want %+v", row.Shape, want)
	}
	if _, err := e.m.Pause(ctx, "p1", sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Resume(ctx, "p1", sb.SandboxID, api.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	wantShape(t, "resume", e.rt.restores()[0].spec, mem, false)
	sn, err := e.m.Snapshot(ctx, "p1", sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if snRow, _ := e.st.GetSnapshot(ctx, sn.SnapshotID); snRow.Shape != row.Shape {
		t.Errorf("snapshot shape = %+v, want the sandbox's %+v", snRow.Shape, row.Shape)
	}
	fromSnap, err := e.m.Create(ctx, "p1", api.CreateSandboxRequest{SnapshotID: sn.SnapshotID})
	if err != nil {
		t.Fatal(err)
	}
	wantShape(t, "create from snapshot", e.rt.restores()[1].spec, mem, false)
	if _, err := e.m.Fork(ctx, "p1", sb.SandboxID, api.ForkRequest{Count: 2}); err != nil {
		t.Fatal(err)
	}
	for _, r := range e.rt.restores()[2:] {
		wantShape(t, "fork", r.spec, mem, false)
	}
	// A new sandbox gets its own identity, and loses any parent's token.
	rs := e.reseedsFor(fromSnap.SandboxID)
	if len(rs) != 1 || rs[0].Envs["LIZARD_SANDBOX_ID"] != fromSnap.SandboxID || !slices.Contains(rs[0].Unset, "LIZARD_API_KEY") || rs[0].KeepSeeds {
		t.Errorf("reseeds of the restored sandbox = %+v; want one with its ID, unsetting LIZARD_API_KEY, reseeding", rs)
	}
}

// TestResumeReopensSandboxAPI checks that a lizardToken sandbox gets its
// API listener back on its new host address, and its agent the new URL.
func TestResumeReopensSandboxAPI(t *testing.T) {
	api1 := &fakeSandboxAPI{}
	e := shapedEnv(t, func(c *Config) { c.Policy.SandboxAPI = api1 })
	ctx := context.Background()
	sb, err := e.m.Create(ctx, "p1", api.CreateSandboxRequest{LizardToken: true})
	if err != nil {
		t.Fatal(err)
	}
	// Another sandbox takes the slot the paused one leaves.
	if _, err := e.m.Pause(ctx, "p1", sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if api1.isOpen(sb.SandboxID) {
		t.Errorf("API listener still open while paused")
	}
	if _, err := e.m.Create(ctx, "p1", api.CreateSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Resume(ctx, "p1", sb.SandboxID, api.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	spec := e.rt.restores()[0].spec
	if spec.Network.APIPort != 7777 || !api1.isOpen(sb.SandboxID) || api1.host(sb.SandboxID) != spec.Network.HostAddr.String() {
		t.Errorf("after resume: APIPort %d, listener on %q; want 7777 on the new host address %s", spec.Network.APIPort, api1.host(sb.SandboxID), spec.Network.HostAddr)
	}
	rs := e.reseedsFor(sb.SandboxID)
	wantURL := "http://" + spec.Network.HostAddr.String() + ":7777"
	if len(rs) != 1 || rs[0].Envs["LIZARD_API_URL"] != wantURL || !rs[0].KeepSeeds {
		t.Errorf("reseeds after resume = %+v; want LIZARD_API_URL=%s keeping seeds", rs, wantURL)
	}
}

type fakeSandboxAPI struct {
	mu   chanMutex
	open map[string]string
}

type chanMutex struct{ ch chan struct{} }

func (m *chanMutex) lock() {
	if m.ch == nil {
		m.ch = make(chan struct{}, 1)
	}
	m.ch <- struct{}{}
}
func (m *chanMutex) unlock() { <-m.ch }

func (f *fakeSandboxAPI) Open(id string, host netipAddr) (string, int, error) {
	f.mu.lock()
	defer f.mu.unlock()
	if f.open == nil {
		f.open = map[string]string{}
	}
	f.open[id] = host.String()
	return "http://" + host.String() + ":7777", 7777, nil
}

func (f *fakeSandboxAPI) Close(id string) {
	f.mu.lock()
	defer f.mu.unlock()
	delete(f.open, id)
}

func (f *fakeSandboxAPI) isOpen(id string) bool { return f.host(id) != "" }

func (f *fakeSandboxAPI) host(id string) string {
	f.mu.lock()
	defer f.mu.unlock()
	return f.open[id]
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestTemplateSnapshot(t *testing.T) {
	e := shapedEnv(t, func(c *Config) { c.NoTemplateSnapshots = false })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.m.StartBackground(ctx)
	waitFor(t, "the template snapshot", func() bool { return e.m.templateImage("interpreter") != "" })
	dir := e.m.templateImage("interpreter")
	if !strings.Contains(dir, "/templates/interpreter-") {
		t.Errorf("template image %s; want DATA/templates/interpreter-<key>", dir)
	}
	// The sandbox booted for it preloaded modules, and is gone.
	boot := e.rt.creates()[0]
	if !slices.Contains(boot.Env, "LIZARD_AGENT_PRELOAD=numpy,pandas,matplotlib.pyplot") {
		t.Errorf("template sandbox env = %q; want LIZARD_AGENT_PRELOAD", boot.Env)
	}
	waitFor(t, "the template sandbox to end", func() bool { return e.rt.wasKilled(boot.ID) })
	sb, err := e.m.Create(ctx, "p1", api.CreateSandboxRequest{Envs: map[string]string{"K": "V"}, MemoryMb: ms(300)})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(e.rt.creates()); n != 1 {
		t.Errorf("runtime creates = %d; want only the template sandbox's", n)
	}
	rs := e.rt.restores()
	if len(rs) != 1 || rs[0].dir != dir || rs[0].spec.ID != sb.SandboxID {
		t.Fatalf("restores = %+v; want %s from %s", rs, sb.SandboxID, dir)
	}
	wantShape(t, "template restore", rs[0].spec, 300<<20, true)
	r := e.reseedsFor(sb.SandboxID)
	if len(r) != 1 || r[0].Envs["K"] != "V" || r[0].Envs["LIZARD_PROJECT_ID"] != "p1" || r[0].Envs["LIZARD_SANDBOX_ID"] != sb.SandboxID {
		t.Errorf("reseeds = %+v; want K=V and its identity", r)
	}
	if sb.ExpiresAt == nil || sb.ProjectID != "p1" {
		t.Errorf("sandbox = %+v; want p1's with a deadline", sb)
	}
	// The template sandbox is nobody's.
	for _, p := range []string{"p1", store.InternalProject} {
		list, _ := e.m.List(ctx, p, ListFilter{States: []string{api.StateKilled, api.StateRunning}})
		for _, s := range list {
			if s.SandboxID == boot.ID {
				t.Errorf("List(%s) shows the template sandbox", p)
			}
		}
	}
	// A second server start finds the image instead of making it again.
	m2, err := New(e.m.cfg)
	if err != nil {
		t.Fatal(err)
	}
	m2.StartBackground(ctx)
	waitFor(t, "the template snapshot to be found", func() bool { return m2.templateImage("interpreter") == dir })
	if n := len(e.rt.creates()); n != 1 {
		t.Errorf("runtime creates after a restart = %d; want 1 (the image is reused)", n)
	}
	// A new agent binary makes a new image and removes the old one.
	if err := os.WriteFile(e.m.cfg.AgentBinary, []byte("agent v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	m3, err := New(e.m.cfg)
	if err != nil {
		t.Fatal(err)
	}
	m3.StartBackground(ctx)
	waitFor(t, "a new template snapshot", func() bool { d := m3.templateImage("interpreter"); return d != "" && d != dir })
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("old template image %s: stat err %v; want it removed", dir, err)
	}
}

func TestTemplateSnapshotFallback(t *testing.T) {
	e := shapedEnv(t, func(c *Config) { c.NoTemplateSnapshots = false })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.rt.RestoreFunc = func(context.Context, sandbox.Spec, string) error { return errors.New("bad image") }
	e.m.StartBackground(ctx)
	waitFor(t, "the template snapshot", func() bool { return e.m.templateImage("interpreter") != "" })
	dir := e.m.templateImage("interpreter")
	for i := range templateFailures {
		sb, err := e.m.Create(ctx, "p1", api.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("create %d: %v; want a cold boot after the failed restore", i, err)
		}
		if !slices.ContainsFunc(e.rt.creates(), func(s sandbox.Spec) bool { return s.ID == sb.SandboxID }) {
			t.Errorf("create %d: sandbox %s was not booted", i, sb.SandboxID)
		}
	}
	// After templateFailures failures in a row the image is made again.
	waitFor(t, "a new template snapshot", func() bool {
		d := e.m.templateImage("interpreter")
		return d == dir && len(e.rt.creates()) > templateFailures+1
	})
}

func TestTemplateSnapshotDisabled(t *testing.T) {
	e := shapedEnv(t) // NoTemplateSnapshots
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.m.StartBackground(ctx)
	if _, err := e.m.Create(ctx, "p1", api.CreateSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if len(e.rt.restores()) != 0 || len(e.rt.creates()) != 1 {
		t.Errorf("restores %d, creates %d; want one boot and no template snapshot", len(e.rt.restores()), len(e.rt.creates()))
	}
}

func warmIDs(t *testing.T, e *env) []string {
	t.Helper()
	rows, err := e.st.ListSandboxes(context.Background(), store.Filter{Role: store.RoleWarm, LiveOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return ids
}

func TestWarmPool(t *testing.T) {
	var avail atomicInt64
	avail.Store(8 << 30)
	e := shapedEnv(t, func(c *Config) {
		c.NoTemplateSnapshots = false
		c.WarmPool = 2
		c.Policy.MaxRunning = 1
		c.MemAvailable = func() (int64, error) { return avail.Load(), nil }
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.m.StartBackground(ctx)
	waitFor(t, "a full pool", func() bool { return len(warmIDs(t, e)) == 2 })
	pool := warmIDs(t, e)
	// Invisible, and not counted in the quota of one.
	if list, _ := e.m.List(ctx, "p1", ListFilter{}); len(list) != 0 {
		t.Errorf("List(p1) = %+v; want no pool sandboxes", list)
	}
	if _, err := e.m.Get(ctx, store.InternalProject, pool[0]); err != nil {
		t.Logf("note: the internal project is not a user project: %v", err)
	}
	sb, err := e.m.Create(ctx, "p1", api.CreateSandboxRequest{Envs: map[string]string{"K": "V"}, Metadata: map[string]string{"m": "1"}, TimeoutMs: ms(60_000)})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pool, sb.SandboxID) || sb.ProjectID != "p1" || sb.Metadata["m"] != "1" || sb.ExpiresAt == nil {
		t.Errorf("created %+v; want one of the pool %v, in p1 with metadata and a deadline", sb, pool)
	}
	r := e.reseedsFor(sb.SandboxID)
	if last := r[len(r)-1]; last.Envs["K"] != "V" || last.Envs["LIZARD_PROJECT_ID"] != "p1" {
		t.Errorf("reseed at claim = %+v; want K=V and LIZARD_PROJECT_ID=p1", last)
	}
	waitFor(t, "the pool to refill", func() bool { ids := warmIDs(t, e); return len(ids) == 2 && !slices.Contains(ids, sb.SandboxID) })
	// The quota of one is now used by the claimed sandbox alone.
	if _, err := e.m.Create(ctx, "p1", api.CreateSandboxRequest{}); !errors.Is(err, ErrRateLimited) {
		t.Errorf("second create with a quota of 1: err = %v; want ErrRateLimited", err)
	}
	// Non-default limits are not claimed: the pool's were fixed at restore.
	pool = warmIDs(t, e)
	sb2, err := e.m.Create(ctx, "p2", api.CreateSandboxRequest{MemoryMb: ms(300)})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(pool, sb2.SandboxID) {
		t.Errorf("a create with memoryMb claimed pool sandbox %s", sb2.SandboxID)
	}
	// Under memory pressure the pool gives its sandboxes back.
	avail.Store(100 << 20)
	e.m.kickPool()
	waitFor(t, "the pool to shrink", func() bool { return len(warmIDs(t, e)) == 0 })
	for _, id := range pool {
		if !e.rt.wasKilled(id) {
			t.Errorf("pool sandbox %s not killed when the pool shrank", id)
		}
	}
	// A server on its way out drains the pool.
	avail.Store(8 << 30)
	waitFor(t, "the pool to refill", func() bool { return len(warmIDs(t, e)) == 2 })
	pool = warmIDs(t, e)
	cancel()
	e.m.DrainWarmPool(context.Background())
	if ids := warmIDs(t, e); len(ids) != 0 {
		t.Errorf("warm sandboxes after DrainWarmPool = %v; want none", ids)
	}
	for _, id := range pool {
		if !e.rt.wasKilled(id) {
			t.Errorf("pool sandbox %s not killed by DrainWarmPool", id)
		}
	}
	// A restart ends what was left of the pool.
	if err := e.m.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ids := warmIDs(t, e); len(ids) != 0 {
		t.Errorf("warm sandboxes after Reconcile = %v; want none", ids)
	}
}

type atomicInt64 = atomic.Int64
type netipAddr = netip.Addr
