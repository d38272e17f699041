package control_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

// env is the control plane over a real node on the fake runtime
// (nodetest), with room to ask for other limits and the internet on by
// default.
type env struct {
	*nodetest.Env
	c     *control.Control
	audit *syncBuffer
}

var (
	defaultLimits = node.Limits{MemoryBytes: 512 << 20, CPUs: 1, DiskBytes: 1 << 30}
	maxLimits     = node.Limits{MemoryBytes: 1 << 30, CPUs: 2, DiskBytes: 2 << 30}
)

func newEnv(t *testing.T, mutate func(*control.Config), nodeMutate ...func(*node.Config)) *env {
	t.Helper()
	nodeMutate = append([]func(*node.Config){func(c *node.Config) {
		c.TokenAPI = func(host string) ([]string, int) { return []string{"LIZARD_API_URL=http://" + host + ":7777"}, 7777 }
	}}, nodeMutate...)
	// One quota, as under lizard serve: the node admits by it, the
	// control plane refuses early by it.
	quota := &node.Quota{}
	nodeMutate = append(nodeMutate, func(c *node.Config) { quota.Store, c.Admission = c.Store, quota })
	e := &env{Env: nodetest.New(t, nodeMutate...), audit: &syncBuffer{}}
	audit := slog.New(slog.NewTextHandler(e.audit, nil))
	cfg := control.Config{
		Node: e.Node, Store: e.Store, Logger: nodetest.Discard(), Templates: []string{nodetest.Template},
		Limits: defaultLimits, MaxLimits: maxLimits, Internet: true, Quota: quota,
		Audit: audit, Now: e.Clock.Now,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	var err error
	if e.c, err = control.New(cfg); err != nil {
		t.Fatal(err)
	}
	e.Node.Subscribe(e.c.Events)
	e.Node.Subscribe(node.Audit(audit))
	return e
}

func (e *env) create(t *testing.T, project string, req api.CreateSandboxRequest) api.Sandbox {
	t.Helper()
	sb, err := e.c.Create(context.Background(), project, req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return sb
}

func ms(v int64) *int64 { return &v }

// syncBuffer is a bytes.Buffer safe for the audit logger's concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestCreate(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(t, "p1", api.CreateSandboxRequest{Envs: map[string]string{"B": "2", "A": "1"}, Metadata: map[string]string{"user": "u1"}})
	if sb.State != api.StateRunning || sb.ProjectID != "p1" || sb.Template != "interpreter" || sb.Metadata["user"] != "u1" || sb.TimeoutMs != 300_000 {
		t.Errorf("sandbox = %+v; want running in p1 from interpreter with metadata and the default timeout", sb)
	}
	if want := e.Clock.Now().Add(5 * time.Minute); sb.ExpiresAt == nil || !sb.ExpiresAt.Equal(want) {
		t.Errorf("expiresAt = %v; want %v", sb.ExpiresAt, want)
	}
	spec := e.Runtime.Creates()[0]
	if want := []string{"A=1", "B=2", "LIZARD_SANDBOX_ID=" + sb.SandboxID, "LIZARD_PROJECT_ID=p1", "LIZARD_AGENT_SUDO=/usr/bin/sudo"}; !slices.Equal(spec.Env, want) {
		t.Errorf("env = %q; want %q", spec.Env, want)
	}
	if spec.Limits != sandbox.Limits(defaultLimits) || !spec.Network.Internet || spec.Network.APIPort != 0 {
		t.Errorf("spec limits %+v internet %v API port %d; want the defaults %+v, the internet, no API", spec.Limits, spec.Network.Internet, spec.Network.APIPort, defaultLimits)
	}
	// Limits asked for within the maxima, and no internet.
	no := false
	e.create(t, "p1", api.CreateSandboxRequest{MemoryMb: ms(1024), Cpus: new(2.0), DiskMb: ms(16), AllowInternet: &no})
	spec = e.Runtime.Creates()[1]
	if want := (sandbox.Limits{MemoryBytes: 1 << 30, CPUs: 2, DiskBytes: 16 << 20}); spec.Limits != want || spec.Network.Internet {
		t.Errorf("spec limits %+v internet %v; want %+v without internet", spec.Limits, spec.Network.Internet, want)
	}
	if got := e.Row(t, sb.SandboxID); got.Shape.MemoryBytes != defaultLimits.MemoryBytes || !got.Shape.Internet || got.Shape.Token {
		t.Errorf("recorded shape %+v; want the defaults, the internet, no token", got.Shape)
	}
}

func TestCreateLizardToken(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb := e.create(t, "p1", api.CreateSandboxRequest{LizardToken: true})
	spec := e.Runtime.Creates()[0]
	var key string
	for _, kv := range spec.Env {
		if v, ok := strings.CutPrefix(kv, "LIZARD_API_KEY="); ok {
			key = v
		}
	}
	if !strings.HasPrefix(key, "lz_") || !slices.Contains(spec.Env, "LIZARD_API_URL=http://169.254.128.1:7777") || spec.Network.APIPort != 7777 {
		t.Errorf("env = %q, API port %d; want LIZARD_API_KEY and LIZARD_API_URL, port 7777", spec.Env, spec.Network.APIPort)
	}
	// The key is p1's, tied to the sandbox, and its minting is audited
	// by ID, never by secret.
	v := &auth.Verifier{Store: e.Store, Logger: nodetest.Discard()}
	if project, err := v.Verify(ctx, key); err != nil || project != "p1" {
		t.Errorf("Verify(sandbox key) = %q, %v; want p1", project, err)
	}
	if has, err := e.Store.SandboxHasLiveKey(ctx, sb.SandboxID, time.Now()); err != nil || !has {
		t.Errorf("SandboxHasLiveKey = %v, %v; want true", has, err)
	}
	k, _ := auth.Parse(key)
	if a := e.audit.String(); !strings.Contains(a, "key.create") || !strings.Contains(a, k.ID) || strings.Contains(a, k.Secret) {
		t.Errorf("audit = %q; want key.create naming key %s without its secret", a, k.ID)
	}
	if err := e.c.Kill(ctx, "p1", sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if a := e.audit.String(); !strings.Contains(a, "sandbox.end") || !strings.Contains(a, "state=killed") {
		t.Errorf("audit = %q; want sandbox.end, killed", a)
	}
}

func TestCreateInvalid(t *testing.T) {
	e := newEnv(t, nil)
	many := map[string]string{}
	for i := range control.MaxMetadataPairs + 1 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	tests := []struct {
		name string
		req  api.CreateSandboxRequest
		want string
	}{
		{"unknown template", api.CreateSandboxRequest{Template: "x"}, `template "x" not found in project p1: build it first`},
		{"template reference", api.CreateSandboxRequest{Template: "x@0123456789abcdef"}, `name "x@0123456789abcdef"`},
		{"negative timeout", api.CreateSandboxRequest{TimeoutMs: ms(-1)}, "timeoutMs -1 is out of range"},
		{"huge timeout", api.CreateSandboxRequest{TimeoutMs: ms(1 << 60)}, "is out of range"},
		{"onTimeout", api.CreateSandboxRequest{OnTimeout: "sleep"}, `onTimeout "sleep"`},
		{"env with =", api.CreateSandboxRequest{Envs: map[string]string{"A=B": "1"}}, `env name "A=B" is not valid`},
		{"env with NUL", api.CreateSandboxRequest{Envs: map[string]string{"A": "x\x00"}}, "NUL"},
		{"reserved env", api.CreateSandboxRequest{Envs: map[string]string{"LIZARD_SANDBOX_ID": "x"}}, "set by Lizard"},
		{"token env", api.CreateSandboxRequest{LizardToken: true, Envs: map[string]string{"LIZARD_API_KEY": "x"}}, "when lizardToken is true"},
		{"envs too big", api.CreateSandboxRequest{Envs: map[string]string{"A": strings.Repeat("x", control.MaxEnvBytes)}}, "at most"},
		{"metadata key with =", api.CreateSandboxRequest{Metadata: map[string]string{"a=b": "1"}}, "contains '='"},
		{"metadata too long", api.CreateSandboxRequest{Metadata: map[string]string{"a": strings.Repeat("x", control.MaxMetadataValue+1)}}, "at most"},
		{"metadata too many", api.CreateSandboxRequest{Metadata: many}, "pairs"},
		{"memory over the maximum", api.CreateSandboxRequest{MemoryMb: ms(1025)}, "memoryMb 1025 is out of range: want 64 to 1024"},
		{"memory too small", api.CreateSandboxRequest{MemoryMb: ms(63)}, "memoryMb 63 is out of range"},
		{"cpus over the maximum", api.CreateSandboxRequest{Cpus: new(2.5)}, "cpus 2.5 is out of range: want 0.1 to 2"},
		{"disk over the maximum", api.CreateSandboxRequest{DiskMb: ms(4096)}, "diskMb 4096 is out of range: want 16 to 2048"},
		{"snapshot unknown", api.CreateSandboxRequest{SnapshotID: "snap-nosuch"}, "not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.c.Create(context.Background(), "p1", tt.req)
			wantErr := errdefs.ErrInvalid
			if tt.req.SnapshotID != "" || tt.name == "unknown template" {
				wantErr = errdefs.ErrNotFound
			}
			if !errors.Is(err, wantErr) || !strings.Contains(errdefs.Message(err), tt.want) {
				t.Errorf("Create = %v (message %q); want %v containing %q", err, errdefs.Message(err), wantErr, tt.want)
			}
		})
	}
	if n := len(e.Runtime.Creates()) + len(e.Runtime.Restores()); n != 0 {
		t.Errorf("invalid creates started %d sandboxes", n)
	}
	if rows, _ := e.Store.ListSandboxes(context.Background(), store.Filter{}); len(rows) != 0 {
		t.Errorf("invalid creates left %d rows", len(rows))
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	e := nodetest.New(t)
	tests := []struct {
		name string
		cfg  control.Config
	}{
		{"no node", control.Config{Store: e.Store}},
		{"no store", control.Config{Node: e.Node}},
		{"default timeout over the maximum", control.Config{Node: e.Node, Store: e.Store, DefaultTimeout: time.Hour, MaxTimeout: time.Minute}},
		{"default memory over the maximum", control.Config{Node: e.Node, Store: e.Store, Limits: maxLimits, MaxLimits: defaultLimits}},
	}
	for _, tt := range tests {
		if _, err := control.New(tt.cfg); err == nil {
			t.Errorf("%s: New succeeded; want an error", tt.name)
		}
	}
}

// TestChildBound checks that a sandbox made with another's lizardToken
// never lives past its creation + MaxChildTimeout, whatever asks: a new
// timeout, a resume, or a call that would resume it.
func TestChildBound(t *testing.T) {
	e := newEnv(t, func(c *control.Config) { c.MaxChildTimeout = 10 * time.Minute })
	ctx := context.Background()
	parent := e.create(t, "p1", api.CreateSandboxRequest{LizardToken: true})
	child, err := e.c.CreateBy(ctx, "p1", parent.SandboxID, api.CreateSandboxRequest{TimeoutMs: ms(int64(9 * time.Minute / time.Millisecond))})
	if err != nil {
		t.Fatalf("CreateBy: %v", err)
	}
	e.Clock.Add(5 * time.Minute)
	if _, err := e.c.SetTimeout(ctx, "p1", child.SandboxID, int64(9*time.Minute/time.Millisecond)); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "want at most 300000") {
		t.Errorf("SetTimeout past the bound = %v; want ErrInvalid naming the 300000 ms left", err)
	}
	if _, err := e.c.SetTimeout(ctx, "p1", child.SandboxID, int64(4*time.Minute/time.Millisecond)); err != nil {
		t.Errorf("SetTimeout within the bound: %v", err)
	}
	if _, err := e.c.Resume(ctx, "p1", child.SandboxID, api.ResumeRequest{TimeoutMs: ms(int64(6 * time.Minute / time.Millisecond))}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Resume with a timeout past the bound = %v; want ErrInvalid", err)
	}
	call, err := e.c.Acquire(ctx, "p1", child.SandboxID)
	if err != nil {
		t.Fatalf("Acquire within the bound: %v", err)
	}
	call.Release()
	if _, err := e.c.Pause(ctx, "p1", child.SandboxID, api.PauseRequest{}); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	e.Clock.Add(5 * time.Minute)
	// Acquire remembers the child from the first call: the bound holds
	// without reading its row again.
	if _, err := e.c.Acquire(ctx, "p1", child.SandboxID); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "cannot be resumed") {
		t.Errorf("Acquire of a paused child past its bound = %v; want ErrConflict, cannot be resumed", err)
	}
	if _, err := e.c.Resume(ctx, "p1", child.SandboxID, api.ResumeRequest{}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Resume past the bound = %v; want ErrConflict", err)
	}
	if sb, err := e.c.Get(ctx, "p1", child.SandboxID); err != nil || sb.State != api.StatePaused {
		t.Errorf("child = %+v, %v; want it left paused", sb, err)
	}
	// The parent, no child, is not bounded so.
	if _, err := e.c.SetTimeout(ctx, "p1", parent.SandboxID, int64(time.Hour/time.Millisecond)); err != nil {
		t.Errorf("SetTimeout of the parent: %v", err)
	}
}
