// Package server is Lizard's HTTP API v1 (docs/architecture.md): sandbox
// lifecycle calls served from the control plane, and the public agent
// calls (execute, contexts, process, files) proxied to the sandbox's agent
// after the caller's key and the sandbox's project and state are checked.
package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/desktop"
	"github.com/lizard-build/lizard/internal/e2b"
	"github.com/lizard-build/lizard/internal/e2b/envd"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/fdbudget"
	"github.com/lizard-build/lizard/internal/inflight"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/trace"
	"github.com/lizard-build/lizard/internal/version"
)

// Config says what the API serves.
type Config struct {
	Control *control.Control
	// Keys authenticates callers: API keys (*auth.Verifier).
	Keys interface {
		Require(next http.Handler) http.Handler
	}
	Logger *slog.Logger // default slog.Default()
	// KeyLimits bound each API key's request rate (ratelimit.go).
	KeyLimits KeyLimits
	// Descriptors, when set, counts each project's requests under way
	// against its budget of this process's file descriptors (package
	// fdbudget; on `lizard serve` the node's, shared with its sandboxes'
	// connections).
	Descriptors *fdbudget.Budget
	// Audit receives create and kill events with key IDs; nil: none.
	Audit *slog.Logger
	// Console serves every path outside /v1 (the web console); nil: a
	// JSON 404 like unknown API paths.
	Console http.Handler
	// Metrics counts and times every request; nil: none.
	Metrics *metrics.Metrics
	// MaxFileBytes bounds a file upload (PUT /files) passed to an agent;
	// 0: no bound but the sandbox's disk.
	MaxFileBytes int64
	// PortsDomain, when set, serves sandboxes' exposed ports at
	// <port>-<sandboxId>.<PortsDomain> (ports.go).
	PortsDomain string
	// E2B, when set, serves E2B's API and sandbox protocols under /e2b
	// (internal/e2b) with this API's keys, rate limits, errors and audit;
	// its Control, Keys, Limit, Audit and Logger are filled here.
	E2B *e2b.Config
	// MCP, when set, serves the Model Context Protocol at /mcp
	// (internal/mcp) to callers with an API key.
	MCP http.Handler
	// Nodes, when set, serves /v1/nodes/ (a cluster's drain and undrain,
	// cluster.Router.AdminHandler), which checks its own credential.
	Nodes http.Handler
}

// Server is the API's http.Handler.
type Server struct {
	c       *control.Control
	log     *slog.Logger
	handler http.Handler
	// auditLog is Config.Audit.
	auditLog    *slog.Logger
	keys        *auth.Verifier
	portsDomain string
	// e2b serves E2B's surface, when on; with a ports domain it also takes
	// E2B's host form of sandbox calls (49983-<id>.D, 49999-<id>.D).
	e2b     http.Handler
	maxFile int64
	// observe counts how each run through the agent proxy ended, on
	// every surface (agentproxy.Metered).
	observe func(agentproxy.Outcome)

	// portsInFlight counts each sandbox's requests to its ports under way
	// (ports.go), which no key's bounds cover.
	portsInFlight *inflight.Limit
}

