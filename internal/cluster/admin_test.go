package cluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
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
