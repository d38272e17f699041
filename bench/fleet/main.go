// Command fleet is `make bench-fleet`: Lizard's control plane at fleet
// scale, measured on one machine (issue 40; docs/performance.md "Fleet",
// docs/cluster.md "Sizing").
//
// It starts PostgreSQL from Debian's packages (internal/store/pgtest) with
// pg_stat_statements, --apis real `lizard api` processes (bin/lizard), and
// --nodes simulated nodes in this process (sim.go: the real node code and
// internal API on the fake runtime), then, for each of --rows sandbox rows
// already in the store (inserted in bulk: ended and paused sandboxes of
// other nodes, and their events), drives --workers create → runCode → kill
// loops through the APIs for --duration and prints a row: creates/s, p50
// and p99 of create and of runCode (whose agent answers after
// --agent-delay: the rest is routing), the statements per create, the
// statements whose blocks per call grow with the rows, lease renewals per
// second and their database time, and each api process's memory — with
// the load average beside them.
//
// First (--count-creates) it makes sandboxes one at a time and counts what
// the api processes (their own PostgreSQL role) asked of the database per
// create: statements, rows and blocks, which do not depend on the load.
//
// Everything but PostgreSQL and the api processes runs in this process,
// on the same cores: the figures are of the whole control plane on this
// machine, load generator included.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/bench/internal/loadgen"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/store/pgtest"
)

var (
	binDir     = flag.String("bin-dir", "bin", "directory of the lizard binary")
	nodeCount  = flag.Int("nodes", 100, "simulated nodes")
	apiCount   = flag.Int("apis", 3, "lizard api processes")
	workers    = flag.Int("workers", 24, "concurrent create → runCode → kill loops (over all APIs)")
	duration   = flag.Duration("duration", 15*time.Second, "length of each row's run")
	rowsFlag   = flag.String("rows", "0,10000,100000", "sandbox rows already in the store, one table row each (ascending)")
	eventsPer  = flag.Int("events-per-row", 2, "events stored per preloaded sandbox row")
	lease      = flag.Duration("lease", 15*time.Second, "the nodes' lease (lizard node's default)")
	agentDelay = flag.Duration("agent-delay", 2*time.Millisecond, "the fake agent's answer time to runCode")
	pools      = flag.Int("store-pools", 6, "database pools the simulated nodes share (16 connections each)")
	maxLive    = flag.Int("max-sandboxes-per-project", 100000, "the project quota every create is admitted against")
	projects   = flag.Int("projects", 1, "projects the workers create in, round-robin (a project's creates are admitted one at a time, cluster-wide)")
	explain    = flag.Bool("explain", true, "EXPLAIN the create path's statements over sandboxes at the largest row count")
	lose       = flag.Int("lose-nodes", 0, "at the end: kill this many nodes at once, with --lose-per-node sandboxes a node made first, and time what follows (0: none)")
	losePer    = flag.Int("lose-per-node", 4, "sandboxes per node made before --lose-nodes")
	count      = flag.Int("count-creates", 100, "at each row count (or once, with --rows \"\"): this many creates one at a time, counting the api processes' statements, rows and blocks per create, and every table's rows scanned (0: none)")
	weekEvents = flag.Int("week-events", 0, "with the largest --rows: this many more events, spread over the last week (the default --event-retention), as a week at a create rate leaves them")
	drainN     = flag.Int("drain", 0, "at the end: this many sandboxes made on one node, which is then drained through the API while calls go on (0: none)")
	admitLine  = flag.Duration("admission-line", 0, "instead of the fleet: one project's admission line alone (store.CreateAdmitted against the session-lock sequence before it, alternated twice), this long a run (admit.go)")
	drainCalls = flag.Bool("drain-calls", false, "with --drain: also call the draining node's own sandboxes in and before the drain")
)

func main() {
	flag.Parse()
	err := run()
	cleanup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-fleet:", err)
		os.Exit(1)
	}
}

var cleanFns []func()

func cleanup() {
	for i := len(cleanFns) - 1; i >= 0; i-- {
		cleanFns[i]()
	}
	cleanFns = nil
}