// New returns the API handler.
func New(cfg Config) *Server {
	s := &Server{c: cfg.Control, log: cfg.Logger, portsDomain: cfg.PortsDomain, maxFile: cfg.MaxFileBytes, portsInFlight: inflight.New(maxPortsInFlight),
		observe: agentproxy.Metered(cfg.Metrics)}
	// API keys on exposed ports are checked by hand (ports.go); a cluster
	// node's forwarded calls carry none.
	s.keys, _ = cfg.Keys.(*auth.Verifier)
	if s.log == nil {
		s.log = slog.Default()
	}
	s.auditLog = cfg.Audit
	if cfg.Keys == nil {
		cfg.Keys = (*auth.Verifier)(nil) // tests of handlers that need no key
	}
	lim := &keyLimiter{lim: cfg.KeyLimits, m: map[string]*rate.Limiter{}, inFlight: inflight.New(maxInFlight), fds: cfg.Descriptors}
	authed := func(h http.HandlerFunc) http.Handler {
		return socketKey(cfg.Keys.Require(traced(lim.limit(h, refuseNative))))
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", s.health)
	// Methods are dispatched by hand on these two so that a wrong method
	// gets a JSON 405 like every other error.
	mux.Handle("/v1/sandboxes", authed(s.sandboxes))
	mux.Handle("/v1/sandboxes/{id}", authed(s.sandbox))
	mux.Handle("POST /v1/sandboxes/{id}/timeout", authed(s.setTimeout))
	mux.Handle("GET /v1/sandboxes/{id}/metrics", authed(s.metrics))
	mux.Handle("PATCH /v1/sandboxes/{id}/network", authed(s.updateNetwork))
	mux.Handle("GET /v1/sandboxes/{id}/network/log", authed(s.networkLog))
	for _, p := range api.AgentPublicPaths {
		mux.Handle("/v1/sandboxes/{id}"+p, authed(s.proxy))
	}
	s.snapshotRoutes(mux, authed)
	s.volumeRoutes(mux, authed)
	s.portRoutes(mux)
	s.templateRoutes(mux, authed)
	s.secretRoutes(mux, authed)
	s.projectNetworkRoutes(mux, authed)
	// GET /v1/events and /v1/webhooks are API paths only where the
	// control plane keeps them (Control.EventsKept, WebhooksKept); a
	// server without one (the console's tests) serves neither.
	if s.c != nil && s.c.EventsKept() {
		mux.Handle("GET /v1/events", authed(s.listEvents))
	}
	s.webhookRoutes(mux, authed)
	desktop.New(desktop.Config{Sandboxes: s.c, ServePort: s.viewerPort, Fail: s.fail, Decode: decodeJSON, Logger: s.log}).Routes(mux, authed)
	if cfg.Nodes != nil {
		mux.Handle("/v1/nodes", cfg.Nodes)
		mux.Handle("/v1/nodes/", cfg.Nodes)
	} else {
		// lizard serve has no nodes: a key's caller is told so, one
		// without a key is asked for one first, as on every path.
		mux.Handle("GET /v1/nodes", authed(func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusNotFound, api.CodeNotFound, "lizard serve has no nodes: GET /v1/nodes lists a cluster's, on lizard api (docs/cluster.md)")
		}))
	}
	// Other methods on the server's own paths get a JSON 405, not the
	// proxy (which would ask the agent for /timeout).
	for _, p := range []string{"/v1/sandboxes/{id}/timeout", "/v1/sandboxes/{id}/pause", "/v1/sandboxes/{id}/resume", "/v1/sandboxes/{id}/snapshots", "/v1/sandboxes/{id}/fork", "/v1/sandboxes/{id}/metrics", "/v1/sandboxes/{id}/network", "/v1/sandboxes/{id}/network/log"} {
		mux.HandleFunc(p, notFound(mux))
	}
	mux.HandleFunc("/v1/", notFound(mux))
	if cfg.E2B != nil && s.keys != nil {
		ec := *cfg.E2B
		ec.Control, ec.Keys, ec.Logger = s.c, s.keys, s.log
		ec.Limit, ec.Rate = lim.limit, lim.limitRate
		ec.Audit = s.audit
		ec.Observe = s.observe
		if ec.Envd == nil {
			ec.Envd = envd.New(envd.Config{Sandboxes: s.c, Logger: s.log, Target: e2bTarget, MaxFileBytes: s.maxFile})
			// Sandboxes say the version whose features envd serves: the
			// SDKs gate on it.
			ec.EnvdVersion = envd.Version
		}
		e2bh := e2b.New(ec)
		s.e2b = e2bh
		mux.Handle("/e2b/", s.e2b)
		// E2B's SDK makes a signed file URL from E2B_SANDBOX_URL's host
		// alone: the signature names the sandbox (not the console).
		mux.HandleFunc("/files", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Has("signature") {
				e2bh.UnroutedFile(w, r)
				return
			}
			if cfg.Console != nil {
				cfg.Console.ServeHTTP(w, r)
				return
			}
			notFound(mux)(w, r)
		})
	}
	if cfg.MCP != nil {
		mux.Handle("/mcp", authed(cfg.MCP.ServeHTTP))
	}
	if cfg.Console != nil {
		mux.Handle("/", cfg.Console)
	} else {
		mux.HandleFunc("/", notFound(mux))
	}
	s.handler = trace.Middleware(cfg.Metrics.Middleware(s.logRequests(s.hostPorts(mux))))
	return s
}

