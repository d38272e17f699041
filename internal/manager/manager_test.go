package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

// fakeRuntime is a sandbox.Runtime whose methods are function fields;
// newFakeRuntime fills them with an in-memory runtime.
type fakeRuntime struct {
	CreateFunc func(ctx context.Context, spec sandbox.Spec) error
	StateFunc  func(ctx context.Context, id string) (sandbox.State, error)
	KillFunc   func(ctx context.Context, id string) error
	ListFunc   func(ctx context.Context) ([]string, error)
	// RestoreFunc defaults to starting spec like Create, recording it in
	// restored; Checkpoint writes a file into the image directory.
	RestoreFunc func(ctx context.Context, spec sandbox.Spec, dir string) error

	mu       sync.Mutex
	running  map[string]sandbox.Spec
	killed   []string
	created  []sandbox.Spec
	restored []restore
}

type restore struct {
	spec sandbox.Spec
	dir  string
}

var _ sandbox.Runtime = (*fakeRuntime)(nil)

func newFakeRuntime() *fakeRuntime {
	f := &fakeRuntime{running: map[string]sandbox.Spec{}}
	f.CreateFunc = func(_ context.Context, spec sandbox.Spec) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.running[spec.ID] = spec
		f.created = append(f.created, spec)
		return nil
	}
	f.RestoreFunc = func(_ context.Context, spec sandbox.Spec, dir string) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.running[spec.ID] = spec
		f.restored = append(f.restored, restore{spec, dir})
		return nil
	}
	f.StateFunc = func(_ context.Context, id string) (sandbox.State, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.running[id]; ok {
			return sandbox.Running, nil
		}
		return "", sandbox.ErrNotFound
	}
	f.KillFunc = func(_ context.Context, id string) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.running, id)
		f.killed = append(f.killed, id)
		return nil
	}
	f.ListFunc = func(context.Context) ([]string, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var ids []string
		for id := range f.running {
			ids = append(ids, id)
		}
		return ids, nil
	}
	return f
}

func (f *fakeRuntime) Name() string { return "fake" }
func (f *fakeRuntime) Create(ctx context.Context, spec sandbox.Spec) error {
	return f.CreateFunc(ctx, spec)
}
func (f *fakeRuntime) State(ctx context.Context, id string) (sandbox.State, error) {
	return f.StateFunc(ctx, id)
}
func (f *fakeRuntime) Kill(ctx context.Context, id string) error  { return f.KillFunc(ctx, id) }
func (f *fakeRuntime) List(ctx context.Context) ([]string, error) { return f.ListFunc(ctx) }
func (f *fakeRuntime) Checkpoint(_ context.Context, id, dir string, _ bool) error {
	if !f.isRunning(id) {
		return sandbox.ErrNotFound
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "image"), []byte(id), 0o600)
}
func (f *fakeRuntime) Restore(ctx context.Context, spec sandbox.Spec, dir string) error {
	return f.RestoreFunc(ctx, spec, dir)
}

func (f *fakeRuntime) restores() []restore {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.restored)
}

func (f *fakeRuntime) creates() []sandbox.Spec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.created)
}

func (f *fakeRuntime) wasKilled(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.killed, id)
}

func (f *fakeRuntime) isRunning(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.running[id]
	return ok
}

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type env struct {
	m     *Manager
	rt    *fakeRuntime
	st    *store.Store
	clock *clock
	agent *httptest.Server
	// health is the status the fake agent's /health answers.
	health atomic.Int32
	// reseeds are the bodies of /reseed calls the fake agent got.
	mu      sync.Mutex
	reseeds []reseedRequest
}

func (e *env) reseedsFor(id string) []reseedRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []reseedRequest
	for _, r := range e.reseeds {
		if r.SandboxID == id {
			out = append(out, r)
		}
	}
	return out
}