func run() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pg, dbURL, db, err := startPostgres(ctx)
	if err != nil {
		return err
	}
	cleanFns = append(cleanFns, func() { pg.Stop() })
	if *admitLine > 0 {
		return admissionLine(ctx, db, dbURL, *admitLine)
	}
	secret := randHex(32)
	key := make([]byte, 32)
	rand.Read(key)
	// The api processes connect as their own role, so that
	// pg_stat_statements tells their statements from the nodes'.
	apiURL, err := apiRole(ctx, db, dbURL)
	if err != nil {
		return err
	}
	env := []string{"LIZARD_DATABASE_URL=" + apiURL, "LIZARD_CLUSTER_SECRET=" + secret, "LIZARD_SECRETS_KEY=" + base64.StdEncoding.EncodeToString(key)}
	var apis []*apiProc
	for i := range *apiCount {
		p, err := startAPI(fmt.Sprintf("api-%d", i), env)
		if err != nil {
			return err
		}
		apis = append(apis, p)
	}
	var keys []string
	for i := range max(1, *projects) {
		k, err := createProject(env, projectID(i))
		if err != nil {
			return err
		}
		keys = append(keys, k)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO projects (id, created_at) VALUES ('bench-paused', 0)`); err != nil {
		return fmt.Errorf("making the paused rows' project: %w", err)
	}

	ag := &http.Server{Handler: agent(*agentDelay)}
	agl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go ag.Serve(agl)
	cleanFns = append(cleanFns, func() { ag.Close() })
	dir, err := os.MkdirTemp("", "lizard-fleet-")
	if err != nil {
		return err
	}
	cleanFns = append(cleanFns, func() { os.RemoveAll(dir) })
	var stores []*store.Store
	for range max(1, min(*pools, *nodeCount)) {
		st, err := store.OpenURL(ctx, dbURL)
		if err != nil {
			return err
		}
		cleanFns = append(cleanFns, func() { st.Close() })
		stores = append(stores, st)
	}
	logFile, err := os.Create(filepath.Join(dir, "nodes.log"))
	if err != nil {
		return err
	}
	cfg := simConfig{Secret: secret, Lease: *lease, Agent: agl.Addr().String(), Dir: dir, MaxLive: *maxLive,
		Log: slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if *drainN > 0 {
		if err := cfg.shareImages(filepath.Join(dir, "images"), key); err != nil {
			return err
		}
	}
	began := time.Now()
	var nodes []*simNode
	for i := range *nodeCount {
		n, err := startSimNode(ctx, cfg, stores[i%len(stores)], fmt.Sprintf("sim-%04d", i))
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	cleanFns = append(cleanFns, func() {
		for _, n := range nodes {
			n.Kill()
		}
	})
	fmt.Printf("bench-fleet: PostgreSQL %s, %d lizard api, %d simulated nodes (started in %s), lease %s, %d workers, %s per row, agent delay %s, %d cores\n",
		pgVersion(ctx, db), len(apis), len(nodes), time.Since(began).Round(time.Millisecond), *lease, *workers, *duration, *agentDelay, numCPU())

	clients, err := workerClients(apis, keys)
	if err != nil {
		return err
	}
	if *count > 0 && strings.TrimSpace(*rowsFlag) == "" {
		if err := countCreates(ctx, db, clients[:min(len(clients), len(apis))], *count); err != nil {
			return err
		}
	}
	results, err := measureLevels(ctx, db, clients, apis)
	if err != nil {
		return err
	}
	if err := atTheEnd(ctx, db, clients, apis, secret, nodes); err != nil {
		return err
	}
	if len(results) == 0 {
		return nil
	}
	printTable(results)
	if *explain {
		explainCreatePath(ctx, db)
	}
	return nil
}

// workerClients are the workers' clients: worker w calls API w%apis in
// project w%projects.
func workerClients(apis []*apiProc, keys []string) ([]*client.Client, error) {
	var clients []*client.Client
	for w := range *workers {
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		c, err := client.New(client.Config{BaseURL: apis[w%len(apis)].url, APIKey: keys[w%len(keys)], HTTPClient: hc})
		if err != nil {
			return nil, err
		}
		clients = append(clients, c)
	}
	return clients, nil
}

// atTheEnd runs what ends a fleet: --lose-nodes, then --drain.
func atTheEnd(ctx context.Context, db *sql.DB, clients []*client.Client, apis []*apiProc, secret string, nodes []*simNode) error {
	if *lose > 0 {
		if err := loseNodes(ctx, db, clients[:min(len(clients), len(apis))], nodes, *lose, *losePer); err != nil {
			return err
		}
	}
	if *drainN > 0 {
		return drainNode(ctx, db, clients, apis, secret, nodes, *drainN)
	}
	return nil
}

// apiRole makes the role the api processes connect as and returns their
// URL: dbURL with that user (a superuser, as the bench's own is).
func apiRole(ctx context.Context, db *sql.DB, dbURL string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", err
	}
	pw, _ := u.User.Password()
	if _, err := db.ExecContext(ctx, `CREATE ROLE lizard_api LOGIN SUPERUSER PASSWORD '`+strings.ReplaceAll(pw, "'", "''")+`'`); err != nil {
		return "", fmt.Errorf("making the api processes' role: %w", err)
	}
	u.User = url.UserPassword("lizard_api", pw)
	return u.String(), nil
}

