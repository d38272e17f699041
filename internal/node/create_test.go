package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sandbox/sandboxtest"
	"github.com/lizard-build/lizard/internal/store"
)

func TestCreateRunning(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	p := nodetest.Plan(60_000)
	p.Envs = []string{"A=1", "B=2"}
	p.Metadata = map[string]string{"user": "u1"}
	sb := e.Create(t, p)
	if sb.State != api.StateRunning || sb.ProjectID != "p1" || sb.Template != "interpreter" || sb.Metadata["user"] != "u1" {
		t.Errorf("sandbox = %+v; want running in p1 from interpreter with metadata", sb)
	}
	if want := e.Clock.Now().Add(time.Minute); sb.ExpiresAt == nil || !sb.ExpiresAt.Equal(want) {
		t.Errorf("expiresAt = %v; want %v", sb.ExpiresAt, want)
	}
	// Without a warm pool or template snapshots, a create boots.
	creates := e.Runtime.Creates()
	if len(creates) != 1 || len(e.Runtime.Restores()) != 0 {
		t.Fatalf("runtime creates %d, restores %d; want one boot", len(creates), len(e.Runtime.Restores()))
	}
	spec := creates[0]
	// The agent serves sudo in every sandbox (internal/agent/sudo).
	wantEnv := []string{"A=1", "B=2", "LIZARD_SANDBOX_ID=" + sb.ID, "LIZARD_PROJECT_ID=p1", "LIZARD_AGENT_SUDO=" + node.SudoPath}
	if !slices.Equal(spec.Env, wantEnv) {
		t.Errorf("env = %q; want %q", spec.Env, wantEnv)
	}
	if !slices.Equal(spec.Files, e.Config.Files) || spec.Template != nodetest.Artifact || !slices.Equal(spec.Args, []string{node.AgentPath}) {
		t.Errorf("spec = %+v; want the agent and lizard injected, the template's artifact, the agent as first process", spec)
	}
	wantNet := sandbox.Network{HostAddr: netip.MustParseAddr("169.254.128.1"), GuestAddr: netip.MustParseAddr("169.254.128.2"), PrefixLen: 30}
	if spec.Network.HostAddr != wantNet.HostAddr || spec.Network.GuestAddr != wantNet.GuestAddr ||
		spec.Network.PrefixLen != wantNet.PrefixLen || spec.Network.Internet || spec.Network.APIPort != 0 {
		t.Errorf("network = %+v; want %+v", spec.Network, wantNet)
	}
	if ev := e.Events(sb.ID); len(ev) != 1 || ev[0].Kind != node.Started || ev[0].GuestAddr != "169.254.128.2" || ev[0].Token {
		t.Errorf("events = %+v; want one Started at 169.254.128.2 without a token", ev)
	}
	// Agent URLs name the sandbox, not its address, which a later sandbox
	// may reuse; the transport dials the address behind the name.
	call, err := e.Node.Acquire(ctx, sb.ID)
	if err != nil || call.URL.Host != sb.ID+":49983" {
		t.Fatalf("Acquire = %+v, %v; want http://%s:49983", call, err, sb.ID)
	}
	defer call.Release()
	u := call.URL
	resp, err := (&http.Client{Transport: e.Node.Transport()}).Get(u.String() + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("GET %s/health through the node's transport = %v, %v; want the fake agent's 200", u, resp, err)
	} else {
		resp.Body.Close()
	}
	// A second sandbox takes the next slot.
	e.Create(t, nodetest.Plan(0))
	if got := e.Runtime.Creates()[1].Network.GuestAddr; got != netip.MustParseAddr("169.254.128.6") {
		t.Errorf("second guest address = %s; want 169.254.128.6", got)
	}
}

