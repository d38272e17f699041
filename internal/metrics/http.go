package metrics

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
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
// is the route label. Execute and process streams are also read as they
// pass, for their outcomes (lizard_executions_total,
// lizard_processes_total) and for kernel deaths, which only the agent's
// events tell (lizard_kernel_deaths_total). On a nil *Metrics it returns
// next.
func (m *Metrics) Middleware(next http.Handler) http.Handler {
	if m == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &responseWriter{ResponseWriter: w, status: http.StatusOK}
		var body *headReader
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/execute") && r.Body != nil {
			body = &headReader{r: r.Body}
			r.Body = body
		}
		if r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/execute") || strings.HasSuffix(r.URL.Path, "/process")) {
			rw.sniff = &streamSniffer{}
		}
		next.ServeHTTP(rw, r)
		took := time.Since(start).Seconds()
		route := Route(r)
		m.httpRequests.WithLabelValues(route, r.Method, strconv.Itoa(rw.status)).Inc()
		m.httpDuration.WithLabelValues(route, r.Method).Observe(took)
		switch route {
		case "/v1/sandboxes/{id}/execute":
			if r.Method != http.MethodPost {
				return
			}
			lang := "unknown"
			if body != nil {
				lang = body.language()
			}
			o := rw.sniff.executeOutcome(rw.status)
			m.executions.WithLabelValues(lang, o).Inc()
			if rw.sniff.kernelDied {
				m.kernelDeaths.Inc()
			}
			m.executionDuration.WithLabelValues(lang, o).Observe(took)
		case "/v1/sandboxes/{id}/process":
			if r.Method != http.MethodPost {
				return
			}
			o := rw.sniff.processOutcome(rw.status)
			m.processes.WithLabelValues(o).Inc()
			m.processDuration.WithLabelValues(o).Observe(took)
		}
	})
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

// responseWriter remembers the status and feeds the body to a sniffer.
// Flush and Unwrap keep streaming working through it.
type responseWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
	sniff  *streamSniffer
}

func (w *responseWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	w.wrote = true
	if w.sniff != nil && w.status == http.StatusOK {
		w.sniff.write(b)
	}
	return w.ResponseWriter.Write(b)
}

func (w *responseWriter) Flush() {
	w.wrote = true
	http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// headLen is how much of each NDJSON line the sniffer keeps: enough for the
// event type, an error's name and an end event's exit code, which the wire
// types put first.
const headLen = 128

// streamSniffer reads an NDJSON event stream for its outcome, keeping only
// the head of each line: outputs can be large and are none of its business.
type streamSniffer struct {
	head       []byte
	sawError   bool
	timeout    bool
	kernelDied bool
	sawEnd     bool
	exitCode   *int
}

func (s *streamSniffer) write(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		line := b
		if i >= 0 {
			line = b[:i]
		}
		if n := headLen - len(s.head); n > 0 {
			s.head = append(s.head, line[:min(n, len(line))]...)
		}
		if i < 0 {
			return
		}
		s.endLine()
		b = b[i+1:]
	}
}

func (s *streamSniffer) endLine() {
	h := string(s.head)
	s.head = s.head[:0]
	switch {
	case strings.HasPrefix(h, `{"type":"error"`):
		s.sawError = true
		if strings.Contains(h, `"name":"`+api.ErrorNameTimeout+`"`) {
			s.timeout = true
		}
		if strings.Contains(h, `"name":"`+api.ErrorNameKernelDied+`"`) {
			s.kernelDied = true // died during this call
		}
	case strings.HasPrefix(h, `{"type":"stderr","text":"[lizard] the kernel died`):
		s.kernelDied = true // died since the last call; this one runs on a new kernel
	case strings.HasPrefix(h, `{"type":"end"`):
		s.sawEnd = true
		if _, after, ok := strings.Cut(h, `"exitCode":`); ok {
			end := strings.IndexAny(after, ",}")
			if end > 0 {
				if n, err := strconv.Atoi(after[:end]); err == nil {
					s.exitCode = &n
				}
			}
		}
	}
}

func (s *streamSniffer) executeOutcome(status int) string {
	switch {
	case status != http.StatusOK:
		return "rejected"
	case !s.sawEnd:
		return "cut"
	case s.timeout:
		return "timeout"
	case s.kernelDied && s.sawError:
		return "kernel_died"
	case s.sawError:
		return "error"
	}
	return "ok"
}

func (s *streamSniffer) processOutcome(status int) string {
	switch {
	case status != http.StatusOK:
		return "rejected"
	case !s.sawEnd || s.exitCode == nil:
		return "cut"
	case *s.exitCode == 0:
		return "ok"
	case *s.exitCode == 124:
		return "timeout"
	case *s.exitCode == -1:
		return "failed"
	}
	return "exit_nonzero"
}

// bodyHeadLen bounds what is kept of an execute request to find its
// language; code longer than that is labelled "unknown".
const bodyHeadLen = 64 << 10

// headReader passes a request body through, keeping its first bodyHeadLen
// bytes.
type headReader struct {
	r    io.ReadCloser
	head []byte
	over bool
}

func (h *headReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if room := bodyHeadLen - len(h.head); room > 0 {
		h.head = append(h.head, p[:min(n, room)]...)
		h.over = n > room
	} else if n > 0 {
		h.over = true
	}
	return n, err
}

func (h *headReader) Close() error { return h.r.Close() }

func (h *headReader) language() string {
	if h.over {
		return "unknown"
	}
	var req struct {
		Language  string `json:"language"`
		ContextID string `json:"contextId"`
	}
	if json.Unmarshal(h.head, &req) != nil {
		return "unknown"
	}
	// A contextId's own language wins over the field; the console and the
	// SDKs send both, so the field is right in practice.
	switch strings.ToLower(strings.TrimSpace(req.Language)) {
	case "", "python", "py", "python3":
		return "python"
	case "javascript", "js", "node", "nodejs":
		return "javascript"
	case "bash", "sh", "shell":
		return "bash"
	}
	return "unknown"
}
