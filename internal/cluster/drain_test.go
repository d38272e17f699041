package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/cluster/remote"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/imagestore/disk"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/version"
)

// newDrainCluster is newCluster whose nodes share one image store (over a
// directory), each recorded with it unless the name is in local, and
// upload their images.
func newDrainCluster(t *testing.T, local map[string]bool, names ...string) (*store.Store, *Router, *control.Control) {
	t.Helper()
	st, r, ctl, _ := newDrainClusterDirs(t, local, names...)
	return st, r, ctl
}

// newDrainClusterDirs is newDrainCluster that also returns each node's
// data directory by name.
func newDrainClusterDirs(t *testing.T, local map[string]bool, names ...string) (*store.Store, *Router, *control.Control, map[string]string) {
	t.Helper()
	dirs := map[string]string{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	shared, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shared.Close() })
	if err := shared.CreateProject(ctx, "p1", time.Now()); err != nil {
		t.Fatal(err)
	}
	bucket := &disk.Bucket{Root: t.TempDir()}
	// Every node has the same key, as every node has the operator's
	// secrets key.
	keySecret := make([]byte, 32)
	rand.Read(keySecret)
	key, err := imagestore.NewKey(keySecret)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		env := nodetest.New(t, func(c *node.Config) {
			c.Store, c.Now = shared.OnNode(name), nil
			if local[name] {
				return
			}
			c.Images = imagestore.New(bucket, key)
			cache, err := imagestore.NewCache(c.Images, filepath.Join(t.TempDir(), "cache"), 1<<30, nodetest.Discard())
			if err != nil {
				t.Fatal(err)
			}
			c.ImageCache = cache
		})
		dirs[name] = env.DataDir
		go env.Node.RunUploader(ctx)
		h := remote.Handler(remote.HandlerConfig{Node: env.Node, Secret: testSecret, Logger: nodetest.Discard(), DataDir: env.DataDir,
			Peers: func(ctx context.Context, name string) (string, error) {
				n, err := shared.Nodes().Get(ctx, name)
				return n.Addr, err
			}})
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		info := store.NodeInfo{Name: name, Addr: srv.Listener.Addr().String(), Slots: 100, MemoryBytes: 8 << 30,
			FreeMemory: 4 << 30, StartedAt: time.Now(), LeaseUntil: time.Now().Add(time.Hour), Version: version.Version}
		if !local[name] {
			info.ImageStore = "file://" + bucket.Root
		}
		if err := shared.Nodes().Heartbeat(ctx, info); err != nil {
			t.Fatal(err)
		}
	}
	r, ctl := newRouter(t, shared)
	return shared, r, ctl, dirs
}

