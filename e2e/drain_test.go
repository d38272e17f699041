package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/testenv"
)

// TestClusterDrain: on PostgreSQL + an S3 image store + three nodes + two
// APIs, a drain of node n2 moves its three running sandboxes (a kernel's
// variables, a file, a background process) to the other nodes while
// calls to them go on, every call answered; creates meanwhile never land
// on n2; undrain makes it placeable again. Refused: a drain without the
// cluster secret, of an unknown node, of the last placeable node, and of
// a node running a sandbox that mounts a volume.
func TestClusterDrain(t *testing.T) {
	testenv.RequiresRoot(t)
	s3 := testenv.S3Server(t)
	c, cl := startClusterWith(t, 3, 2, sealedStoreEnv(s3), []string{"--image-store", "s3://" + s3.Bucket + "/drain"}, nil)
	ctx := context.Background()
	var adm []*client.Client
	for _, a := range c.apis {
		ac, err := client.New(client.Config{BaseURL: a.url, APIKey: c.secret})
		if err != nil {
			t.Fatal(err)
		}
		adm = append(adm, ac)
	}
	status := func(err error) int {
		var e *client.Error
		if errors.As(err, &e) {
			return e.Status
		}
		return 0
	}

	t.Run("Refused", func(t *testing.T) {
		if _, err := cl[0].DrainNode(ctx, "n2"); status(err) != http.StatusUnauthorized || !strings.Contains(err.Error(), "cluster secret") {
			t.Errorf("drain with a project's API key: %v; want 401 naming the cluster secret", err)
		}
		resp, err := http.Post(c.apis[1].url+"/v1/nodes/n2/drain", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("drain without credentials: %d; want 401", resp.StatusCode)
		}
		if _, err := adm[0].DrainNode(ctx, "nope"); status(err) != http.StatusNotFound {
			t.Errorf("drain of an unknown node: %v; want 404", err)
		}
		if _, err := adm[0].UndrainNode(ctx, "nope"); status(err) != http.StatusNotFound {
			t.Errorf("undrain of an unknown node: %v; want 404", err)
		}
	})

	// n1 drained through the CLI, n3 through the API, twice: creates can
	// only land on n2 then, which is the last placeable node.
	// (As a node's own pod may run it: the node named by its
	// environment.)
	cmd := exec.Command(testenv.Binary(t, "lizard"), "node", "drain", "--json")
	cmd.Env = append(os.Environ(), "LIZARD_API_URL="+c.apis[0].url, "LIZARD_CLUSTER_SECRET="+c.secret, "LIZARD_NODE_NAME=n1")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), `"draining": true`) {
		t.Fatalf("lizard node drain n1: %v\n%s", err, out)
	}
	for range 2 {
		if d, err := adm[1].DrainNode(ctx, "n3"); err != nil || !d.Draining || len(d.Moved) != 0 {
			t.Fatalf("drain of empty n3 = %+v, %v; want draining, nothing moved", d, err)
		}
	}
	if _, err := adm[0].DrainNode(ctx, "n2"); status(err) != http.StatusConflict || !strings.Contains(err.Error(), "last node") {
		t.Fatalf("drain of the last placeable node: %v; want 409 saying so", err)
	}

	type moving struct {
		sb   *api.Sandbox
		x    int
		file string
	}
	var sbs []moving
	for i := range 3 {
		sb := newSandbox(t, cl[i%2], api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
		if n := c.nodeOf(sb.SandboxID); n != "n2" {
			t.Fatalf("create with n1 and n3 draining placed on %s", n)
		}
		m := moving{sb: sb, x: 40 + i, file: fmt.Sprintf("kept %d", i)}
		run(t, cl[0], sb.SandboxID, "python", fmt.Sprintf(
			"import subprocess\nx = %d\nopen('/home/user/f.txt', 'w').write(%q)\nbg = subprocess.Popen(['sleep', '600'])", m.x, m.file))
		sbs = append(sbs, m)
	}
	vol, err := cl[0].Volumes().Create(ctx, api.CreateVolumeRequest{Name: "drainvol", SizeMb: 64})
	if err != nil {
		t.Fatal(err)
	}
	withVol := newSandbox(t, cl[1], api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: vol.Name, Path: "/home/user/data"}}, TimeoutMs: ms(600_000)})
	cmd = exec.Command(testenv.Binary(t, "lizard"), "node", "undrain", "n1")
	cmd.Env = append(os.Environ(), "LIZARD_API_URL="+c.apis[1].url, "LIZARD_CLUSTER_SECRET="+c.secret)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "node n1 takes new sandboxes again") {
		t.Fatalf("lizard node undrain n1: %v\n%s", err, out)
	}
	if s, err := adm[0].UndrainNode(ctx, "n3"); err != nil || s.Draining || !s.Live {
		t.Fatalf("undrain n3 = %+v, %v", s, err)
	}
	if _, err := adm[1].DrainNode(ctx, "n2"); status(err) != http.StatusConflict || !strings.Contains(err.Error(), withVol.SandboxID) || !strings.Contains(err.Error(), "volume") {
		t.Fatalf("drain of a node running a sandbox that mounts a volume: %v; want 409 naming %s", err, withVol.SandboxID)
	}
	if err := cl[0].KillSandbox(ctx, withVol.SandboxID); err != nil {
		t.Fatal(err)
	}

	// Calls in flight through both APIs, and creates, while n2 drains.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls atomic.Int64
	var mu sync.Mutex
	var failures []string
	var created []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	for i, m := range sbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				c := cl[(i+j)%2]
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				if j%3 == 2 {
					if _, err := c.SetTimeout(cctx, m.sb.SandboxID, 600_000); err != nil {
						fail("setTimeout of %s during the drain: %v", m.sb.SandboxID, err)
					}
				} else {
					ex, err := c.Execute(cctx, m.sb.SandboxID, api.ExecuteRequest{Code: "x", Language: "python"}, nil)
					if err != nil || ex.Error != nil || len(ex.Results) == 0 || ex.Results[0].Data != fmt.Sprint(m.x) {
						fail("x in %s during the drain = %+v, %v; want %d", m.sb.SandboxID, ex, err, m.x)
					}
				}
				cancel()
				calls.Add(1)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			sb, err := cl[i%2].CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
			if err != nil {
				fail("create during the drain: %v", err)
				continue
			}
			mu.Lock()
			created = append(created, sb.SandboxID)
			mu.Unlock()
		}
	}()
	time.Sleep(time.Second) // calls under way before the drain
	d, err := adm[0].DrainNode(ctx, "n2")
	time.Sleep(time.Second) // and after it
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("drain n2: %v", err)
	}
	for _, id := range created {
		if n := c.nodeOf(id); n == "n2" {
			t.Errorf("sandbox %s created during the drain landed on n2", id)
		}
		cl[0].KillSandbox(ctx, id)
	}
	for _, f := range failures {
		t.Error(f)
	}
	t.Logf("drain of n2: %d calls answered meanwhile, %d creates; %+v", calls.Load(), len(created), d)
	if len(d.Moved) != 3 || len(d.Left) != 0 {
		t.Fatalf("drain of n2 = %+v; want 3 moved, none left", d)
	}
	for _, mv := range d.Moved {
		if !mv.Resumed || mv.From != "n2" || mv.To == "n2" || mv.DowntimeMs <= 0 {
			t.Errorf("move %+v: want resumed off n2 with its downtime", mv)
		}
	}

	// Each runs on its new node with its kernel, file and process.
	for _, m := range sbs {
		id := m.sb.SandboxID
		if n := c.nodeOf(id); n == "n2" {
			t.Fatalf("sandbox %s still on n2", id)
		}
		ex := run(t, cl[1], id, "python", "(x, open('/home/user/f.txt').read(), bg.poll())")
		if want := fmt.Sprintf("(%d, '%s', None)", m.x, m.file); len(ex.Results) == 0 || ex.Results[0].Data != want {
			t.Errorf("after the move, %s = %+v; want %s (its process still running)", id, ex.Results, want)
		}
	}
	evs, err := cl[0].Events().List(ctx, client.EventOptions{Types: []string{api.LifecycleMoved}})
	if err != nil || len(evs.Events) != 3 {
		t.Fatalf("sandbox.moved events = %+v, %v; want 3", evs, err)
	}
	for _, e := range evs.Events {
		if e.Data.From != "n2" || e.Data.Node == "" || e.Data.DowntimeMs <= 0 || e.Data.State != api.StateRunning {
			t.Errorf("sandbox.moved event %+v: want from n2 to a node, with its downtime", e)
		}
	}

	// Undrained, n2 takes creates again (the others marked draining so
	// that placement has no other choice).
	if _, err := adm[1].UndrainNode(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.db.Exec(`UPDATE nodes SET draining = 1 WHERE name <> 'n2'`); err != nil {
		t.Fatal(err)
	}
	again := newSandbox(t, cl[0], api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
	if _, err := c.db.Exec(`UPDATE nodes SET draining = 0`); err != nil {
		t.Fatal(err)
	}
	if n := c.nodeOf(again.SandboxID); n != "n2" {
		t.Fatalf("create after undrain landed on %s; want n2", n)
	}
	for _, m := range sbs {
		if err := cl[0].KillSandbox(ctx, m.sb.SandboxID); err != nil {
			t.Error(err)
		}
	}
	if err := cl[0].KillSandbox(ctx, again.SandboxID); err != nil {
		t.Error(err)
	}
	if err := cl[0].Volumes().Delete(ctx, vol.Name); err != nil {
		t.Error(err)
	}
}

// TestClusterDrainOnStop: a node run as the Helm chart runs it
// (--drain-on-stop with the api's URL, --undrain-at-start), given SIGTERM,
// first has the api move its sandbox to the other node over their shared
// image store, and only then stops: the Python variable set on it is
// answered from the other node once it is gone. Started again, it takes
// new sandboxes (not left draining).
func TestClusterDrainOnStop(t *testing.T) {
	testenv.RequiresRoot(t)
	key := make([]byte, 32)
	rand.Read(key)
	c, cl := startClusterWith(t, 2, 1, []string{"LIZARD_SECRETS_KEY=" + base64.StdEncoding.EncodeToString(key)},
		[]string{"--image-store", "file://" + t.TempDir()}, nil)
	ctx := context.Background()
	sb := newSandbox(t, cl[0], api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
	py(t, cl[0], sb.SandboxID, "x = 42")
	from, to := c.nodeOf(sb.SandboxID), "n1"
	if from == "n1" {
		to = "n2"
	}
	// Restarted as the chart runs it; its sandbox runs on across that.
	a := c.node(from)
	a.args = append(slices.Clone(a.args), "--drain-on-stop", "--api-url", c.apis[0].url, "--undrain-at-start")
	a.restart()

	a.stop() // SIGTERM
	logs := a.logs()
	i := strings.Index(logs, "drained; stopping")
	if i < 0 || !strings.Contains(logs[i:], "moved=1") {
		t.Fatalf("node %s's log does not say it drained before stopping:\n%s", from, tail(logs, 30))
	}
	line := logs[strings.LastIndex(logs[:i], "\n")+1:]
	t.Logf("node %s at SIGTERM: %s", from, strings.SplitN(line, "\n", 2)[0])
	if n := c.nodeOf(sb.SandboxID); n != to {
		t.Fatalf("sandbox %s is on %s after %s's stop; want %s", sb.SandboxID, n, from, to)
	}
	if got := py(t, cl[0], sb.SandboxID, "print(x)"); got != "42" {
		t.Errorf("x after node %s's stop, on %s = %q; want 42", from, to, got)
	}

	a.start()
	admin, err := client.New(client.Config{BaseURL: c.apis[0].url, APIKey: c.secret})
	if err != nil {
		t.Fatal(err)
	}
	l, err := admin.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range l.Nodes {
		if n.Name == from && n.Draining {
			t.Errorf("node %s still draining after its start with --undrain-at-start: %+v", from, n)
		}
	}
	if err := cl[0].KillSandbox(ctx, sb.SandboxID); err != nil {
		t.Error(err)
	}
}
