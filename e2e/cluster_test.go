package e2e

// Lizard on many machines, on one (docs/cluster.md): PostgreSQL from
// Debian's packages, three `lizard node` processes each with its own data
// directory, port and address pool, and two `lizard api` processes, all
// real. The scenarios run in order on one cluster, as an operator would
// meet them.

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/store/pgtest"
	"github.com/lizard-build/lizard/internal/testenv"
)

// clusterLease is the nodes' lease in the test: short, so that a lost
// node is found within seconds, and long enough for a heartbeat every
// 2.7 s to get through on a loaded machine.
const clusterLease = 8 * time.Second

// clusterChildBound is the api processes' --max-child-timeout: short, so
// that a token child's key is seen to expire at it.
const clusterChildBound = 30 * time.Second

// apiProc is one `lizard api` process.
type apiProc struct {
	t      *testing.T
	bin    string
	listen string
	url    string
	env    []string
	args   []string // more lizard api flags, after the harness's
	cmd    *exec.Cmd
	log    *bytes.Buffer
	done   chan struct{}
}

func (a *apiProc) start() {
	t := a.t
	t.Helper()
	a.log = &bytes.Buffer{}
	a.cmd = exec.Command(a.bin, "api", "--listen", a.listen, "--metrics-listen=", "--lease", clusterLease.String(), "--egress=none",
		"--max-child-timeout="+clusterChildBound.String())
	a.cmd.Args = append(a.cmd.Args, a.args...)
	a.cmd.Env = append(os.Environ(), a.env...)
	a.cmd.Stdout = &lockedWriter{w: a.log}
	a.cmd.Stderr = a.cmd.Stdout
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("starting lizard api: %v", err)
	}
	a.done = make(chan struct{})
	go func() { a.cmd.Wait(); close(a.done) }()
	waitHealthy(t, a.url, a.done, a.log)
}

func (a *apiProc) kill9() {
	if a.cmd == nil {
		return
	}
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
	a.cmd = nil
}

func (a *apiProc) stop() {
	if a.cmd == nil {
		return
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		a.cmd.Process.Kill()
		<-a.done
	}
	a.cmd = nil
}

func waitHealthy(t *testing.T, url string, done chan struct{}, log *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url + "/v1/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-done:
			t.Fatalf("exited early:\n%s", log)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("did not become healthy:\n%s", log)
}

// cluster is the test's cluster.
type cluster struct {
	t     *testing.T
	pg    *pgtest.Server
	dbURL string
	nodes []*server
	apis  []*apiProc
	db    *sql.DB
	key   string // project p1's API key
	// secret is the cluster secret, the operators' credential (drain).
	secret string
}

func startCluster(t *testing.T) (*cluster, []*client.Client) {
	return startClusterOf(t, 3, 2, nil)
}

// startClusterOf is startCluster with nodes `lizard node` and apis `lizard
// api` processes, given extra environment variables.
func startClusterOf(t *testing.T, nodes, apis int, extraEnv []string) (*cluster, []*client.Client) {
	return startClusterWith(t, nodes, apis, extraEnv, nil, nil)
}

// startClusterWith is startClusterOf with more flags for each `lizard
// node` and each `lizard api`.
func startClusterWith(t *testing.T, nodes, apis int, extraEnv, nodeArgs, apiArgs []string) (*cluster, []*client.Client) {
	return startClusterBin(t, testenv.Binary(t, "lizard"), nodes, apis, extraEnv, nodeArgs, apiArgs)
}