// TestCreateToken: the node mints a lizardToken plan's key itself, tied to
// the sandbox, and tells its events (the audit trail's source) its ID.
func TestCreateToken(t *testing.T) {
	e := nodetest.New(t, func(c *node.Config) {
		c.TokenAPI = func(host string) ([]string, int) { return []string{"LIZARD_API_URL=http://" + host + ":7777"}, 7777 }
	})
	p := nodetest.Plan(0)
	p.Token = true
	sb := e.Create(t, p)
	spec := e.Runtime.Creates()[0]
	var key string
	for _, kv := range spec.Env {
		if v, ok := strings.CutPrefix(kv, "LIZARD_API_KEY="); ok {
			key = v
		}
	}
	project, err := (&auth.Verifier{Store: e.Store}).Verify(context.Background(), key)
	if err != nil || project != "p1" || !slices.Contains(spec.Env, "LIZARD_API_URL=http://169.254.128.1:7777") || spec.Network.APIPort != 7777 {
		t.Errorf("key %q verifies for %q (%v); env %q, API port %d; want a key of p1, the API on its host address, port 7777",
			key, project, err, spec.Env, spec.Network.APIPort)
	}
	ids, err := e.Store.SandboxKeyIDs(context.Background(), sb.ID)
	if err != nil || len(ids) != 1 || !strings.HasPrefix(key, "lz_"+ids[0]) && !strings.Contains(key, ids[0]) {
		t.Errorf("keys of the sandbox = %v, %v; want the one minted, in %q", ids, err, key)
	}
	if !sb.Shape.Token {
		t.Error("recorded shape has no token")
	}
	ev := e.AllEvents(sb.ID)
	var kinds []node.EventKind
	for _, x := range ev {
		kinds = append(kinds, x.Kind)
	}
	if !slices.Equal(kinds, []node.EventKind{node.KeyCreated, node.Started, node.Created}) || !ev[1].Token || ev[1].HostAddr != "169.254.128.1" ||
		len(ids) == 0 || !slices.Equal(ev[0].KeyIDs, ids) {
		t.Errorf("events = %+v; want KeyCreated naming %v, Started with a token on 169.254.128.1, Created", ev, ids)
	}
}

// TestAudit: node.Audit writes one line per event kind, from the node's
// events alone, with the caller's key ID and never a key.
func TestAudit(t *testing.T) {
	var buf bytes.Buffer
	e := nodetest.New(t)
	e.Node.Subscribe(node.Audit(slog.New(slog.NewJSONHandler(&buf, nil))))
	ctx := auth.WithCaller(context.Background(), auth.Caller{ProjectID: "p1", KeyID: "k_caller", Remote: "192.0.2.7:1"})
	p := nodetest.Plan(0)
	p.Token = true
	sb, err := e.Node.Create(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Node.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	ids, _ := e.Store.SandboxKeyIDs(ctx, sb.ID)
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		msgs = append(msgs, l["msg"].(string))
		if l["sandbox_id"] != sb.ID {
			t.Errorf("audit line %q: want sandbox_id %s", line, sb.ID)
		}
		switch l["msg"] {
		case "sandbox.create", "sandbox.kill":
			if l["key_id"] != "k_caller" || l["remote"] != "192.0.2.7:1" {
				t.Errorf("audit line %q: want the caller's key ID and address", line)
			}
		case "key.create", "key.revoke":
			if len(ids) != 1 || l["key_id"] != ids[0] {
				t.Errorf("audit line %q: want key %v", line, ids)
			}
		}
	}
	want := []string{"key.create", "sandbox.create", "sandbox.kill", "key.revoke", "sandbox.end"}
	if !slices.Equal(msgs, want) {
		t.Errorf("audit = %v; want %v", msgs, want)
	}
}