func newEnv(t *testing.T, mutate ...func(*Config)) *env {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, p := range []string{"p1", "p2"} {
		if err := st.CreateProject(ctx, p, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{rt: newFakeRuntime(), st: st, clock: &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}}
	e.health.Store(200)
	e.agent = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.WriteHeader(int(e.health.Load()))
			io.WriteString(w, `{"status":"ok"}`)
			return
		case "/ready":
			w.WriteHeader(http.StatusNoContent)
			return
		case "/reseed":
			var req reseedRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			e.mu.Lock()
			e.reseeds = append(e.reseeds, req)
			e.mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(e.agent.Close)
	pool, _ := NewPool(DefaultPool)
	cfg := Config{
		Runtime:      e.rt,
		Store:        st,
		Pool:         pool,
		RootFS:       func(context.Context, string) (string, error) { return "/rootfs", nil },
		AgentBinary:  "/host/lizard-agent",
		LizardBinary: "/host/lizard",
		StartTimeout: 2 * time.Second,
		AgentAddr:    func(string, string) string { return e.agent.Listener.Addr().String() },
		Now:          e.clock.Now,
		Logger:       slogDiscard(),
	}
	for _, f := range mutate {
		f(&cfg)
	}
	e.m, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func ms(v int64) *int64 { return &v }

func TestCreateRunning(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var spec sandbox.Spec
	create := e.rt.CreateFunc
	e.rt.CreateFunc = func(ctx context.Context, s sandbox.Spec) error { spec = s; return create(ctx, s) }

	sb, err := e.m.Create(ctx, "p1", api.CreateSandboxRequest{
		TimeoutMs: ms(60_000), Envs: map[string]string{"B": "2", "A": "1"}, Metadata: map[string]string{"user": "u1"},
	})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if sb.State != api.StateRunning || sb.ProjectID != "p1" || sb.Template != "interpreter" || sb.Metadata["user"] != "u1" {
		t.Errorf("sandbox = %+v; want running in p1 from interpreter with metadata", sb)
	}
	if want := e.clock.Now().Add(time.Minute); sb.ExpiresAt == nil || !sb.ExpiresAt.Equal(want) {
		t.Errorf("expiresAt = %v; want %v", sb.ExpiresAt, want)
	}
	wantEnv := []string{"A=1", "B=2", "LIZARD_SANDBOX_ID=" + sb.SandboxID, "LIZARD_PROJECT_ID=p1"}
	if !slices.Equal(spec.Env, wantEnv) {
		t.Errorf("env = %q; want %q", spec.Env, wantEnv)
	}
	wantMounts := []sandbox.Mount{
		{Source: "/host/lizard-agent", Target: AgentPath, ReadOnly: true},
		{Source: "/host/lizard", Target: LizardPath, ReadOnly: true},
	}
	if !slices.Equal(spec.Mounts, wantMounts) || spec.RootFS != "/rootfs" || !slices.Equal(spec.Args, []string{AgentPath}) {
		t.Errorf("spec = %+v; want the agent and lizard mounted, rootfs /rootfs", spec)
	}
	wantNet := sandbox.Network{HostAddr: netip.MustParseAddr("169.254.128.1"), GuestAddr: netip.MustParseAddr("169.254.128.2"), PrefixLen: 30}
	if spec.Network != wantNet {
		t.Errorf("network = %+v; want %+v", spec.Network, wantNet)
	}
	// Agent URLs name the sandbox, not its address, which a later sandbox
	// may reuse; the transport dials the address behind the name.
	u, err := e.m.AgentURL(ctx, "p1", sb.SandboxID)
	if err != nil || u.Host != sb.SandboxID+":49983" {
		t.Errorf("AgentURL = %v, %v; want http://%s:49983", u, err, sb.SandboxID)
	}
	resp, err := (&http.Client{Transport: e.m.Transport()}).Get(u.String() + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("GET %s/health through the manager's transport = %v, %v; want the fake agent's 200", u, resp, err)
	} else {
		resp.Body.Close()
	}
	// A second sandbox takes the next slot.
	e.m.Create(ctx, "p1", api.CreateSandboxRequest{})
	if spec.Network.GuestAddr != netip.MustParseAddr("169.254.128.6") {
		t.Errorf("second guest address = %s; want 169.254.128.6", spec.Network.GuestAddr)
	}
}

func TestCreateLizardToken(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.APIURL = "http://169.254.128.1:8080" })
	var spec sandbox.Spec
	create := e.rt.CreateFunc
	e.rt.CreateFunc = func(ctx context.Context, s sandbox.Spec) error { spec = s; return create(ctx, s) }
	if _, err := e.m.Create(context.Background(), "p1", api.CreateSandboxRequest{LizardToken: true}); err != nil {
		t.Fatal(err)
	}
	var key string
	for _, kv := range spec.Env {
		if v, ok := strings.CutPrefix(kv, "LIZARD_API_KEY="); ok {
			key = v
		}
	}
	if !strings.HasPrefix(key, "lz_") || !slices.Contains(spec.Env, "LIZARD_API_URL=http://169.254.128.1:8080") {
		t.Errorf("env = %q; want LIZARD_API_KEY and LIZARD_API_URL", spec.Env)
	}
}