// countCreates makes n sandboxes one at a time through the api processes
// in turn and prints what the api processes asked of the database per
// create: statements, rows returned and blocks touched, in all and by
// statement. Counts, not times: they do not depend on the machine's load.
// What the api processes run in the background (the node list's refresh,
// the lease sweeper, the events pruner, webhook polls) is in them, spread
// over the creates; the nodes' side of a create (admission, the row, its
// event) does not depend on the fleet and is left out.
func countCreates(ctx context.Context, db *sql.DB, clients []*client.Client, n int) error {
	scans0, err := tableScans(ctx, db)
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return err
	}
	began := time.Now()
	var ids []string
	var took []float64
	for i := range n {
		t0 := time.Now()
		sb, err := clients[i%len(clients)].CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ptr(int64(300_000))})
		if err != nil {
			return fmt.Errorf("counting creates: create %d: %w", i, err)
		}
		took = append(took, ms(time.Since(t0)))
		ids = append(ids, sb.SandboxID)
	}
	secs := time.Since(began).Seconds()
	scans1, err := tableScans(ctx, db)
	if err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, `SELECT query, calls, rows, shared_blks_hit + shared_blks_read FROM pg_stat_statements s
		JOIN pg_roles r ON r.oid = s.userid WHERE r.rolname = 'lizard_api'
		AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND query NOT LIKE '%pg_stat_statements%' ORDER BY rows DESC, calls DESC`)
	if err != nil {
		return err
	}
	defer rows.Close()
	var calls, rws, blks int64
	var lines []string
	for rows.Next() {
		var q string
		var c, r, b int64
		if err := rows.Scan(&q, &c, &r, &b); err != nil {
			return err
		}
		calls, rws, blks = calls+c, rws+r, blks+b
		lines = append(lines, fmt.Sprintf("      %7.2f %8.1f %8.1f  %s", float64(c)/float64(n), float64(r)/float64(n), float64(b)/float64(n), shorten(q, 110)))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	fmt.Printf("  %d creates one at a time (%.1f s, create p50 %.1f ms, p99 %.1f ms, load %s): the api processes ran %.2f statements, returned %.1f rows and touched %.1f blocks per create (%d nodes)\n",
		n, secs, loadgen.Pct(took, 50), loadgen.Pct(took, 99), loadAvg(), float64(calls)/float64(n), float64(rws)/float64(n), float64(blks)/float64(n), *nodeCount)
	fmt.Println("    by statement (calls, rows, blocks per create):")
	for _, l := range lines[:min(10, len(lines))] {
		fmt.Println(l)
	}
	printScans(scans0, scans1, n)
	fmt.Println("    after:", sandboxesDead(ctx, db))
	for i, id := range ids {
		if err := clients[i%len(clients)].KillSandbox(ctx, id); err != nil {
			return fmt.Errorf("counting creates: kill: %w", err)
		}
	}
	return nil
}

// measureLevels runs measure at each of --rows, preloading rows up to it.
func measureLevels(ctx context.Context, db *sql.DB, clients []*client.Client, apis []*apiProc) ([]result, error) {
	var levels []int
	for _, s := range strings.Split(*rowsFlag, ",") {
		if strings.TrimSpace(s) == "" {
			continue // --rows "": the counts alone
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("--rows %q: %w", *rowsFlag, err)
		}
		levels = append(levels, n)
	}
	var results []result
	have := 0
	for _, level := range levels {
		if level > have {
			t0 := time.Now()
			if err := preload(ctx, db, have, level); err != nil {
				return nil, err
			}
			fmt.Printf("  preloaded %d sandbox rows and %d events in %s\n", level-have, (level-have)**eventsPer, time.Since(t0).Round(time.Millisecond))
			have = level
		}
		if *weekEvents > 0 && level == levels[len(levels)-1] {
			t0 := time.Now()
			if err := preloadWeek(ctx, db, level, *weekEvents); err != nil {
				return nil, err
			}
			fmt.Printf("  preloaded %d events over the last week in %s\n", *weekEvents, time.Since(t0).Round(time.Millisecond))
		}
		var size string
		db.QueryRowContext(ctx, `SELECT pg_size_pretty(pg_database_size(current_database()))`).Scan(&size)
		fmt.Printf("  rows %d: the database is %s\n", level, size)
		if *count > 0 {
			if err := countCreates(ctx, db, clients[:min(len(clients), len(apis))], *count); err != nil {
				return nil, err
			}
		}
		if *duration <= 0 {
			continue
		}
		r, err := measure(ctx, db, clients, apis, level)
		if err != nil {
			return nil, err
		}
		results = append(results, r)
		printRow(r)
	}
	return results, nil
}

