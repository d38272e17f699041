package cluster

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/node/nodetest"
	"github.com/lizard-build/lizard/internal/server"
)

// countingKeys authenticates every request as the project its
// X-Test-Project header names, and counts the requests it let through:
// the public API's checks (the key, then the project's ownership of the
// sandbox in the proxy) run once per request it counts.
type countingKeys struct{ n atomic.Int32 }

func (k *countingKeys) Require(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.n.Add(1)
		next.ServeHTTP(w, r.WithContext(auth.WithProjectID(r.Context(), r.Header.Get("X-Test-Project"))))
	})
}

// TestOneCheckPerCall: a runCode through the API of a cluster passes the
// public checks and the public proxy once, on the API; the node serves it
// to the agent with its own proxy, without a public server of its own.
func TestOneCheckPerCall(t *testing.T) {
	_, nodes, router, ctl := newCluster(t, 0, "a")
	keys := &countingKeys{}
	front := httptest.NewServer(server.New(server.Config{Control: ctl, Keys: keys, Logger: nodetest.Discard()}))
	t.Cleanup(front.Close)
	sb, err := ctl.Create(context.Background(), "p1", api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	run := func(project string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, front.URL+"/v1/sandboxes/"+sb.SandboxID+"/execute", strings.NewReader(`{"code":"1+1"}`))
		req.Header.Set("X-Test-Project", project)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	n := nodes["a"]
	path := "/v1/sandboxes/" + sb.SandboxID + "/execute"

	status, body := run("p1")
	if status != http.StatusOK || !strings.Contains(body, `"stdout"`) || !strings.Contains(body, `"end"`) {
		t.Fatalf("runCode = %d %s; want the agent's stream", status, body)
	}
	if got := keys.n.Load(); got != 1 {
		t.Errorf("the API's checks ran %d times for one runCode; want 1", got)
	}
	if got := n.Requests(path); got != 1 {
		t.Errorf("the node's handler got %d requests for %s; want 1", got, path)
	}
	if got := n.env.Agent.Requests("/execute"); got != 1 {
		t.Errorf("the agent got %d /execute requests; want 1", got)
	}

	// The ownership check is the API's: another project's call stops
	// there and never reaches the node.
	if status, body := run("p2"); status != http.StatusNotFound {
		t.Errorf("another project's runCode = %d %s; want 404", status, body)
	}
	if got := n.Requests(path); got != 1 {
		t.Errorf("another project's runCode reached the node (%d requests in all); want it refused on the API", got)
	}

	// Nor does the node check it again: what the API forwards, naming
	// whichever caller, it serves (it trusts the cluster secret alone).
	call, err := router.Acquire(auth.WithProjectID(context.Background(), "p2"), sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	defer call.Release()
	req, _ := http.NewRequestWithContext(call.Ctx, http.MethodPost, call.URL.String()+"/execute", strings.NewReader(`{"code":"1+1"}`))
	resp, err := router.Transport().RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || n.env.Agent.Requests("/execute") != 2 {
		t.Errorf("a forwarded call naming another project = %d, %d agent calls in all; want 200 and 2: the node checks no ownership again",
			resp.StatusCode, n.env.Agent.Requests("/execute"))
	}
}
