// Command cluster is `make bench-cluster`: Lizard on many machines measured
// on one, in one run (docs/performance.md, docs/cluster.md).
//
//   - runCode("1+1") and create through `lizard api` → `lizard node`
//     beside `lizard serve` on the same machine, interleaved (the ratio);
//   - creates per second through the API with 1, 2 and 3 nodes;
//   - from a node's kill -9 to its sandboxes reported `node lost`, and to
//     the first create placed on another node;
//   - with the image store on an S3 server (versitygw, docs/storage.md):
//     pause → durable, and a paused sandbox's resume → first result on
//     another node, which fetches its image, beside one on its own node;
//   - a drain of a node holding 10 idle sandboxes (docs/cluster.md): its
//     total time and each sandbox's stall, beside a move by hand (pause,
//     durable, resume elsewhere) measured above.
//
// With --real-drain N it measures only a drain of N interpreter sandboxes
// with pandas imported and a variable set (real checkpoint images) from
// one of two nodes to the other, with calls meanwhile (drain.go).
//
// Everything runs on this machine: PostgreSQL from Debian's packages
// (internal/store/pgtest), the nodes with their own data directories,
// ports and address pools (taken under the e2e tests' machine-wide pool
// locks). Run as root after `make build`.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/bench/internal/loadgen"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/sandbox/gvisor"
	"github.com/lizard-build/lizard/internal/store/pgtest"
	"github.com/lizard-build/lizard/internal/testenv"
)

var (
	binDir         = flag.String("bin-dir", "bin", "directory of lizard, lizard-agent, lizard-client and runsc")
	cacheDir       = flag.String("cache-dir", cmpOr(os.Getenv("LIZARD_CACHE_DIR"), "/var/cache/lizard"), "template cache")
	runs           = flag.Int("runs", 20, "creates timed per target")
	codeRuns       = flag.Int("code-runs", 200, "runCode(\"1+1\") calls timed per target")
	sustain        = flag.Duration("sustain", 15*time.Second, "length of each creates-per-second run")
	workers        = flag.Int("workers", 4, "concurrent create → kill loops")
	lease          = flag.Duration("lease", 15*time.Second, "the nodes' lease (the default of lizard node)")
	imgRuns        = flag.Int("image-runs", 5, "pauses and resumes timed for the image store")
	drainSandboxes = flag.Int("drain-sandboxes", 10, "idle sandboxes on the node the drain row drains")
	realDrainN     = flag.Int("real-drain", 0, "measure only a drain of this many interpreter sandboxes with pandas and a variable (real checkpoints) from one real node to another, with calls meanwhile (drain.go)")
	out            = flag.String("out", "bench/results", "directory for the JSON results")
)

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-cluster:", err)
		cleanup()
		os.Exit(1)
	}
	cleanup()
}

// proc is one lizard process.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *bytes.Buffer
	mu   *sync.Mutex
	url  string
	done chan struct{}
	args []string
	env  []string
}

var (
	procsMu sync.Mutex
	procs   []*proc
	cleanFn []func()
)

func cleanup() {
	procsMu.Lock()
	defer procsMu.Unlock()
	for _, p := range procs {
		p.stop()
	}
	for i := len(cleanFn) - 1; i >= 0; i-- {
		cleanFn[i]()
	}
	cleanFn = nil
}

type syncWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (p *proc) start() error {
	p.log, p.mu = &bytes.Buffer{}, &sync.Mutex{}
	p.cmd = exec.Command(filepath.Join(*binDir, "lizard"), p.args...)
	p.cmd.Env = append(os.Environ(), p.env...)
	p.cmd.Stdout = syncWriter{p.mu, p.log}
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		return err
	}
	p.done = make(chan struct{})
	go func() { p.cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(p.url + "/v1/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %s", p.name, p.logs())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not become healthy", p.name)
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// waitSnapshot waits until p has its template snapshot (made, or found
// in its data directory), so that creates restore it.
func (p *proc) waitSnapshot(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		l := p.logs()
		if strings.Contains(l, `msg="template snapshot made"`) || strings.Contains(l, `msg="template snapshot found"`) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no template snapshot within %s", p.name, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *proc) stop() {
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
}

func (p *proc) kill9() {
	p.cmd.Process.Kill()
	<-p.done
	p.cmd = nil
}

func freeAddr() string {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	defer l.Close()
	return l.Addr().String()
}

// endLeftovers kills the sandboxes still running in data directory dir
// (a run that failed half-way), before the directory goes.
func endLeftovers(dir string) {
	rt, err := gvisor.New(gvisor.Config{Runsc: filepath.Join(*binDir, "runsc"), Dir: filepath.Join(dir, "gvisor"), SpareNetworks: -1})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-cluster: cleaning up", dir, err)
		return
	}
	ctx := context.Background()
	ids, _ := rt.List(ctx)
	for _, id := range ids {
		if err := rt.Kill(ctx, id); err != nil {
			fmt.Fprintln(os.Stderr, "bench-cluster: killing leftover sandbox", id, err)
		}
	}
	rt.Close(ctx)
}

// poolsTaken counts the /24s taken from LIZARD_TEST_ADDRESS_POOL.
var poolsTaken int

// takePool takes a 169.254.N.0/24 pool under the e2e tests' machine-wide
// lock (e2e/harness_test.go), so that nothing else uses it meanwhile.
// With LIZARD_TEST_ADDRESS_POOL set (a /22 or larger, as the SDK and API
// suites take it), the nodes take its /24s in turn instead.
func takePool() (string, error) {
	if env := os.Getenv("LIZARD_TEST_ADDRESS_POOL"); env != "" {
		pfx, err := netip.ParsePrefix(env)
		if err != nil || !pfx.Addr().Is4() || pfx.Bits() > 24 {
			return "", fmt.Errorf("LIZARD_TEST_ADDRESS_POOL=%q: want an IPv4 prefix of /24 or larger", env)
		}
		b := pfx.Masked().Addr().As4()
		if poolsTaken >= 1<<(24-pfx.Bits()) {
			return "", fmt.Errorf("LIZARD_TEST_ADDRESS_POOL=%s: all its /24s are taken", env)
		}
		b[2] += byte(poolsTaken)
		poolsTaken++
		return netip.PrefixFrom(netip.AddrFrom4(b), 24).String(), nil
	}
	n, release, err := testenv.TakePool()
	if err != nil {
		return "", err
	}
	cleanFn = append(cleanFn, release)
	return fmt.Sprintf("169.254.%d.0/24", n), nil
}

var unlimited = []string{"--creates-per-second=0", "--requests-per-second=0", "--max-sandboxes-per-project=0", "--max-disk-per-project-mb=0", "--egress=none", "--metrics-listen="}

func newProc(name string, args, env []string) *proc {
	listen := freeAddr()
	p := &proc{name: name, url: "http://" + listen, env: env,
		args: append(append([]string{args[0], "--listen", listen}, args[1:]...), unlimited...)}
	procsMu.Lock()
	procs = append(procs, p)
	procsMu.Unlock()
	return p
}

// nodeArgs are more flags of every node (the image store).
var nodeArgs []string

func newNode(name string, env []string) (*proc, error) {
	pool, err := takePool()
	if err != nil {
		return nil, err
	}
	dir, _ := os.MkdirTemp("", "lizard-bench-"+name+"-")
	cleanFn = append(cleanFn, func() { endLeftovers(dir); os.RemoveAll(dir) })
	return newProc(name, append([]string{"node", "--name", name, "--data-dir", dir, "--cache-dir", *cacheDir,
		"--address-pool", pool, "--lease", lease.String()}, nodeArgs...), env), nil
}

// target is what is measured: serve, or the cluster's API.
type target struct {
	name string
	c    *client.Client
}