// TestDrain: a drained node takes no creates; its running sandboxes run
// on the other node afterwards and its paused one resumes there; calls
// keep being answered; undrain makes it placeable again; the refusals
// name what is wrong.
func TestDrain(t *testing.T) {
	st, r, ctl, dirs := newDrainClusterDirs(t, map[string]bool{"c": true}, "a", "b", "c")
	ctx := context.Background()
	// c keeps its images on its own disk: it cannot be drained, and takes
	// none of a's or b's sandboxes.
	if _, err := r.Drain(ctx, "c"); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(errdefs.Message(err), "--image-store") {
		t.Fatalf("drain of a node without an image store: %v; want ErrConflict naming --image-store", err)
	}
	if _, err := r.Drain(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("drain of an unknown node: %v; want ErrNotFound", err)
	}
	if _, err := r.Undrain(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("undrain of an unknown node: %v; want ErrNotFound", err)
	}
	if err := st.Nodes().SetDraining(ctx, "c", true); err != nil {
		t.Fatal(err)
	}
	if d, err := r.Drain(ctx, "b"); err != nil || len(d.Moved) != 0 || !d.Draining {
		t.Fatalf("drain of empty b = %+v, %v", d, err)
	}
	if _, err := r.Drain(ctx, "a"); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(errdefs.Message(err), "last node") {
		t.Fatalf("drain of the last placeable node: %v; want ErrConflict saying so", err)
	}
	var ids []string
	for range 3 {
		sb, err := ctl.Create(ctx, "p1", api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if row, _ := st.GetSandbox(ctx, sb.SandboxID); row.Node != "a" {
			t.Fatalf("create with b and c draining placed on %s", row.Node)
		}
		ids = append(ids, sb.SandboxID)
	}
	if _, err := ctl.Pause(ctx, "p1", ids[2], api.PauseRequest{}); err != nil {
		t.Fatal(err)
	}
	if s, err := r.Undrain(ctx, "b"); err != nil || s.Draining || !s.Live {
		t.Fatalf("undrain b = %+v, %v", s, err)
	}
	// A call to a sandbox during its move: it waits, then is answered on
	// its new node.
	calls := make(chan error, 1)
	go func() {
		time.Sleep(5 * time.Millisecond)
		_, err := ctl.SetTimeout(ctx, "p1", ids[0], 120_000)
		calls <- err
	}()
	d, err := r.Drain(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := <-calls; err != nil {
		t.Errorf("setTimeout during the drain: %v", err)
	}
	if len(d.Moved) != 3 || len(d.Left) != 0 {
		t.Fatalf("drain of a = %+v; want 3 moved", d)
	}
	for _, mv := range d.Moved {
		if mv.From != "a" || mv.To != "b" || mv.Resumed != (mv.SandboxID != ids[2]) {
			t.Errorf("move %+v: want a → b, resumed unless it was paused", mv)
		}
	}
	for i, id := range ids {
		want := api.StateRunning
		if i == 2 {
			want = api.StatePaused
		}
		if row, _ := st.GetSandbox(ctx, id); row.Node != "b" || row.State != want {
			t.Errorf("sandbox %d after the drain: %s on %s; want %s on b", i, row.State, row.Node, want)
		}
	}
	// a's images went with the moves: b resumes from the image store.
	for i, id := range ids {
		if _, err := os.Stat(filepath.Join(dirs["a"], "images", id)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a's image of moved sandbox %d: %v; want removed", i, err)
		}
	}
	if sb, err := ctl.Resume(ctx, "p1", ids[2], api.ResumeRequest{}); err != nil || sb.State != api.StateRunning {
		t.Fatalf("resume of the re-homed paused sandbox = %+v, %v", sb, err)
	}
	if status, body := forward(t, r, ctl, ids[1]); status != http.StatusOK || !strings.Contains(body, "ok") {
		t.Errorf("agent call after the move = %d %s", status, body)
	}
	// Undrained, a is placed on again.
	if _, err := r.Undrain(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := st.Nodes().SetDraining(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	sb, err := ctl.Create(ctx, "p1", api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if row, _ := st.GetSandbox(ctx, sb.SandboxID); row.Node != "a" {
		t.Fatalf("create after undrain of a placed on %s", row.Node)
	}
}

// An agent call that reaches a node after its sandbox moved off it (it
// waited there for the move) is passed on to the node the sandbox's row
// names, which resumes the sandbox and answers; a lifecycle call the old
// node refuses is retried by the router on the new node.
func TestMovedCallPassedOn(t *testing.T) {
	st, r, ctl := newDrainCluster(t, nil, "a", "b")
	ctx := context.Background()
	if err := st.Nodes().SetDraining(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	sb, err := ctl.Create(ctx, "p1", api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Nodes().SetDraining(ctx, "b", false); err != nil {
		t.Fatal(err)
	}
	// The router has seen it on a.
	if status, _ := forward(t, r, ctl, sb.SandboxID); status != http.StatusOK {
		t.Fatalf("agent call on a = %d", status)
	}
	if _, err := ctl.Pause(ctx, "p1", sb.SandboxID, api.PauseRequest{WaitDurable: true}); err != nil {
		t.Fatal(err)
	}
	if err := st.AdoptPaused(ctx, sb.SandboxID, "a", "b"); err != nil {
		t.Fatal(err)
	}
	a, err := st.Nodes().Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+a.Addr+"/v1/sandboxes/"+sb.SandboxID+"/health", nil)
	req.Header.Set("Authorization", "Bearer "+testSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "ok") {
		t.Fatalf("agent call sent to the old node = %d %s; want 200 from the agent on b", resp.StatusCode, body)
	}
	if row, _ := st.GetSandbox(ctx, sb.SandboxID); row.Node != "b" || row.State != api.StateRunning {
		t.Fatalf("after the call: %s on %s; want running on b", row.State, row.Node)
	}
	// The router still remembers a (same run, live, not draining): its
	// setTimeout is refused there and sent once more to b.
	if got, err := ctl.SetTimeout(ctx, "p1", sb.SandboxID, 90_000); err != nil || got.TimeoutMs != 90_000 {
		t.Fatalf("setTimeout through a router that remembered the old node = %+v, %v", got, err)
	}
}
