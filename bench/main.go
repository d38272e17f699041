// Command bench measures Lizard beside its baselines in one run on this
// machine and prints a markdown table of p50/p95 and their ratios; the JSON
// goes to bench/results/. Run it with `make bench` (as root).
//
// Baselines are measured in the same run as Lizard because the machines are
// shared and noisy: the ratio is the figure to read, not the milliseconds.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/template"
)

type config struct {
	runs     int
	codeRuns int
	cacheDir string
	python   string
	out      string
}

func main() {
	var cfg config
	flag.IntVar(&cfg.runs, "runs", 20, "sandboxes to create for the lifecycle figures")
	flag.IntVar(&cfg.codeRuns, "code-runs", 200, "calls for the runCode figures")
	flag.StringVar(&cfg.cacheDir, "cache-dir", envOr("LIZARD_CACHE_DIR", template.DefaultCacheDir), "template cache")
	flag.StringVar(&cfg.python, "python", os.Getenv("LIZARD_TEST_PYTHON"), "Python with ipykernel and jupyter_client, for the direct-kernel baseline")
	flag.StringVar(&cfg.out, "out", "bench/results", "directory for the JSON results")
	flag.Parse()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// figure is one measured series.
type figure struct {
	Name     string    `json:"name"`
	Baseline string    `json:"baseline,omitempty"` // name of the figure it is compared with
	Samples  []float64 `json:"samplesMs"`
	P50      float64   `json:"p50Ms"`
	P95      float64   `json:"p95Ms"`
}

func newFigure(name, baseline string, samples []time.Duration) figure {
	f := figure{Name: name, Baseline: baseline}
	for _, s := range samples {
		f.Samples = append(f.Samples, float64(s.Microseconds())/1000)
	}
	sorted := slices.Clone(f.Samples)
	slices.Sort(sorted)
	if n := len(sorted); n > 0 {
		f.P50 = sorted[n/2]
		f.P95 = sorted[min(n-1, (n*95+99)/100-1)]
	}
	return f
}

func run(ctx context.Context, cfg config) error {
	rootfs, err := template.Ensure(ctx, cfg.cacheDir, template.Default, os.Stderr)
	if err != nil {
		return err
	}
	var figs []figure

	raw, err := rawRunsc(ctx, rootfs, cfg.runs)
	if err != nil {
		return fmt.Errorf("raw runsc baseline: %w", err)
	}
	figs = append(figs, newFigure("raw runsc run /bin/true", "", raw))

	srv, err := startServer(ctx, cfg.cacheDir)
	if err != nil {
		return err
	}
	defer srv.stop()
	c := srv.client

	var creates, kills []time.Duration
	var first []time.Duration
	for range cfg.runs {
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			return fmt.Errorf("creating sandbox: %w", err)
		}
		creates = append(creates, time.Since(t0))
		if _, err := c.Execute(ctx, sb.SandboxID, api.ExecuteRequest{Code: "1+1"}, nil); err != nil {
			return err
		}
		first = append(first, time.Since(t0))
		t1 := time.Now()
		if err := c.KillSandbox(ctx, sb.SandboxID); err != nil {
			return err
		}
		kills = append(kills, time.Since(t1))
	}
	figs = append(figs,
		newFigure("create → agent ready", "raw runsc run /bin/true", creates),
		newFigure("create → first runCode(\"1+1\") result", "raw runsc run /bin/true", first),
		newFigure("kill", "", kills))

	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		return err
	}
	defer c.KillSandbox(context.WithoutCancel(ctx), sb.SandboxID)
	var calls []time.Duration
	for i := range cfg.codeRuns + 10 {
		t0 := time.Now()
		run, err := c.Execute(ctx, sb.SandboxID, api.ExecuteRequest{Code: "1+1"}, nil)
		if err != nil || run.Error != nil || len(run.Results) != 1 {
			return fmt.Errorf("runCode 1+1: %v %+v", err, run)
		}
		if i >= 10 { // warm-up
			calls = append(calls, time.Since(t0))
		}
	}
	if cfg.python != "" {
		direct, err := directJupyter(ctx, cfg.python, cfg.codeRuns)
		if err != nil {
			return fmt.Errorf("direct jupyter_client baseline: %w", err)
		}
		figs = append(figs, newFigure("direct jupyter_client 1+1 (host kernel)", "", direct))
		figs = append(figs, newFigure("runCode(\"1+1\") through the API", "direct jupyter_client 1+1 (host kernel)", calls))
	} else {
		figs = append(figs, newFigure("runCode(\"1+1\") through the API", "", calls))
	}

	printTable(figs)
	return save(cfg.out, figs)
}