// TestCreateFails checks that a create that fails says why without the
// internal cause and leaves nothing: the runtime killed it, its row is
// failed with the reason, and its slot is free again.
func TestCreateFails(t *testing.T) {
	tests := []struct {
		name       string
		mutate     func(*node.Config)
		setup      func(e *nodetest.Env)
		timeout    time.Duration // cancels the create's ctx after this
		wantErr    error
		wantMsg    string // in the error's client message
		hidden     string // never in it
		wantReason string // in the row's end reason
	}{
		{name: "runtime fails", setup: func(e *nodetest.Env) {
			e.Runtime.CreateFunc = func(context.Context, sandbox.Spec) error { return errors.New("runsc exploded") }
		}, wantMsg: "could not start it", hidden: "exploded", wantReason: "could not start it"},
		{name: "agent never healthy", mutate: func(c *node.Config) { c.StartTimeout = 200 * time.Millisecond }, setup: func(e *nodetest.Env) {
			e.Agent.Health.Store(500)
		}, wantMsg: "did not answer within", wantReason: "did not answer"},
		{name: "sandbox dies during start", setup: func(e *nodetest.Env) {
			e.Agent.Health.Store(500)
			e.Runtime.StateFunc = func(context.Context, string) (sandbox.State, error) { return sandbox.Stopped, nil }
		}, wantMsg: "stopped before its agent started", wantReason: "stopped"},
		{name: "client goes away", setup: func(e *nodetest.Env) {
			e.Agent.Health.Store(500)
		}, timeout: 100 * time.Millisecond, wantErr: context.Canceled, wantReason: "cancelled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mutate []func(*node.Config)
			if tt.mutate != nil {
				mutate = append(mutate, tt.mutate)
			}
			e := nodetest.New(t, mutate...)
			tt.setup(e)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.timeout > 0 {
				time.AfterFunc(tt.timeout, cancel)
			}
			start := time.Now()
			_, err := e.Node.Create(ctx, nodetest.Plan(0))
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Create = %v; want %v", err, tt.wantErr)
			}
			msg := errdefs.Message(err)
			if err == nil || !strings.Contains(msg, tt.wantMsg) || tt.hidden != "" && strings.Contains(msg, tt.hidden) {
				t.Fatalf("Create = %v (message %q); want a message containing %q without %q", err, msg, tt.wantMsg, tt.hidden)
			}
			if d := time.Since(start); d > 1500*time.Millisecond && tt.name == "sandbox dies during start" {
				t.Errorf("noticing the dead sandbox took %s; want well under the 2 s start timeout", d)
			}
			assertCleanedUp(t, e, tt.wantReason)
		})
	}
}

func assertCleanedUp(t *testing.T, e *nodetest.Env, wantReason string) {
	t.Helper()
	ctx := context.Background()
	rows, err := e.Store.ListSandboxes(ctx, store.Filter{})
	if err != nil || len(rows) != 1 {
		t.Fatalf("rows = %d, %v; want 1", len(rows), err)
	}
	sb := rows[0]
	if sb.State != api.StateFailed || sb.EndedAt == nil || !strings.Contains(sb.EndReason, wantReason) {
		t.Errorf("row = state %s ended %v reason %q; want failed, ended, reason containing %q", sb.State, sb.EndedAt, sb.EndReason, wantReason)
	}
	if !e.Runtime.WasKilled(sb.ID) || e.Runtime.IsRunning(sb.ID) {
		t.Errorf("runtime: killed=%v running=%v; want killed, not running", e.Runtime.WasKilled(sb.ID), e.Runtime.IsRunning(sb.ID))
	}
	if ev := e.Events(sb.ID); len(ev) != 1 || ev[0].Kind != node.Stopped || ev[0].State != api.StateFailed {
		t.Errorf("events = %+v; want one Stopped, failed", ev)
	}
	// The slot is free: the next sandbox gets slot 0's addresses.
	fresh := sandboxtest.NewFake()
	e.Runtime.CreateFunc, e.Runtime.StateFunc = fresh.CreateFunc, fresh.StateFunc
	e.Agent.Health.Store(200)
	next := e.Create(t, nodetest.Plan(0))
	if next.GuestAddr != "169.254.128.2" {
		t.Errorf("guest address after failure = %s; want slot 0's 169.254.128.2", next.GuestAddr)
	}
}

func TestCreateRefused(t *testing.T) {
	small, err := netns.ParsePool("10.9.0.0/29") // two slots
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		mutate  func(*node.Config)
		creates int // that work first
		wantErr error
		hidden  string
	}{
		{"template not built", func(c *node.Config) {
			c.Artifact = func(context.Context, string) (sandbox.Artifact, error) {
				return sandbox.Artifact{}, errors.New("debootstrap: no network")
			}
		}, 0, errdefs.ErrUnavailable, "debootstrap"},
		{"address pool exhausted", func(c *node.Config) { c.Pool = small }, 2, errdefs.ErrUnavailable, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := nodetest.New(t, tt.mutate)
			for range tt.creates {
				e.Create(t, nodetest.Plan(0))
			}
			_, err := e.Node.Create(context.Background(), nodetest.Plan(0))
			if !errors.Is(err, tt.wantErr) || errdefs.Message(err) == "" || tt.hidden != "" && strings.Contains(errdefs.Message(err), tt.hidden) {
				t.Fatalf("Create = %v (message %q); want %v with a message hiding the cause", err, errdefs.Message(err), tt.wantErr)
			}
			if n := e.Runtime.Running(); n != tt.creates {
				t.Errorf("%d sandboxes run; want %d", n, tt.creates)
			}
		})
	}
}
