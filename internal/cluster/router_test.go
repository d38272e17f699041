package cluster

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/cluster/remote"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/version"
)

// testSecret is the test cluster's secret, as long as a real one must be (secret.MinLen).
const testSecret = "0123456789abcdef-test-secret-0123456789abcdef"

// testNode is one node of the test's cluster: a real node.Local on the
// fake runtime, served over HTTP by remote.Handler.
type testNode struct {
	env *nodetest.Env
	srv *httptest.Server

	mu       sync.Mutex
	requests map[string]int // path → requests the node's handler got
}

// Requests is how many requests for path the node's handler got.
func (n *testNode) Requests(path string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.requests[path]
}

// newCluster makes nodes named names over one shared store, registered
// with a live lease, and the API's control plane over a router.
func newCluster(t *testing.T, maxLive int, names ...string) (*store.Store, map[string]*testNode, *Router, *control.Control) {
	t.Helper()
	return newClusterWith(t, func(q *node.Quota) { q.MaxLive = maxLive }, names...)
}

// newClusterWith is newCluster with the nodes' admission set by mutate:
// one node.Quota for all, as the nodes of a cluster share the database's
// per-project lock.
func newClusterWith(t *testing.T, mutate func(*node.Quota), names ...string) (*store.Store, map[string]*testNode, *Router, *control.Control) {
	t.Helper()
	ctx := context.Background()
	shared, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shared.Close() })
	if err := shared.CreateProject(ctx, "p1", time.Now()); err != nil {
		t.Fatal(err)
	}
	quota := &node.Quota{Store: shared}
	mutate(quota)
	nodes := map[string]*testNode{}
	for _, name := range names {
		env := nodetest.New(t, func(c *node.Config) { c.Store = shared.OnNode(name); c.Now = nil; c.Admission = quota })
		tn := &testNode{env: env, requests: map[string]int{}}
		h := remote.Handler(remote.HandlerConfig{Node: env.Node, Secret: testSecret, Logger: nodetest.Discard(), DataDir: env.DataDir})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tn.mu.Lock()
			tn.requests[r.URL.Path]++
			tn.mu.Unlock()
			h.ServeHTTP(w, r)
		}))
		tn.srv = srv
		t.Cleanup(srv.Close)
		nodes[name] = tn
		beat(t, shared, name, srv.Listener.Addr().String(), time.Now().Add(time.Minute))
	}
	r, ctl := newRouter(t, shared)
	return shared, nodes, r, ctl
}