func printTable(figs []figure) {
	byName := map[string]figure{}
	for _, f := range figs {
		byName[f.Name] = f
	}
	fmt.Println("| figure | n | p50 ms | p95 ms | p50 ratio to baseline |")
	fmt.Println("| --- | ---: | ---: | ---: | --- |")
	for _, f := range figs {
		ratio := ""
		if b, ok := byName[f.Baseline]; ok && b.P50 > 0 {
			ratio = fmt.Sprintf("%.2f× %s (+%.1f ms)", f.P50/b.P50, b.Name, f.P50-b.P50)
		}
		fmt.Printf("| %s | %d | %.1f | %.1f | %s |\n", f.Name, len(f.Samples), f.P50, f.P95, ratio)
	}
}

func save(dir string, figs []figure) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	host, _ := os.Hostname()
	b, _ := json.MarshalIndent(map[string]any{"time": time.Now().UTC(), "host": host, "figures": figs}, "", "  ")
	path := filepath.Join(dir, "bench-"+time.Now().UTC().Format("20060102-150405")+".json")
	fmt.Println("\nresults:", path)
	return os.WriteFile(path, b, 0o644)
}

// rawRunsc times `runsc run` of /bin/true in the template with the flags
// Lizard uses, minus Lizard's network namespace: the floor for a boot.
func rawRunsc(ctx context.Context, rootfs string, n int) ([]time.Duration, error) {
	dir, err := os.MkdirTemp("", "lizard-bench-runsc-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	spec := map[string]any{
		"ociVersion": "1.0.0",
		"process":    map[string]any{"args": []string{"/bin/true"}, "cwd": "/", "user": map[string]int{"uid": 0, "gid": 0}, "env": []string{"PATH=/usr/bin:/bin"}},
		"root":       map[string]any{"path": rootfs, "readonly": false},
		"mounts":     []map[string]any{{"destination": "/proc", "type": "proc", "source": "proc"}},
	}
	b, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		return nil, err
	}
	runsc := filepath.Join("bin", "runsc")
	var out []time.Duration
	for i := range n {
		id := fmt.Sprintf("lizard-bench-%d-%d", os.Getpid(), i)
		t0 := time.Now()
		cmd := exec.CommandContext(ctx, runsc, "--root", filepath.Join(dir, "state"), "--platform=systrap",
			"--network=none", "--overlay2=root:memory", "run", "--bundle", dir, id)
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("runsc run: %v: %s", err, b)
		}
		out = append(out, time.Since(t0))
		exec.Command(runsc, "--root", filepath.Join(dir, "state"), "delete", "--force", id).Run()
	}
	return out, nil
}

// directJupyter times 1+1 through jupyter_client to a kernel on the host:
// the floor for runCode.
func directJupyter(ctx context.Context, python string, n int) ([]time.Duration, error) {
	script := `
import sys, time, json
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="python3")
try:
    out = []
    for i in range(int(sys.argv[1]) + 10):
        t0 = time.perf_counter()
        kc.execute_interactive("1+1", output_hook=lambda m: None, timeout=30)
        if i >= 10:
            out.append(time.perf_counter() - t0)
    print(json.dumps(out))
finally:
    kc.stop_channels(); km.shutdown_kernel(now=True)
`
	b, err := exec.CommandContext(ctx, python, "-c", script, fmt.Sprint(n)).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("%v: %s", err, ee.Stderr)
		}
		return nil, err
	}
	var secs []float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return nil, fmt.Errorf("reading %q: %w", b, err)
	}
	out := make([]time.Duration, len(secs))
	for i, s := range secs {
		out[i] = time.Duration(s * float64(time.Second))
	}
	return out, nil
}

type server struct {
	cmd    *exec.Cmd
	client *client.Client
	dir    string
}

// startServer starts bin/lizard serve with a fresh data directory and a
// project, as a user would.
func startServer(ctx context.Context, cacheDir string) (*server, error) {
	dir, err := os.MkdirTemp("", "lizard-bench-")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	out, err := exec.CommandContext(ctx, "bin/lizard", "admin", "create-project", "--data-dir", dir, "--id", "bench", "--json").Output()
	if err != nil {
		return nil, fmt.Errorf("creating project: %w", err)
	}
	var p struct{ APIKey string }
	if err := json.Unmarshal(out, &p); err != nil {
		return nil, err
	}
	s := &server{dir: dir}
	s.cmd = exec.Command("bin/lizard", "serve", "--listen", addr, "--data-dir", dir, "--cache-dir", cacheDir,
		"--address-pool", "169.254.224.0/20")
	logf, _ := os.Create(filepath.Join(dir, "serve.log"))
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/v1/health"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, errors.New("lizard serve did not start; see " + logf.Name())
		}
	}
	s.client, err = client.New(client.Config{BaseURL: "http://" + addr, APIKey: p.APIKey})
	return s, err
}

func (s *server) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	s.cmd.Wait()
	if !strings.HasPrefix(s.dir, os.TempDir()) {
		return
	}
	os.RemoveAll(s.dir)
}
