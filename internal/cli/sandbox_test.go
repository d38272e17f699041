package cli

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

func ptr[T any](v T) *T { return &v }

func TestParseSandboxCreate(t *testing.T) {
	tests := []struct {
		args    []string
		want    api.CreateSandboxRequest
		json    bool
		wantErr bool
	}{
		{args: nil, want: api.CreateSandboxRequest{}},
		{
			args: []string{"--template", "interpreter", "--timeout", "5m", "--env", "A=1", "--env", "B=2",
				"--metadata", "user=ann", "--lizard-token", "--json"},
			want: api.CreateSandboxRequest{Template: "interpreter", TimeoutMs: ptr(int64(300000)),
				Envs: map[string]string{"A": "1", "B": "2"}, Metadata: map[string]string{"user": "ann"}, LizardToken: true},
			json: true,
		},
		{args: []string{"--timeout", "0"}, want: api.CreateSandboxRequest{TimeoutMs: ptr(int64(0))}},
		{args: []string{"--allow-domain", "pypi.org", "--allow-domain", "*.pythonhosted.org", "--deny-domain", "evil.test", "--network-default", "deny"},
			want: api.CreateSandboxRequest{Network: &api.NetworkPolicy{Default: "deny", Allow: []string{"pypi.org", "*.pythonhosted.org"}, Deny: []string{"evil.test"}}}},
		{args: []string{"--timeout", "forever"}, wantErr: true},
		{args: []string{"--env", "A"}, wantErr: true},
		{args: []string{"extra"}, wantErr: true},
	}
	for _, tt := range tests {
		a, err := parseSandboxCreate(Env{Stdout: io.Discard, Stderr: io.Discard}, tt.args)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseSandboxCreate(%q) error = %v, want error %v", tt.args, err, tt.wantErr)
			continue
		}
		if err != nil {
			if ExitCode(err) != 2 {
				t.Errorf("parseSandboxCreate(%q): exit code %d, want 2 for a usage error", tt.args, ExitCode(err))
			}
			continue
		}
		if !reflect.DeepEqual(a.req, tt.want) || a.json != tt.json {
			t.Errorf("parseSandboxCreate(%q) = %+v json=%v, want %+v json=%v", tt.args, a.req, a.json, tt.want, tt.json)
		}
	}
}

func TestParseSandboxList(t *testing.T) {
	tests := []struct {
		args    []string
		want    client.ListOptions
		wantErr bool
	}{
		{args: nil, want: client.ListOptions{}},
		{args: []string{"--metadata", "a=1", "--metadata", "b=2", "--state", "running"},
			want: client.ListOptions{Metadata: map[string]string{"a": "1", "b": "2"}, State: "running"}},
		{args: []string{"--state", "sleeping"}, wantErr: true},
		{args: []string{"sb_1"}, wantErr: true},
	}
	for _, tt := range tests {
		a, err := parseSandboxList(Env{Stdout: io.Discard, Stderr: io.Discard}, tt.args)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseSandboxList(%q) error = %v, want error %v", tt.args, err, tt.wantErr)
			continue
		}
		if err == nil && !reflect.DeepEqual(a.opts, tt.want) {
			t.Errorf("parseSandboxList(%q) = %+v, want %+v", tt.args, a.opts, tt.want)
		}
	}
}

const sbJSON = `{"sandboxId":"sb_1","projectId":"proj_1","template":"interpreter","state":"running",
"timeoutMs":300000,"metadata":{"user":"ann"},"createdAt":"2026-01-02T03:04:05Z","expiresAt":"2026-01-02T03:09:05Z"}`

const sbNeverJSON = `{"sandboxId":"sb_2","projectId":"proj_1","template":"interpreter","state":"killed",
"timeoutMs":0,"metadata":{},"createdAt":"2026-01-02T03:04:05Z","endedAt":"2026-01-02T03:05:05Z"}`

func TestSandboxCreate(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{"POST /v1/sandboxes": reply(201, sbJSON)})
	out, _, err := lizard(t, "sandbox", "create", "--timeout", "0", "--env", "A=1", "--metadata", "user=ann")
	if err != nil {
		t.Fatalf("sandbox create: %v", err)
	}
	if out != "sb_1\n" {
		t.Errorf("stdout = %q, want the id", out)
	}
	want := map[string]any{"timeoutMs": 0.0, "envs": map[string]any{"A": "1"}, "metadata": map[string]any{"user": "ann"}}
	if got := f.last(); got.auth != "Bearer key_test" || !reflect.DeepEqual(got.body, want) {
		t.Errorf("request = %+v, want body %v with the key", got, want)
	}

	out, _, err = lizard(t, "sandbox", "create", "--json")
	if err != nil {
		t.Fatalf("sandbox create --json: %v", err)
	}
	var sb api.Sandbox
	if err := json.Unmarshal([]byte(out), &sb); err != nil || sb.SandboxID != "sb_1" || sb.Metadata["user"] != "ann" {
		t.Errorf("--json printed %q (%v), want the sandbox", out, err)
	}
}

func TestSandboxList(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/sandboxes": reply(200, `{"sandboxes":[`+sbJSON+`,`+sbNeverJSON+`]}`),
	})
	out, _, err := lizard(t, "sandbox", "list", "--state", "running", "--metadata", "user=ann")
	if err != nil {
		t.Fatalf("sandbox list: %v", err)
	}
	if got := f.last().query; got != "metadata=user%3Dann&state=running" {
		t.Errorf("query = %q, want metadata and state", got)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("table = %q, want a header and 2 rows", out)
	}
	if fields := strings.Fields(lines[0]); !reflect.DeepEqual(fields, []string{"ID", "STATE", "TEMPLATE", "CREATED", "EXPIRES"}) {
		t.Errorf("header = %q", lines[0])
	}
	if !strings.HasPrefix(lines[1], "sb_1 ") || !strings.Contains(lines[1], "running") || !strings.Contains(lines[1], "2026-01-02") {
		t.Errorf("row 1 = %q, want sb_1 running with its dates", lines[1])
	}
	if f := strings.Fields(lines[2]); f[0] != "sb_2" || f[len(f)-1] != "-" {
		t.Errorf("row 2 = %q, want sb_2 ending in - (ended)", lines[2])
	}

	out, _, err = lizard(t, "sandbox", "list", "--json")
	var list api.SandboxList
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Sandboxes) != 2 {
		t.Errorf("--json printed %q (%v), want 2 sandboxes", out, err)
	}
}

func TestSandboxGet(t *testing.T) {
	newFakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/sandboxes/sb_1": reply(200, sbJSON),
		"GET /v1/sandboxes/sb_2": reply(200, sbNeverJSON),
	})
	out, _, err := lizard(t, "sandbox", "get", "sb_1", "--json")
	var sb api.Sandbox
	if err != nil || json.Unmarshal([]byte(out), &sb) != nil || sb.SandboxID != "sb_1" {
		t.Errorf("get --json printed %q (%v), want sb_1", out, err)
	}
	out, _, err = lizard(t, "sandbox", "get", "sb_2")
	if err != nil || !strings.Contains(out, "killed") || !strings.Contains(out, "ENDED") {
		t.Errorf("get printed %q (%v), want its state and end", out, err)
	}
	_, _, err = lizard(t, "sandbox", "get", "sb_nope")
	if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "sb_nope") {
		t.Errorf("get of an unknown sandbox: got %v, want ErrNotFound naming it", err)
	}
	if _, _, err := lizard(t, "sandbox", "get"); ExitCode(err) != 2 {
		t.Errorf("get without an id: got %v (exit %d), want a usage error", err, ExitCode(err))
	}
}

func TestSandboxKill(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{
		"DELETE /v1/sandboxes/sb_1": reply(204, ""),
		"DELETE /v1/sandboxes/sb_2": reply(410, `{"code":"gone","message":"sandbox sb_2 has ended"}`),
	})
	out, _, err := lizard(t, "sandbox", "kill", "sb_1", "sb_nope", "sb_2")
	if err == nil || !strings.Contains(err.Error(), "sb_nope") {
		t.Errorf("kill: got %v, want the failure of sb_nope", err)
	}
	if out != "sb_1\nsb_2\n" {
		t.Errorf("stdout = %q, want the killed ids (an ended one counts)", out)
	}
	f.mu.Lock()
	n := len(f.requests)
	f.mu.Unlock()
	if n != 3 {
		t.Errorf("%d requests, want 3: one failure must not stop the others", n)
	}
}

func TestSandboxTimeout(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{"POST /v1/sandboxes/sb_1/timeout": reply(200, sbJSON)})
	out, _, err := lizard(t, "sandbox", "timeout", "sb_1", "10m")
	if err != nil {
		t.Fatalf("timeout: %v", err)
	}
	if got := f.last().body; !reflect.DeepEqual(got, map[string]any{"timeoutMs": 600000.0}) {
		t.Errorf("body = %v, want timeoutMs 600000", got)
	}
	if !strings.HasPrefix(out, "sb_1 expires ") {
		t.Errorf("stdout = %q", out)
	}
	if _, _, err := lizard(t, "sandbox", "timeout", "sb_1", "0"); err != nil {
		t.Errorf("timeout 0: %v", err)
	}
	if got := f.last().body; !reflect.DeepEqual(got, map[string]any{"timeoutMs": 0.0}) {
		t.Errorf("body = %v, want timeoutMs 0 (sent, not omitted)", got)
	}
	for _, args := range [][]string{{"sb_1"}, {"sb_1", "later"}} {
		if _, _, err := lizard(t, append([]string{"sandbox", "timeout"}, args...)...); ExitCode(err) != 2 {
			t.Errorf("timeout %q: got %v, want a usage error", args, err)
		}
	}
}

func TestSandboxUsage(t *testing.T) {
	out, _, err := lizard(t, "sandbox")
	if err != nil || !strings.Contains(out, "lizard sandbox create") {
		t.Errorf("sandbox with no command printed %q (%v), want usage", out, err)
	}
	if _, _, err := lizard(t, "sandbox", "explode"); ExitCode(err) != 2 {
		t.Errorf("unknown sandbox command: got %v, want a usage error", err)
	}
}

func TestSandboxMetrics(t *testing.T) {
	body := `{"metrics":[{"timestamp":"2026-01-01T00:00:05Z","cpuUsedPct":42.5,"cpuCount":2,"memUsed":104857600,"memTotal":1073741824,"diskUsed":1048576,"diskTotal":2147483648}]}`
	newFakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/sandboxes/sb_1/metrics": reply(200, body),
		"GET /v1/sandboxes/sb_2/metrics": reply(200, `{"metrics":[]}`),
	})
	out, _, err := lizard(t, "sandbox", "metrics", "sb_1")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	for _, want := range []string{"CPU", "42.5% of 2", "100 MiB / 1024 MiB", "1 MiB / 2048 MiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout = %q, want %q in it", out, want)
		}
	}
	out, _, err = lizard(t, "sandbox", "metrics", "sb_1", "--json")
	if err != nil || !strings.Contains(out, `"cpuUsedPct": 42.5`) {
		t.Errorf("metrics --json: %q (%v)", out, err)
	}
	out, _, err = lizard(t, "sandbox", "metrics", "sb_2")
	if err != nil || !strings.Contains(out, "no samples yet") {
		t.Errorf("metrics of a sandbox with none: %q (%v)", out, err)
	}
	if _, _, err := lizard(t, "sandbox", "metrics"); ExitCode(err) != 2 {
		t.Errorf("metrics with no ID: %v, want a usage error", err)
	}
}

func TestSandboxNetwork(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{
		"PATCH /v1/sandboxes/sb_1/network":   reply(200, `{"default":"deny","allow":["a.test"],"deny":["b.test"]}`),
		"GET /v1/sandboxes/sb_1/network/log": reply(200, `{"entries":[{"time":"2026-01-01T00:00:05Z","kind":"tls","name":"a.test","addr":"203.0.113.1","port":443,"allowed":true,"bytesOut":10,"bytesIn":20}]}`),
		"GET /v1/sandboxes/sb_2":             reply(200, sbJSON),
	})
	out, _, err := lizard(t, "sandbox", "network", "sb_1", "--default", "deny", "--allow-domain", "a.test", "--cut")
	if err != nil || !strings.Contains(out, "default: deny") {
		t.Fatalf("network: %q (%v)", out, err)
	}
	// Only the fields given are sent: the deny rules are kept.
	if got, want := f.last().body, map[string]any{"default": "deny", "allow": []any{"a.test"}, "cut": true}; !reflect.DeepEqual(got, want) {
		t.Errorf("body = %v, want %v", got, want)
	}
	out, _, err = lizard(t, "sandbox", "network", "sb_1", "--log")
	if err != nil || !strings.Contains(out, "a.test") || !strings.Contains(out, "allowed") {
		t.Errorf("network --log: %q (%v)", out, err)
	}
	out, _, err = lizard(t, "sandbox", "network", "sb_2")
	if err != nil || !strings.Contains(out, "no network policy") {
		t.Errorf("network of a sandbox without one: %q (%v)", out, err)
	}
	for _, args := range [][]string{{}, {"sb_1", "--log", "--cut"}} {
		if _, _, err := lizard(t, append([]string{"sandbox", "network"}, args...)...); ExitCode(err) != 2 {
			t.Errorf("network %q: %v, want a usage error", args, err)
		}
	}
}
