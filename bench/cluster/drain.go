package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/bench/internal/loadgen"
	"github.com/lizard-build/lizard/client"
)

// realDrain is `--real-drain N` (issue 40's "a drain with real checkpoint
// images"): PostgreSQL, an S3 image store (versitygw), one `lizard api`
// and two real `lizard node`s; N interpreter sandboxes on node a, each
// with a variable set and pandas imported (a real checkpoint each), then
// node a drained through the API while workers create on the cluster and
// call runCode on other sandboxes. It prints the drain's time, moves/s,
// each move's downtime and its parts (from the nodes' logs: the pause's
// checkpoint, the upload, the fetch and the restore on node b), the image
// bytes moved, the calls' latencies in the drain against the same time
// before it, and whether every moved sandbox still has its variable.
func realDrain(ctx context.Context, n int) (results, error) {
	res := results{"started": time.Now().UTC().Format(time.RFC3339), "load_at_start": loadavg(), "sandboxes": n}
	r, err := startDrainCluster(ctx)
	if err != nil {
		return nil, err
	}
	defer r.close()
	want, err := r.fill(ctx, n)
	if err != nil {
		return nil, err
	}
	// The load, before and in the drain, all on node b: two sandboxes
	// there that 2 workers call, and 2 workers that create, runCode and
	// kill.
	if err := r.onlyOn("b"); err != nil {
		return nil, err
	}
	var others []string
	for range 2 {
		sb, _, err := create(ctx, r.c)
		if err != nil {
			return nil, err
		}
		r.keep(sb.SandboxID)
		others = append(others, sb.SandboxID)
	}
	bucket := dirBytes(r.s3dir)
	const window = 15 * time.Second
	before := clusterLoad(ctx, r.c, others)
	time.Sleep(window)
	lb := before()
	res["load_at_drain"] = loadavg()
	during := clusterLoad(ctx, r.c, others)
	begin := time.Now()
	d, err := r.adm.DrainNode(ctx, "a")
	took := time.Since(begin)
	ld := during()
	if err != nil {
		return nil, fmt.Errorf("drain of node a: %w", err)
	}
	res["load_at_end"] = loadavg()
	res["bucket_bytes_added"] = dirBytes(r.s3dir) - bucket
	wrong := r.check(ctx, want)

	fmt.Printf("  drained node a in %s (took_ms %d): %d moved, %d left; %.2f moves/s; load %s at the start, %s at the end\n",
		took.Round(time.Millisecond), d.TookMs, len(d.Moved), len(d.Left), float64(len(d.Moved))/took.Seconds(), res["load_at_drain"], res["load_at_end"])
	if len(d.Left) > 0 {
		fmt.Printf("  the first left: %s: %s\n", d.Left[0].SandboxID, d.Left[0].Reason)
	}
	res["drain_ms"] = ms(took)
	res["moved"], res["left"] = len(d.Moved), len(d.Left)
	res["moves_per_second"] = float64(len(d.Moved)) / took.Seconds()
	reportMoves(res, d, moveParts(r.a.logs(), r.b.logs(), want), n)
	fmt.Printf("  | calls on node b | %s before the drain | in the drain (%s) | ratio of p50s |\n", window, took.Round(time.Second))
	fmt.Println("  | --- | --- | --- | --- |")
	for _, k := range []string{"create", "runCode (new sandbox)", "runCode (other sandboxes)"} {
		fmt.Printf("  | %s | %s | %s | %.2f |\n", k, lb[k], ld[k], ld[k].P50()/max(lb[k].P50(), 0.001))
	}
	if len(wrong) > 0 {
		fmt.Printf("  WRONG after the move: %d of %d, the first: %s\n", len(wrong), n, wrong[0])
	} else {
		fmt.Printf("  every one of the %d moved sandboxes runs on b with its x and DataFrame\n", n)
	}
	res["calls_before"], res["calls_in_drain"] = lb.summary(), ld.summary()
	res["wrong_after_move"] = wrong
	res["finished"] = time.Now().UTC().Format(time.RFC3339)
	if len(wrong) > 0 || len(d.Left) > 0 {
		return res, fmt.Errorf("the drain left %d and %d sandboxes lost their state", len(d.Left), len(wrong))
	}
	return res, nil
}

// drainCluster is the real drain's cluster: nodes a and b behind one
// API, and the sandboxes it made (killed by close).
type drainCluster struct {
	db     *sql.DB
	c, adm *client.Client
	a, b   *proc
	s3dir  string
	mu     sync.Mutex
	live   []string
}