// result is one row of the table.
type result struct {
	Rows                 int
	Creates, Errors      int
	Seconds              float64
	CreateP50, CreateP99 float64 // ms
	CodeP50, CodeP99     float64 // ms
	StatementsPerCreate  float64
	BlocksPerCreate      float64
	Renewals             float64 // per second
	RenewalDBms          float64 // database ms per second
	DBmsPerCreate        float64 // statements' execution time, lock waits apart
	LockWaitMsPerCreate  float64 // in pg_advisory_lock and pg_advisory_xact_lock
	APIRSSMB             []float64
	Load                 string
	Top                  []statement
	// CPU ms per create of the api processes (together), of PostgreSQL
	// and of this process (the simulated nodes and the load generator).
	CPUAPI, CPUPG, CPUSelf float64
}

type statement struct {
	Query        string
	Calls        int64
	MeanMs       float64
	BlocksPerRun float64
	RowsPerRun   float64
	TotalMs      float64
}

func measure(ctx context.Context, db *sql.DB, clients []*client.Client, apis []*apiProc, rows int) (result, error) {
	if _, err := db.ExecContext(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return result{}, err
	}
	var (
		mu               sync.Mutex
		creates, codes   []float64
		nCreate, nErrors atomic.Int64
		firstErr         error
	)
	cpu0 := cpuNow(apis)
	deadline := time.Now().Add(*duration)
	begin := time.Now()
	var wg sync.WaitGroup
	for w := range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[w]
			for time.Now().Before(deadline) {
				t0 := time.Now()
				sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ptr(int64(300_000))})
				dc := time.Since(t0)
				if err != nil {
					nErrors.Add(1)
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
					continue
				}
				nCreate.Add(1)
				t1 := time.Now()
				ex, err := c.Execute(ctx, sb.SandboxID, api.ExecuteRequest{Code: "1+1"}, nil)
				dx := time.Since(t1)
				if err == nil && (len(ex.Results) != 1 || ex.Results[0].Data != "2") {
					err = fmt.Errorf("runCode = %+v", ex)
				}
				mu.Lock()
				creates = append(creates, ms(dc))
				if err == nil {
					codes = append(codes, ms(dx))
				} else {
					nErrors.Add(1)
					firstErr = cmpErr(firstErr, err)
				}
				mu.Unlock()
				if err := c.KillSandbox(ctx, sb.SandboxID); err != nil {
					nErrors.Add(1)
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(begin).Seconds()
	cpu1 := cpuNow(apis)
	r := result{Rows: rows, Creates: int(nCreate.Load()), Errors: int(nErrors.Load()), Seconds: secs,
		CreateP50: loadgen.Pct(creates, 50), CreateP99: loadgen.Pct(creates, 99), CodeP50: loadgen.Pct(codes, 50), CodeP99: loadgen.Pct(codes, 99), Load: loadAvg()}
	if n := float64(max(1, r.Creates)); true {
		r.CPUAPI, r.CPUPG, r.CPUSelf = (cpu1.api-cpu0.api)/n, (cpu1.pg-cpu0.pg)/n, (cpu1.self-cpu0.self)/n
	}
	if firstErr != nil {
		fmt.Printf("  %d errors, the first: %v\n", r.Errors, firstErr)
	}
	fmt.Println("    after:", sandboxesDead(ctx, db))
	for _, p := range apis {
		r.APIRSSMB = append(r.APIRSSMB, rssMB(p.cmd.Process.Pid))
	}
	// Everything the database ran meanwhile: the creates, runCodes and
	// kills, and the fleet's background work (leases, reapers).
	q, err := db.QueryContext(ctx, `SELECT query, calls, mean_exec_time, total_exec_time, shared_blks_hit + shared_blks_read, rows
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time DESC`)
	if err != nil {
		return r, err
	}
	defer q.Close()
	var calls, blocks int64
	var dbms, lockms float64
	for q.Next() {
		var s statement
		var blks, rws int64
		if err := q.Scan(&s.Query, &s.Calls, &s.MeanMs, &s.TotalMs, &blks, &rws); err != nil {
			return r, err
		}
		s.BlocksPerRun, s.RowsPerRun = float64(blks)/float64(max(1, s.Calls)), float64(rws)/float64(max(1, s.Calls))
		calls += s.Calls
		blocks += blks
		if strings.Contains(s.Query, "pg_advisory") {
			lockms += s.TotalMs
		} else {
			dbms += s.TotalMs
		}
		if strings.Contains(s.Query, "INSERT INTO nodes") {
			r.Renewals += float64(s.Calls) / secs
			r.RenewalDBms += s.TotalMs / secs
		}
		r.Top = append(r.Top, s)
	}
	if r.Creates > 0 {
		r.StatementsPerCreate = float64(calls) / float64(r.Creates)
		r.BlocksPerCreate = float64(blocks) / float64(r.Creates)
		r.DBmsPerCreate = dbms / float64(r.Creates)
		r.LockWaitMsPerCreate = lockms / float64(r.Creates)
	}
	return r, q.Err()
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func printRow(r result) {
	fmt.Printf("  rows %d: %d creates in %.1fs = %.0f/s (%d errors); create p50 %.1f p99 %.1f ms; runCode p50 %.1f p99 %.1f ms; load %s\n",
		r.Rows, r.Creates, r.Seconds, float64(r.Creates)/r.Seconds, r.Errors, r.CreateP50, r.CreateP99, r.CodeP50, r.CodeP99, r.Load)
	fmt.Printf("    statements (every process) per create %.1f, blocks per create %.0f, database ms per create %.2f (and %.1f ms waiting for advisory locks); lease renewals %.1f/s costing %.1f ms/s\n",
		r.StatementsPerCreate, r.BlocksPerCreate, r.DBmsPerCreate, r.LockWaitMsPerCreate, r.Renewals, r.RenewalDBms)
	fmt.Printf("    CPU per create: api processes %.1f ms, PostgreSQL %.1f ms, simulated nodes and load generator %.1f ms\n", r.CPUAPI, r.CPUPG, r.CPUSelf)
	fmt.Println("    slowest statements by total time (calls, mean ms, blocks/call, rows/call):")
	for _, s := range r.Top[:min(8, len(r.Top))] {
		fmt.Printf("      %7d %7.3f %8.1f %8.1f  %s\n", s.Calls, s.MeanMs, s.BlocksPerRun, s.RowsPerRun, shorten(s.Query, 110))
	}
}

func printTable(rs []result) {
	fmt.Printf("\nFleet: %d simulated nodes, %d lizard api, %d workers in %d projects, %s each, on %d cores\n", *nodeCount, *apiCount, *workers, max(1, *projects), *duration, numCPU())
	fmt.Println("| sandbox rows | creates/s | create p50 / p99 ms | runCode p50 / p99 ms | statements / create | blocks / create | DB ms / create | lock wait ms / create | lease renewals/s (DB ms/s) | CPU ms / create: api, PostgreSQL, nodes+load | api RSS MB | errors | load avg |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, r := range rs {
		var rss []string
		for _, m := range r.APIRSSMB {
			rss = append(rss, fmt.Sprintf("%.0f", m))
		}
		fmt.Printf("| %d | %.0f | %.1f / %.1f | %.1f / %.1f | %.1f | %.0f | %.2f | %.1f | %.1f (%.1f) | %.1f, %.1f, %.1f | %s | %d | %s |\n",
			r.Rows, float64(r.Creates)/r.Seconds, r.CreateP50, r.CreateP99, r.CodeP50, r.CodeP99, r.StatementsPerCreate,
			r.BlocksPerCreate, r.DBmsPerCreate, r.LockWaitMsPerCreate, r.Renewals, r.RenewalDBms, r.CPUAPI, r.CPUPG, r.CPUSelf, strings.Join(rss, "/"), r.Errors, r.Load)
	}
}

// explainCreatePath shows the plans of the statements over sandboxes a
// create and a call run, with values of this run, at the largest count.
func explainCreatePath(ctx context.Context, db *sql.DB) {
	var node string
	db.QueryRowContext(ctx, `SELECT node FROM sandboxes WHERE node LIKE 'sim-%' LIMIT 1`).Scan(&node)
	now := time.Now().UnixMilli()
	for _, q := range []string{
		`SELECT COUNT(*) FROM sandboxes WHERE node = '` + node + `' AND ended_at IS NULL`,
		`SELECT COUNT(*) FROM sandboxes WHERE project_id = 'bench' AND role = '' AND ended_at IS NULL`,
		`SELECT name, (SELECT COUNT(*) FROM sandboxes s WHERE s.node = nodes.name AND s.ended_at IS NULL) FROM nodes`,
		`SELECT id FROM sandboxes WHERE node = '` + node + `' AND ended_at IS NULL AND expires_at <= ` + strconv.FormatInt(now, 10),
		`SELECT id FROM sandboxes WHERE node = '` + node + `' AND state = 'paused' AND ended_at IS NULL`,
	} {
		rows, err := db.QueryContext(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+q)
		if err != nil {
			fmt.Println("EXPLAIN", q, err)
			continue
		}
		fmt.Println("\nEXPLAIN ANALYZE", q)
		for rows.Next() {
			var line string
			rows.Scan(&line)
			fmt.Println("  ", line)
		}
		rows.Close()
	}
}

// preload inserts sandbox rows from..to of other (absent) nodes: nine in
// ten ended (of the bench's project, which the creates' quota counts
// over), one in ten paused and one in a hundred running (of another
// project), as a fleet's history leaves them, and eventsPer events for
// each.
func preload(ctx context.Context, db *sql.DB, from, to int) error {
	now := time.Now().UnixMilli()
	if _, err := db.ExecContext(ctx, `INSERT INTO sandboxes (id, project_id, template, state, timeout_ms, created_at, expires_at, ended_at, end_reason, slot, host_addr, guest_addr, node)
		SELECT 'pre' || lpad(g::text, 9, '0'),
			CASE WHEN g % 10 = 0 OR g % 100 = 1 THEN 'bench-paused' ELSE 'bench' END,
			'interpreter',
			CASE WHEN g % 10 = 0 THEN 'paused' WHEN g % 100 = 1 THEN 'running' ELSE 'killed' END,
			300000, $3 - g, CASE WHEN g % 100 = 1 THEN $3 + 86400000 END,
			CASE WHEN g % 10 = 0 OR g % 100 = 1 THEN NULL ELSE $3 - g + 1000 END,
			'', 1000000 + g, '169.254.0.1', '169.254.0.2',
			'gone-' || (g % 500)::text
		FROM generate_series($1::bigint, $2::bigint - 1) g`, from, to, now); err != nil {
		return fmt.Errorf("preloading sandboxes: %w", err)
	}
	if *eventsPer > 0 {
		if _, err := db.ExecContext(ctx, `INSERT INTO events (id, project_id, sandbox_id, type, at, data)
			SELECT m.last + row_number() OVER (), CASE WHEN g % 10 = 0 THEN 'bench-paused' ELSE 'bench' END, 'pre' || lpad(g::text, 9, '0'),
				CASE WHEN e = 0 THEN 'sandbox.created' ELSE 'sandbox.killed' END, $3 - g + e * 1000, '{}'
			FROM generate_series($1::bigint, $2::bigint - 1) g, generate_series(0, $4 - 1) e, (`+lastEventID+`) m`,
			from, to, now, *eventsPer); err != nil {
			return fmt.Errorf("preloading events: %w", err)
		}
		if err := raiseEventIDs(ctx, db); err != nil {
			return err
		}
	}
	_, err := db.ExecContext(ctx, `VACUUM ANALYZE sandboxes, events`)
	return err
}

// preloadWeek inserts n events of the sandboxes preloaded (rows of them),
// at even steps over the last week, in statements of a million.
func preloadWeek(ctx context.Context, db *sql.DB, rows, n int) error {
	const week, chunk = int64(7 * 24 * time.Hour / time.Millisecond), 1_000_000
	now := time.Now().UnixMilli()
	for from := 0; from < n; from += chunk {
		if _, err := db.ExecContext(ctx, `INSERT INTO events (id, project_id, sandbox_id, type, at, data)
			SELECT m.last + row_number() OVER (), 'bench', 'pre' || lpad((g % $4::bigint)::text, 9, '0'),
				CASE WHEN g % 2 = 0 THEN 'sandbox.created' ELSE 'sandbox.killed' END, $3::bigint - $5::bigint + g * $5::bigint / $6::bigint, '{}'
			FROM generate_series($1::bigint, $2::bigint - 1) g, (`+lastEventID+`) m`,
			from, min(from+chunk, n), now, max(1, rows), week, n); err != nil {
			return fmt.Errorf("preloading a week of events: %w", err)
		}
	}
	if err := raiseEventIDs(ctx, db); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, `VACUUM ANALYZE events`)
	return err
}