// newRouter is the API of a test cluster on shared: its Router, which
// reads the nodes at every call, and the control plane over it.
func newRouter(t *testing.T, shared *store.Store) (*Router, *control.Control) {
	t.Helper()
	r, err := NewRouter(Config{Store: shared, Secret: testSecret, Logger: nodetest.Discard(), Refresh: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := control.New(control.Config{Node: r, Store: shared, Logger: nodetest.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	return r, ctl
}

func beat(t *testing.T, st *store.Store, name, addr string, lease time.Time) {
	t.Helper()
	if err := st.Nodes().Heartbeat(context.Background(), store.NodeInfo{Name: name, Addr: addr, Slots: 100, MemoryBytes: 8 << 30,
		FreeMemory: 4 << 30, StartedAt: time.Now(), LeaseUntil: lease, Version: version.Version}); err != nil {
		t.Fatal(err)
	}
}

func TestPlacementAndRouting(t *testing.T) {
	st, nodes, r, ctl := newCluster(t, 0, "a", "b")
	ctx := context.Background()
	on := map[string]int{}
	var ids []string
	for range 6 {
		sb, err := ctl.Create(ctx, "p1", api.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		row, _ := st.GetSandbox(ctx, sb.SandboxID)
		on[row.Node]++
		ids = append(ids, sb.SandboxID)
	}
	if on["a"] != 3 || on["b"] != 3 {
		t.Errorf("6 creates on two empty nodes placed %v; want 3 and 3 (least loaded first)", on)
	}

	// Lifecycle calls reach the sandbox's node.
	id := ids[0]
	if sb, err := ctl.Pause(ctx, "p1", id, api.PauseRequest{}); err != nil || sb.State != api.StatePaused {
		t.Fatalf("Pause = %+v, %v", sb, err)
	}
	if sb, err := ctl.Resume(ctx, "p1", id, api.ResumeRequest{}); err != nil || sb.State != api.StateRunning {
		t.Fatalf("Resume = %+v, %v", sb, err)
	}
	if sb, err := ctl.SetTimeout(ctx, "p1", id, 60_000); err != nil || sb.TimeoutMs != 60_000 {
		t.Fatalf("SetTimeout = %+v, %v", sb, err)
	}

	// An agent call is forwarded to the node, which proxies it to the
	// agent with the caller named.
	if status, body := forward(t, r, ctl, id); status != http.StatusOK || !strings.Contains(body, "ok") {
		t.Errorf("forwarded /health = %d %s; want 200 from the agent", status, body)
	}

	// Nodes refuse anything without the secret.
	row, _ := st.GetSandbox(ctx, id)
	for _, path := range []string{"/internal/v1/sandboxes/" + id + "/pause", "/v1/sandboxes/" + id + "/health"} {
		resp, err := http.Post(nodes[row.Node].srv.URL+path, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST %s without the secret = %d; want 401", path, resp.StatusCode)
		}
	}

	// Snapshots are named with their node; creates from them go there.
	snap, err := ctl.Snapshot(ctx, "p1", id, api.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := st.GetSnapshot(ctx, snap.SnapshotID)
	if node, _ := store.SplitImageRef(sn.ImageDir); node != row.Node {
		t.Errorf("snapshot image %q; want it named with node %s", sn.ImageDir, row.Node)
	}
	restored, err := ctl.Create(ctx, "p1", api.CreateSandboxRequest{SnapshotID: snap.SnapshotID})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := st.GetSandbox(ctx, restored.SandboxID); c.Node != row.Node {
		t.Errorf("restore of a snapshot of node %s ran on %s", row.Node, c.Node)
	}
	if err := ctl.Project("p1").Snapshots().Delete(ctx, snap.SnapshotID); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Kill(ctx, "p1", id); err != nil {
		t.Fatal(err)
	}
	// The node answers for the sandboxes it ended.
	if status, body := forward(t, r, ctl, id); status != http.StatusGone || !strings.Contains(body, "was killed") {
		t.Errorf("forwarded call to a killed sandbox = %d %s; want 410 saying it was killed", status, body)
	}
}

// forward makes one agent call to sandbox id through the router, as the
// API's proxy does, and returns the answer.
func forward(t *testing.T, r *Router, ctl *control.Control, id string) (int, string) {
	t.Helper()
	call, err := ctl.Acquire(context.Background(), "p1", id)
	if err != nil {
		t.Fatal(err)
	}
	defer call.Release()
	req, _ := http.NewRequestWithContext(auth.WithProjectID(call.Ctx, "p1"), http.MethodGet, call.URL.String()+"/health", nil)
	resp, err := r.Transport().RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestNodeFaults(t *testing.T) {
	st, nodes, r, ctl := newCluster(t, 0, "a", "b")
	ctx := context.Background()
	sb, err := ctl.Create(ctx, "p1", api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	row, _ := st.GetSandbox(ctx, sb.SandboxID)
	other := "a"
	if row.Node == "a" {
		other = "b"
	}

	// A node that does not answer: creates go to the other; calls to its
	// sandboxes say it stopped answering.
	nodes[row.Node].srv.Close()
	for range 3 {
		got, err := ctl.Create(ctx, "p1", api.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("Create with node %s down: %v", row.Node, err)
		}
		if g, _ := st.GetSandbox(ctx, got.SandboxID); g.Node != other {
			t.Errorf("create placed on %s; want %s, the one answering", g.Node, other)
		}
	}
	if _, err := ctl.Pause(ctx, "p1", sb.SandboxID, api.PauseRequest{}); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(errdefs.Message(err), "did not answer") {
		t.Errorf("Pause on a node that does not answer: %v; want ErrUnavailable saying so", err)
	}

	// Its lease runs out: the sweeper ends its sandboxes as node lost.
	beat(t, st, row.Node, "127.0.0.1:1", time.Now().Add(-time.Second))
	var events []node.Event
	r.Subscribe(func(e node.Event) { events = append(events, e) })
	s := &Sweeper{Store: st, Router: r, Lease: time.Second, Log: nodetest.Discard()}
	if err := s.sweep(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	got, err := ctl.Get(ctx, "p1", sb.SandboxID)
	if err != nil || got.State != api.StateFailed {
		t.Fatalf("sandbox of the lost node = %+v, %v; want failed", got, err)
	}
	_, err = ctl.Acquire(ctx, "p1", sb.SandboxID)
	if !errors.Is(err, errdefs.ErrGone) || !strings.Contains(errdefs.Message(err), "node lost") {
		t.Errorf("Acquire on a lost node's sandbox: %v; want ErrGone naming node lost", err)
	}
	if len(events) != 1 || events[0].SandboxID != sb.SandboxID || events[0].State != api.StateFailed {
		t.Errorf("events = %+v; want the lost sandbox's end", events)
	}
	// Creates never go to it, and with no node left they say why.
	beat(t, st, other, nodes[other].srv.Listener.Addr().String(), time.Now().Add(-time.Second))
	if _, err := ctl.Create(ctx, "p1", api.CreateSandboxRequest{}); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(errdefs.Message(err), "live lease") {
		t.Errorf("Create with no live node: %v; want ErrUnavailable naming the lease", err)
	}
	// Just after a database failure the sweeper waits a lease.
	if err := s.sweep(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	live, _ := st.ListSandboxes(ctx, store.Filter{LiveOnly: true})
	if len(live) != 3 {
		t.Errorf("%d live sandboxes after a sweep within a lease of a database failure; want the 3 of the other node kept", len(live))
	}
}

// TestQuotaOnNodes: the live-sandbox quota is enforced where sandboxes are
// recorded, so creates through API processes that each admitted them are
// refused past it with the quota's 429.
func TestQuotaOnNodes(t *testing.T) {
	st, _, _, ctl := newCluster(t, 2, "a", "b")
	ctx := context.Background()
	// A second API process: its own router and control plane.
	r2, err := NewRouter(Config{Store: st, Secret: testSecret, Logger: nodetest.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	ctl2, err := control.New(control.Config{Node: r2, Store: st, Logger: nodetest.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []*control.Control{ctl, ctl2} {
		if _, err := c.Create(ctx, "p1", api.CreateSandboxRequest{}); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	_, err = ctl2.Create(ctx, "p1", api.CreateSandboxRequest{})
	if !errors.Is(err, errdefs.ErrRateLimited) || !strings.Contains(errdefs.Message(err), "its maximum") {
		t.Errorf("a third create with a quota of 2: %v; want ErrRateLimited naming the maximum", err)
	}
}

// TestDiskOnNodes: the disk a project is promised is bounded where
// sandboxes are recorded too, under the project's lock, so that API
// processes that each admitted a create cannot pass it together.
func TestDiskOnNodes(t *testing.T) {
	st, _, _, _ := newClusterWith(t, func(q *node.Quota) { q.MaxDisk, q.DefaultDisk = 2<<30+512<<20, 1<<30 }, "a", "b")
	ctx := context.Background()
	var ctls []*control.Control
	for range 2 {
		r, err := NewRouter(Config{Store: st, Secret: testSecret, Logger: nodetest.Discard()})
		if err != nil {
			t.Fatal(err)
		}
		c, err := control.New(control.Config{Node: r, Store: st, Logger: nodetest.Discard(), Limits: node.Limits{DiskBytes: 1 << 30}})
		if err != nil {
			t.Fatal(err)
		}
		ctls = append(ctls, c)
	}
	for i, c := range ctls {
		if _, err := c.Create(ctx, "p1", api.CreateSandboxRequest{}); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	_, err := ctls[1].Create(ctx, "p1", api.CreateSandboxRequest{})
	if !errors.Is(err, errdefs.ErrRateLimited) || !strings.Contains(errdefs.Message(err), "--max-disk-per-project-mb") {
		t.Errorf("a third sandbox of 1 GiB within 2.5 GiB: %v; want ErrRateLimited naming --max-disk-per-project-mb", err)
	}
}

// TestWrongSecret: an API process whose cluster secret differs from the
// nodes' is told so, on creates and on forwarded calls, never with the
// client's key blamed.
func TestWrongSecret(t *testing.T) {
	st, _, _, ctl := newCluster(t, 0, "a")
	ctx := context.Background()
	sb, err := ctl.Create(ctx, "p1", api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := NewRouter(Config{Store: st, Secret: "another-secret-entirely-0123456789abcdef", Logger: nodetest.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	badCtl, err := control.New(control.Config{Node: bad, Store: st, Logger: nodetest.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := badCtl.Create(ctx, "p1", api.CreateSandboxRequest{}); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(errdefs.Message(err), "LIZARD_CLUSTER_SECRET") {
		t.Errorf("Create with the wrong secret: %v; want ErrUnavailable naming LIZARD_CLUSTER_SECRET", err)
	}
	call, err := badCtl.Acquire(ctx, "p1", sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	defer call.Release()
	req, _ := http.NewRequestWithContext(auth.WithProjectID(call.Ctx, "p1"), http.MethodGet, call.URL.String()+"/health", nil)
	if _, err := bad.Transport().RoundTrip(req); err == nil || !strings.Contains(errdefs.Message(context.Cause(call.Ctx)), "LIZARD_CLUSTER_SECRET") {
		t.Errorf("forwarded call with the wrong secret: %v (call ended by %v); want it ended naming LIZARD_CLUSTER_SECRET", err, context.Cause(call.Ctx))
	}
}

// TestPlacementKeepsTheNodes: a create reads the nodes it samples, not
// every node (bench/fleet counted 515 rows a create at 500 nodes when it
// did). The list of nodes is kept in memory and only says which to
// sample: a node registered since it was read is not sampled until it is
// read again, in the background once it is Refresh old; the sampled
// nodes' rows are read fresh, so one drained since gets nothing.
func TestPlacementKeepsTheNodes(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := NewRouter(Config{Store: st, Secret: testSecret, Logger: nodetest.Discard(), Refresh: time.Hour, Choices: 2})
	if err != nil {
		t.Fatal(err)
	}
	lease := time.Now().Add(time.Hour)
	beat(t, st, "n1", "127.0.0.1:1", lease)
	beat(t, st, "n2", "127.0.0.1:2", lease)
	place := func() string {
		t.Helper()
		n, err := r.place(ctx, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		r.done(n.Name)
		return n.Name
	}
	place() // reads the list and keeps it
	if err := st.Nodes().SetDraining(ctx, "n1", true); err != nil {
		t.Fatal(err)
	}
	// n3: registered after the list was read, and the emptiest.
	if err := st.Nodes().Heartbeat(ctx, store.NodeInfo{Name: "n3", Addr: "127.0.0.1:3", Slots: 100, MemoryBytes: 8 << 30,
		FreeMemory: 6 << 30, StartedAt: time.Now(), LeaseUntil: lease, Version: version.Version}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if got := place(); got != "n2" {
			t.Fatalf("placed on %s with the list kept; want n2 (n1 drained since, read fresh; n3 not in the list kept)", got)
		}
	}
	// Refresh old: the kept list serves once more while it is read again.
	r.mu.Lock()
	r.readAt = time.Now().Add(-2 * time.Hour)
	r.mu.Unlock()
	if got := place(); got != "n2" {
		t.Fatalf("placed on %s while the list is read in the background; want n2", got)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r.mu.Lock()
		fresh := time.Since(r.readAt) < time.Hour
		r.mu.Unlock()
		if fresh {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the list of nodes was not read again in the background")
		}
	}
	if got := place(); got != "n3" {
		t.Fatalf("placed on %s after the list was read again; want n3, the emptiest", got)
	}
	// staleRefreshes old (a process idle that long): read before placing.
	beat(t, st, "n4", "127.0.0.1:4", lease)
	if err := st.Nodes().SetDraining(ctx, "n2", true); err != nil {
		t.Fatal(err)
	}
	if err := st.Nodes().SetDraining(ctx, "n3", true); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.readAt = time.Now().Add(-staleRefreshes * time.Hour)
	r.mu.Unlock()
	if got := place(); got != "n4" {
		t.Fatalf("placed on %s with a list too old to serve; want n4", got)
	}
}

// TestPlacementReadsAgainBeforeRefusing: a create is not refused on the
// list kept: when it shows no placeable node, or those sampled turn out
// drained as read now, the nodes are read again — an undrain made through
// another API process counts at once.
func TestPlacementReadsAgainBeforeRefusing(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := NewRouter(Config{Store: st, Secret: testSecret, Logger: nodetest.Discard(), Refresh: time.Hour, Choices: 2})
	if err != nil {
		t.Fatal(err)
	}
	lease := time.Now().Add(time.Hour)
	for _, n := range []string{"n1", "n2", "n3"} {
		beat(t, st, n, "127.0.0.1:1", lease)
	}
	if err := st.Nodes().SetDraining(ctx, "n2", true); err != nil {
		t.Fatal(err)
	}
	if _, err := r.list(ctx, false); err != nil { // kept: n2 draining
		t.Fatal(err)
	}
	for _, d := range []struct {
		name     string
		draining bool
	}{{"n2", false}, {"n1", true}, {"n3", true}} {
		if err := st.Nodes().SetDraining(ctx, d.name, d.draining); err != nil {
			t.Fatal(err)
		}
	}
	n, err := r.place(ctx, nil, "")
	if err != nil || n.Name != "n2" {
		t.Fatalf("place after n2 was undrained and the others drained = %s, %v; want n2", n.Name, err)
	}
	r.done(n.Name)
	if err := st.Nodes().SetDraining(ctx, "n2", true); err != nil {
		t.Fatal(err)
	}
	_, err = r.place(ctx, nil, "")
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "no node can take the sandbox") {
		t.Fatalf("place with every node drained: %v; want ErrUnavailable saying no node can take it", err)
	}
}

// TestCallsToALostNodesSandboxGone: a call to a sandbox whose node stopped
// answering is told 503 (retry: the node may come back within its lease)
// while the sandbox's row is live, and 410 naming why once the row has
// ended (the sweeper, in this or another API process, ended it as node
// lost) — also while this process's list of nodes still shows the node's
// lease live, as a list a second old does: the row, not the list, ends
// the 503s. On both paths: a call forwarded to the node (Acquire) and a
// request the router makes itself (Pause).
func TestCallsToALostNodesSandboxGone(t *testing.T) {
	st, nodes, r, ctl := newCluster(t, 0, "a", "b")
	ctx := context.Background()
	sb, err := ctl.Create(ctx, "p1", api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	row, _ := st.GetSandbox(ctx, sb.SandboxID)
	// A first call: the router knows the sandbox's node from now on.
	call, err := ctl.Acquire(ctx, "p1", sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	call.Release()
	nodes[row.Node].srv.Close()
	forward := func() error {
		t.Helper()
		call, err := ctl.Acquire(ctx, "p1", sb.SandboxID)
		if err != nil {
			return err
		}
		defer call.Release()
		req, _ := http.NewRequestWithContext(call.Ctx, http.MethodPost, call.URL.String()+"/execute", strings.NewReader(`{"code":"1+1"}`))
		if resp, err := r.Transport().RoundTrip(req); err == nil {
			resp.Body.Close()
			return errors.New("the dead node answered")
		}
		return agentproxy.StopCause(call.Ctx)
	}
	if err := forward(); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(errdefs.Message(err), "stopped answering") {
		t.Errorf("call to a live sandbox of a node not answering: %v; want 503 saying it stopped answering", err)
	}
	if err := st.EndSandbox(ctx, sb.SandboxID, "failed", "node lost: node "+row.Node+" missed its lease", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := forward(); !errors.Is(err, errdefs.ErrGone) || !strings.Contains(errdefs.Message(err), "node lost: node "+row.Node) {
		t.Errorf("forwarded call to the ended sandbox of a node not answering: %v; want 410 naming the lost node", err)
	}
	if _, err := ctl.Pause(ctx, "p1", sb.SandboxID, api.PauseRequest{}); !errors.Is(err, errdefs.ErrGone) || !strings.Contains(errdefs.Message(err), "node lost") {
		t.Errorf("Pause of the ended sandbox of a node not answering: %v; want 410 naming the lost node", err)
	}
}

// TestSweepEndsALostNodesSandboxes: one sweep ends every running sandbox of
// a lost node, each with its event (naming the node, and its keys revoked
// with it), and leaves the other node's.
func TestSweepEndsALostNodesSandboxes(t *testing.T) {
	st, _, r, ctl := newCluster(t, 0, "a", "b")
	ctx := context.Background()
	var onA []string
	for len(onA) < 20 {
		sb, err := ctl.Create(ctx, "p1", api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if row, _ := st.GetSandbox(ctx, sb.SandboxID); row.Node == "a" {
			onA = append(onA, sb.SandboxID)
		}
	}
	beat(t, st, "a", "127.0.0.1:1", time.Now().Add(-time.Second))
	var mu sync.Mutex
	ended := map[string]node.Event{}
	r.Subscribe(func(e node.Event) {
		mu.Lock()
		defer mu.Unlock()
		ended[e.SandboxID] = e
	})
	s := &Sweeper{Store: st, Router: r, Lease: time.Second, Log: nodetest.Discard()}
	if err := s.sweep(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ended) != len(onA) {
		t.Errorf("one sweep told %d ends; want the %d sandboxes of the lost node", len(ended), len(onA))
	}
	for _, id := range onA {
		e, ok := ended[id]
		if !ok || e.State != api.StateFailed || e.LostNode != "a" {
			t.Errorf("event of %s = %+v, %v; want failed, node a lost", id, e, ok)
		}
		if got, err := ctl.Get(ctx, "p1", id); err != nil || got.State != api.StateFailed {
			t.Errorf("sandbox %s = %+v, %v; want failed", id, got, err)
		}
	}
	if live, _ := st.OnNode("b").ListSandboxes(ctx, store.Filter{LiveOnly: true}); len(live) == 0 {
		t.Errorf("the live node's sandboxes were ended")
	}
}
