package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lizard-build/lizard/api"
)

// scrape reads the server's /metrics and returns each sample of the
// counters and histograms (their _count) keyed as name{label="v",...} with
// labels in name order.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scraping %s: %s %s", url, resp.Status, b)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := name + "{" + strings.Join(labels, ",") + "}"
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[strings.Replace(key, "{", "_count{", 1)] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestMetrics drives real traffic through a real server and checks that
// /metrics, on its own listener, moved by exactly that much.
func TestMetrics(t *testing.T) {
	metricsAddr := freeAddr(t)
	s := startServer(t, "--metrics-listen", metricsAddr)
	c := s.createProject("proj_metrics")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	murl := "http://" + metricsAddr + "/metrics"

	// The metrics listener serves nothing but /metrics, and never the API.
	if resp, err := http.Get("http://" + metricsAddr + "/v1/health"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /v1/health on the metrics listener = %d, want 404", resp.StatusCode)
	}

	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	before := scrape(t, murl)

	for range 3 {
		if _, err := c.Health(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.GetSandbox(ctx, "nosuchsandbox"); err == nil {
		t.Fatal("GetSandbox of a made-up id succeeded")
	}
	if _, err := c.GetSandbox(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	run := func(lang, code string) *api.ExecutionError {
		ex, err := c.Execute(ctx, sb.SandboxID, api.ExecuteRequest{Language: lang, Code: code}, nil)
		if err != nil {
			t.Fatalf("execute %s %q: %v", lang, code, err)
		}
		return ex.Error
	}
	if e := run("python", "1 + 1"); e != nil {
		t.Fatalf("1 + 1 raised %v", e)
	}
	if e := run("python", "x = 2"); e != nil {
		t.Fatalf("x = 2 raised %v", e)
	}
	if e := run("python", "1/0"); e == nil || e.Name != "ZeroDivisionError" {
		t.Fatalf("1/0 raised %v, want ZeroDivisionError", e)
	}
	if e := run("bash", "echo hi"); e != nil {
		t.Fatalf("echo hi raised %v", e)
	}
	for _, cmd := range []string{"true", "exit 3", "exit 3"} {
		if _, err := c.Exec(ctx, sb.SandboxID, api.ProcessRequest{Cmd: cmd}, nil); err != nil {
			t.Fatalf("exec %q: %v", cmd, err)
		}
	}
	after := scrape(t, murl)

	const sbRoute = `route="/v1/sandboxes/{id}"`
	for _, w := range []struct {
		key  string
		want float64
	}{
		{`lizard_http_requests_total{code="200",method="GET",route="/v1/health"}`, 3},
		{`lizard_http_requests_total{code="404",method="GET",` + sbRoute + `}`, 1},
		{`lizard_http_requests_total{code="200",method="GET",` + sbRoute + `}`, 1},
		{`lizard_http_requests_total{code="200",method="POST",route="/v1/sandboxes/{id}/execute"}`, 4},
		{`lizard_http_requests_total{code="200",method="POST",route="/v1/sandboxes/{id}/process"}`, 3},
		{`lizard_http_request_duration_seconds_count{method="GET",route="/v1/health"}`, 3},
		{`lizard_executions_total{language="python",outcome="ok"}`, 2},
		{`lizard_executions_total{language="python",outcome="error"}`, 1},
		{`lizard_executions_total{language="bash",outcome="ok"}`, 1},
		{`lizard_execution_duration_seconds_count{language="python",outcome="ok"}`, 2},
		{`lizard_processes_total{outcome="ok"}`, 1},
		{`lizard_processes_total{outcome="exit_nonzero"}`, 2},
		{`lizard_process_duration_seconds_count{outcome="exit_nonzero"}`, 2},
	} {
		if got := after[w.key] - before[w.key]; got != w.want {
			t.Errorf("%s moved by %v, want %v", w.key, got, w.want)
		}
	}
	// No sandbox or project id in any label: an operator's dashboards
	// must not grow a series per sandbox.
	for key := range after {
		if strings.Contains(key, sb.SandboxID) || strings.Contains(key, "proj_metrics") {
			t.Errorf("series %s names a sandbox or project", key)
		}
	}
	if v := after["lizard_node_memory_available_bytes{}"]; v <= 0 {
		t.Errorf("lizard_node_memory_available_bytes = %v, want > 0", v)
	}

	// A kernel killed between calls: the next call says so (a note, or
	// KernelDiedError if it met the dying kernel), and one death is counted.
	ex, err := c.Execute(ctx, sb.SandboxID, api.ExecuteRequest{Code: "import os; print(os.getpid())"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, sb.SandboxID, api.ProcessRequest{Args: []string{"kill", "-9", strings.TrimSpace(ex.Stdout)}}, nil); err != nil {
		t.Fatal(err)
	}
	before = scrape(t, murl)
	if _, err := c.Execute(ctx, sb.SandboxID, api.ExecuteRequest{Code: "1 + 1"}, nil); err != nil {
		t.Fatalf("call after kill -9 of the kernel: %v", err)
	}
	after = scrape(t, murl)
	if got := after["lizard_kernel_deaths_total{}"] - before["lizard_kernel_deaths_total{}"]; got != 1 {
		t.Errorf("lizard_kernel_deaths_total moved by %v after kill -9 of the kernel, want 1", got)
	}

	// What the core feeds: creates by path, operations, and the gauges
	// read at scrape time.
	if _, err := c.PauseSandbox(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResumeSandbox(ctx, sb.SandboxID, api.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	forks, err := c.Fork(ctx, sb.SandboxID, api.ForkRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forks {
		defer c.KillSandbox(context.Background(), f.SandboxID)
	}
	final := scrape(t, murl)
	created := final[`lizard_sandbox_creates_total{outcome="ok",path="boot"}`] + final[`lizard_sandbox_creates_total{outcome="ok",path="template_restore"}`]
	if created < 1 {
		t.Errorf("creates by boot or template restore = %v, want at least the test's sandbox", created)
	}
	for _, w := range []struct {
		key  string
		want float64
	}{
		{`lizard_sandbox_creates_total{outcome="ok",path="fork"}`, 2},
		{`lizard_sandbox_op_duration_seconds_count{op="fork",outcome="ok"}`, 1},
		{`lizard_sandbox_op_duration_seconds_count{op="pause",outcome="ok"}`, 1},
		{`lizard_sandbox_op_duration_seconds_count{op="resume",outcome="ok"}`, 1},
		{`lizard_sandboxes{state="running"}`, 3},
		{`lizard_address_pool_slots{kind="total"}`, 64},
	} {
		if got := final[w.key]; got != w.want {
			t.Errorf("%s = %v, want %v", w.key, got, w.want)
		}
	}
	if used := final[`lizard_address_pool_slots{kind="used"}`]; used < 3 {
		t.Errorf("address slots used = %v, want at least the 3 running sandboxes", used)
	}
}

// TestMetricsListenTaken: a taken metrics port is an error in the log, not
// a server that will not start.
func TestMetricsListenTaken(t *testing.T) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := startServer(t, "--metrics-listen", l.Addr().String())
	if !s.logged("metrics listener not started") {
		t.Errorf("server log does not say the metrics listener failed:\n%s", s.logs())
	}
}