func TestCreateInvalid(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name string
		req  api.CreateSandboxRequest
		want string
	}{
		{"unknown template", api.CreateSandboxRequest{Template: "x"}, `unknown template "x"; available: interpreter`},
		{"negative timeout", api.CreateSandboxRequest{TimeoutMs: ms(-1)}, "timeoutMs -1 is out of range"},
		{"huge timeout", api.CreateSandboxRequest{TimeoutMs: ms(1 << 60)}, "is out of range"},
		{"env with =", api.CreateSandboxRequest{Envs: map[string]string{"A=B": "1"}}, `env name "A=B" is not valid`},
		{"env with NUL", api.CreateSandboxRequest{Envs: map[string]string{"A": "x\x00"}}, "NUL"},
		{"reserved env", api.CreateSandboxRequest{Envs: map[string]string{"LIZARD_SANDBOX_ID": "x"}}, "set by Lizard"},
		{"metadata key with =", api.CreateSandboxRequest{Metadata: map[string]string{"a=b": "1"}}, "contains '='"},
		{"metadata too long", api.CreateSandboxRequest{Metadata: map[string]string{"a": strings.Repeat("x", MaxMetadataValue+1)}}, "at most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.m.Create(context.Background(), "p1", tt.req)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(Message(err), tt.want) {
				t.Errorf("Create = %v (message %q); want ErrInvalid containing %q", err, Message(err), tt.want)
			}
		})
	}
	if rows, _ := e.st.ListSandboxes(context.Background(), store.Filter{}); len(rows) != 0 {
		t.Errorf("invalid creates left %d rows", len(rows))
	}
}

// assertCleanedUp checks that a failed create left nothing: the runtime
// killed it, its row is failed and its slot is free again.
func assertCleanedUp(t *testing.T, e *env, wantReason string) {
	t.Helper()
	ctx := context.Background()
	rows, err := e.st.ListSandboxes(ctx, store.Filter{})
	if err != nil || len(rows) != 1 {
		t.Fatalf("rows = %d, %v; want 1", len(rows), err)
	}
	sb := rows[0]
	if sb.State != api.StateFailed || sb.EndedAt == nil || !strings.Contains(sb.EndReason, wantReason) {
		t.Errorf("row = state %s ended %v reason %q; want failed, ended, reason containing %q", sb.State, sb.EndedAt, sb.EndReason, wantReason)
	}
	if !e.rt.wasKilled(sb.ID) || e.rt.isRunning(sb.ID) {
		t.Errorf("runtime: killed=%v running=%v; want killed, not running", e.rt.wasKilled(sb.ID), e.rt.isRunning(sb.ID))
	}
	// The slot is free: the next sandbox gets slot 0's addresses.
	var spec sandbox.Spec
	e.rt.CreateFunc = func(_ context.Context, s sandbox.Spec) error {
		spec = s
		e.rt.mu.Lock()
		e.rt.running[s.ID] = s
		e.rt.mu.Unlock()
		return nil
	}
	e.health.Store(200)
	if _, err := e.m.Create(ctx, "p1", api.CreateSandboxRequest{}); err != nil {
		t.Fatalf("Create after failure: %v", err)
	}
	if spec.Network.GuestAddr != netip.MustParseAddr("169.254.128.2") {
		t.Errorf("guest address after failure = %s; want slot 0's 169.254.128.2", spec.Network.GuestAddr)
	}
}

func TestCreateRuntimeFailure(t *testing.T) {
	e := newEnv(t)
	e.rt.CreateFunc = func(context.Context, sandbox.Spec) error { return errors.New("runsc exploded") }
	_, err := e.m.Create(context.Background(), "p1", api.CreateSandboxRequest{})
	if err == nil || !strings.Contains(Message(err), "failed to boot") || strings.Contains(Message(err), "exploded") {
		t.Fatalf("Create = %v (message %q); want a client message about booting without the internal cause", err, Message(err))
	}
	assertCleanedUp(t, e, "failed to boot")
}