func connect(url string, args, env []string) (*client.Client, error) {
	cmd := exec.Command(filepath.Join(*binDir, "lizard"), append([]string{"admin", "create-project", "--id", "bench", "--json"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("admin create-project: %w", err)
	}
	var p struct{ APIKey string }
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	return client.New(client.Config{BaseURL: url, APIKey: p.APIKey})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func create(ctx context.Context, c *client.Client) (*api.Sandbox, time.Duration, error) {
	begin := time.Now()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ptr(int64(300_000))})
	return sb, time.Since(begin), err
}

func ptr[T any](v T) *T { return &v }

func runCode(ctx context.Context, c *client.Client, id string) (time.Duration, error) {
	begin := time.Now()
	ex, err := c.Execute(ctx, id, api.ExecuteRequest{Code: "1+1"}, nil)
	if err == nil && (len(ex.Results) == 0 || ex.Results[0].Data != "2") {
		err = fmt.Errorf("runCode(1+1) = %+v", ex)
	}
	return time.Since(begin), err
}

// runCodeOnNode runs 1+1 in sandbox id through the node's forwarded agent
// path, with the cluster secret, as `lizard api` does.
func runCodeOnNode(ctx context.Context, nodeURL, secret, id string) (time.Duration, error) {
	begin := time.Now()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, nodeURL+"/v1/sandboxes/"+id+"/execute", strings.NewReader(`{"code":"1+1"}`))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("X-Lizard-Project", "bench")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"end"`)) {
		return 0, fmt.Errorf("%s: %s", resp.Status, body)
	}
	return time.Since(begin), nil
}

type results map[string]any

func run() error {
	ctx := context.Background()
	if os.Geteuid() != 0 {
		return fmt.Errorf("run as root (sandboxes need it)")
	}
	if *realDrainN > 0 {
		res, err := realDrain(ctx, *realDrainN)
		if res != nil {
			if werr := writeResults("drain", res); werr != nil && err == nil {
				err = werr
			}
		}
		return err
	}
	res := results{"started": time.Now().UTC().Format(time.RFC3339), "load_at_start": loadavg(), "cpus": runtime.NumCPU(), "lease": lease.String(),
		"note": "every process on this one machine: the cluster figures are bounded by its cores, not by the number of nodes"}
	db, env, nodeEnv, _, err := startStores(ctx)
	if err != nil {
		return err
	}
	defer db.Close()

	// `lizard serve` and a one-node cluster, each with its template
	// snapshot made before anything is timed.
	pool, err := takePool()
	if err != nil {
		return err
	}
	serveDir, _ := os.MkdirTemp("", "lizard-bench-serve-")
	cleanFn = append(cleanFn, func() { endLeftovers(serveDir); os.RemoveAll(serveDir) })
	serve := newProc("serve", []string{"serve", "--data-dir", serveDir, "--cache-dir", *cacheDir, "--address-pool", pool}, nil)
	n1, err := newNode("n1", nodeEnv)
	if err != nil {
		return err
	}
	apiP := newProc("api", []string{"api", "--lease", lease.String()}, env)
	for _, p := range []*proc{serve, n1, apiP} {
		if err := p.start(); err != nil {
			return err
		}
	}
	for _, p := range []*proc{serve, n1} {
		if err := p.waitSnapshot(10 * time.Minute); err != nil {
			return err
		}
	}
	sc, err := connect(serve.url, []string{"--data-dir", serveDir}, nil)
	if err != nil {
		return err
	}
	cc, err := connect(apiP.url, nil, env)
	if err != nil {
		return err
	}
	targets := []target{{"serve", sc}, {"cluster", cc}}
	secretHex := strings.TrimPrefix(env[1], "LIZARD_CLUSTER_SECRET=")
	ratio, err := apiVsServe(ctx, targets, n1, secretHex)
	if err != nil {
		return err
	}
	res["api_vs_serve"] = ratio
	serve.stop()

	// Creates per second through the API with 1, 2 and 3 nodes.
	perSecond, nodes, err := createsPerSecond(ctx, cc, n1, nodeEnv)
	if err != nil {
		return err
	}
	res["creates_per_second"] = perSecond

	// The image store.
	imgRes, err := imageStore(ctx, env, cc, db, nodes)
	if err != nil {
		return err
	}
	res["image_store"] = imgRes

	drainRes, err := drainRow(ctx, db, cc, apiP.url, secretHex, nodes[0].name, *drainSandboxes)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	manual := imgRes["pause_ms_p50"] + imgRes["pause_to_durable_ms_p50"] + imgRes["resume_other_node_ms_p50"]
	drainRes["manual_move_ms"] = manual
	drainRes["stall_p50_vs_manual_move_ratio"] = drainRes["stall_ms_p50"] / manual
	fmt.Printf("  drain of %d idle sandboxes: %.0f ms in all; stall p50 %.0f ms, p95 %.0f ms (%.2f× a move by hand: pause + durable + resume elsewhere, %.0f ms)\n",
		*drainSandboxes, drainRes["total_ms"], drainRes["stall_ms_p50"], drainRes["stall_ms_p95"], drainRes["stall_p50_vs_manual_move_ratio"], manual)
	res["drain"] = drainRes

	// A node's death: to node lost, and to the first create elsewhere.
	victim := nodes[2]
	death, err := nodeDeath(ctx, cc, db, victim)
	if err != nil {
		return err
	}
	res["node_death"] = death
	// Its restart reconciles: what was given up is killed.
	if err := victim.start(); err != nil {
		return err
	}

	res["finished"] = time.Now().UTC().Format(time.RFC3339)
	res["load_at_end"] = loadavg()
	return writeResults("cluster", res)
}

// writeResults writes res to *out as NAME-TIME.json.
func writeResults(name string, res results) error {
	os.MkdirAll(*out, 0o755)
	path := filepath.Join(*out, name+"-"+time.Now().UTC().Format("20060102-150405")+".json")
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println("results:", path)
	return nil
}

// startStores starts the cluster's PostgreSQL and S3 image store (both
// stopped by cleanFn) and returns the database, the API's environment
// and the nodes'.
func startStores(ctx context.Context) (db *sql.DB, env, nodeEnv []string, s3dir string, err error) {
	pg, err := pgtest.Start()
	if err != nil {
		return nil, nil, nil, "", fmt.Errorf("PostgreSQL: %w", err)
	}
	cleanFn = append(cleanFn, func() { pg.Stop() })
	dbName, err := pg.CreateDatabase(ctx)
	if err != nil {
		return nil, nil, nil, "", err
	}
	dbURL := pg.URL(dbName)
	db, err = sql.Open("pgx", dbURL)
	if err != nil {
		return nil, nil, nil, "", err
	}
	secret := make([]byte, 24)
	rand.Read(secret)
	env = []string{"LIZARD_DATABASE_URL=" + dbURL, "LIZARD_CLUSTER_SECRET=" + hex.EncodeToString(secret)}
	s3, err := testenv.StartS3()
	if s3 == nil && err == nil {
		err = fmt.Errorf("no .cache/bin/versitygw: run make versitygw")
	}
	if s3 != nil {
		cleanFn = append(cleanFn, s3.Close)
	}
	if err != nil {
		return nil, nil, nil, "", err
	}
	// The image store seals images with a key derived from the secrets
	// key, which every node has (docs/storage.md#sealing).
	secretsKey := make([]byte, 32)
	rand.Read(secretsKey)
	nodeEnv = append(append([]string{}, env...), s3.Env()...)
	nodeEnv = append(nodeEnv, "LIZARD_SECRETS_KEY="+base64.StdEncoding.EncodeToString(secretsKey))
	nodeArgs = []string{"--image-store", "s3://" + s3.Bucket + "/bench"}
	return db, env, nodeEnv, s3.Dir(), nil
}

// apiVsServe times create and runCode on `lizard serve` beside the same
// through `lizard api` to a node, interleaved so that both see the same
// load, and runCode straight to the node for what the API adds.
func apiVsServe(ctx context.Context, targets []target, n1 *proc, secretHex string) (map[string]any, error) {
	fmt.Println("warming up")
	for _, tg := range targets {
		sb, _, err := create(ctx, tg.c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", tg.name, err)
		}
		if _, err := runCode(ctx, tg.c, sb.SandboxID); err != nil {
			return nil, err
		}
		tg.c.KillSandbox(ctx, sb.SandboxID)
	}

	// Interleaved, so that both see the same load.
	fmt.Printf("create × %d and runCode × %d on each, interleaved\n", *runs, *codeRuns)
	creates := map[string][]float64{}
	codes := map[string][]float64{}
	for range *runs {
		for _, tg := range targets {
			sb, d, err := create(ctx, tg.c)
			if err != nil {
				return nil, fmt.Errorf("%s create: %w", tg.name, err)
			}
			creates[tg.name] = append(creates[tg.name], ms(d))
			tg.c.KillSandbox(ctx, sb.SandboxID)
		}
	}
	var held []string
	for _, tg := range targets {
		sb, _, err := create(ctx, tg.c)
		if err != nil {
			return nil, err
		}
		held = append(held, sb.SandboxID)
	}
	for range *codeRuns {
		for i, tg := range targets {
			d, err := runCode(ctx, tg.c, held[i])
			if err != nil {
				return nil, fmt.Errorf("%s runCode: %w", tg.name, err)
			}
			codes[tg.name] = append(codes[tg.name], ms(d))
		}
		// The same call straight to the node, as the API forwards it:
		// what the node's side costs without the API's.
		d, err := runCodeOnNode(ctx, n1.url, secretHex, held[1])
		if err != nil {
			return nil, fmt.Errorf("runCode on the node: %w", err)
		}
		codes["node"] = append(codes["node"], ms(d))
	}
	for i, tg := range targets {
		tg.c.KillSandbox(ctx, held[i])
	}
	ratio := map[string]any{}
	for _, fig := range []struct {
		name string
		m    map[string][]float64
	}{{"create_ms", creates}, {"run_code_ms", codes}} {
		s, c := loadgen.Pct(fig.m["serve"], 50), loadgen.Pct(fig.m["cluster"], 50)
		ratio[fig.name] = map[string]float64{"serve_p50": s, "cluster_p50": c, "ratio": c / s}
		fmt.Printf("  %-12s serve p50 %8.2f ms   api→node p50 %8.2f ms   ratio %.2f×\n", fig.name, s, c, c/s)
	}
	ratio["run_code_on_node_ms"] = map[string]float64{"p50": loadgen.Pct(codes["node"], 50)}
	fmt.Printf("  run_code straight to the node (no API) p50 %.2f ms\n", loadgen.Pct(codes["node"], 50))
	return ratio, nil
}

// createsPerSecond measures sustained creates through the API with 1, 2
// and 3 nodes, starting the second and third; it returns the nodes.
func createsPerSecond(ctx context.Context, cc *client.Client, n1 *proc, nodeEnv []string) (map[string]float64, []*proc, error) {
	perSecond := map[string]float64{}
	nodes := []*proc{n1}
	for k := 1; k <= 3; k++ {
		if k > 1 {
			n, err := newNode(fmt.Sprintf("n%d", k), nodeEnv)
			if err != nil {
				return nil, nil, err
			}
			if err := n.start(); err != nil {
				return nil, nil, err
			}
			if err := n.waitSnapshot(10 * time.Minute); err != nil {
				return nil, nil, err
			}
			nodes = append(nodes, n)
			time.Sleep(2 * time.Second) // its first heartbeat and the API's list of nodes
		}
		rate, err := sustained(ctx, cc, *sustain, *workers)
		if err != nil {
			return nil, nil, fmt.Errorf("%d nodes: %w", k, err)
		}
		perSecond[fmt.Sprint(k)] = rate
		fmt.Printf("  creates/s with %d node(s), %d workers, %s: %.2f\n", k, *workers, *sustain, rate)
	}
	return perSecond, nodes, nil
}

// imageStore times pause → durable and resume → first result on the
// sandbox's own node beside on another, which fetches the image. The
// move is the one a lost node's sandbox makes (store.AdoptPaused), done
// in the database and read by a second API process, whose routing has not
// seen the sandbox yet.
func imageStore(ctx context.Context, env []string, cc *client.Client, db *sql.DB, nodes []*proc) (map[string]float64, error) {
	api2 := newProc("api2", []string{"api", "--lease", lease.String()}, env)
	if err := api2.start(); err != nil {
		return nil, err
	}
	keyCmd := exec.Command(filepath.Join(*binDir, "lizard"), "admin", "create-key", "--project", "bench", "--json")
	keyCmd.Env = append(os.Environ(), env...)
	kb, err := keyCmd.Output()
	if err != nil {
		return nil, fmt.Errorf("admin create-key: %w", err)
	}
	var key struct{ APIKey string }
	if err := json.Unmarshal(kb, &key); err != nil {
		return nil, err
	}
	c2, err := client.New(client.Config{BaseURL: api2.url, APIKey: key.APIKey})
	if err != nil {
		return nil, err
	}
	images := map[string][]float64{}
	for i := range *imgRuns {
		sb, _, err := create(ctx, cc)
		if err != nil {
			return nil, err
		}
		if _, err := runCode(ctx, cc, sb.SandboxID); err != nil {
			return nil, err
		}
		begin := time.Now()
		if _, err := cc.PauseSandbox(ctx, sb.SandboxID); err != nil {
			return nil, err
		}
		paused := time.Now()
		for {
			got, err := cc.GetSandbox(ctx, sb.SandboxID)
			if err != nil {
				return nil, err
			}
			if got.Durable {
				break
			}
			if time.Since(paused) > 5*time.Minute {
				return nil, fmt.Errorf("sandbox %s not durable 5 minutes after its pause", sb.SandboxID)
			}
			time.Sleep(10 * time.Millisecond)
		}
		images["pause_ms"] = append(images["pause_ms"], ms(paused.Sub(begin)))
		images["pause_to_durable_ms"] = append(images["pause_to_durable_ms"], ms(time.Since(paused)))
		d, err := runCode(ctx, cc, sb.SandboxID)
		if err != nil {
			return nil, err
		}
		images["resume_same_node_ms"] = append(images["resume_same_node_ms"], ms(d))
		if _, err := cc.PauseSandboxWith(ctx, sb.SandboxID, api.PauseRequest{WaitDurable: true}); err != nil {
			return nil, err
		}
		var home string
		db.QueryRow(`SELECT node FROM sandboxes WHERE id = $1`, sb.SandboxID).Scan(&home)
		other := nodes[(slices.IndexFunc(nodes, func(p *proc) bool { return p.name == home })+1+i)%len(nodes)].name
		if other == home {
			other = nodes[(slices.IndexFunc(nodes, func(p *proc) bool { return p.name == home })+1)%len(nodes)].name
		}
		if _, err := db.Exec(`UPDATE sandboxes SET node = $1 WHERE id = $2 AND state = 'paused'`, other, sb.SandboxID); err != nil {
			return nil, err
		}
		if d, err = runCode(ctx, c2, sb.SandboxID); err != nil {
			return nil, fmt.Errorf("resume on another node: %w", err)
		}
		images["resume_other_node_ms"] = append(images["resume_other_node_ms"], ms(d))
		// Through the second API process: the first remembers the
		// sandbox's old node, which is live (a lost node's is not).
		c2.KillSandbox(ctx, sb.SandboxID)
	}
	api2.stop()
	imgRes := map[string]float64{}
	for k, v := range images {
		imgRes[k+"_p50"] = loadgen.Pct(v, 50)
	}
	imgRes["resume_other_vs_same_ratio"] = imgRes["resume_other_node_ms_p50"] / imgRes["resume_same_node_ms_p50"]
	fmt.Printf("  image store: pause p50 %.0f ms → durable p50 %.0f ms later; resume → first result p50: same node %.0f ms, another node %.0f ms (%.2f×)\n",
		imgRes["pause_ms_p50"], imgRes["pause_to_durable_ms_p50"], imgRes["resume_same_node_ms_p50"], imgRes["resume_other_node_ms_p50"], imgRes["resume_other_vs_same_ratio"])
	return imgRes, nil
}

// nodeDeath kills victim with one of its sandboxes and times the first
// create placed elsewhere and the sandbox reported lost.
func nodeDeath(ctx context.Context, cc *client.Client, db *sql.DB, victim *proc) (map[string]float64, error) {
	var sbID string
	for range 30 {
		sb, _, err := create(ctx, cc)
		if err != nil {
			return nil, err
		}
		var node string
		db.QueryRow(`SELECT node FROM sandboxes WHERE id = $1`, sb.SandboxID).Scan(&node)
		if node == victim.name {
			sbID = sb.SandboxID
			break
		}
		cc.KillSandbox(ctx, sb.SandboxID)
	}
	if sbID == "" {
		return nil, fmt.Errorf("no create landed on %s in 30 tries", victim.name)
	}
	killed := time.Now()
	victim.kill9()
	var firstCreate time.Duration
	var created []string
	for firstCreate == 0 {
		sb, _, err := create(ctx, cc)
		if err != nil {
			continue
		}
		created = append(created, sb.SandboxID)
		firstCreate = time.Since(killed)
	}
	var lost time.Duration
	for lost == 0 {
		sb, err := cc.GetSandbox(ctx, sbID)
		if err == nil && sb.State == api.StateFailed {
			lost = time.Since(killed)
			break
		}
		if time.Since(killed) > 5**lease {
			return nil, fmt.Errorf("sandbox of the killed node not reported lost within %s", 5**lease)
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Printf("  node kill -9 → first create placed elsewhere: %.0f ms; → node lost: %.0f ms (lease %s)\n", ms(firstCreate), ms(lost), *lease)
	for _, id := range created {
		cc.KillSandbox(ctx, id)
	}
	return map[string]float64{"first_create_elsewhere_ms": ms(firstCreate), "node_lost_ms": ms(lost)}, nil
}

// loadavg is the machine's load average (1, 5, 15 minutes): others share
// it, and the figures depend on it.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// sustained runs workers loops of create → kill for d and returns creates
// per second.
func sustained(ctx context.Context, c *client.Client, d time.Duration, workers int) (float64, error) {
	var n atomic.Int64
	var firstErr atomic.Value
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	begin := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				sb, _, err := create(ctx, c)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				n.Add(1)
				c.KillSandbox(ctx, sb.SandboxID)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return float64(n.Load()) / time.Since(begin).Seconds(), nil
}

// drainRow drains node name holding n idle sandboxes (each has run code
// once) through the API at apiURL with the cluster secret, and returns
// the drain's total time and the sandboxes' stalls (the API's downtime of
// each move). The other nodes are marked draining in the database while
// the sandboxes are made, so that all land on name; name is undrained
// after.
func drainRow(ctx context.Context, db *sql.DB, c *client.Client, apiURL, secret, name string, n int) (map[string]float64, error) {
	if _, err := db.Exec(`UPDATE nodes SET draining = 1 WHERE name <> $1`, name); err != nil {
		return nil, err
	}
	var ids []string
	defer func() {
		for _, id := range ids {
			c.KillSandbox(ctx, id)
		}
	}()
	for range n {
		sb, _, err := create(ctx, c)
		if err != nil {
			db.Exec(`UPDATE nodes SET draining = 0`)
			return nil, err
		}
		ids = append(ids, sb.SandboxID)
		if _, err := runCode(ctx, c, sb.SandboxID); err != nil {
			db.Exec(`UPDATE nodes SET draining = 0`)
			return nil, err
		}
	}
	if _, err := db.Exec(`UPDATE nodes SET draining = 0`); err != nil {
		return nil, err
	}
	adm, err := client.New(client.Config{BaseURL: apiURL, APIKey: secret})
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	d, err := adm.DrainNode(ctx, name)
	if err != nil {
		return nil, err
	}
	total := time.Since(begin)
	if _, err := adm.UndrainNode(ctx, name); err != nil {
		return nil, err
	}
	if len(d.Moved) != n || len(d.Left) != 0 {
		return nil, fmt.Errorf("drain of %s moved %d and left %v; want %d moved", name, len(d.Moved), d.Left, n)
	}
	var stalls []float64
	for _, mv := range d.Moved {
		stalls = append(stalls, float64(mv.DowntimeMs))
	}
	for _, id := range ids {
		if _, err := runCode(ctx, c, id); err != nil {
			return nil, fmt.Errorf("runCode after the drain: %w", err)
		}
	}
	return map[string]float64{"sandboxes": float64(n), "total_ms": ms(total), "stall_ms_p50": loadgen.Pct(stalls, 50), "stall_ms_p95": loadgen.Pct(stalls, 95)}, nil
}
