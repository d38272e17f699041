package metrics

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// agentRoutes are the sandbox-scoped paths the API proxies to the agent
// under one catch-all pattern; each gets a route label of its own. Any
// other path there is "other", so a caller cannot mint label values.
var agentRoutes = map[string]bool{
	"execute": true, "process": true, "contexts": true, "files": true, "health": true,
	"files/list": true, "files/stat": true, "files/mkdir": true,
}

// Middleware counts and times every request next serves. next must be (or
// wrap) an http.ServeMux: its pattern, set on the request while routing,
// is the route label. How runs (runCode, commands) end is counted by the
// agent proxy, which reads their streams on every surface (Execution,
// Process). On a nil *Metrics it returns next.
func (m *Metrics) Middleware(next http.Handler) http.Handler {
	if m == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &responseWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rw, r)
		took := time.Since(start).Seconds()
		route := Route(r)
		m.httpRequests.WithLabelValues(route, r.Method, strconv.Itoa(rw.status)).Inc()
		m.httpDuration.WithLabelValues(route, r.Method).Observe(took)
	})
}

// Execution counts a runCode that ended with outcome (agentproxy's
// Result*), in language; kernelDied: its kernel died during it or since
// the last one.
func (m *Metrics) Execution(language, outcome string, kernelDied bool, took time.Duration) {
	if m == nil {
		return
	}
	m.executions.WithLabelValues(language, outcome).Inc()
	m.executionDuration.WithLabelValues(language, outcome).Observe(took.Seconds())
	if kernelDied {
		m.kernelDeaths.Inc()
	}
}

// Process counts a command (POST /process) that ended with outcome.
func (m *Metrics) Process(outcome string, took time.Duration) {
	if m == nil {
		return
	}
	m.processes.WithLabelValues(outcome).Inc()
	m.processDuration.WithLabelValues(outcome).Observe(took.Seconds())
}

// Route is the request's mux pattern without its method, with the proxy's
// catch-all narrowed to the agent path it served: a name for the route
// that holds no sandbox id (the route label, and traces' span names).
func Route(r *http.Request) string {
	p := r.Pattern
	if _, after, ok := strings.Cut(p, " "); ok {
		p = after // "GET /v1/health" → "/v1/health"
	}
	if p == "" {
		return "none"
	}
	if base, ok := strings.CutSuffix(p, "{rest...}"); ok {
		rest := r.PathValue("rest")
		if agentRoutes[rest] {
			return base + rest
		}
		if head, _, _ := strings.Cut(rest, "/"); head == "contexts" {
			return base + "contexts/{context}" // delete, restart
		}
		return base + "other"
	}
	return p
}

// responseWriter remembers the status. Flush and Unwrap keep streaming
// working through it.
type responseWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *responseWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *responseWriter) Flush() {
	w.wrote = true
	http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