func TestCreateAgentNeverHealthy(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.StartTimeout = 200 * time.Millisecond })
	e.health.Store(500)
	_, err := e.m.Create(context.Background(), "p1", api.CreateSandboxRequest{})
	if err == nil || !strings.Contains(Message(err), "did not answer within") {
		t.Fatalf("Create = %v; want the agent-did-not-answer message", err)
	}
	assertCleanedUp(t, e, "did not answer")
}

func TestCreateSandboxDiesDuringStart(t *testing.T) {
	e := newEnv(t)
	e.health.Store(500)
	e.rt.StateFunc = func(context.Context, string) (sandbox.State, error) { return sandbox.Stopped, nil }
	start := time.Now()
	_, err := e.m.Create(context.Background(), "p1", api.CreateSandboxRequest{})
	if err == nil || !strings.Contains(Message(err), "stopped before its agent started") {
		t.Fatalf("Create = %v; want the stopped message", err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("noticing the dead sandbox took %s; want well under the 2 s start timeout", d)
	}
	e.rt.StateFunc = newFakeRuntime().StateFunc
	assertCleanedUp(t, e, "stopped")
}

func TestCreateCancelled(t *testing.T) {
	e := newEnv(t)
	e.health.Store(500)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := e.m.Create(ctx, "p1", api.CreateSandboxRequest{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Create = %v; want context.Canceled", err)
	}
	assertCleanedUp(t, e, "cancelled")
}

func TestCreateTemplateFailure(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.RootFS = func(context.Context, string) (string, error) { return "", errors.New("debootstrap: no network") }
	})
	_, err := e.m.Create(context.Background(), "p1", api.CreateSandboxRequest{})
	if !errors.Is(err, ErrUnavailable) || strings.Contains(Message(err), "debootstrap") {
		t.Fatalf("Create = %v (message %q); want ErrUnavailable without the cause", err, Message(err))
	}
}

