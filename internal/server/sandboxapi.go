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

	"github.com/lizard-build/lizard/internal/node"
)

// SandboxListeners serve the API to sandboxes created with lizardToken, one
// listener on each such sandbox's host address, opened when the sandbox
// starts and closed when it stops (Handle, subscribed to the node's
// lifecycle events). The main listener stays where --listen put it
// (loopback by default): the API is never opened to every address of the
// host, and the network policy lets a sandbox reach its own host address
// on Port only when it holds a token.
type SandboxListeners struct {
	port    int
	handler http.Handler
	log     *slog.Logger

	mu   sync.Mutex
	open map[string]*http.Server
}

// NewSandboxListeners returns listeners serving h on port.
func NewSandboxListeners(port int, h http.Handler, logger *slog.Logger) *SandboxListeners {
	return &SandboxListeners{port: port, handler: h, log: logger, open: map[string]*http.Server{}}
}

// Handle opens a listener for a lizardToken sandbox that started and
// closes it when the sandbox stops.
func (l *SandboxListeners) Handle(e node.Event) {
	switch {
	case e.Kind == node.Stopped:
		l.Close(e.SandboxID)
	case e.Kind == node.Started && e.Token:
		host, err := netip.ParseAddr(e.HostAddr)
		if err == nil {
			err = l.Open(e.SandboxID, host)
		}
		if err != nil {
			l.log.Error("opening the API to a sandbox holding a lizardToken", "sandbox_id", e.SandboxID, "err", err)
		}
	}
}

// Open listens on hostAddr:Port. The address may not exist yet (the
// sandbox's link is made next): IP_FREEBIND lets the socket bind anyway.
func (l *SandboxListeners) Open(id string, hostAddr netip.Addr) error {
	addr := net.JoinHostPort(hostAddr.String(), strconv.Itoa(l.port))
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
		})
		return errors.Join(err, serr)
	}}
	ln, err := lc.Listen(context.Background(), "tcp4", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           l.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	if l.log != nil {
		srv.ErrorLog = slog.NewLogLogger(l.log.Handler(), slog.LevelWarn)
	}
	l.mu.Lock()
	if old := l.open[id]; old != nil {
		old.Close()
	}
	l.open[id] = srv
	l.mu.Unlock()
	go srv.Serve(ln)
	return nil
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
	l.open = map[string]*http.Server{}
	l.mu.Unlock()
	for _, srv := range open {
		srv.Close()
	}
}
