// Package inject sets secrets in the headers of requests leaving a
// sandbox (docs/secrets.md), on the node, so that the sandbox never holds
// them. The egress proxy (package egress) hands it each connection whose
// name matches one of the sandbox's inject rules; it serves the
// connection as HTTP/1.1 — over TLS it terminates with the sandbox's own
// certificate authority (Authorities) — and forwards every request on it
// to the address the proxy resolved, over TLS verified against the
// host's roots when the sandbox spoke TLS, with the rule's headers set
// (templates expanded at that moment) and any the sandbox sent under the
// same names removed.
//
// Only HTTP/1.1 is offered to the sandbox (ALPN), which every client
// falls back to; HTTP/2 would need a second server for no gain here.
package inject

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/internal/egress"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/netpolicy"
	"github.com/lizard-build/lizard/internal/secrets"
)

// Injector serves intercepted connections. Secrets, Authorities and
// Roots are required.
type Injector struct {
	Secrets     *secrets.Store
	Authorities *Authorities
	// Roots verify upstreams: the host's, and the operator's extra ones
	// (--egress-extra-roots). Verification is never skipped.
	Roots  *x509.CertPool
	Logger *slog.Logger

	// sessions resume the node's TLS sessions with upstreams, which
	// saves a full handshake on each new connection to the same one.
	once     sync.Once
	sessions tls.ClientSessionCache

	logMu  sync.Mutex
	logged map[logKey]*logged
}

// logKey is one kind of line of one sandbox's (logLimited).
type logKey struct{ sandbox, msg string }

type logged struct {
	at      time.Time
	dropped int
}

var _ egress.Interceptor = (*Injector)(nil)

// Intercept serves c until either side closes it or ctx ends, and closes
// it.
func (in *Injector) Intercept(ctx context.Context, c egress.InterceptConn) error {
	in.once.Do(func() { in.sessions = tls.NewLRUClientSessionCache(1024) })
	log := in.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("sandbox_id", c.SandboxID, "project_id", c.Project, "name", c.Name, "port", c.Port)
	client := c.Conn
	if c.TLS {
		ca, err := in.Authorities.Get(c.SandboxID)
		if err != nil {
			c.Conn.Close()
			return err
		}
		tc := tls.Server(c.Conn, &tls.Config{
			// The proxy matched the name; the certificate is for it
			// whatever the ClientHello says.
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return ca.Leaf(c.Name, time.Now()) },
			NextProtos:     []string{"http/1.1"},
			MinVersion:     tls.VersionTLS12,
		})
		hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			// Most often the sandbox does not trust its CA (a client with
			// its own roots): it sees a certificate error, and nothing
			// was sent.
			c.Conn.Close()
			in.logLimited(log, c.SandboxID, "egress TLS handshake with the sandbox failed", "err", err)
			return nil
		}
		client = tc
		// The sandbox's client may hold its request back (Nagle) until
		// its Finished is acknowledged, and Go's server sends nothing
		// after Finished (its ticket went with its own flight): without
		// this, the request waits for the delayed ACK, 40 ms and more.
		quickAck(c.Conn)
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return c.Dial(ctx) },
		// One upstream connection at a time for this one of the
		// sandbox's: HTTP/1.1 has one request in flight.
		MaxIdleConnsPerHost:   1,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   30 * time.Second,
		ResponseHeaderTimeout: 0, // as long as the upstream takes: the sandbox's client decides
		DisableCompression:    true,
	}
	if c.TLS {
		tr.DialTLSContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			raw, err := c.Dial(ctx)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(raw, &tls.Config{ServerName: c.Name, RootCAs: in.Roots, NextProtos: []string{"http/1.1"},
				ClientSessionCache: in.sessions, MinVersion: tls.VersionTLS12})
			if err := tc.HandshakeContext(ctx); err != nil {
				raw.Close()
				return nil, fmt.Errorf("TLS with %s: %w", c.Name, err)
			}
			return tc, nil
		}
	}
	defer tr.CloseIdleConnections()
	rp := &httputil.ReverseProxy{
		Rewrite:      func(pr *httputil.ProxyRequest) { in.rewrite(pr, c) },
		Transport:    &injecting{in: in, c: c, next: tr},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { in.fail(w, log, c.SandboxID, err) },
	}
	return serveOne(ctx, client, rp, log)
}

// rewrite aims the request at the upstream. The headers are set by
// injecting, where an error can still answer the sandbox.
func (in *Injector) rewrite(pr *httputil.ProxyRequest, c egress.InterceptConn) {
	u := *pr.In.URL
	u.Scheme = "http"
	if c.TLS {
		u.Scheme = "https"
	}
	u.Host = c.Name
	if (c.TLS && c.Port != 443) || (!c.TLS && c.Port != 80) {
		u.Host = net.JoinHostPort(c.Name, strconv.Itoa(c.Port))
	}
	pr.Out.URL = &u
	pr.Out.Host = pr.In.Host
}

