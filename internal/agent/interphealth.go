package agent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"

	"github.com/lizard-build/lizard/api"
)

// DefaultHealthListen is where E2B's code interpreter answers GET /health
// inside its sandboxes: E2B's suite, and code written for E2B, check
// `curl http://0.0.0.0:49999/health` from inside before running code. The
// agent's own API refuses every request from inside the sandbox
// (guard.go), so this is a listener of its own that answers that one path
// and nothing else: no secret, no state, no way to the agent's handlers.
const DefaultHealthListen = "0.0.0.0:49999"

// healthConns bounds the connections the health listener serves at once:
// code inside may open as many as it likes, and each is a goroutine of
// the agent's.
const healthConns = 16

// healthHandler answers GET /health with 200 and E2B's body, "OK" as
// JSON, while the agent serves (503 once it is shutting down); anything
// else is 404.
func (a *Agent) healthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		closed := a.closed
		a.mu.Unlock()
		if closed {
			api.WriteJSON(w, http.StatusServiceUnavailable, "shutting down")
			return
		}
		api.WriteJSON(w, http.StatusOK, "OK")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "only GET /health is served here (the code interpreter's health, as on E2B)", http.StatusNotFound)
	})
	return mux
}

// serveHealth serves healthHandler on cfg.HealthListen until ctx ends. It
// is best-effort: a port taken by code (or a listener that fails) is
// logged, and the agent serves on without it.
func (a *Agent) serveHealth(ctx context.Context) {
	if a.cfg.HealthListen == "" {
		return
	}
	ln, err := net.Listen("tcp", a.cfg.HealthListen)
	if err != nil {
		a.log.Warn("not serving the interpreter's /health", "addr", a.cfg.HealthListen, "err", err)
		return
	}
	srv := &http.Server{
		Handler:           a.healthHandler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      5 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    8 << 10,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
	}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	a.log.Info("serving the interpreter's /health", "addr", ln.Addr().String())
	if err := srv.Serve(netutil.LimitListener(ln, healthConns)); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.log.Warn("interpreter /health stopped", "err", err)
	}
}
