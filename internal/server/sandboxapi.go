package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SandboxListeners serve the API to sandboxes created with lizardToken, one
// listener on each such sandbox's host address (manager.SandboxAPI). The
// main listener stays where --listen put it (loopback by default): the API
// is never opened to every address of the host, and the network policy
// lets a sandbox reach its own host address on Port only when it holds a
// token.
type SandboxListeners struct {
	Port   int
	Logger *slog.Logger

	mu      sync.Mutex
	handler http.Handler
	open    map[string]*http.Server
}

// SetHandler sets what the listeners serve: the API handler, made after the
// manager that opens listeners.
func (l *SandboxListeners) SetHandler(h http.Handler) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.handler = h
}

func (l *SandboxListeners) serveHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	h := l.handler
	l.mu.Unlock()
	if h == nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the API is starting; try again")
		return
	}
	h.ServeHTTP(w, r)
}

// Open listens on hostAddr:Port. The address may not exist yet (the
// sandbox's link is made next): IP_FREEBIND lets the socket bind anyway.
func (l *SandboxListeners) Open(id string, hostAddr netip.Addr) (string, int, error) {
	addr := net.JoinHostPort(hostAddr.String(), strconv.Itoa(l.Port))
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
		})
		return errors.Join(err, serr)
	}}
	ln, err := lc.Listen(context.Background(), "tcp4", addr)
	if err != nil {
		return "", 0, fmt.Errorf("listening on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(l.serveHTTP),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	if l.Logger != nil {
		srv.ErrorLog = slog.NewLogLogger(l.Logger.Handler(), slog.LevelWarn)
	}
	l.mu.Lock()
	if l.open == nil {
		l.open = map[string]*http.Server{}
	}
	if old := l.open[id]; old != nil {
		old.Close()
	}
	l.open[id] = srv
	l.mu.Unlock()
	go srv.Serve(ln)
	return "http://" + addr, l.Port, nil
}

// Close stops serving sandbox id.
func (l *SandboxListeners) Close(id string) {
	l.mu.Lock()
	srv := l.open[id]
	delete(l.open, id)
	l.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// CloseAll stops every listener, at shutdown.
func (l *SandboxListeners) CloseAll() {
	l.mu.Lock()
	open := l.open
	l.open = nil
	l.mu.Unlock()
	for _, srv := range open {
		srv.Close()
	}
}