// startClusterBin is startClusterWith with the lizard binary bin for every
// process: another build's (TestUpgradeCluster's earlier release).
func startClusterBin(t *testing.T, bin string, nodes, apis int, extraEnv, nodeArgs, apiArgs []string) (*cluster, []*client.Client) {
	testenv.RequiresRoot(t)
	pg, err := pgtest.Start()
	if err != nil {
		if os.Getenv("LIZARD_TEST_STRICT") == "1" {
			t.Fatalf("PostgreSQL: %v", err)
		}
		t.Skipf("PostgreSQL: %v (LIZARD_TEST_STRICT=1 makes this a failure)", err)
	}
	t.Cleanup(func() {
		if err := pg.Stop(); err != nil {
			t.Errorf("stopping PostgreSQL: %v", err)
		}
	})
	name, err := pg.CreateDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, pg: pg, dbURL: pg.URL(name)}
	if c.db, err = sql.Open("pgx", c.dbURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.db.Close() })
	secret := make([]byte, 24)
	rand.Read(secret)
	c.secret = hex.EncodeToString(secret)
	env := []string{"LIZARD_DATABASE_URL=" + c.dbURL, "LIZARD_CLUSTER_SECRET=" + c.secret}
	env = append(env, extraEnv...)
	testenv.Binary(t, "lizard-agent")
	testenv.Binary(t, "lizard-client")
	runsc := testenv.Binary(t, "runsc")
	// Nodes start one after the other: the first migrates the database.
	for i := range nodes {
		n := &server{t: t, bin: bin, dataDir: t.TempDir(), pool: takePool(t), runsc: runsc, role: "node", env: env,
			dbURL: c.dbURL, name: fmt.Sprintf("n%d", i+1)}
		n.listen = freeAddr(t)
		n.url = "http://" + n.listen
		// Cold boots: three nodes checkpointing templates at once would
		// cost the machine's two cores more than the test's creates.
		n.args = append([]string{"--name", n.name, "--lease", clusterLease.String(), "--template-snapshot=false"}, nodeArgs...)
		n.start()
		t.Cleanup(n.shutdown)
		c.nodes = append(c.nodes, n)
	}
	for range apis {
		a := &apiProc{t: t, bin: bin, env: env, listen: freeAddr(t), args: apiArgs}
		a.url = "http://" + a.listen
		a.start()
		t.Cleanup(a.stop)
		c.apis = append(c.apis, a)
	}
	cmd := exec.Command(bin, "admin", "create-project", "--id", "p1", "--json")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("admin create-project: %v", err)
	}
	var p struct{ APIKey string }
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	c.key = p.APIKey
	var clients []*client.Client
	for _, a := range c.apis {
		cl, err := client.New(client.Config{BaseURL: a.url, APIKey: p.APIKey})
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, cl)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, a := range c.apis {
				t.Logf("lizard api %s log:\n%s", a.listen, a.log)
			}
			for _, n := range c.nodes {
				t.Logf("lizard node %s log:\n%s", n.name, n.logs())
			}
		}
	})
	return c, clients
}

// nodeOf is the node sandbox id's row names.
func (c *cluster) nodeOf(id string) string {
	c.t.Helper()
	var node string
	if err := c.db.QueryRow(`SELECT node FROM sandboxes WHERE id = $1`, id).Scan(&node); err != nil {
		c.t.Fatalf("reading the node of %s: %v", id, err)
	}
	return node
}

// lose kills node name and everything it ran (kill -9: no drain, no
// goodbye) and waits until the control plane has marked it lost, which
// takes its lease running out: at most three leases and some.
func (c *cluster) lose(t *testing.T, name string) {
	t.Helper()
	killedAt := time.Now()
	c.node(name).kill9()
	killProcsOf(t, c.node(name).dataDir)
	for deadline := killedAt.Add(3*clusterLease + 10*time.Second); ; time.Sleep(200 * time.Millisecond) {
		var lost bool
		if err := c.db.QueryRow(`SELECT lost_at IS NOT NULL FROM nodes WHERE name = $1`, name).Scan(&lost); err != nil {
			t.Fatal(err)
		}
		if lost {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s not lost %s after it was killed", name, time.Since(killedAt).Round(time.Millisecond))
		}
	}
}

func (c *cluster) node(name string) *server {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	c.t.Fatalf("no node %s", name)
	return nil
}