// injecting sets c's headers on each request just before it goes
// upstream: the secrets are opened then, and nowhere else.
type injecting struct {
	in   *Injector
	c    egress.InterceptConn
	next http.RoundTripper
}

// errMisdirected is a request on the connection for another host than
// the one the proxy checked.
var errMisdirected = errors.New("misdirected")

func (t *injecting) RoundTrip(r *http.Request) (*http.Response, error) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if !strings.EqualFold(strings.TrimSuffix(host, "."), t.c.Name) {
		return nil, fmt.Errorf("%w: Host %q on a connection to %s", errMisdirected, r.Host, t.c.Name)
	}
	for name, tmpl := range t.c.Headers {
		v, err := netpolicy.ExpandTemplate(tmpl, func(secret string) (string, error) {
			return t.in.Secrets.Open(r.Context(), t.c.Project, secret, secrets.Use{SandboxID: t.c.SandboxID, Host: t.c.Name, Plain: !t.c.TLS})
		})
		if err != nil {
			return nil, &injectError{header: name, err: err}
		}
		// Set replaces every value the sandbox sent under the name.
		r.Header.Set(name, v)
	}
	return t.next.RoundTrip(r)
}

// injectError is a header that could not be made: the request is not
// sent without it.
type injectError struct {
	header string
	err    error
}

func (e *injectError) Error() string { return fmt.Sprintf("header %s: %v", e.header, e.err) }
func (e *injectError) Unwrap() error { return e.err }

// fail answers the sandbox a request that did not go out or got no
// answer. The message names what failed, never a value: errors from
// secrets say the name of the secret alone.
func (in *Injector) fail(w http.ResponseWriter, log *slog.Logger, sandboxID string, err error) {
	status, msg := http.StatusBadGateway, "lizard egress: the upstream did not answer: "+err.Error()
	var ie *injectError
	var ve *tls.CertificateVerificationError
	switch {
	case errors.Is(err, errMisdirected):
		status, msg = http.StatusMisdirectedRequest, "lizard egress: "+err.Error()
	case errors.As(err, &ie):
		msg = "lizard egress: the request was not sent: " + err.Error()
		if errors.Is(err, errdefs.ErrForbidden) {
			status = http.StatusForbidden // the secret's scope refused it
		}
	case errors.As(err, &ve):
		msg = "lizard egress: the upstream's certificate is not trusted by the node: " + ve.Err.Error()
	case errors.Is(err, context.Canceled):
		return // the sandbox went away
	}
	in.logLimited(log, sandboxID, "egress request with secrets failed", "status", status, "err", err)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprintln(w, msg)
}

// logLimited logs msg for sandbox id at most once a second, counting the
// lines dropped in between in the next one. Code in the sandbox makes
// these failures at its own rate (a connection or a request each), and
// the node's log is a file on the host outside every bound of the
// sandbox.
func (in *Injector) logLimited(log *slog.Logger, id, msg string, args ...any) {
	now := time.Now()
	k := logKey{id, msg}
	in.logMu.Lock()
	if in.logged == nil {
		in.logged = map[logKey]*logged{}
	}
	l := in.logged[k]
	if l != nil && now.Sub(l.at) < time.Second {
		l.dropped++
		in.logMu.Unlock()
		return
	}
	if l == nil {
		if len(in.logged) >= 4096 {
			for k, l := range in.logged {
				if now.Sub(l.at) >= time.Second {
					delete(in.logged, k)
				}
			}
		}
		l = &logged{}
		in.logged[k] = l
	}
	dropped := l.dropped
	l.at, l.dropped = now, 0
	in.logMu.Unlock()
	if dropped > 0 {
		args = append(args, "dropped", dropped)
	}
	log.Info(msg, args...)
}

// quickAck acknowledges at once what conn's socket has received.
func quickAck(conn net.Conn) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1) })
}

// maxRequestHeader bounds a request's headers from the sandbox, which the
// server holds whole: as much as the proxy reads to find a plain
// request's Host (egress.maxPeek).
const maxRequestHeader = 64 << 10

// serveOne serves HTTP/1.1 on conn alone until it closes or ctx ends.
func serveOne(ctx context.Context, conn net.Conn, h http.Handler, log *slog.Logger) error {
	ln := &oneConn{conn: conn, done: make(chan struct{})}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    maxRequestHeader,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				ln.Close()
			}
		},
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// oneConn is a listener of one connection: Accept returns it, then
// blocks until Close.
type oneConn struct {
	mu   sync.Mutex
	conn net.Conn
	done chan struct{}
	once sync.Once
}

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConn) Addr() net.Addr { return dummyAddr{} }

type dummyAddr struct{}

func (dummyAddr) Network() string { return "tcp" }
func (dummyAddr) String() string  { return "sandbox" }