// lastEventID is the largest event ID recorded. Preloaded events are
// numbered above it: an event's ID is its transaction's ID plus
// event_ids.base (store.Events.Append), so IDs from the column's own
// sequence would meet those of the creates before them.
const lastEventID = `SELECT COALESCE(MAX(id), 0) AS last FROM events`

// raiseEventIDs raises event_ids.base above the preloaded events, as the
// store does at open after a restore (eventIDBase): the running API
// processes and nodes read it in each append.
func raiseEventIDs(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `UPDATE event_ids SET base = m.last - txid_current() + 1
		FROM (`+lastEventID+`) m WHERE m.last >= txid_current() + base`); err != nil {
		return fmt.Errorf("keeping new event IDs above the preloaded: %w", err)
	}
	return nil
}

// sandboxesDead says how many live and dead rows the sandboxes table
// holds (PostgreSQL's estimate), when autovacuum last ran on it, and the
// size of the index of live sandboxes every create counts through.
func sandboxesDead(ctx context.Context, db *sql.DB) string {
	var live, dead int64
	var vacuumed sql.NullTime
	var pages int64
	db.QueryRowContext(ctx, `SELECT n_live_tup, n_dead_tup, GREATEST(last_autovacuum, last_vacuum) FROM pg_stat_user_tables WHERE relname = 'sandboxes'`).Scan(&live, &dead, &vacuumed)
	db.QueryRowContext(ctx, `SELECT pg_relation_size('sandboxes_live_project') / 8192`).Scan(&pages)
	ago := "never"
	if vacuumed.Valid {
		ago = time.Since(vacuumed.Time).Round(time.Second).String() + " ago"
	}
	return fmt.Sprintf("sandboxes: %d live rows, %d dead; last vacuumed %s; sandboxes_live_project %d pages", live, dead, ago, pages)
}

