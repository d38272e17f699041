package cluster

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// TestAdminRefusals: drain and undrain take exactly the cluster secret —
// not a missing, empty or partial one, another cluster's, one with
// something appended, or in the node API's header — and a node name
// that is a path, SQL or unknown drains nothing.
func TestAdminRefusals(t *testing.T) {
	st, r, _ := newDrainCluster(t, nil, "a", "b")
	srv := httptest.NewServer(r.AdminHandler())
	defer srv.Close()
	do := func(path string, header map[string]string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, h := range []map[string]string{
		nil,
		{"Authorization": "Bearer "},
		{"Authorization": "Bearer " + secret[:len(secret)-1]},
		{"Authorization": "Bearer " + secret + "x"},
		{"Authorization": "Bearer another-cluster-secret-0123456789"},
		{"Authorization": secret},
		{"Authorization": "Basic " + secret},
		{"X-Lizard-Secret": secret},
		{"Authorization": "Bearer lz_projectkey"},
	} {
		for _, verb := range []string{"drain", "undrain"} {
			if got := do("/v1/nodes/a/"+verb, h); got != http.StatusUnauthorized {
				t.Errorf("%s with %v = %d; want 401", verb, h, got)
			}
		}
	}
	auth := map[string]string{"Authorization": "Bearer " + secret}
	for _, name := range []string{"a'%20OR%20'1'='1", "a%2F..%2Fb", "%2E%2E", "nope", "a;DROP%20TABLE%20nodes"} {
		if got := do("/v1/nodes/"+name+"/drain", auth); got != http.StatusNotFound {
			t.Errorf("drain of node %q = %d; want 404", name, got)
		}
	}
	for _, name := range []string{"a", "b"} {
		if n, err := st.GetNode(context.Background(), name); err != nil || n.Draining {
			t.Errorf("node %s after the refusals: draining %v, %v; want not draining", name, n.Draining, err)
		}
	}
}

// TestMoveOutRefusals: a node's move takes another registered node — not
// an unknown name (which calls would then be passed on to), itself or
// nothing — and a refused move leaves the sandbox running where it was.
func TestMoveOutRefusals(t *testing.T) {
	st, r, ctl := newDrainCluster(t, nil, "a", "b")
	ctx := context.Background()
	if err := st.SetDraining(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	r.list(ctx, true)
	sb, err := ctl.Create(ctx, "p1", api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := st.GetNode(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{"", "nope", "a", "b' OR '1'='1", "../b"} {
		if _, err := r.clientOf(a).MoveOut(ctx, sb.SandboxID, to); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("move to %q: %v; want invalid", to, err)
		}
	}
	if row, err := st.GetSandbox(ctx, sb.SandboxID); err != nil || row.Node != "a" || row.State != api.StateRunning {
		t.Fatalf("after the refused moves: %s on %s, %v; want running on a", row.State, row.Node, err)
	}
}
