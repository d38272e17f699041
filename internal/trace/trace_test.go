package trace

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/trace/otlptest"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestLoadConfig(t *testing.T) {
	const ep = "http://127.0.0.1:4318"
	tests := []struct {
		name    string
		env     map[string]string
		enabled bool
		wantErr string // a substring; "" for none
		check   func(Config) bool
	}{
		{name: "off by default", env: nil},
		{name: "sampler alone is not on", env: map[string]string{"OTEL_TRACES_SAMPLER": "always_on", "OTEL_SERVICE_NAME": "x"}},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep}, enabled: true,
			check: func(c Config) bool { return c.QueueSize == 2048 && c.BatchSize == 512 && c.Delay == 5*time.Second }},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ep + "/v1/traces"}, enabled: true},
		{name: "disabled wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_SDK_DISABLED": "true"}},
		{name: "disabled false", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_SDK_DISABLED": "false"}, enabled: true},
		{name: "exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_TRACES_EXPORTER": "none"}},
		{name: "exporter otlp", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_TRACES_EXPORTER": "otlp"}, enabled: true},
		{name: "http/protobuf", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, enabled: true},
		{name: "traces protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, enabled: true},
		{name: "queue settings", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_BSP_MAX_QUEUE_SIZE": "10", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "50", "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_BSP_EXPORT_TIMEOUT": "2000"}, enabled: true,
			check: func(c Config) bool {
				return c.QueueSize == 10 && c.BatchSize == 10 && c.Delay == 100*time.Millisecond && c.ExportTimeout == 2*time.Second
			}},
		{name: "grpc refused", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, wantErr: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{name: "other exporter refused", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "OTEL_TRACES_EXPORTER"},
		{name: "bad disabled", env: map[string]string{"OTEL_SDK_DISABLED": "maybe"}, wantErr: "OTEL_SDK_DISABLED"},
		{name: "bad queue size", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_BSP_MAX_QUEUE_SIZE": "0"}, wantErr: "OTEL_BSP_MAX_QUEUE_SIZE"},
		{name: "bad delay", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_BSP_SCHEDULE_DELAY": "5s"}, wantErr: "OTEL_BSP_SCHEDULE_DELAY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := LoadConfig(env(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("LoadConfig error = %v; want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			if c.Enabled != tt.enabled {
				t.Errorf("Enabled = %v; want %v", c.Enabled, tt.enabled)
			}
			if tt.check != nil && !tt.check(c) {
				t.Errorf("config %+v is not what the variables say", c)
			}
		})
	}
}

// setup turns tracing on as the OTEL_* variables in kv say, for the rest
// of the test, and returns the metrics it counts drops in.
func setup(t *testing.T, kv map[string]string) (*metrics.Metrics, func(context.Context) error) {
	t.Helper()
	for k, v := range kv {
		t.Setenv(k, v)
	}
	c, err := LoadConfig(env(kv))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	shutdown, err := Setup(context.Background(), c, "lizard-test", m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		shutdown(ctx)
		otel.SetTracerProvider(noop.NewTracerProvider())
	})
	return m, shutdown
}

func TestOffByDefault(t *testing.T) {
	otel.SetTracerProvider(noop.NewTracerProvider())
	c, err := LoadConfig(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Setup(context.Background(), c, "lizard-test", nil, slog.Default()); err != nil {
		t.Fatal(err)
	}
	_, sp := Start(context.Background(), "x")
	if sp.IsRecording() {
		t.Error("a span records with tracing off")
	}
	// Off, a caller's trace still passes through to the next hop.
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	var got string
	h := Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := http.Header{}
		Inject(r.Context(), h)
		got = h.Get("traceparent")
	}))
	req := httptest.NewRequest("GET", "/v1/health", nil)
	req.Header.Set("traceparent", tp)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got != tp {
		t.Errorf("traceparent passed on = %q; want the caller's %q", got, tp)
	}
}

