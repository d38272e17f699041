package remote

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
)

// TestVersionRefusal: a node works with callers of its major and, for
// 0.x, its minor; a caller without the header is an api of 0.1.0.
func TestVersionRefusal(t *testing.T) {
	for _, tc := range []struct {
		own, caller string
		refused     bool
	}{
		{"0.1.0", "0.1.0", false},
		{"0.1.3", "0.1.0", false},
		{"0.1.2", "", false},
		{"0.2.0", "", true},
		{"0.2.0", "0.1.9", true},
		{"0.1.0", "0.2.0", true},
		{"1.4.0", "1.0.2", false},
		{"2.0.0", "1.9.0", true},
		{"0.1.0", "garbage", true},
	} {
		msg := versionRefusal(tc.own, tc.caller)
		if (msg != "") != tc.refused {
			t.Errorf("node %s, caller %q: %q; want refused %v", tc.own, tc.caller, msg, tc.refused)
		}
	}
}

// TestNodeRefusesOtherVersions: a node of 0.2.0 answers a call from this
// build's client, and one without the header (an api of 0.1.0, which
// checks no node's version), with a 503 naming both versions and what to
// do, before the call reaches its sandbox; GET /v1/health still answers.
func TestNodeRefusesOtherVersions(t *testing.T) {
	var paused int
	n := &fakeNode{pause: func(ctx context.Context, id string) (node.Sandbox, error) {
		paused++
		return node.Sandbox{ID: id, State: "paused"}, nil
	}}
	srv := httptest.NewServer(Handler(HandlerConfig{Node: n, Secret: testSecret, Logger: discard(), DataDir: t.TempDir(), Version: "7.0.0"}))
	t.Cleanup(srv.Close)
	_, err := NewClient("n1", srv.Listener.Addr().String(), NewTransport(testSecret)).Pause(context.Background(), "sb-1")
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(errdefs.Message(err), "this node runs Lizard 7.0.0") || !strings.Contains(errdefs.Message(err), "version 7.x") {
		t.Errorf("Pause from this build's client on a 7.0.0 node: %v; want unavailable naming both versions", err)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/internal/v1/sandboxes/sb-1/pause", nil)
	req.Header.Set("Authorization", "Bearer "+testSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "(Lizard 0.1.0)") {
		t.Errorf("a call without %s: %d %s; want 503 naming the caller as 0.1.0", HeaderVersion, resp.StatusCode, body)
	}
	if paused != 0 {
		t.Errorf("the node paused %d sandboxes for refused calls", paused)
	}
	resp, err = http.Get(srv.URL + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/health of a node of another version: %d; want 200 (probes)", resp.StatusCode)
	}
}
