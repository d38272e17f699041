package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/cluster/secret"
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
	// Each refusal from an address of its own: an address is throttled
	// after secret.Burst failures (TestAdminThrottle).
	from := 1
	do := func(path string, header map[string]string) int {
		t.Helper()
		from++
		status, _ := postFrom(t, fmt.Sprintf("127.0.0.%d", from), srv.URL+path, header)
		return status
	}
	for _, h := range []map[string]string{
		nil,
		{"Authorization": "Bearer "},
		{"Authorization": "Bearer " + testSecret[:len(testSecret)-1]},
		{"Authorization": "Bearer " + testSecret + "x"},
		{"Authorization": "Bearer another-cluster-secret-0123456789"},
		{"Authorization": testSecret},
		{"Authorization": "Basic " + testSecret},
		{"X-Lizard-Secret": testSecret},
		{"Authorization": "Bearer lz_projectkey"},
	} {
		for _, verb := range []string{"drain", "undrain"} {
			if got := do("/v1/nodes/a/"+verb, h); got != http.StatusUnauthorized {
				t.Errorf("%s with %v = %d; want 401", verb, h, got)
			}
		}
	}
	auth := map[string]string{"Authorization": "Bearer " + testSecret}
	for _, name := range []string{"a'%20OR%20'1'='1", "a%2F..%2Fb", "%2E%2E", "nope", "a;DROP%20TABLE%20nodes"} {
		if got := do("/v1/nodes/"+name+"/drain", auth); got != http.StatusNotFound {
			t.Errorf("drain of node %q = %d; want 404", name, got)
		}
	}
	for _, name := range []string{"a", "b"} {
		if n, err := st.Nodes().Get(context.Background(), name); err != nil || n.Draining {
			t.Errorf("node %s after the refusals: draining %v, %v; want not draining", name, n.Draining, err)
		}
	}
}

// postFrom POSTs to url from the loopback address local (127.0.0.0/8
// is all loopback, so each test client may be a source of its own), and
// returns the status and Retry-After.
func postFrom(t *testing.T, local, url string, header map[string]string) (int, string) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	req, _ := http.NewRequest(http.MethodPost, url, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// TestAdminThrottle: guesses of the cluster secret on the API's
// /v1/nodes are throttled per source address — 2,100 guesses in a burst
// from one address are checked secret.Burst times, the rest 429 with a
// Retry-After, the right secret from there too — while the right secret
// from another address drains and undrains a node at once. Before, all
// 2,100 were checked (401) in 3 s.
func TestAdminThrottle(t *testing.T) {
	st, r, _ := newDrainCluster(t, nil, "a", "b")
	srv := httptest.NewServer(r.AdminHandler())
	defer srv.Close()
	const guesser, operator = "127.0.0.2", "127.0.0.3"
	var mu sync.Mutex
	counts := map[int]int{}
	retry := ""
	var wg sync.WaitGroup
	start := time.Now()
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2100 / 8 {
				status, after := postFrom(t, guesser, srv.URL+"/v1/nodes/a/drain", map[string]string{"Authorization": fmt.Sprintf("Bearer guess-%d-%d-0123456789abcdef0123456789", w, i)})
				mu.Lock()
				counts[status]++
				if status == http.StatusTooManyRequests {
					retry = after
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	// The burst took under a second or so: a token or two more may have
	// come in it.
	if counts[http.StatusUnauthorized] < secret.Burst || counts[http.StatusUnauthorized] > secret.Burst+int(took.Seconds())+1 || counts[http.StatusOK] != 0 {
		t.Errorf("2,096 guesses in %s: %v by status; want %d (and one a second) checked, 401, the rest 429", took.Round(time.Millisecond), counts, secret.Burst)
	}
	if n, err := strconv.Atoi(retry); err != nil || n < 1 {
		t.Errorf("a throttled guess's Retry-After = %q; want a positive number of seconds", retry)
	}
	auth := map[string]string{"Authorization": "Bearer " + testSecret}
	if status, after := postFrom(t, guesser, srv.URL+"/v1/nodes/a/drain", auth); status != http.StatusTooManyRequests || after == "" {
		t.Errorf("the right secret from the throttled address = %d (Retry-After %q); want 429 with Retry-After, the secret not checked", status, after)
	}
	start = time.Now()
	for _, verb := range []string{"drain", "undrain"} {
		if status, _ := postFrom(t, operator, srv.URL+"/v1/nodes/b/"+verb, auth); status != http.StatusOK {
			t.Errorf("%s of b with the right secret from another address = %d; want 200", verb, status)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the operator's drain and undrain took %s during the guessing; want no wait", d)
	}
	if n, err := st.Nodes().Get(context.Background(), "a"); err != nil || n.Draining {
		t.Errorf("node a after the guesses: draining %v, %v; want not draining", n.Draining, err)
	}
}

// TestMoveOutRefusals: a node's move takes another registered node — not
// an unknown name (which calls would then be passed on to), itself or
// nothing — and a refused move leaves the sandbox running where it was.
func TestMoveOutRefusals(t *testing.T) {
	st, r, ctl := newDrainCluster(t, nil, "a", "b")
	ctx := context.Background()
	if err := st.Nodes().SetDraining(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	r.list(ctx, true)
	sb, err := ctl.Create(ctx, "p1", api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := st.Nodes().Get(ctx, "a")
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