// startDrainCluster starts PostgreSQL, the S3 store, nodes a and b (each
// with its template snapshot) and the API, and connects a project's
// client and the cluster secret's.
func startDrainCluster(ctx context.Context) (*drainCluster, error) {
	db, env, nodeEnv, s3dir, err := startStores(ctx)
	if err != nil {
		return nil, err
	}
	r := &drainCluster{db: db, s3dir: s3dir}
	if r.a, err = newNode("a", nodeEnv); err != nil {
		return nil, err
	}
	if r.b, err = newNode("b", nodeEnv); err != nil {
		return nil, err
	}
	apiP := newProc("api", []string{"api", "--lease", lease.String()}, env)
	for _, p := range []*proc{r.a, r.b, apiP} {
		if err := p.start(); err != nil {
			return nil, err
		}
	}
	for _, p := range []*proc{r.a, r.b} {
		if err := p.waitSnapshot(10 * time.Minute); err != nil {
			return nil, err
		}
	}
	if r.c, err = connect(apiP.url, nil, env); err != nil {
		return nil, err
	}
	r.adm, err = client.New(client.Config{BaseURL: apiP.url, APIKey: strings.TrimPrefix(env[1], "LIZARD_CLUSTER_SECRET=")})
	return r, err
}

func (r *drainCluster) keep(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live = append(r.live, id)
}

// close kills the sandboxes kept, whatever happened.
func (r *drainCluster) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range r.live {
		r.c.KillSandbox(context.Background(), id)
	}
	r.db.Close()
}

// onlyOn makes node name the only placeable one.
func (r *drainCluster) onlyOn(name string) error {
	if _, err := r.db.Exec(`UPDATE nodes SET draining = CASE WHEN name = $1 THEN 0 ELSE 1 END`, name); err != nil {
		return err
	}
	time.Sleep(1500 * time.Millisecond) // the API's kept node list
	return nil
}

// fill makes n sandboxes on node a, each with its own x and a DataFrame,
// one at a time (each runs code: a real kernel with pandas imported), and
// returns what each must answer after its move.
func (r *drainCluster) fill(ctx context.Context, n int) (map[string]string, error) {
	if err := r.onlyOn("a"); err != nil {
		return nil, err
	}
	memBefore := memAvailableMB()
	want := map[string]string{}
	made := time.Now()
	for i := range n {
		sb, err := r.c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ptr(int64(3_600_000))})
		if err != nil {
			return nil, fmt.Errorf("sandbox %d of %d on node a: %w", i+1, n, err)
		}
		r.keep(sb.SandboxID)
		x := 1000 + 7*i
		code := fmt.Sprintf("import pandas as pd\nx = %d\ndf = pd.DataFrame({'a': range(%d)})\n%s", x, 1000+i, askState)
		want[sb.SandboxID] = fmt.Sprintf("(%d, 'DataFrame', %d)", x, (1000+i)*(1000+i-1)/2)
		ex, err := r.c.Execute(ctx, sb.SandboxID, api.ExecuteRequest{Code: code}, nil)
		if err != nil || ex.Error != nil || len(ex.Results) == 0 || ex.Results[0].Data != want[sb.SandboxID] {
			return nil, fmt.Errorf("setting up sandbox %s: %+v, %v; want %s", sb.SandboxID, ex, err, want[sb.SandboxID])
		}
	}
	var onA int
	r.db.QueryRow(`SELECT COUNT(*) FROM sandboxes WHERE node = 'a' AND ended_at IS NULL AND role = ''`).Scan(&onA)
	fmt.Printf("real drain: %d sandboxes with pandas and x made on node a in %s (%d live there); memory available %d → %d MB; load %s\n",
		n, time.Since(made).Round(time.Millisecond), onA, memBefore, memAvailableMB(), loadavg())
	return want, nil
}

// askState is what a sandbox answers its state with: (x, the DataFrame's
// type, its column's sum).
const askState = "(x, type(df).__name__, int(df['a'].sum()))"

// check asks every sandbox of want its state through the API after the
// drain, and returns each that is not on node b with its own.
func (r *drainCluster) check(ctx context.Context, want map[string]string) []string {
	wrong := []string{}
	for id, w := range want {
		var node string
		r.db.QueryRow(`SELECT node FROM sandboxes WHERE id = $1`, id).Scan(&node)
		ex, err := r.c.Execute(ctx, id, api.ExecuteRequest{Code: askState}, nil)
		switch {
		case err != nil || ex.Error != nil || len(ex.Results) == 0:
			wrong = append(wrong, fmt.Sprintf("%s on %s: %+v, %v", id, node, ex, err))
		case ex.Results[0].Data != w || node != "b":
			wrong = append(wrong, fmt.Sprintf("%s on %s: %s; want %s on b", id, node, ex.Results[0].Data, w))
		}
	}
	return wrong
}