// traced names the caller's project on the request's span.
func traced(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := auth.CallerOf(r.Context()); ok {
			trace.Annotate(r.Context(), trace.Project(c.ProjectID))
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	m, err := s.c.Metrics(r.Context(), project, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, m)
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	api.WriteJSON(w, http.StatusOK, api.Health{Status: "ok", Version: version.Version})
}

func (s *Server) sandboxes(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	switch r.Method {
	case http.MethodPost:
		var req api.CreateSandboxRequest
		if err := decodeJSON(w, r, &req, true); err != nil {
			s.fail(w, r, err)
			return
		}
		caller, _ := auth.CallerOf(r.Context())
		sb, err := s.c.CreateBy(r.Context(), project, caller.SandboxID, req)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		api.WriteJSON(w, http.StatusCreated, sb)
	case http.MethodGet:
		f, err := listFilter(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		sbs, err := s.c.List(r.Context(), project, f)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		api.WriteJSON(w, http.StatusOK, api.SandboxList{Sandboxes: sbs})
	default:
		methodNotAllowed(w, r, "GET, POST")
	}
}

// listFilter reads ?metadata=k=v and ?state=s, each repeated for several.
func listFilter(r *http.Request) (control.ListFilter, error) {
	var f control.ListFilter
	q := r.URL.Query()
	for _, kv := range q["metadata"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return f, errdefs.Invalidf("metadata filter %q: want key=value, such as metadata=user=alice", kv)
		}
		if f.Metadata == nil {
			f.Metadata = map[string]string{}
		}
		f.Metadata[k] = v
	}
	for _, st := range q["state"] {
		if st == "" {
			return f, errdefs.Invalidf("state filter is empty: give a state, such as state=running, or leave the parameter out")
		}
		f.States = append(f.States, st)
	}
	return f, nil
}

func (s *Server) sandbox(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	id := r.PathValue("id")
	switch r.Method {
	case http.MethodGet:
		sb, err := s.c.Get(r.Context(), project, id)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		api.WriteJSON(w, http.StatusOK, sb)
	case http.MethodDelete:
		if err := s.c.Kill(r.Context(), project, id); err != nil {
			s.fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		methodNotAllowed(w, r, "GET, DELETE")
	}
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	var req api.SetTimeoutRequest
	if err := decodeJSON(w, r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.TimeoutMs == nil {
		s.fail(w, r, errdefs.Invalidf("timeoutMs is required: milliseconds from now, or 0 to never expire"))
		return
	}
	sb, err := s.c.SetTimeout(r.Context(), project, r.PathValue("id"), *req.TimeoutMs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, sb)
}

// updateNetwork answers PATCH /v1/sandboxes/{id}/network (docs/network.md).
func (s *Server) updateNetwork(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	var req api.UpdateNetworkRequest
	if err := decodeJSON(w, r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	caller, _ := auth.CallerOf(r.Context())
	pol, err := s.c.UpdateNetworkBy(r.Context(), project, caller.SandboxID, r.PathValue("id"), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, pol)
}

// networkLog answers GET /v1/sandboxes/{id}/network/log.
func (s *Server) networkLog(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	log, err := s.c.NetworkLog(r.Context(), project, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, log)
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path+"; use "+allow)
}

// logRequests logs one line per request, with the sandbox and project when
// known.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		attrs := []slog.Attr{
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", rec.status), slog.Duration("took", time.Since(start).Round(time.Microsecond)),
		}
		if id := r.PathValue("id"); id != "" {
			attrs = append(attrs, slog.String("sandbox_id", id))
		}
		level := slog.LevelInfo
		if r.URL.Path == "/v1/health" {
			level = slog.LevelDebug
		}
		s.log.LogAttrs(r.Context(), level, "request", attrs...)
	})
}

// statusRecorder remembers the status written. Unwrap lets
// http.ResponseController (and so the proxy's flushing) reach the real
// writer.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (rec *statusRecorder) WriteHeader(code int) {
	if !rec.wrote {
		rec.status, rec.wrote = code, true
	}
	rec.ResponseWriter.WriteHeader(code)
}

func (rec *statusRecorder) Write(b []byte) (int, error) {
	rec.wrote = true
	return rec.ResponseWriter.Write(b)
}

func (rec *statusRecorder) Flush() {
	rec.wrote = true
	http.NewResponseController(rec.ResponseWriter).Flush()
}

func (rec *statusRecorder) Unwrap() http.ResponseWriter { return rec.ResponseWriter }

// ShutdownTimeout bounds how long Run waits for requests in flight (such as
// NDJSON streams) when its context ends.
const ShutdownTimeout = 10 * time.Second

// Run serves h on ln until ctx ends, then shuts down gracefully. Sandboxes
// are not touched: they outlive the server and are served again after a
// restart.
func Run(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		// No ReadTimeout or WriteTimeout: uploads and NDJSON streams may
		// rightly last as long as the code they run.
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down the API; sandboxes keep running")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		logger.Warn("requests still running after the shutdown timeout; closing them", "timeout", ShutdownTimeout)
		err = srv.Close()
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// e2bTarget is the sandbox the E2B router authenticated a call for, as
// envd asks for it.
func e2bTarget(ctx context.Context) (projectID, sandboxID string, ok bool) {
	t, ok := e2b.Target(ctx)
	return t.ProjectID, t.SandboxID, ok
}