func TestPoolExhausted(t *testing.T) {
	pool, err := ParsePool("10.9.0.0/29") // two slots
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) { c.Pool = pool })
	ctx := context.Background()
	for range 2 {
		if _, err := e.m.Create(ctx, "p1", api.CreateSandboxRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.m.Create(ctx, "p1", api.CreateSandboxRequest{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("third Create = %v; want ErrUnavailable", err)
	}
}

func TestKillAndGone(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb, err := e.m.Create(ctx, "p1", api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// Another project sees nothing.
	for name, err := range map[string]error{
		"Get":  func() error { _, err := e.m.Get(ctx, "p2", sb.SandboxID); return err }(),
		"Kill": e.m.Kill(ctx, "p2", sb.SandboxID),
		"URL":  func() error { _, err := e.m.AgentURL(ctx, "p2", sb.SandboxID); return err }(),
	} {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s from another project = %v; want ErrNotFound", name, err)
		}
	}
	if !e.rt.isRunning(sb.SandboxID) {
		t.Fatal("another project's Kill killed the sandbox")
	}
	if err := e.m.Kill(ctx, "p1", sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Kill(ctx, "p1", sb.SandboxID); err != nil {
		t.Fatalf("second Kill = %v; want nil (idempotent)", err)
	}
	if e.rt.isRunning(sb.SandboxID) {
		t.Fatal("sandbox still running after Kill")
	}
	got, err := e.m.Get(ctx, "p1", sb.SandboxID)
	if err != nil || got.State != api.StateKilled || got.EndedAt == nil {
		t.Fatalf("Get after Kill = %+v, %v; want killed with endedAt", got, err)
	}
	_, err = e.m.AgentURL(ctx, "p1", sb.SandboxID)
	if !errors.Is(err, ErrGone) || !strings.Contains(Message(err), "was killed at") {
		t.Errorf("AgentURL after Kill = %v; want ErrGone saying it was killed", err)
	}
	if _, err := e.m.SetTimeout(ctx, "p1", sb.SandboxID, 1000); !errors.Is(err, ErrGone) {
		t.Errorf("SetTimeout after Kill = %v; want ErrGone", err)
	}
}

func TestKillFailureKeepsSandbox(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb, _ := e.m.Create(ctx, "p1", api.CreateSandboxRequest{})
	e.rt.KillFunc = func(context.Context, string) error { return errors.New("runsc: busy") }
	if err := e.m.Kill(ctx, "p1", sb.SandboxID); err == nil || strings.Contains(Message(err), "busy") {
		t.Fatalf("Kill = %v; want an error whose message hides the cause", err)
	}
	if got, _ := e.m.Get(ctx, "p1", sb.SandboxID); got.State != api.StateRunning {
		t.Errorf("state after failed kill = %s; want running (the kill can be retried)", got.State)
	}
}

func TestExpiry(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	short, _ := e.m.Create(ctx, "p1", api.CreateSandboxRequest{TimeoutMs: ms(1000)})
	extended, _ := e.m.Create(ctx, "p1", api.CreateSandboxRequest{TimeoutMs: ms(1000)})
	forever, _ := e.m.Create(ctx, "p1", api.CreateSandboxRequest{TimeoutMs: ms(0)})
	if forever.ExpiresAt != nil {
		t.Errorf("timeoutMs 0: expiresAt = %v; want none", forever.ExpiresAt)
	}
	e.clock.Add(500 * time.Millisecond)
	got, err := e.m.SetTimeout(ctx, "p1", extended.SandboxID, 10_000)
	if want := e.clock.Now().Add(10 * time.Second); err != nil || got.ExpiresAt == nil || !got.ExpiresAt.Equal(want) || got.TimeoutMs != 10_000 {
		t.Fatalf("SetTimeout = %+v, %v; want expiresAt %v", got, err, want)
	}
	e.m.Reap(ctx)
	if st, _ := e.m.Get(ctx, "p1", short.SandboxID); st.State != api.StateRunning {
		t.Fatalf("state before the deadline = %s; want running", st.State)
	}
	e.clock.Add(time.Second)
	e.m.Reap(ctx)
	want := map[string]string{short.SandboxID: api.StateExpired, extended.SandboxID: api.StateRunning, forever.SandboxID: api.StateRunning}
	for id, w := range want {
		if got, _ := e.m.Get(ctx, "p1", id); got.State != w {
			t.Errorf("sandbox %s: state %s; want %s", id, got.State, w)
		}
	}
	if e.rt.isRunning(short.SandboxID) {
		t.Error("expired sandbox still running in the runtime")
	}
	_, err = e.m.AgentURL(ctx, "p1", short.SandboxID)
	if !errors.Is(err, ErrGone) || !strings.Contains(Message(err), "expired at") {
		t.Errorf("AgentURL of an expired sandbox = %v; want ErrGone saying it expired", err)
	}
	// A year on, only the extended one has expired; timeoutMs 0 never does.
	e.clock.Add(365 * 24 * time.Hour)
	e.m.Reap(ctx)
	if got, _ := e.m.Get(ctx, "p1", extended.SandboxID); got.State != api.StateExpired {
		t.Errorf("extended sandbox after its deadline: %s; want expired", got.State)
	}
	if got, _ := e.m.Get(ctx, "p1", forever.SandboxID); got.State != api.StateRunning {
		t.Errorf("timeoutMs 0 sandbox after a year: %s; want running", got.State)
	}
	// SetTimeout 0 removes a deadline.
	if got, err := e.m.SetTimeout(ctx, "p1", forever.SandboxID, 0); err != nil || got.ExpiresAt != nil {
		t.Errorf("SetTimeout 0 = %+v, %v; want no expiresAt", got, err)
	}
}

func TestRunReaper(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Now = nil; c.ReapInterval = 20 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.m.RunReaper(ctx)
	sb, err := e.m.Create(ctx, "p1", api.CreateSandboxRequest{TimeoutMs: ms(50)})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if got, _ := e.m.Get(ctx, "p1", sb.SandboxID); got.State == api.StateExpired {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the reaper did not expire a 50 ms sandbox within 5 s")
}

func TestList(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, _ := e.m.Create(ctx, "p1", api.CreateSandboxRequest{Metadata: map[string]string{"user": "u1", "env": "dev"}})
	e.clock.Add(time.Second)
	b, _ := e.m.Create(ctx, "p1", api.CreateSandboxRequest{Metadata: map[string]string{"user": "u1"}})
	e.clock.Add(time.Second)
	c, _ := e.m.Create(ctx, "p1", api.CreateSandboxRequest{})
	e.m.Create(ctx, "p2", api.CreateSandboxRequest{Metadata: map[string]string{"user": "u1"}})
	e.m.Kill(ctx, "p1", c.SandboxID)
	ids := func(sbs []api.Sandbox) []string {
		var out []string
		for _, s := range sbs {
			out = append(out, s.SandboxID)
		}
		return out
	}
	tests := []struct {
		name string
		f    ListFilter
		want []string
	}{
		{"live, newest first", ListFilter{}, []string{b.SandboxID, a.SandboxID}},
		{"metadata", ListFilter{Metadata: map[string]string{"user": "u1"}}, []string{b.SandboxID, a.SandboxID}},
		{"all pairs must match", ListFilter{Metadata: map[string]string{"user": "u1", "env": "dev"}}, []string{a.SandboxID}},
		{"no match", ListFilter{Metadata: map[string]string{"user": "u2"}}, nil},
		{"state killed", ListFilter{States: []string{"killed"}}, []string{c.SandboxID}},
	}
	for _, tt := range tests {
		got, err := e.m.List(ctx, "p1", tt.f)
		if err != nil || !slices.Equal(ids(got), tt.want) {
			t.Errorf("%s: List = %v, %v; want %v", tt.name, ids(got), err, tt.want)
		}
	}
	if _, err := e.m.List(ctx, "p1", ListFilter{States: []string{"bogus"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("List with an unknown state = %v; want ErrInvalid", err)
	}
}

func TestReconcile(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	alive, _ := e.m.Create(ctx, "p1", api.CreateSandboxRequest{})
	dead, _ := e.m.Create(ctx, "p1", api.CreateSandboxRequest{})
	// The server "restarts": dead's sandbox vanished, one sandbox was left
	// starting, and the runtime holds an orphan nobody recorded.
	e.rt.mu.Lock()
	delete(e.rt.running, dead.SandboxID)
	e.rt.running["orphan"] = sandbox.Spec{ID: "orphan"}
	e.rt.running["half"] = sandbox.Spec{ID: "half"}
	e.rt.mu.Unlock()
	half := store.Sandbox{ID: "half", ProjectID: "p1", Template: "interpreter", State: api.StateStarting, CreatedAt: time.Now()}
	if err := e.st.CreateSandbox(ctx, &half, 100, func(n int) (string, string) { return e.m.cfg.Pool.addrStrings(n) }); err != nil {
		t.Fatal(err)
	}

	m2, err := New(e.m.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Reconcile(ctx); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	want := map[string]string{alive.SandboxID: api.StateRunning, dead.SandboxID: api.StateFailed, "half": api.StateFailed}
	for id, w := range want {
		got, err := m2.Get(ctx, "p1", id)
		if err != nil || got.State != w {
			t.Errorf("sandbox %s: %s, %v; want %s", id, got.State, err, w)
		}
	}
	if !e.rt.isRunning(alive.SandboxID) {
		t.Error("live sandbox killed by Reconcile")
	}
	for _, id := range []string{"orphan", "half"} {
		if e.rt.isRunning(id) || !e.rt.wasKilled(id) {
			t.Errorf("%s still running after Reconcile", id)
		}
	}
	if _, err := m2.AgentURL(ctx, "p1", alive.SandboxID); err != nil {
		t.Errorf("AgentURL of the kept sandbox: %v", err)
	}
	_, err = m2.AgentURL(ctx, "p1", dead.SandboxID)
	if !errors.Is(err, ErrGone) || !strings.Contains(Message(err), "not running after the server restarted") {
		t.Errorf("AgentURL of the dead sandbox = %v; want ErrGone with the restart reason", err)
	}
}

func TestConcurrentKillAndExpire(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var kills atomic.Int32
	kill := e.rt.KillFunc
	e.rt.KillFunc = func(ctx context.Context, id string) error { kills.Add(1); return kill(ctx, id) }
	sb, _ := e.m.Create(ctx, "p1", api.CreateSandboxRequest{TimeoutMs: ms(1000)})
	e.clock.Add(2 * time.Second)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				e.m.Kill(ctx, "p1", sb.SandboxID)
			} else {
				e.m.Reap(ctx)
			}
		}()
	}
	wg.Wait()
	if n := kills.Load(); n != 1 {
		t.Errorf("runtime Kill called %d times; want 1", n)
	}
	got, _ := e.m.Get(ctx, "p1", sb.SandboxID)
	if got.State != api.StateKilled && got.State != api.StateExpired {
		t.Errorf("state = %s; want killed or expired", got.State)
	}
}

func TestPool(t *testing.T) {
	p, err := ParsePool("169.254.128.0/17")
	if err != nil {
		t.Fatal(err)
	}
	// 8192 links less the 64 in 169.254.169.0/24.
	if p.Slots() != 8192-64 {
		t.Errorf("slots = %d; want 8128", p.Slots())
	}
	for _, tt := range []struct {
		n           int
		host, guest string
	}{
		{0, "169.254.128.1", "169.254.128.2"},
		{1, "169.254.128.5", "169.254.128.6"},
		{64, "169.254.129.1", "169.254.129.2"},
		{41*64 - 1, "169.254.168.253", "169.254.168.254"},
		{41 * 64, "169.254.170.1", "169.254.170.2"}, // the metadata /24 is skipped
		{8127, "169.254.255.253", "169.254.255.254"},
	} {
		h, g := p.Addrs(tt.n)
		if h.String() != tt.host || g.String() != tt.guest {
			t.Errorf("slot %d = %s %s; want %s %s", tt.n, h, g, tt.host, tt.guest)
		}
	}
	for _, bad := range []string{"169.254.169.0/24", "169.254.169.128/25", "10.0.0.1/24", "fd00::/64", "10.0.0.0/31", "nonsense"} {
		if _, err := ParsePool(bad); err == nil {
			t.Errorf("ParsePool(%q) succeeded; want an error", bad)
		}
	}
	// No slot of a pool around the metadata range lands in it.
	wide, _ := ParsePool("169.254.0.0/16")
	for n := range wide.Slots() {
		if h, g := wide.Addrs(n); metadataNet.Contains(h) || metadataNet.Contains(g) {
			t.Fatalf("slot %d of %s = %s %s, inside %s", n, wide.Prefix(), h, g, metadataNet)
		}
	}
	small, _ := ParsePool("10.0.0.0/24")
	if h, _ := small.Addrs(63); small.Slots() != 64 || h.String() != "10.0.0.253" {
		t.Errorf("10.0.0.0/24: %d slots, slot 63 host %s; want 64, 10.0.0.253", small.Slots(), h)
	}
}

func TestTemplatesRetryAfterFailure(t *testing.T) {
	var calls atomic.Int32
	ensure := func(ctx context.Context, cacheDir, name string, progress io.Writer) (string, error) {
		if calls.Add(1) == 1 {
			return "", errors.New("network down")
		}
		return "/cache/" + name, nil
	}
	tm := NewTemplates(context.Background(), ensure, "/cache", nil, slogDiscard())
	ctx := context.Background()
	if _, err := tm.RootFS(ctx, "interpreter"); err == nil {
		t.Fatal("first RootFS succeeded; want the build's error")
	}
	got, err := tm.RootFS(ctx, "interpreter")
	if err != nil || got != "/cache/interpreter" {
		t.Fatalf("second RootFS = %q, %v; want a fresh build", got, err)
	}
	tm.RootFS(ctx, "interpreter")
	if n := calls.Load(); n != 2 {
		t.Errorf("ensure called %d times; want 2 (a success is cached)", n)
	}

	// A waiter whose ctx ends stops waiting; the build goes on.
	block := make(chan struct{})
	slow := NewTemplates(context.Background(), func(context.Context, string, string, io.Writer) (string, error) {
		<-block
		return "/r", nil
	}, "", nil, slogDiscard())
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := slow.RootFS(cctx, "interpreter"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("RootFS with an expiring ctx = %v; want DeadlineExceeded", err)
	}
	close(block)
	if got, err := slow.RootFS(ctx, "interpreter"); err != nil || got != "/r" {
		t.Errorf("RootFS after the build = %q, %v", got, err)
	}
}

func TestErrorMessage(t *testing.T) {
	err := fmt.Errorf("wrapping: %w", &Error{Kind: ErrGone, Msg: "for the client", Cause: errors.New("internal")})
	if !errors.Is(err, ErrGone) || Message(err) != "for the client" || !strings.Contains(err.Error(), "internal") {
		t.Errorf("Error: Is=%v Message=%q Error=%q", errors.Is(err, ErrGone), Message(err), err.Error())
	}
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }
