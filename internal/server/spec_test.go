package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"
)

// TestRequestsAsSpecified holds the server to the request rules of
// api/openapi.yaml that schemathesis found it broke: nulls, empty filters,
// unknown fields and optional bodies.
func TestRequestsAsSpecified(t *testing.T) {
	e := newTestEnv(t)
	tests := []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"null env value", "POST", "/v1/sandboxes", `{"envs": {"A": null}}`, 400, `field "envs.A" is null`},
		{"null metadata value", "POST", "/v1/sandboxes", `{"metadata": {"a": null}}`, 400, `field "metadata.a" is null`},
		{"null field", "POST", "/v1/sandboxes", `{"timeoutMs": null}`, 400, `field "timeoutMs" is null`},
		{"null body", "POST", "/v1/sandboxes", `null`, 400, "must be a JSON object, not null"},
		{"null fork count", "POST", "/v1/sandboxes/x/fork", `{"count": null}`, 400, `field "count" is null`},
		{"unknown field", "POST", "/v1/sandboxes", `{"cpu": 1}`, 400, `unknown field "cpu"`},
		{"empty state filter", "GET", "/v1/sandboxes?state=", "", 400, "state filter is empty"},
		{"comma in a state", "GET", "/v1/sandboxes?state=running,paused", "", 400, `unknown state "running,paused"`},
		{"no body for timeout", "POST", "/v1/sandboxes/x/timeout", "", 400, "the request body is empty"},
		{"fork count 0", "POST", "/v1/sandboxes/x/fork", `{"count": 0}`, 400, "count 0 is out of range"},
		{"fork count 17", "POST", "/v1/sandboxes/x/fork", `{"count": 17}`, 400, "count 17 is out of range"},
		{"diskMb under the minimum, from a snapshot", "POST", "/v1/sandboxes", `{"diskMb": 15, "snapshotId": "snap_x"}`, 400, "diskMb 15 is out of range"},
		{"memoryMb under the minimum, from a snapshot", "POST", "/v1/sandboxes", `{"memoryMb": 63, "snapshotId": "snap_x"}`, 400, "memoryMb 63 is out of range"},
		{"cpus under the minimum", "POST", "/v1/sandboxes", `{"cpus": 0.05}`, 400, "cpus 0.05 is out of range"},
		{"negative resume timeout", "POST", "/v1/sandboxes/x/resume", `{"timeoutMs": -1}`, 400, "timeoutMs -1 is out of range"},
		{"integral float is an integer", "POST", "/v1/sandboxes/x/timeout", `{"timeoutMs": 6.0}`, 404, "not found"},
		{"fractional float is not", "POST", "/v1/sandboxes/x/timeout", `{"timeoutMs": 6.5}`, 400, `field "timeoutMs" must be an integer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(t, e.key1, tt.method, tt.path, strings.NewReader(tt.body))
			if r.status != tt.status || !strings.Contains(r.err.Message, tt.want) {
				t.Errorf("%s %s %s = %d %s; want %d containing %q", tt.method, tt.path, tt.body, r.status, r.body, tt.status, tt.want)
			}
		})
	}
	sb := e.create(t, e.key1, "") // no body: the defaults
	for _, q := range []string{"state=running", "state=running&state=paused"} {
		if r := e.do(t, e.key1, "GET", "/v1/sandboxes?"+q, nil); r.status != 200 || !strings.Contains(r.body, sb.SandboxID) {
			t.Errorf("GET /v1/sandboxes?%s = %d %s; want 200 listing %s", q, r.status, r.body, sb.SandboxID)
		}
	}
}

// TestMethodNotAllowed: a method a path does not serve is a JSON 405 with
// Allow, on every path the server serves itself, with or without a key.
func TestMethodNotAllowed(t *testing.T) {
	e := newTestEnv(t)
	tests := []struct {
		method, path, allow string
	}{
		{"TRACE", "/v1/health", "GET"},
		{"POST", "/v1/health", "GET"},
		{"TRACE", "/v1/sandboxes", "GET, POST"},
		{"TRACE", "/v1/sandboxes/x", "GET, DELETE"},
		{"GET", "/v1/sandboxes/x/timeout", "POST"},
		{"TRACE", "/v1/sandboxes/x/pause", "POST"},
		{"DELETE", "/v1/sandboxes/x/resume", "POST"},
		{"GET", "/v1/sandboxes/x/snapshots", "POST"},
		{"PUT", "/v1/sandboxes/x/fork", "POST"},
		{"TRACE", "/v1/snapshots", "GET"},
		{"PATCH", "/v1/snapshots/s", "GET, DELETE"},
	}
	for _, tt := range tests {
		for _, key := range []string{e.key1, ""} {
			req, _ := http.NewRequest(tt.method, e.url+tt.path, nil)
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if key == "" && resp.StatusCode == 401 && tt.path != "/v1/health" {
				continue // authentication may come first
			}
			if resp.StatusCode != 405 || resp.Header.Get("Allow") != tt.allow || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s %s (key %v) = %d, Allow %q, %s; want 405, Allow %q, JSON", tt.method, tt.path, key != "",
					resp.StatusCode, resp.Header.Get("Allow"), resp.Header.Get("Content-Type"), tt.allow)
			}
		}
	}
	if r := e.do(t, e.key1, "TRACE", "/v1/nothing", nil); r.status != 404 {
		t.Errorf("TRACE /v1/nothing = %d; want 404", r.status)
	}
}

// TestAgentFailedIsGoneOnceEnded: a proxied call whose agent fails is a
// 410 naming the end when the sandbox has ended (killed, or its timeout
// passed), and a 502 only while it still runs.
func TestAgentFailedIsGoneOnceEnded(t *testing.T) {
	e := newTestEnv(t)
	s := New(Config{Control: e.c})
	ctx := context.Background()
	status := func(err error) int { st, _, _ := classify(err); return st }

	running := e.create(t, e.key1, "")
	if err := s.agentFailed(ctx, "p1", running.SandboxID); status(err) != http.StatusBadGateway {
		t.Errorf("agent failed in a running sandbox: %v (%d); want 502", err, status(err))
	}

	killed := e.create(t, e.key1, "")
	if err := e.c.Kill(ctx, "p1", killed.SandboxID); err != nil {
		t.Fatal(err)
	}
	err := s.agentFailed(ctx, "p1", killed.SandboxID)
	if status(err) != http.StatusGone || !errors.Is(err, errdefs.ErrGone) || !strings.Contains(errdefs.Message(err), "killed") {
		t.Errorf("agent failed in a killed sandbox: %v (%d); want 410 saying it was killed", err, status(err))
	}

	// A timeout that passes during the call: whether the reaper has marked
	// it yet or not, the answer is 410.
	expiring := e.create(t, e.key1, `{"timeoutMs": 300}`)
	time.Sleep(400 * time.Millisecond)
	err = s.agentFailed(ctx, "p1", expiring.SandboxID)
	if status(err) != http.StatusGone || !strings.Contains(err.Error()+errdefs.Message(err), "expired") {
		t.Errorf("agent failed in an expired sandbox: %v (%d); want 410 saying it expired", err, status(err))
	}

	if err := s.agentFailed(ctx, "p2", running.SandboxID); status(err) != http.StatusNotFound {
		t.Errorf("another project's sandbox: %v (%d); want 404", err, status(err))
	}
}

// TestProxyCallOfEndedSandboxIsGone: a call in flight whose sandbox is
// killed, and whose agent connection then breaks, is a 410 naming the
// kill, not a 502 telling the client to retry.
func TestProxyCallOfEndedSandboxIsGone(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(t, e.key1, `{}`)
	done := make(chan response, 1)
	go func() { done <- e.do(t, e.key1, "POST", "/v1/sandboxes/"+sb.SandboxID+"/files/mkdir", nil) }()
	<-e.agent.started
	if err := e.c.Kill(context.Background(), "p1", sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	e.agent.srv.CloseClientConnections() // the agent dies with its sandbox
	r := <-done
	if r.status != http.StatusGone || !strings.Contains(r.err.Message, "killed") {
		t.Errorf("call whose sandbox was killed = %d %s; want 410 saying it was killed", r.status, r.body)
	}
}