// TestExport: spans reach an OTLP/HTTP receiver, the server span named by
// its route template, a child of the caller's traceparent, with the
// sandbox and project attributes.
func TestExport(t *testing.T) {
	rcv := otlptest.New(t)
	m, shutdown := setup(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL, "OTEL_BSP_SCHEDULE_DELAY": "50"})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		Annotate(r.Context(), Project("proj1"))
		Step(r.Context(), "node.pause", func(context.Context) error { return nil }, Sandbox(r.PathValue("id")))
		w.WriteHeader(http.StatusConflict)
	})
	const traceID, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	req := httptest.NewRequest("POST", "/v1/sandboxes/sb-123/pause", nil)
	req.Header.Set("traceparent", "00-"+traceID+"-"+parent+"-01")
	Middleware(mux).ServeHTTP(httptest.NewRecorder(), req)
	spans := rcv.Wait(t, 10*time.Second, func(s []otlptest.Span) bool { return len(s) >= 2 })
	byName := map[string]otlptest.Span{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	srv, ok := byName["POST /v1/sandboxes/{id}/pause"]
	if !ok {
		t.Fatalf("no span named by the route template; got %+v", spans)
	}
	if srv.TraceID != traceID || srv.ParentID != parent {
		t.Errorf("server span trace %s parent %s; want the caller's %s %s", srv.TraceID, srv.ParentID, traceID, parent)
	}
	if srv.Service != "lizard-test" || srv.Attrs[KeySandbox] != "sb-123" || srv.Attrs[KeyProject] != "proj1" || srv.Attrs["http.response.status_code"] == "" {
		t.Errorf("server span service %q attributes %v; want lizard-test, the sandbox, the project and the status", srv.Service, srv.Attrs)
	}
	step := byName["node.pause"]
	if step.ParentID != srv.SpanID || step.TraceID != traceID {
		t.Errorf("step's parent %s trace %s; want the server span %s in trace %s", step.ParentID, step.TraceID, srv.SpanID, traceID)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if n := dropped(m).sum(""); n != 0 {
		t.Errorf("%v spans dropped with the receiver up", n)
	}
}

func dropped(m *metrics.Metrics) *metricsCounter { return &metricsCounter{m} }

// metricsCounter sums lizard_trace_spans_dropped_total over its reasons.
type metricsCounter struct{ m *metrics.Metrics }

func (c *metricsCounter) sum(reason string) float64 {
	mfs, _ := c.m.Registry().Gather()
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "lizard_trace_spans_dropped_total" {
			continue
		}
		for _, mm := range mf.GetMetric() {
			for _, l := range mm.GetLabel() {
				if l.GetName() == "reason" && (reason == "" || l.GetValue() == reason) {
					n += mm.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// TestCollectorDown: with a collector that accepts connections and never
// answers, spans beyond the queue's bound are dropped and counted, and
// ending spans never waits on the collector.
func TestCollectorDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never answered
		}
	}()
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	m, _ := setup(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + ln.Addr().String(),
		"OTEL_BSP_MAX_QUEUE_SIZE": "8", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4", "OTEL_BSP_SCHEDULE_DELAY": "10", "OTEL_BSP_EXPORT_TIMEOUT": "30000"})
	const n = 500
	begin := time.Now()
	for range n {
		_, sp := Start(context.Background(), "call")
		sp.End()
	}
	took := time.Since(begin)
	// The exporter holds at most one batch and the queue 8: everything
	// past them is dropped, at once.
	if got := dropped(m).sum(metrics.DropQueueFull); got < n-8-4 {
		t.Errorf("queue_full drops = %v; want at least %d of %d", got, n-8-4, n)
	}
	// The export that hangs has 30 s; ending 500 spans took far less.
	if took > 5*time.Second {
		t.Errorf("ending %d spans took %s with the collector hung; it must not wait on it", n, took)
	}
}

// TestCollectorRefuses: spans a collector refuses are counted as
// export_failed.
func TestCollectorRefuses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusBadRequest) // not retried
	}))
	t.Cleanup(srv.Close)
	m, _ := setup(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_BSP_SCHEDULE_DELAY": "10"})
	for range 3 {
		_, sp := Start(context.Background(), "call")
		sp.End()
	}
	deadline := time.Now().Add(10 * time.Second)
	for dropped(m).sum(metrics.DropExportFailed) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("export_failed drops = %v; want 3", dropped(m).sum(metrics.DropExportFailed))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAgentSpans: the timings an agent reports in its trailer become
// children of the hop's span, nested as their times say, placed by their
// offsets from the send, and the trailer goes no further.
func TestAgentSpans(t *testing.T) {
	rcv := otlptest.New(t)
	setup(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL, "OTEL_BSP_SCHEDULE_DELAY": "50"})
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !api.TraceSampled(r.Header.Get("traceparent")) {
			t.Errorf("the agent got traceparent %q, not a sampled one", r.Header.Get("traceparent"))
		}
		w.Header().Set("Trailer", api.HeaderAgentSpans)
		io.WriteString(w, `{"type":"end"}`+"\n")
		w.Header().Set(api.HeaderAgentSpans,
			`[{"name":"agent.execute","startUs":0,"durUs":9000},{"name":"agent.kernel_wait","startUs":100,"durUs":1000},{"name":"kernel.execute","startUs":2000,"durUs":6000,"error":"boom"}]`)
	}))
	t.Cleanup(agent.Close)
	ctx, hop := StartClient(context.Background(), "agent POST /execute")
	req, _ := http.NewRequestWithContext(ctx, "POST", agent.URL, nil)
	Inject(ctx, req.Header)
	sent := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	AgentSpans(ctx, resp, sent, Sandbox("sb-1"))
	io.ReadAll(resp.Body)
	resp.Body.Close()
	if v := resp.Trailer.Get(api.HeaderAgentSpans); v != "" {
		t.Errorf("the trailer is still there after the hop: %q", v)
	}
	hop.End()
	spans := rcv.Wait(t, 10*time.Second, func(s []otlptest.Span) bool { return len(s) >= 4 })
	byName := map[string]otlptest.Span{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	h, ex, wait, kern := byName["agent POST /execute"], byName["agent.execute"], byName["agent.kernel_wait"], byName["kernel.execute"]
	if ex.ParentID != h.SpanID || wait.ParentID != ex.SpanID || kern.ParentID != ex.SpanID {
		t.Errorf("parents: agent.execute %s (want hop %s), kernel_wait %s and kernel.execute %s (want agent.execute %s)",
			ex.ParentID, h.SpanID, wait.ParentID, kern.ParentID, ex.SpanID)
	}
	if d := kern.End.Sub(kern.Start); d != 6*time.Millisecond {
		t.Errorf("kernel.execute lasted %s; want the reported 6ms", d)
	}
	if off := kern.Start.Sub(ex.Start); off != 2*time.Millisecond {
		t.Errorf("kernel.execute began %s after agent.execute; want the reported 2ms", off)
	}
	if !kern.Failed || kern.Attrs[KeySandbox] != "sb-1" {
		t.Errorf("kernel.execute failed=%v attrs %v; want failed with the sandbox", kern.Failed, kern.Attrs)
	}
}
