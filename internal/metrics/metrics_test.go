package metrics

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// serve runs one request through the middleware around a mux shaped like
// the API's.
func serve(t *testing.T, m *Metrics, method, path, body string, h http.HandlerFunc) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", h)
	mux.HandleFunc("/v1/sandboxes/{id}", h)
	mux.HandleFunc("/v1/sandboxes/{id}/{rest...}", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // as the proxy does
		h(w, r)
	})
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	m.Middleware(mux).ServeHTTP(httptest.NewRecorder(), req)
}

func TestMiddlewareRoutesAndRuns(t *testing.T) {
	m := New()
	ok := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }
	serve(t, m, "GET", "/v1/health", "", ok)
	serve(t, m, "GET", "/v1/sandboxes/sb_1", "", ok)
	serve(t, m, "GET", "/v1/sandboxes/sb_2", "", ok)
	serve(t, m, "GET", "/v1/sandboxes/sb_1/files/list?path=/", "", ok)
	serve(t, m, "GET", "/v1/sandboxes/sb_1/made-up/path", "", ok)
	serve(t, m, "POST", "/v1/sandboxes/sb_1/execute", `{"code":"x"}`, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusConflict)
	})
	// How runs ended is the agent proxy's to read (agentproxy's
	// TestOutcomes); the metrics count what it tells.
	m.Execution("python", "ok", false, time.Second)
	m.Execution("python", "ok", true, time.Second)
	m.Execution("python", "kernel_died", true, time.Second)
	m.Execution("bash", "timeout", false, time.Second)
	m.Process("exit_nonzero", time.Second)

	for _, c := range []struct {
		got  float64
		want float64
		what string
	}{
		{testutil.ToFloat64(m.httpRequests.WithLabelValues("/v1/health", "GET", "200")), 1, "health"},
		{testutil.ToFloat64(m.httpRequests.WithLabelValues("/v1/sandboxes/{id}", "GET", "200")), 2, "get sandbox (ids folded into the pattern)"},
		{testutil.ToFloat64(m.httpRequests.WithLabelValues("/v1/sandboxes/{id}/files/list", "GET", "200")), 1, "files/list"},
		{testutil.ToFloat64(m.httpRequests.WithLabelValues("/v1/sandboxes/{id}/other", "GET", "200")), 1, "unknown agent path"},
		{testutil.ToFloat64(m.httpRequests.WithLabelValues("/v1/sandboxes/{id}/execute", "POST", "409")), 1, "rejected execute status"},
		{testutil.ToFloat64(m.executions.WithLabelValues("python", "ok")), 2, "python ok (one after a kernel death)"},
		{testutil.ToFloat64(m.executions.WithLabelValues("python", "kernel_died")), 1, "python kernel died during the call"},
		{testutil.ToFloat64(m.kernelDeaths), 2, "kernel deaths: during a call and between calls"},
		{testutil.ToFloat64(m.executions.WithLabelValues("bash", "timeout")), 1, "bash timeout"},
		{testutil.ToFloat64(m.processes.WithLabelValues("exit_nonzero")), 1, "process exit 1"},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.httpRequests); n != 5 {
		t.Errorf("lizard_http_requests_total has %d series, want 5 (no sandbox ids in labels)", n)
	}
}

func TestCoreAPIAndNil(t *testing.T) {
	var none *Metrics // code without metrics calls the same methods
	none.SandboxCreated(PathBoot, time.Second, nil)
	none.SandboxOp(OpPause, time.Second, nil)
	none.SandboxStates(nil)
	if h := none.Middleware(http.NotFoundHandler()); h == nil {
		t.Fatal("nil Metrics' Middleware returned nil, want next")
	}

	m := New()
	m.SandboxCreated(PathWarmPool, 20*time.Millisecond, nil)
	m.SandboxCreated(PathWarmPool, 30*time.Millisecond, nil)
	m.SandboxCreated(PathBoot, time.Second, errors.New("boom"))
	m.SandboxOp(OpFork, time.Second, nil)
	m.TemplateBuilt("interpreter", BuildSnapshot, time.Minute, nil)
	m.SandboxStates(func() map[string]int { return map[string]int{"running": 3, "paused": 1} })
	m.WarmPool(func() map[string]int { return map[string]int{"interpreter": 2} })
	m.AddressPool(func() (int, int) { return 5, 256 })

	want := `
# HELP lizard_sandboxes Sandboxes by state (starting, running, paused); ended sandboxes are not counted.
# TYPE lizard_sandboxes gauge
lizard_sandboxes{state="paused"} 1
lizard_sandboxes{state="running"} 3
# HELP lizard_address_pool_slots Sandbox address slots (a /30 each) in the address pool: used and total.
# TYPE lizard_address_pool_slots gauge
lizard_address_pool_slots{kind="total"} 256
lizard_address_pool_slots{kind="used"} 5
# HELP lizard_sandbox_creates_total Sandbox creates by path (boot, template_restore, warm_pool, snapshot, fork) and outcome (ok, error).
# TYPE lizard_sandbox_creates_total counter
lizard_sandbox_creates_total{outcome="error",path="boot"} 1
lizard_sandbox_creates_total{outcome="ok",path="warm_pool"} 2
# HELP lizard_warm_pool_ready Restored sandboxes ready in the warm pool, by template.
# TYPE lizard_warm_pool_ready gauge
lizard_warm_pool_ready{template="interpreter"} 2
`
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), "lizard_sandboxes", "lizard_address_pool_slots",
		"lizard_sandbox_creates_total", "lizard_warm_pool_ready"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.createDuration); n != 1 {
		t.Errorf("create duration has %d series, want 1 (failed creates are not timed)", n)
	}
	if v := memAvailable(); !(v > 0) {
		t.Errorf("memAvailable() = %v, want > 0", v)
	}

	none.DiskFree(map[string]string{"data": t.TempDir()})
	m.DiskFree(map[string]string{"data": t.TempDir(), "cache": filepath.Join(t.TempDir(), "missing")})
	if n := testutil.CollectAndCount(m.diskFree); n != 1 {
		t.Errorf("lizard_disk_free_bytes has %d series, want 1 (a directory that cannot be read is left out)", n)
	}
	if v := testutil.ToFloat64(m.diskFree); !(v > 0) {
		t.Errorf("lizard_disk_free_bytes{dir=\"data\"} = %v, want > 0", v)
	}
}