// tableScan is what PostgreSQL read of one table so far: rows by
// sequential scans and index entries by index scans.
type tableScan struct{ seqScans, seqRows, idxScans, idxRows int64 }

// tableScans reads every table's scans, after the 10 s in which
// PostgreSQL's backends send it their counts when idle.
func tableScans(ctx context.Context, db *sql.DB) (map[string]tableScan, error) {
	time.Sleep(11 * time.Second)
	rows, err := db.QueryContext(ctx, `SELECT t.relname, COALESCE(t.seq_scan, 0), COALESCE(t.seq_tup_read, 0),
		COALESCE(SUM(i.idx_scan), 0), COALESCE(SUM(i.idx_tup_read), 0)
		FROM pg_stat_user_tables t LEFT JOIN pg_stat_user_indexes i ON i.relid = t.relid
		GROUP BY t.relname, t.seq_scan, t.seq_tup_read`)
	if err != nil {
		return nil, fmt.Errorf("reading the tables' scans: %w", err)
	}
	defer rows.Close()
	out := map[string]tableScan{}
	for rows.Next() {
		var name string
		var s tableScan
		if err := rows.Scan(&name, &s.seqScans, &s.seqRows, &s.idxScans, &s.idxRows); err != nil {
			return nil, err
		}
		out[name] = s
	}
	return out, rows.Err()
}