// reportMoves prints and records the moves' downtimes, their parts from
// the nodes' logs and the image bytes uploaded.
func reportMoves(res results, d *api.NodeDrain, parts map[string][]float64, n int) {
	var downtime []float64
	for _, m := range d.Moved {
		downtime = append(downtime, float64(m.DowntimeMs))
	}
	fmt.Printf("  a move's downtime (pause → durable → resumed on b): p50 %.0f ms, p99 %.0f ms, max %.0f ms\n",
		loadgen.Pct(downtime, 50), loadgen.Pct(downtime, 99), loadgen.Pct(downtime, 100))
	res["downtime_ms_p50"], res["downtime_ms_p99"], res["downtime_ms_max"] = loadgen.Pct(downtime, 50), loadgen.Pct(downtime, 99), loadgen.Pct(downtime, 100)
	for _, k := range []string{"pause_ms", "upload_ms", "fetch_ms", "resume_ms"} {
		fmt.Printf("  %s (nodes' logs, %d): p50 %.0f, p99 %.0f, max %.0f\n", k, len(parts[k]), loadgen.Pct(parts[k], 50), loadgen.Pct(parts[k], 99), loadgen.Pct(parts[k], 100))
		if len(parts[k]) != n {
			fmt.Printf("  (the nodes' logs gave %s of %d sandboxes, not %d: did a log message moveParts reads change?)\n", k, len(parts[k]), n)
		}
	}
	var imgSum float64
	for _, s := range parts["image_bytes"] {
		imgSum += s
	}
	fmt.Printf("  images: %d uploaded, %.1f MB in all, p50 %.1f MB each (sealed, as the store holds them: %.1f MB more in the bucket)\n",
		len(parts["image_bytes"]), imgSum/1e6, loadgen.Pct(parts["image_bytes"], 50)/1e6, float64(res["bucket_bytes_added"].(int64))/1e6)
	for k, v := range parts {
		res[k+"_p50"], res[k+"_p99"] = loadgen.Pct(v, 50), loadgen.Pct(v, 99)
	}
	res["image_bytes_total"] = imgSum
}

// lats are calls' latencies by kind.
type lats map[string]loadgen.Latencies

func (ls lats) summary() map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for k, l := range ls {
		out[k] = l.Summary()
	}
	return out
}

// clusterLoad runs, until the function it returns is called, 2 workers
// that create, runCode and kill a sandbox, and 2 that runCode one of
// others; that function returns their latencies by kind.
func clusterLoad(ctx context.Context, c *client.Client, others []string) func() lats {
	var calls loadgen.Calls
	note := calls.Note
	stop := loadgen.UntilStopped(4, func(w int) {
		if w >= 2 {
			d, err := runCode(ctx, c, others[w-2])
			note("runCode (other sandboxes)", d, err)
			time.Sleep(50 * time.Millisecond)
			return
		}
		sb, d, err := create(ctx, c)
		note("create", d, err)
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			return
		}
		d, err = runCode(ctx, c, sb.SandboxID)
		note("runCode (new sandbox)", d, err)
		c.KillSandbox(ctx, sb.SandboxID)
	})
	return func() lats {
		stop()
		return calls.ByKind()
	}
}

var (
	logSandbox = regexp.MustCompile(`sandbox_id=(\S+)`)
	logImage   = regexp.MustCompile(`image=paused/(\S+)`)
	logSize    = regexp.MustCompile(`size_bytes=(\d+)`)
	logTook    = regexp.MustCompile(`took=(\S+)`)
)

// moveParts reads each move's parts from the nodes' logs, in ms: node
// a's pause (the checkpoint to its disk) and upload of the image, node
// b's fetch of it and resume (restore until its agent answers); and the
// images' sizes as uploaded. Only the sandboxes of ids count.
func moveParts(aLog, bLog string, ids map[string]string) map[string][]float64 {
	out := map[string][]float64{}
	scan := func(log, msg, key string, idOf *regexp.Regexp) {
		for _, line := range strings.Split(log, "\n") {
			if !strings.Contains(line, `msg="`+msg+`"`) {
				continue
			}
			m := idOf.FindStringSubmatch(line)
			if m == nil || ids[m[1]] == "" {
				continue
			}
			if t := logTook.FindStringSubmatch(line); t != nil {
				if d, err := time.ParseDuration(t[1]); err == nil {
					out[key] = append(out[key], ms(d))
				}
			}
			if key == "upload_ms" {
				if s := logSize.FindStringSubmatch(line); s != nil {
					v, _ := strconv.ParseFloat(s[1], 64)
					out["image_bytes"] = append(out["image_bytes"], v)
				}
			}
		}
	}
	scan(aLog, "sandbox paused", "pause_ms", logSandbox)
	scan(aLog, "image uploaded to the image store", "upload_ms", logImage)
	scan(bLog, "image fetched from the image store", "fetch_ms", logImage)
	scan(bLog, "sandbox resumed", "resume_ms", logSandbox)
	return out
}

// dirBytes is the size of the files under dir.
func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// memAvailableMB is the machine's MemAvailable.
func memAvailableMB() int64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb / 1024
		}
	}
	return 0
}
