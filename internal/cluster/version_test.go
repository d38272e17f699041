package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/version"
)

// otherVersion is a version this Lizard does not work with: the next
// minor of a 0.x, the next major otherwise.
func otherVersion(t *testing.T) string {
	t.Helper()
	var major, minor int
	if _, err := fmt.Sscanf(version.Version, "%d.%d.", &major, &minor); err != nil {
		t.Fatal(err)
	}
	if major == 0 {
		return fmt.Sprintf("0.%d.0", minor+1)
	}
	return fmt.Sprintf("%d.0.0", major+1)
}

// TestPlacementByVersion: a node registered with a version this API does
// not work with gets no creates, which go to the compatible node; the
// listing shows both versions; with only incompatible nodes live, a
// create is a 503 naming them and their versions.
func TestPlacementByVersion(t *testing.T) {
	st, nodes, r, ctl := newCluster(t, 0, "new", "old")
	ctx := context.Background()
	other := otherVersion(t)
	setVersion := func(name, v string) {
		t.Helper()
		n, err := st.Nodes().Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		n.Version = v
		if err := st.Nodes().Heartbeat(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	setVersion("old", other)
	for range 4 {
		sb, err := ctl.Create(ctx, "p1", api.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		if row, _ := st.GetSandbox(ctx, sb.SandboxID); row.Node != "new" {
			t.Fatalf("a create went to node %s, of version %s; want node new, of this API's %s", row.Node, other, version.Version)
		}
	}
	if n := nodes["old"].Requests("/internal/v1/sandboxes"); n != 0 {
		t.Errorf("node old got %d creates", n)
	}

	// The listing, over the admin API with the cluster secret.
	srv := httptest.NewServer(r.AdminHandler())
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/nodes", nil)
	req.Header.Set("Authorization", "Bearer "+testSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var l api.NodeList
	err = json.NewDecoder(resp.Body).Decode(&l)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(l.Nodes) != 2 {
		t.Fatalf("GET /v1/nodes = %d %+v, %v; want both nodes", resp.StatusCode, l, err)
	}
	want := map[string]api.NodeInfo{"new": {Version: version.Version, Compatible: true, Sandboxes: 4}, "old": {Version: other, Compatible: false}}
	for _, n := range l.Nodes {
		w := want[n.Name]
		if n.Version != w.Version || n.Compatible != w.Compatible || n.Sandboxes != w.Sandboxes || !n.Live {
			t.Errorf("listed %+v; want version %s compatible %v sandboxes %d, live", n, w.Version, w.Compatible, w.Sandboxes)
		}
	}

	// Only the incompatible node live: a 503 naming it.
	beat(t, st, "new", nodes["new"].srv.Listener.Addr().String(), time.Now().Add(-time.Second))
	_, err = ctl.Create(ctx, "p1", api.CreateSandboxRequest{})
	if k, _ := errdefs.Classify(err); k.Status != 503 || !strings.Contains(errdefs.Message(err), "old ("+other+")") || !strings.Contains(errdefs.Message(err), version.Span(version.Version)) {
		t.Fatalf("Create with only node old (%s) live = %v (status %d); want a 503 naming it, its version and the versions that work", other, err, k.Status)
	}

	// A node that reports no version is of version.Unreported.
	if Speaks(store.NodeInfo{}) != version.Compatible(version.Version, version.Unreported) {
		t.Errorf("Speaks of a node without a version = %v; want that of %s", Speaks(store.NodeInfo{}), version.Unreported)
	}
}

// TestCallsByVersion: calls to a sandbox whose node now runs a version
// this API does not work with (upgraded under it) are refused before they
// reach the node, with a 503 naming the node, both versions and what to
// do — a pause, a kill, a call through Acquire, a drain of the node; the
// row is still read.
// Back on a version it speaks, the calls go through.
func TestCallsByVersion(t *testing.T) {
	st, nodes, r, ctl := newCluster(t, 0, "old")
	ctx := context.Background()
	sb, err := ctl.Create(ctx, "p1", api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Acquire(ctx, sb.SandboxID); err != nil {
		t.Fatalf("Acquire while node old speaks this API's version: %v", err)
	}
	setVersion := func(v string) {
		t.Helper()
		n, err := st.Nodes().Get(ctx, "old")
		if err != nil {
			t.Fatal(err)
		}
		n.Version = v
		n.StartedAt = time.Now() // a restart with the new binary
		if err := st.Nodes().Heartbeat(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	other := otherVersion(t)
	setVersion(other)
	before := len(nodes["old"].requests)
	want := []string{"node old runs Lizard " + other, "(Lizard " + version.Version + ")", version.Span(other), version.Span(version.Version)}
	for name, call := range map[string]func() error{
		"acquire": func() error { _, err := r.Acquire(ctx, sb.SandboxID); return err },
		"pause":   func() error { _, err := ctl.Pause(ctx, "p1", sb.SandboxID, api.PauseRequest{}); return err },
		"kill":    func() error { return ctl.Kill(ctx, "p1", sb.SandboxID) },
		"drain":   func() error { _, err := r.Drain(ctx, "old"); return err },
	} {
		err := call()
		if k, _ := errdefs.Classify(err); k.Status != http.StatusServiceUnavailable {
			t.Errorf("%s of a sandbox on a node of %s = %v (status %d); want 503", name, other, err, k.Status)
			continue
		}
		for _, w := range want {
			if !strings.Contains(errdefs.Message(err), w) {
				t.Errorf("%s's error %q does not name %q", name, errdefs.Message(err), w)
			}
		}
	}
	nodes["old"].mu.Lock()
	after := len(nodes["old"].requests)
	nodes["old"].mu.Unlock()
	if after != before {
		t.Errorf("node old got calls while this API does not speak its version: %v", nodes["old"].requests)
	}
	if got, err := ctl.Get(ctx, "p1", sb.SandboxID); err != nil || got.State != api.StateRunning {
		t.Errorf("GET of the sandbox = %+v, %v; want its row, running", got, err)
	}
	setVersion(version.Version)
	if err := ctl.Kill(ctx, "p1", sb.SandboxID); err != nil {
		t.Errorf("Kill with node old back on %s: %v", version.Version, err)
	}
}