func TestCluster(t *testing.T) {
	c, cl := startCluster(t)
	ctx := context.Background()

	// Creates spread across the nodes, through either API process.
	var mu sync.Mutex
	var sbs []*api.Sandbox
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := cl[i%2].CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
			if err != nil {
				t.Errorf("create %d through api %d: %v", i, i%2, err)
				return
			}
			mu.Lock()
			sbs = append(sbs, sb)
			mu.Unlock()
		}()
		if i%2 == 1 {
			wg.Wait() // two at a time: the machine has two cores
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	on := map[string][]string{}
	for _, sb := range sbs {
		n := c.nodeOf(sb.SandboxID)
		on[n] = append(on[n], sb.SandboxID)
	}
	t.Logf("placement: %v", on)
	if len(on) < 2 {
		t.Fatalf("6 creates all went to %v; want them spread over the nodes", on)
	}

	// Calls and files through either API process, whatever took the create.
	for i, sb := range sbs {
		ex := run(t, cl[(i+1)%2], sb.SandboxID, "python", fmt.Sprintf("x = %d\nx * 2", i))
		if len(ex.Results) == 0 || ex.Results[0].Data != fmt.Sprint(i*2) {
			t.Errorf("runCode in %s through api %d = %+v; want %d", sb.SandboxID, (i+1)%2, ex.Results, i*2)
		}
		body := fmt.Sprintf("file of %s\n", sb.SandboxID)
		if _, err := cl[i%2].WriteFile(ctx, sb.SandboxID, "/tmp/f.txt", strings.NewReader(body)); err != nil {
			t.Fatalf("WriteFile through api %d: %v", i%2, err)
		}
		rc, err := cl[(i+1)%2].ReadFile(ctx, sb.SandboxID, "/tmp/f.txt")
		if err != nil {
			t.Fatalf("ReadFile through api %d: %v", (i+1)%2, err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if string(got) != body {
			t.Errorf("ReadFile = %q; want %q", got, body)
		}
	}

	// A watch through one API process sees a file written through the
	// other: the event stream crosses the API and the node unbuffered.
	w, err := cl[0].WatchDir(ctx, sbs[0].SandboxID, "/tmp", false)
	if err != nil {
		t.Fatalf("WatchDir through api 0: %v", err)
	}
	if _, err := cl[1].WriteFile(ctx, sbs[0].SandboxID, "/tmp/watched.txt", strings.NewReader("x")); err != nil {
		t.Fatalf("WriteFile through api 1: %v", err)
	}
	for {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("the watch through api 0 ended before the write through api 1 showed: %v", err)
		}
		if ev.Name == "watched.txt" {
			break
		}
	}
	w.Close()
	// The node samples its sandboxes; either API process answers with its
	// samples.
	var samples []api.SandboxMetric
	for deadline := time.Now().Add(20 * time.Second); len(samples) == 0 && time.Now().Before(deadline); time.Sleep(time.Second) {
		if samples, err = cl[1].Metrics(ctx, sbs[1].SandboxID); err != nil {
			t.Fatalf("Metrics through api 1: %v", err)
		}
	}
	if len(samples) == 0 || samples[0].MemTotal <= 0 || samples[0].DiskTotal <= 0 {
		t.Errorf("Metrics through api 1 = %+v; want a sample within 20 s, with the sandbox's limits", samples)
	}

	var ce *client.Error

	// Exposed ports through either API: the request goes to the sandbox's
	// node, which dials the port; both API processes give the sandbox the
	// same access token.
	ps := sbs[2]
	servePorts(t, cl[0], ps.SandboxID)
	portURL := func(api int) string { return c.apis[api].url + "/v1/sandboxes/" + ps.SandboxID + "/ports/8000/" }
	if body := waitPort(t, portURL(1), "Authorization", "Bearer "+c.key); !strings.Contains(body, "hello from the sandbox") {
		t.Errorf("port 8000 through api 1: %q", body)
	}
	if code, body, _ := get(t, portURL(0)); code != http.StatusUnauthorized {
		t.Errorf("port 8000 without a key: %d %s; want 401", code, body)
	}
	withToken, err := cl[1].GetSandbox(ctx, ps.SandboxID)
	if err != nil || withToken.AccessToken == "" {
		t.Fatalf("GetSandbox: %+v, %v; want an access token", withToken, err)
	}
	if code, body, _ := get(t, portURL(0)+"?lizard_access_token="+withToken.AccessToken); code != http.StatusOK || !strings.Contains(body, "hello") {
		t.Errorf("port 8000 through api 0 with the token api 1 gave: %d %s; want 200", code, body)
	}
	wsURL := c.apis[1].url + "/v1/sandboxes/" + ps.SandboxID + "/ports/8765/"
	waitPort(t, wsURL, "Authorization", "Bearer "+c.key)
	conn, br, err := wsDial(wsURL+"ws", http.Header{"Authorization": {"Bearer " + c.key}})
	if err != nil {
		t.Fatalf("WebSocket through api 1 and the node: %v", err)
	}
	for _, msg := range []string{"hello", "world"} {
		if err := wsSend(conn, msg); err != nil {
			t.Fatal(err)
		}
		if got, err := wsRecv(conn, br, 10*time.Second); err != nil || got != msg {
			t.Errorf("WebSocket echo = %q, %v; want %q", got, err, msg)
		}
	}
	conn.Close()
	if code, body, _ := get(t, c.apis[0].url+"/v1/sandboxes/"+ps.SandboxID+"/ports/8001/", "Authorization", "Bearer "+c.key); code != http.StatusBadGateway || !strings.Contains(body, "nothing listens") {
		t.Errorf("a closed port: %d %s; want 502 saying nothing listens", code, body)
	}

	// A volume lives on the node that made it; the sandboxes that mount it
	// are placed there, and see what the last one wrote.
	if _, err := cl[0].Volumes().Create(ctx, api.CreateVolumeRequest{Name: "data", SizeMb: 64}); err != nil {
		t.Fatalf("Volumes().Create: %v", err)
	}
	var volNode string
	if err := c.db.QueryRow(`SELECT node FROM volumes WHERE name = 'data'`).Scan(&volNode); err != nil || volNode == "" {
		t.Fatalf("the volume's node: %q, %v", volNode, err)
	}
	mount := []api.VolumeMount{{Name: "data", Path: "/home/user/data"}}
	for i, code := range []string{"open('/home/user/data/f', 'w').write('kept')", "open('/home/user/data/f').read()"} {
		vs, err := cl[i%2].CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: mount, TimeoutMs: ms(600_000)})
		if err != nil {
			t.Fatalf("create %d with the volume: %v", i, err)
		}
		if n := c.nodeOf(vs.SandboxID); n != volNode {
			t.Errorf("a sandbox mounting a volume of node %s ran on %s", volNode, n)
		}
		ex := run(t, cl[(i+1)%2], vs.SandboxID, "python", code)
		if i == 1 && (len(ex.Results) == 0 || ex.Results[0].Data != "'kept'") {
			t.Errorf("the volume read by the next sandbox: %+v; want 'kept'", ex.Results)
		}
		if err := cl[0].KillSandbox(ctx, vs.SandboxID); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl[1].Volumes().Delete(ctx, "data"); err != nil {
		t.Errorf("Volumes().Delete: %v", err)
	}

	// Pause on one API, resume on the other: the sandbox stays on its
	// node, which holds its image, and keeps its state.
	p := sbs[0]
	before := c.nodeOf(p.SandboxID)
	run(t, cl[0], p.SandboxID, "python", "kept = 41")
	if got, err := cl[1].PauseSandbox(ctx, p.SandboxID); err != nil || got.State != api.StatePaused {
		t.Fatalf("PauseSandbox = %+v, %v; want paused", got, err)
	}
	if got, err := cl[0].ResumeSandbox(ctx, p.SandboxID, api.ResumeRequest{}); err != nil || got.State != api.StateRunning {
		t.Fatalf("ResumeSandbox = %+v, %v; want running", got, err)
	}
	if after := c.nodeOf(p.SandboxID); after != before {
		t.Errorf("sandbox moved from node %s to %s over a pause", before, after)
	}
	if ex := run(t, cl[1], p.SandboxID, "python", "kept + 1"); len(ex.Results) == 0 || ex.Results[0].Data != "42" {
		t.Errorf("after resume: %+v; want 42", ex.Results)
	}

	// A fork runs on its parent's node, with the parent's state.
	forks, err := cl[1].Fork(ctx, p.SandboxID, api.ForkRequest{Count: 1, TimeoutMs: ms(600_000)})
	if err != nil || len(forks) != 1 {
		t.Fatalf("Fork = %v, %v", forks, err)
	}
	if n := c.nodeOf(forks[0].SandboxID); n != before {
		t.Errorf("fork of a sandbox of node %s ran on %s", before, n)
	}
	if ex := run(t, cl[0], forks[0].SandboxID, "python", "kept * 2"); len(ex.Results) == 0 || ex.Results[0].Data != "82" {
		t.Errorf("fork's state: %+v; want 82", ex.Results)
	}
	sbs = append(sbs, &forks[0])

	// The resources a create asked for are what every answer of the API
	// reports, whichever API process and node: the node's answer carries
	// the sandbox's recorded shape, not the API's defaults (1024 MiB,
	// 2048 MiB of disk).
	shaped, err := cl[0].CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMb: ms(512), Cpus: new(1.0), DiskMb: ms(1024), TimeoutMs: ms(600_000)})
	if err != nil {
		t.Fatalf("create with memoryMb 512, cpus 1, diskMb 1024: %v", err)
	}
	sbs = append(sbs, shaped)
	checkShape := func(call string, sb *api.Sandbox, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", call, err)
		}
		if sb.MemoryMb != 512 || sb.Cpus != 1 || sb.DiskMb != 1024 {
			t.Errorf("%s answered memoryMb %d, cpus %v, diskMb %d; want 512, 1, 1024", call, sb.MemoryMb, sb.Cpus, sb.DiskMb)
		}
	}
	checkShape("CreateSandbox", shaped, nil)
	got, err := cl[1].SetTimeout(ctx, shaped.SandboxID, 600_000)
	checkShape("SetTimeout", got, err)
	got, err = cl[0].PauseSandbox(ctx, shaped.SandboxID)
	checkShape("PauseSandbox", got, err)
	got, err = cl[1].ResumeSandbox(ctx, shaped.SandboxID, api.ResumeRequest{})
	checkShape("ResumeSandbox", got, err)
	shapedForks, err := cl[0].Fork(ctx, shaped.SandboxID, api.ForkRequest{Count: 1, TimeoutMs: ms(600_000)})
	if err == nil && len(shapedForks) != 1 {
		err = fmt.Errorf("%d forks; want 1", len(shapedForks))
	}
	if err == nil {
		sbs = append(sbs, &shapedForks[0])
		checkShape("Fork", &shapedForks[0], nil)
	} else {
		checkShape("Fork", nil, err)
	}
	got, err = cl[1].GetSandbox(ctx, shaped.SandboxID)
	checkShape("GetSandbox", got, err)

	// The same through the Python SDK, whose create takes memory_mb, cpus
	// and disk_mb.
	t.Run("PythonSDK", func(t *testing.T) {
		const script = `
from lizard import CodeSandbox
sb = CodeSandbox.create(memory_mb=512, cpus=1, disk_mb=1024, timeout_ms=600_000)
try:
    for info in (sb._info, sb.get_info()):  # the create's answer, then GET
        print(info.memory_mb, info.cpus, info.disk_mb)
    sb.pause()
    sb.resume()
    info = sb.get_info()
    print(info.state, info.memory_mb, info.cpus, info.disk_mb)
    fork = sb.fork()
    try:
        info = fork.get_info()
        print(info.memory_mb, info.cpus, info.disk_mb)
    finally:
        fork.kill()
finally:
    sb.kill()
`
		cmd := exec.Command(testenv.Python(t), "-c", script)
		cmd.Env = append(os.Environ(), "LIZARD_API_URL="+c.apis[1].url, "LIZARD_API_KEY="+c.key,
			"PYTHONPATH="+filepath.Join(testenv.RepoRoot(t), "sdk", "python", "src"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the Python SDK against the cluster: %v\n%s", err, out)
		}
		if got, want := strings.TrimSpace(string(out)), "512 1.0 1024\n512 1.0 1024\nrunning 512 1.0 1024\n512 1.0 1024"; got != want {
			t.Errorf("the Python SDK printed\n%s\nwant\n%s", got, want)
		}
	})

	// A lizardToken is minted by the node in the shared database: it works
	// on either API process, and is revoked when its sandbox ends.
	tok := newSandbox(t, cl[0], api.CreateSandboxRequest{LizardToken: true})
	ex := run(t, cl[1], tok.SandboxID, "python", "import os\nos.environ['LIZARD_API_KEY']")
	key := strings.Trim(ex.Results[0].Data, "'")
	tc, err := client.New(client.Config{BaseURL: c.apis[1].url, APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.GetSandbox(ctx, tok.SandboxID); err != nil {
		t.Errorf("the sandbox's lizardToken through api 1: %v", err)
	}
	// A child made with that key, with a lizardToken of its own: the node
	// mints the child's key with the expiry the API sends, so the key
	// dies at the child's bound although the child is paused (not ended,
	// so not revoked), on either API process, and the paused child
	// cannot be resumed past the bound.
	begin := time.Now()
	kid, err := tc.CreateSandbox(ctx, api.CreateSandboxRequest{LizardToken: true})
	if err != nil {
		t.Fatalf("a child through the lizardToken: %v", err)
	}
	t.Cleanup(func() { cl[0].KillSandbox(context.Background(), kid.SandboxID) })
	ex = run(t, cl[0], kid.SandboxID, "python", "import os\nos.environ['LIZARD_API_KEY']")
	kidKey := strings.Trim(ex.Results[0].Data, "'")
	if kc, err := client.New(client.Config{BaseURL: c.apis[1].url, APIKey: kidKey}); err != nil {
		t.Fatal(err)
	} else if _, err := kc.ListSandboxes(ctx, client.ListOptions{}); err != nil {
		t.Errorf("the child's key within its bound: %v", err)
	}
	if _, err := cl[1].PauseSandbox(ctx, kid.SandboxID); err != nil {
		t.Fatalf("pausing the child: %v", err)
	}
	time.Sleep(time.Until(begin.Add(clusterChildBound + time.Second)))
	for i, a := range c.apis {
		kc, err := client.New(client.Config{BaseURL: a.url, APIKey: kidKey})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kc.ListSandboxes(ctx, client.ListOptions{}); !errors.As(err, &ce) || ce.Status != http.StatusUnauthorized {
			t.Errorf("the paused child's key past its bound through api %d: %v; want 401", i, err)
		}
	}
	if _, err := cl[0].ResumeSandbox(ctx, kid.SandboxID, api.ResumeRequest{}); !errors.As(err, &ce) || ce.Status != http.StatusConflict {
		t.Errorf("resuming the child past its bound: %v; want 409", err)
	}
	if err := cl[0].KillSandbox(ctx, kid.SandboxID); err != nil {
		t.Errorf("killing the child: %v", err)
	}
	if err := cl[0].KillSandbox(ctx, tok.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.GetSandbox(ctx, tok.SandboxID); !errors.As(err, &ce) || ce.Status != http.StatusUnauthorized {
		t.Errorf("the lizardToken of a killed sandbox: %v; want 401", err)
	}

	// A node stopped and started again within its lease keeps its
	// sandboxes; while it stops, creates go to the others.
	kept := sbs[len(sbs)-1]
	keptOn := c.node(c.nodeOf(kept.SandboxID))
	keptOn.stop()
	for i := range 2 {
		sb := newSandbox(t, cl[i], api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
		if n := c.nodeOf(sb.SandboxID); n == keptOn.name {
			t.Errorf("create placed on node %s while it was stopped", n)
		}
		sbs = append(sbs, sb)
	}
	keptOn.start()
	if ex := run(t, cl[1], kept.SandboxID, "python", "1 + 1"); len(ex.Results) == 0 || ex.Results[0].Data != "2" {
		t.Errorf("a sandbox of a node restarted within its lease: %+v", ex.Results)
	}

	// kill -9 of one API process: the other carries on, and the killed
	// one comes back.
	c.apis[1].kill9()
	sb := newSandbox(t, cl[0], api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
	run(t, cl[0], sb.SandboxID, "python", "1 + 1")
	sbs = append(sbs, sb)
	c.apis[1].start()

	// kill -9 of a node during a call.
	victim := sbs[len(sbs)-1]
	lost := c.nodeOf(victim.SandboxID)
	callErr := make(chan error, 1)
	go func() {
		_, err := cl[1].Execute(ctx, victim.SandboxID, api.ExecuteRequest{Code: "import time\nprint('sleeping', flush=True)\ntime.sleep(60)"},
			nil)
		callErr <- err
	}()
	time.Sleep(2 * time.Second)
	killedAt := time.Now()
	c.node(lost).kill9()
	select {
	case err := <-callErr:
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable || !strings.Contains(ce.Message, "stopped answering") {
			t.Errorf("call cut by its node's death: %v; want a 503 saying the node stopped answering", err)
		}
		t.Logf("call cut by the node's death ended in %s: %v", time.Since(killedAt).Round(time.Millisecond), err)
	case <-time.After(20 * time.Second):
		t.Fatalf("the call to a sandbox whose node was killed did not end")
	}
	// After the lease, its sandboxes are failed: node lost, 410 on calls.
	deadline := time.Now().Add(3*clusterLease + 10*time.Second)
	for {
		got, err := cl[0].GetSandbox(ctx, victim.SandboxID)
		if err == nil && got.State == api.StateFailed {
			t.Logf("node lost %s after the kill", time.Since(killedAt).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox on the killed node: %+v, %v; want failed (node lost) within %s", got, err, 3*clusterLease)
		}
		time.Sleep(200 * time.Millisecond)
	}
	_, err = cl[1].Execute(ctx, victim.SandboxID, api.ExecuteRequest{Code: "1"}, nil)
	if !errors.As(err, &ce) || ce.Status != http.StatusGone || !strings.Contains(ce.Message, "node lost") {
		t.Errorf("call to a sandbox of a lost node: %v; want 410 naming node lost", err)
	}
	// Creates go to the survivors.
	for i := range 3 {
		sb := newSandbox(t, cl[i%2], api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
		if n := c.nodeOf(sb.SandboxID); n == lost {
			t.Errorf("create placed on lost node %s", n)
		}
		sbs = append(sbs, sb)
	}
	// The node's restart ends what the API gave up on: no sandbox of it
	// left running, nothing of the ended ones left on the host.
	var endedOnLost []string
	for id, row := range c.node(lost).dbSandboxes(t) {
		if row.State == api.StateFailed && strings.Contains(row.EndReason, "node lost") {
			endedOnLost = append(endedOnLost, id)
		}
	}
	c.node(lost).start()
	c.node(lost).expectNoLeftovers(t, leftoverCheck{ids: endedOnLost})
	if ids := c.node(lost).runtimeIDs(); len(ids) != 0 {
		t.Errorf("node %s still runs %v after its restart; want nothing (its sandboxes were given up)", lost, ids)
	}

	// PostgreSQL stopped: clear 503s; started again: served again, without
	// a restart, and no node lost for it.
	alive := sbs[1]
	if c.nodeOf(alive.SandboxID) == lost {
		alive = sbs[len(sbs)-1]
	}
	if err := c.pg.StopServer(); err != nil {
		t.Fatal(err)
	}
	_, err = cl[0].GetSandbox(ctx, alive.SandboxID)
	if !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable || !strings.Contains(ce.Message, "database") {
		t.Errorf("GetSandbox with the database down: %v; want a 503 naming the database", err)
	}
	_, err = cl[1].CreateSandbox(ctx, api.CreateSandboxRequest{})
	if !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable {
		t.Errorf("CreateSandbox with the database down: %v; want a 503", err)
	}
	time.Sleep(clusterLease) // longer than a lease: nodes cannot renew theirs
	if err := c.pg.StartServer(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		_, err := cl[0].GetSandbox(ctx, alive.SandboxID)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GetSandbox 30 s after the database came back: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	time.Sleep(clusterLease + 2*time.Second) // the sweeper's grace after the outage, and then some
	for i, sb := range sbs {
		if c.nodeOf(sb.SandboxID) == lost {
			continue
		}
		got, err := cl[i%2].GetSandbox(ctx, sb.SandboxID)
		if err != nil || got.State != api.StateRunning {
			t.Errorf("sandbox %s on node %s after the database came back: %+v, %v; want running", sb.SandboxID, c.nodeOf(sb.SandboxID), got, err)
		}
	}
	run(t, cl[1], alive.SandboxID, "python", "1 + 1")

	// Nothing left behind.
	for _, sb := range sbs {
		if err := cl[0].KillSandbox(ctx, sb.SandboxID); err != nil {
			t.Errorf("KillSandbox(%s): %v", sb.SandboxID, err)
		}
	}
	for _, a := range c.apis {
		a.stop()
	}
	for _, n := range c.nodes {
		n.stopAndExpectNothingLeft(t)
	}
}

// TestClusterShortSecret: `lizard api` and `lizard node` refuse at start
// a cluster secret under 32 bytes (it was 16) or the chart's placeholder,
// saying how to make one, before they reach the database.
func TestClusterShortSecret(t *testing.T) {
	for _, role := range []string{"api", "node"} {
		for _, sec := range []string{"0123456789abcdef0123", "CHANGE-ME-to-openssl-rand-hex-32"} {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			cmd := exec.CommandContext(ctx, testenv.Binary(t, "lizard"), role)
			cmd.Env = append(os.Environ(), "LIZARD_DATABASE_URL=postgres://u:p@127.0.0.1:1/db", "LIZARD_CLUSTER_SECRET="+sec)
			out, err := cmd.CombinedOutput()
			timedOut := ctx.Err() != nil
			cancel()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 || timedOut || !strings.Contains(string(out), "openssl rand -hex 32") || !strings.Contains(string(out), "LIZARD_CLUSTER_SECRET") {
				t.Errorf("lizard %s with LIZARD_CLUSTER_SECRET=%s: %v\n%s\nwant it refused at start, naming the variable and openssl rand -hex 32", role, sec, err, out)
			}
		}
	}
}
