package warm_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sandbox/sandboxtest"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/warm"
)

var limits = node.Limits{MemoryBytes: 512 << 20, CPUs: 1, DiskBytes: 1 << 30}

// env is a warm pool serving a real node on the fake runtime, behind the
// control plane.
type env struct {
	*nodetest.Env
	pool  *warm.Pool
	cfg   warm.Config
	c     *control.Control
	avail atomic.Int64 // MemAvailable
}

// newEnv makes the pool (size warm sandboxes; 0: template snapshots only)
// and a control plane allowing maxRunning live sandboxes per project.
func newEnv(t *testing.T, size, maxRunning int) *env {
	t.Helper()
	return newEnvWith(t, size, maxRunning, func(*warm.Config) {})
}

// newEnvWith is newEnv with edit applied to the pool's Config.
func newEnvWith(t *testing.T, size, maxRunning int, edit func(*warm.Config)) *env {
	t.Helper()
	e := &env{}
	e.avail.Store(8 << 30)
	bin := t.TempDir()
	var files []string
	for _, f := range []string{"lizard-agent", "lizard"} {
		p := filepath.Join(bin, f)
		if err := os.WriteFile(p, []byte(f), 0o755); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	quota := &node.Quota{MaxLive: maxRunning}
	e.Env = nodetest.New(t, func(c *node.Config) {
		quota.Store, c.Admission = c.Store, quota
		e.cfg = warm.Config{Store: c.Store, Templates: []string{nodetest.Template}, Artifact: c.Artifact, DataDir: c.DataDir,
			RuntimeKey: c.Runtime.ImageKey(), Files: files, Size: size, Limits: limits, Internet: true,
			MemAvailable: func() (int64, error) { return e.avail.Load(), nil }, Logger: nodetest.Discard()}
		edit(&e.cfg)
		e.pool = warm.New(e.cfg)
		c.Warm = e.pool
	})
	var err error
	e.c, err = control.New(control.Config{Node: e.Node, Store: e.Store, Logger: nodetest.Discard(), Templates: []string{nodetest.Template},
		Limits: limits, MaxLimits: node.Limits{MemoryBytes: 1 << 30, CPUs: 2, DiskBytes: 2 << 30}, Internet: true,
		Quota: quota, Now: e.Clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// run starts the pool until the test ends or stop is called, and waits
// for the template snapshot image.
func (e *env) run(t *testing.T, p *warm.Pool) (ctx context.Context, stop func(), image string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go p.Run(ctx, e.Node)
	nodetest.WaitFor(t, "the template snapshot", func() bool { return p.Image(nodetest.Template, limits) != "" })
	return ctx, cancel, p.Image(nodetest.Template, limits)
}

func (e *env) warmIDs(t *testing.T) []string {
	t.Helper()
	rows, err := e.Store.ListSandboxes(context.Background(), store.Filter{Role: store.RoleWarm, LiveOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return ids
}

func TestTemplateSnapshot(t *testing.T) {
	e := newEnv(t, 0, 0)
	ctx, _, dir := e.run(t, e.pool)
	if !strings.HasPrefix(dir, filepath.Join(e.DataDir, "templates", "interpreter-")) || !nodetest.Exists(filepath.Join(dir, "lizard-template-ready")) {
		t.Errorf("template image %s; want DATA/templates/interpreter-<key>, marked ready", dir)
	}
	// The sandbox booted for it preloaded modules, and is gone.
	boot := e.Runtime.Creates()[0]
	if !slices.Contains(boot.Env, "LIZARD_AGENT_PRELOAD=numpy,pandas,matplotlib.pyplot") || boot.Limits != sandbox.Limits(limits) {
		t.Errorf("template sandbox env %q limits %+v; want LIZARD_AGENT_PRELOAD and the default limits", boot.Env, boot.Limits)
	}
	nodetest.WaitFor(t, "the template sandbox to end", func() bool { return !e.Row(t, boot.ID).Live() })
	if row := e.Row(t, boot.ID); row.Role != store.RoleTemplate || row.ProjectID != store.InternalProject || !e.Runtime.WasKilled(boot.ID) {
		t.Errorf("template sandbox row %+v, killed %v; want the internal project's, role template, killed", row, e.Runtime.WasKilled(boot.ID))
	}
	sb, err := e.c.Create(ctx, "p1", api.CreateSandboxRequest{Envs: map[string]string{"K": "V"}, MemoryMb: new(int64(300))})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(e.Runtime.Creates()); n != 1 {
		t.Errorf("runtime creates = %d; want only the template sandbox's", n)
	}
	rs := e.Runtime.Restores()
	if len(rs) != 1 || rs[0].Dir != dir || rs[0].Spec.ID != sb.SandboxID {
		t.Fatalf("restores = %+v; want %s from %s", rs, sb.SandboxID, dir)
	}
	// Limits given at create hold on the restored path too.
	if l := rs[0].Spec.Limits; l.MemoryBytes != 300<<20 || l.CPUs != 1 || !rs[0].Spec.Network.Internet {
		t.Errorf("template restore: limits %+v internet %v; want 300 MiB, 1 CPU, internet", l, rs[0].Spec.Network.Internet)
	}
	r := e.Agent.Reseeds(sb.SandboxID)
	if len(r) != 1 || r[0].Envs["K"] != "V" || r[0].Envs["LIZARD_PROJECT_ID"] != "p1" || r[0].Envs["LIZARD_SANDBOX_ID"] != sb.SandboxID {
		t.Errorf("reseeds = %+v; want K=V and its identity", r)
	}
	if sb.ExpiresAt == nil || sb.ProjectID != "p1" {
		t.Errorf("sandbox = %+v; want p1's with a deadline", sb)
	}
	// The template sandbox is nobody's.
	for _, p := range []string{"p1", store.InternalProject} {
		list, _ := e.c.List(ctx, p, control.ListFilter{States: []string{api.StateKilled, api.StateRunning}})
		for _, s := range list {
			if s.SandboxID == boot.ID {
				t.Errorf("List(%s) shows the template sandbox", p)
			}
		}
	}
	// A second server start finds the image instead of making it again.
	if _, _, again := e.run(t, warm.New(e.cfg)); again != dir {
		t.Errorf("second start's image %s; want %s", again, dir)
	}
	if n := len(e.Runtime.Creates()); n != 1 {
		t.Errorf("runtime creates after a restart = %d; want 1 (the image is reused)", n)
	}
	// A new agent binary makes a new image and removes the old one.
	if err := os.WriteFile(e.cfg.Files[0], []byte("agent v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, fresh := e.run(t, warm.New(e.cfg)); fresh == dir || len(e.Runtime.Creates()) != 2 {
		t.Errorf("image after a new agent binary %s, %d boots; want a new image, one more boot", fresh, len(e.Runtime.Creates()))
	}
	if nodetest.Exists(dir) {
		t.Errorf("old template image %s is still there; want it removed", dir)
	}
}

func TestTemplateSnapshotFallback(t *testing.T) {
	e := newEnv(t, 0, 0)
	e.Runtime.RestoreFunc = func(context.Context, sandbox.Spec, string) error { return errors.New("bad image") }
	ctx, _, dir := e.run(t, e.pool)
	const failures = 3 // warm's templateFailures
	for i := range failures {
		sb, err := e.c.Create(ctx, "p1", api.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("create %d: %v; want a cold boot after the failed restore", i, err)
		}
		if !slices.ContainsFunc(e.Runtime.Creates(), func(s sandbox.Spec) bool { return s.ID == sb.SandboxID }) {
			t.Errorf("create %d: sandbox %s was not booted", i, sb.SandboxID)
		}
	}
	if n := len(e.Runtime.Restores()); n != 0 {
		t.Errorf("%d restores worked; want none", n)
	}
	// After that many failures in a row the image is made again (the
	// template sandbox boots again).
	nodetest.WaitFor(t, "a new template snapshot", func() bool {
		return e.pool.Image(nodetest.Template, limits) == dir && len(e.Runtime.Creates()) > failures+1
	})
}

func TestWarmPool(t *testing.T) {
	e := newEnv(t, 2, 1)
	ctx, stop, _ := e.run(t, e.pool)
	nodetest.WaitFor(t, "a full pool", func() bool { return len(e.warmIDs(t)) == 2 })
	pool := e.warmIDs(t)
	// Invisible, and not counted in the quota of one.
	if list, _ := e.c.List(ctx, "p1", control.ListFilter{}); len(list) != 0 {
		t.Errorf("List(p1) = %+v; want no pool sandboxes", list)
	}
	sb, err := e.c.Create(ctx, "p1", api.CreateSandboxRequest{Envs: map[string]string{"K": "V"}, Metadata: map[string]string{"m": "1"}, TimeoutMs: new(int64(60_000))})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pool, sb.SandboxID) || sb.ProjectID != "p1" || sb.Metadata["m"] != "1" || sb.ExpiresAt == nil {
		t.Errorf("created %+v; want one of the pool %v, in p1 with metadata and a deadline", sb, pool)
	}
	r := e.Agent.Reseeds(sb.SandboxID)
	if last := r[len(r)-1]; last.Envs["K"] != "V" || last.Envs["LIZARD_PROJECT_ID"] != "p1" || last.Envs["LIZARD_SANDBOX_ID"] != sb.SandboxID {
		t.Errorf("reseed at claim = %+v; want K=V, LIZARD_PROJECT_ID=p1 and its ID", last)
	}
	// Its seeds were made fresh when the pool restored it, and only then.
	if len(r) != 2 || r[0].KeepSeeds || !r[1].KeepSeeds {
		t.Errorf("reseeds of a claimed sandbox = %+v; want two: fresh seeds at the pool's restore, kept at the claim", r)
	}
	// The pool restores in the background, and a claim brings its
	// sandbox, and no other, to the foreground.
	for _, r := range e.Runtime.Restores() {
		if slices.Contains(pool, r.Spec.ID) && !r.Spec.Background {
			t.Errorf("pool sandbox %s restored with Background false; want true", r.Spec.ID)
		}
	}
	if got := e.Runtime.Foregrounded(); !slices.Equal(got, []string{sb.SandboxID}) {
		t.Errorf("sandboxes brought to the foreground = %v; want the claimed %s alone", got, sb.SandboxID)
	}
	nodetest.WaitFor(t, "the pool to refill", func() bool {
		ids := e.warmIDs(t)
		return len(ids) == 2 && !slices.Contains(ids, sb.SandboxID)
	})
	// The quota of one is now used by the claimed sandbox alone: a claim
	// passes admission, and a refused one takes nothing from the pool.
	pool = e.warmIDs(t)
	if _, err := e.c.Create(ctx, "p1", api.CreateSandboxRequest{}); !errors.Is(err, errdefs.ErrRateLimited) {
		t.Errorf("second create with a quota of 1: err = %v; want ErrRateLimited", err)
	}
	if ids := e.warmIDs(t); !slices.Equal(ids, pool) {
		t.Errorf("pool after a refused create = %v; want %v untouched", ids, pool)
	}
	// Non-default limits are not claimed: the pool's were fixed at restore.
	sb2, err := e.c.Create(ctx, "p2", api.CreateSandboxRequest{MemoryMb: new(int64(300))})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(pool, sb2.SandboxID) {
		t.Errorf("a create with memoryMb claimed pool sandbox %s", sb2.SandboxID)
	}
	for _, r := range e.Runtime.Restores() {
		if r.Spec.ID == sb2.SandboxID && r.Spec.Background {
			t.Errorf("a user's sandbox %s restored with Background true; want false", sb2.SandboxID)
		}
	}
	// Under memory pressure the pool gives its sandboxes back, one per
	// wake-up (Claimed wakes it, rather than waiting for its tick).
	e.avail.Store(100 << 20)
	nodetest.WaitFor(t, "the pool to shrink", func() bool {
		e.pool.Claimed(nodetest.Template)
		return len(e.warmIDs(t)) == 0
	})
	for _, id := range pool {
		if !e.Runtime.WasKilled(id) {
			t.Errorf("pool sandbox %s not killed when the pool shrank", id)
		}
	}
	// A server on its way out drains the pool.
	e.avail.Store(8 << 30)
	e.pool.Claimed(nodetest.Template)
	nodetest.WaitFor(t, "the pool to refill", func() bool { return len(e.warmIDs(t)) == 2 })
	pool = e.warmIDs(t)
	stop()
	e.pool.Drain(context.Background())
	if ids := e.warmIDs(t); len(ids) != 0 {
		t.Errorf("warm sandboxes after Drain = %v; want none", ids)
	}
	for _, id := range pool {
		if !e.Runtime.WasKilled(id) {
			t.Errorf("pool sandbox %s not killed by Drain", id)
		}
	}
	if !e.Runtime.IsRunning(sb.SandboxID) || !e.Runtime.IsRunning(sb2.SandboxID) {
		t.Error("Drain ended users' sandboxes")
	}
}

// A claimed sandbox that cannot be brought to the foreground is not handed
// out at its background share: it is ended, and a fresh restore serves.
func TestWarmClaimForegroundFails(t *testing.T) {
	e := newEnv(t, 1, 0)
	e.Runtime.ForegroundFunc = func(context.Context, string) error { return errors.New("no cpu cgroup") }
	ctx, _, _ := e.run(t, e.pool)
	nodetest.WaitFor(t, "a full pool", func() bool {
		rows, _ := e.Store.ListSandboxes(ctx, store.Filter{Role: store.RoleWarm, LiveOnly: true})
		return len(rows) == 1 && rows[0].State == api.StateRunning
	})
	claimed := e.warmIDs(t)[0]
	sb, err := e.c.Create(ctx, "p1", api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if sb.SandboxID == claimed || !e.Runtime.WasKilled(claimed) {
		t.Errorf("created %s, pool sandbox %s killed: %v; want a fresh sandbox and the pool's killed", sb.SandboxID, claimed, e.Runtime.WasKilled(claimed))
	}
	i := slices.IndexFunc(e.Runtime.Restores(), func(r sandboxtest.Restore) bool { return r.Spec.ID == sb.SandboxID })
	if i < 0 || e.Runtime.Restores()[i].Spec.Background {
		t.Errorf("sandbox %s: restored %v, in the background; want restored in the foreground", sb.SandboxID, i >= 0)
	}
}

// While creates keep claiming, the pool restores nothing beside them; once
// they pause for RefillQuiet it refills.
func TestWarmRefillAfterClaims(t *testing.T) {
	// Claims 100 ms apart for longer than the quiet time; the quiet time is
	// long enough that a loaded machine's stalls between them do not make
	// one.
	e := newEnvWith(t, 2, 0, func(c *warm.Config) { c.RefillQuiet, c.RefillWait = 2*time.Second, time.Hour })
	ctx, _, _ := e.run(t, e.pool)
	nodetest.WaitFor(t, "a full pool", func() bool { return len(e.warmIDs(t)) == 2 })
	if _, err := e.c.Create(ctx, "p1", api.CreateSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	// Counted after the create: on a loaded machine the create itself may
	// find its claim not yet running and restore afresh, which is not the
	// pool's refill this test is about.
	restores := len(e.Runtime.Restores())
	for range 30 { // claims go on for 3 s
		e.pool.Claimed(nodetest.Template)
		time.Sleep(100 * time.Millisecond)
	}
	if n := len(e.Runtime.Restores()); n != restores {
		t.Errorf("%d restores while claims went on; want none", n-restores)
	}
	nodetest.WaitFor(t, "the pool to refill after the claims", func() bool { return len(e.warmIDs(t)) == 2 })
}

// A template deleted (Forget, its size gone) while the pool waits for
// claims to pause gets neither a sandbox nor a new template snapshot
// after the wait: before, the pool restored one from the image it had
// looked up before waiting, or booted a template sandbox for it (Image
// was asked before the size), either of which held the deleted
// template's build.
func TestWarmForgottenWhileSettling(t *testing.T) {
	var sizes atomic.Int64
	sizes.Store(2)
	e := newEnvWith(t, 2, 0, func(c *warm.Config) {
		c.RefillQuiet, c.RefillWait = 500*time.Millisecond, time.Hour
		c.Sizes = func(context.Context) map[string]int { return map[string]int{nodetest.Template: int(sizes.Load())} }
	})
	ctx, _, _ := e.run(t, e.pool)
	nodetest.WaitFor(t, "a full pool", func() bool { return len(e.warmIDs(t)) == 2 })
	if _, err := e.c.Create(ctx, "p1", api.CreateSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	var restores, creates int
	for i := range 10 { // claims go on for 1 s; the pool waits to refill
		e.pool.Claimed(nodetest.Template)
		if i == 5 {
			sizes.Store(0)
			e.pool.Forget(ctx, nodetest.Template)
			restores, creates = len(e.Runtime.Restores()), len(e.Runtime.Creates())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // the quiet time, and then some
	if n, m := len(e.Runtime.Restores()), len(e.Runtime.Creates()); n != restores || m != creates {
		t.Errorf("%d restores and %d template sandboxes booted after the template was forgotten; want none", n-restores, m-creates)
	}
	if ids := e.warmIDs(t); len(ids) != 0 {
		t.Errorf("warm sandboxes of a forgotten template: %v", ids)
	}
}

// TestTemplateSnapshotShareHeap: with ShareHeap the template sandbox boots
// with a heap directory and LIZARD_AGENT_SHARE_HEAP=1, its kernel's dump
// is in that directory when it is checkpointed, the directory is gone once
// the image is made, and the image's key is not the one made without it.
func TestTemplateSnapshotShareHeap(t *testing.T) {
	e := newEnvWith(t, 0, 0, func(c *warm.Config) { c.ShareHeap = true })
	var atCheckpoint []byte
	checkpoint := e.Runtime.CheckpointFunc
	e.Runtime.CheckpointFunc = func(ctx context.Context, id, dir string, leave bool) error {
		for _, s := range e.Runtime.Creates() {
			if s.ID == id && s.HeapDir != "" {
				atCheckpoint, _ = os.ReadFile(filepath.Join(s.HeapDir, api.HeapFile))
			}
		}
		return checkpoint(ctx, id, dir, leave)
	}
	_, stop, dir := e.run(t, e.pool)
	stop()
	boot := e.Runtime.Creates()[0]
	if boot.HeapDir == "" || !slices.Contains(boot.Env, "LIZARD_AGENT_SHARE_HEAP=1") {
		t.Fatalf("template sandbox heap dir %q env %q; want a heap directory and LIZARD_AGENT_SHARE_HEAP=1", boot.HeapDir, boot.Env)
	}
	if string(atCheckpoint) != string(nodetest.HeapDump) {
		t.Errorf("the heap directory held %q at the checkpoint; want the kernel's dump", atCheckpoint)
	}
	if e.Agent.Requests(api.AgentHeapWaitPath) != 1 {
		t.Errorf("the kernel's answer was asked %d times; want once", e.Agent.Requests(api.AgentHeapWaitPath))
	}
	if nodetest.Exists(boot.HeapDir) {
		t.Errorf("the heap directory %s is still there after the image was made", boot.HeapDir)
	}
	cfg := e.cfg
	cfg.ShareHeap = false
	if _, _, plain := e.run(t, warm.New(cfg)); plain == dir {
		t.Errorf("the image without a shared heap is %s, the one with; want keys of their own", plain)
	} else if c := e.Runtime.Creates()[1]; c.HeapDir != "" || slices.Contains(c.Env, "LIZARD_AGENT_SHARE_HEAP=1") {
		t.Errorf("template sandbox without ShareHeap: heap dir %q env %q; want neither", c.HeapDir, c.Env)
	}
}

// TestTemplateSnapshotShareHeapRefused: a template whose kernel refuses to
// share its heap still gets its snapshot, made at once without sharing,
// rather than none (every create booting cold while it is retried).
func TestTemplateSnapshotShareHeapRefused(t *testing.T) {
	e := newEnvWith(t, 0, 0, func(c *warm.Config) { c.ShareHeap = true })
	e.Agent.HeapRefused.Store(true)
	_, stop, dir := e.run(t, e.pool)
	stop()
	creates := e.Runtime.Creates()
	if len(creates) != 2 || creates[0].HeapDir == "" || creates[1].HeapDir != "" || slices.Contains(creates[1].Env, "LIZARD_AGENT_SHARE_HEAP=1") {
		t.Fatalf("template boots %+v; want one sharing its heap, then one without", creates)
	}
	if nodetest.Exists(creates[0].HeapDir) {
		t.Errorf("the refused share's heap directory %s is still there", creates[0].HeapDir)
	}
	if !nodetest.Exists(filepath.Join(dir, "lizard-template-ready")) {
		t.Errorf("template image %s is not marked ready", dir)
	}
}