// printScans prints per create what every process read of each table
// between a and b: the rows a create's statements, the leases and the
// background work scanned.
func printScans(a, b map[string]tableScan, n int) {
	fmt.Println("    rows scanned per create, every process (table: sequential scans, rows they read; index scans, entries they read):")
	var names []string
	for name := range b {
		names = append(names, name)
	}
	slices.Sort(names)
	var total float64
	for _, name := range names {
		d := tableScan{b[name].seqScans - a[name].seqScans, b[name].seqRows - a[name].seqRows, b[name].idxScans - a[name].idxScans, b[name].idxRows - a[name].idxRows}
		if d == (tableScan{}) {
			continue
		}
		f := float64(n)
		total += float64(d.seqRows+d.idxRows) / f
		fmt.Printf("      %-20s %6.2f %10.1f  %6.2f %10.1f\n", name, float64(d.seqScans)/f, float64(d.seqRows)/f, float64(d.idxScans)/f, float64(d.idxRows)/f)
	}
	fmt.Printf("      %-20s rows and entries scanned per create in all: %.1f\n", "", total)
}

// startPostgres starts a server with pg_stat_statements loaded and makes
// the bench's database, with the extension.
func startPostgres(ctx context.Context) (*pgtest.Server, string, *sql.DB, error) {
	pg, err := pgtest.Start()
	if err != nil {
		return nil, "", nil, err
	}
	fail := func(err error) (*pgtest.Server, string, *sql.DB, error) { pg.Stop(); return nil, "", nil, err }
	admin, err := sql.Open("pgx", pg.URL("postgres"))
	if err != nil {
		return fail(err)
	}
	_, err = admin.ExecContext(ctx, `ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'`)
	admin.Close()
	if err != nil {
		return fail(err)
	}
	if err := pg.StopServer(); err != nil {
		return fail(err)
	}
	if err := pg.StartServer(); err != nil {
		return fail(err)
	}
	name, err := pg.CreateDatabase(ctx)
	if err != nil {
		return fail(err)
	}
	url := pg.URL(name)
	pgPort = pg.Port()
	db, err := sql.Open("pgx", url)
	if err != nil {
		return fail(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE EXTENSION pg_stat_statements`); err != nil {
		return fail(fmt.Errorf("pg_stat_statements (Debian's postgresql package has it): %w", err))
	}
	return pg, url, db, nil
}

func pgVersion(ctx context.Context, db *sql.DB) string {
	var v string
	db.QueryRowContext(ctx, `SHOW server_version`).Scan(&v)
	return v
}

// apiProc is one `lizard api` process.
type apiProc struct {
	url string
	cmd *exec.Cmd
	log *os.File
}

func startAPI(name string, env []string) (*apiProc, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.CreateTemp("", "lizard-fleet-"+name+"-*.log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(*binDir, "lizard"), "api", "--listen", addr, "--lease", lease.String(), "--metrics-listen=",
		"--creates-per-second=0", "--requests-per-second=0", "--max-sandboxes-per-project="+strconv.Itoa(*maxLive), "--max-disk-per-project-mb=0")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &apiProc{url: "http://" + addr, cmd: cmd, log: logf}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	cleanFns = append(cleanFns, func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		os.Remove(logf.Name())
	})
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		select {
		case <-done:
			b, _ := os.ReadFile(logf.Name())
			return nil, fmt.Errorf("%s exited: %s", name, b)
		default:
		}
		if resp, err := http.Get(p.url + "/v1/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
	}
	return nil, errors.New(name + " did not become healthy")
}

// projectID is the bench's i-th project: the first is "bench", which the
// preloaded ended rows belong to.
func projectID(i int) string {
	if i == 0 {
		return "bench"
	}
	return fmt.Sprintf("bench-%d", i)
}

func createProject(env []string, id string) (string, error) {
	cmd := exec.Command(filepath.Join(*binDir, "lizard"), "admin", "create-project", "--id", id, "--json")
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("admin create-project: %w", err)
	}
	var p struct{ APIKey string }
	if err := json.Unmarshal(b, &p); err != nil {
		return "", err
	}
	return p.APIKey, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func ptr[T any](v T) *T { return &v }

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func rssMB(pid int) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// cpuTimes are CPU milliseconds used so far (user and system).
type cpuTimes struct{ api, pg, self float64 }

var pgPort int

func cpuNow(apis []*apiProc) cpuTimes {
	var c cpuTimes
	for _, p := range apis {
		c.api += procCPU(p.cmd.Process.Pid, false)
	}
	c.self = procCPU(os.Getpid(), false)
	// PostgreSQL: its postmaster (found by its port), with the exited
	// backends it reaped, and its live children.
	entries, _ := os.ReadDir("/proc")
	post := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if args := strings.Split(string(b), "\x00"); len(args) > 0 && strings.HasSuffix(args[0], "/postgres") && slices.Contains(args, strconv.Itoa(pgPort)) {
			post = pid
			break
		}
	}
	if post == 0 {
		return c
	}
	c.pg = procCPU(post, true)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := statFields(pid); len(f) > 2 && f[1] == strconv.Itoa(post) {
			c.pg += procCPU(pid, false)
		}
	}
	return c
}

// statFields are /proc/PID/stat's fields after the command (state first).
func statFields(pid int) []string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// procCPU is pid's CPU milliseconds, and its reaped children's with
// children (clock ticks of 10 ms).
func procCPU(pid int, children bool) float64 {
	f := statFields(pid)
	if len(f) < 15 {
		return 0
	}
	n := 0.0
	idx := []int{11, 12} // utime, stime
	if children {
		idx = append(idx, 13, 14) // cutime, cstime
	}
	for _, i := range idx {
		v, _ := strconv.ParseFloat(f[i], 64)
		n += v * 10
	}
	return n
}

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return max(1, strings.Count(string(b), "processor\t:"))
}

func shorten(q string, n int) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > n {
		return q[:n] + "…"
	}
	return q
}
