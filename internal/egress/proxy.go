package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/internal/fdbudget"
	"github.com/lizard-build/lizard/internal/netpolicy"
)

// peekTimeout bounds how long a sandbox may take to send the first bytes
// (ClientHello or request head) the proxy needs to decide, unless
// Proxy.PeekTimeout says otherwise.
const peekTimeout = 10 * time.Second

// maxPeek bounds the bytes read to find the name.
const maxPeek = 64 << 10

// Proxy is the transparent proxy the sandbox's TCP connections to its
// policy's Ports are redirected to. It finds the sandbox by the
// connection's source address, reads the TLS SNI (without terminating
// TLS) or the HTTP Host, checks that name against the policy, resolves it
// itself and connects to an address Reachable allows — never to the
// address the sandbox asked for.
type Proxy struct {
	Table    *Table
	Resolver *Resolver
	// Reachable says whether an address is one a sandbox may reach at
	// all (not the host, a private or special-purpose range; package
	// netns's rules).
	Reachable func(netip.Addr) bool
	// OrigDst is where the sandbox's connection was going (before the
	// redirect); SO_ORIGINAL_DST when nil.
	OrigDst func(net.Conn) (netip.AddrPort, error)
	// Interceptor, when set, takes the connections that match an inject
	// rule.
	Interceptor Interceptor
	Logger      *slog.Logger
	// Decided, when set, is told every decision (metrics).
	Decided func(sb Sandbox, d Decision)
	// PeekTimeout, when set, replaces peekTimeout (tests that hold
	// connections open longer than a loaded machine takes to open them).
	PeekTimeout time.Duration

	ln     net.Listener
	wg     sync.WaitGroup
	closed atomic.Bool
}

// Start listens on addr and serves until Close.
func (p *Proxy) Start(addr string) error {
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		return fmt.Errorf("listening for the egress proxy: %w", err)
	}
	p.ln = ln
	p.wg.Add(1)
	go p.serve()
	return nil
}

// Port is the port the proxy listens on.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Close stops accepting; connections open go on until they end.
func (p *Proxy) Close() error {
	p.closed.Store(true)
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.closed.Load() {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			p.Logger.Error("egress proxy accept", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		go p.handle(c)
	}
}

func (p *Proxy) handle(c net.Conn) {
	src, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	sb, ok := p.Table.ByAddr(src.Addr())
	if !ok {
		c.Close() // not a sandbox with a policy
		return
	}
	untrack, ok, full, refused := p.Table.track(sb.ID, c, fdbudget.Egress)
	if !ok {
		if full {
			p.Logger.Warn("egress proxy: a sandbox has the most connections open at once; further ones are reset",
				"sandbox_id", sb.ID, "max", MaxConns)
		}
		if refused != nil {
			p.decided(sb, Decision{Time: time.Now(), Kind: KindTCP, Reason: refused.Error()})
		}
		return
	}
	defer untrack()
	d, err := p.decide(c, sb)
	if err != nil {
		d.Reason = err.Error()
		p.decided(sb, *d)
		c.Close()
		return
	}
	p.decided(sb, *d)
}

// origDst is SO_ORIGINAL_DST: where a redirected connection was going.
func origDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, errors.New("not a TCP connection")
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var mreq *unix.IPv6Mreq
	var serr error
	if err := raw.Control(func(fd uintptr) {
		mreq, serr = unix.GetsockoptIPv6Mreq(int(fd), unix.IPPROTO_IP, unix.SO_ORIGINAL_DST)
	}); err != nil {
		return netip.AddrPort{}, err
	}
	if serr != nil {
		return netip.AddrPort{}, fmt.Errorf("reading the original destination: %w", serr)
	}
	b := mreq.Multiaddr // a sockaddr_in
	a := netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]})
	return netip.AddrPortFrom(a, uint16(b[2])<<8|uint16(b[3])), nil
}

// decide reads the name, checks it and, when allowed, carries the
// connection to its end. The Decision it returns is complete (bytes
// included); on error it holds what was known.
func (p *Proxy) decide(c net.Conn, sb Sandbox) (*Decision, error) {
	d := &Decision{Time: time.Now()}
	get := p.OrigDst
	if get == nil {
		get = origDst
	}
	dst, err := get(c)
	if err != nil {
		return d, err
	}
	d.Port = int(dst.Port())
	if !sb.Policy.Proxied(d.Port) {
		return d, fmt.Errorf("port %d is not one the policy proxies", d.Port)
	}
	rec := &recorder{r: c}
	wait := peekTimeout
	if p.PeekTimeout > 0 {
		wait = p.PeekTimeout
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	br := bufio.NewReaderSize(io.LimitReader(rec, maxPeek), 4096)
	first, err := br.Peek(1)
	if err != nil {
		return d, fmt.Errorf("reading the first bytes: %w", err)
	}
	var name string
	isTLS := first[0] == 0x16 // a TLS handshake record
	if isTLS {
		d.Kind = KindTLS
		name, err = serverName(br)
	} else {
		d.Kind = KindHTTP
		name, err = httpHost(br)
	}
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		if !isTLS {
			refuse(c, err.Error())
		}
		return d, err
	}
	d.Name = name
	if !sb.Policy.AllowName(name) {
		if !isTLS {
			refuse(c, "egress to "+name+" is denied by the sandbox's network policy")
		}
		return d, errors.New("denied by policy")
	}
	addr, err := p.resolve(name)
	if err != nil {
		if !isTLS {
			refuse(c, err.Error())
		}
		return d, err
	}
	d.Addr = addr.String()
	target := net.JoinHostPort(addr.String(), strconv.Itoa(d.Port))
	dial := func(ctx context.Context) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "tcp4", target)
	}
	if rule, ok := sb.Policy.HeaderRule(name); ok && p.Interceptor != nil {
		d.Allowed = true
		counted := &countConn{Conn: &replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(rec.buf.Bytes()), c)}}
		err := p.Interceptor.Intercept(context.Background(), InterceptConn{SandboxID: sb.ID, Project: sb.Project,
			Conn: counted, Name: name, Port: d.Port, TLS: isTLS, Headers: rule.Headers, Dial: dial})
		d.BytesOut, d.BytesIn = counted.in.Load(), counted.out.Load()
		if err != nil {
			p.Logger.Warn("egress interceptor", "sandbox_id", sb.ID, "name", name, "err", err)
		}
		return d, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	up, err := dial(ctx)
	cancel()
	if err != nil {
		return d, fmt.Errorf("connecting to %s: %w", target, err)
	}
	d.Allowed = true
	// What was read to find the name goes first; then the two sockets are
	// joined as they are, so that the kernel moves the bytes (splice(2)).
	n, err := up.Write(rec.buf.Bytes())
	if err != nil {
		up.Close()
		return d, fmt.Errorf("writing to %s: %w", target, err)
	}
	d.BytesOut, d.BytesIn = splice(c, up)
	d.BytesOut += int64(n)
	return d, nil
}

// resolve returns the first address of name a sandbox may reach: an
// answer in the host, private or special-purpose ranges (DNS rebinding)
// is never connected to.
func (p *Proxy) resolve(name string) (netip.Addr, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := p.Resolver.LookupA(ctx, name)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("resolving %s: %w", name, err)
	}
	for _, a := range addrs {
		if p.Reachable(a) {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%s resolves only to addresses no sandbox may reach (%s)", name, addrs[0])
}

func (p *Proxy) decided(sb Sandbox, d Decision) {
	p.Table.Record(sb.ID, d)
	if p.Decided != nil {
		p.Decided(sb, d)
	}
}

// serverName reads a TLS ClientHello from br (without consuming what
// the recorder keeps for the replay) and returns its SNI.
func serverName(br *bufio.Reader) (string, error) {
	var hello *tls.ClientHelloInfo
	errDone := errors.New("hello read")
	err := tls.Server(readOnlyConn{r: br}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			hello = h
			return nil, errDone
		},
	}).Handshake()
	if hello == nil {
		return "", fmt.Errorf("reading the TLS ClientHello: %w", err)
	}
	if hello.ServerName == "" {
		return "", errors.New("TLS without a server name (SNI): a bare address is never allowed")
	}
	return netpolicy.Name(hello.ServerName)
}

// httpHost reads an HTTP request head from br and returns its host name.
// CONNECT and absolute URLs, which a forward proxy would follow, are
// refused: either would let a name other than the Host checked choose
// where the request goes.
func httpHost(br *bufio.Reader) (string, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return "", fmt.Errorf("reading the HTTP request: %w", err)
	}
	if req.Method == http.MethodConnect {
		return "", errors.New("CONNECT is not allowed: the proxy is transparent")
	}
	if req.URL.IsAbs() {
		return "", errors.New("a request for a forward proxy (an absolute URL) is not allowed: the proxy is transparent")
	}
	host := req.Host
	if host == "" {
		return "", errors.New("HTTP request without a Host")
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return netpolicy.Name(host)
}

// refuse answers an HTTP client that its request is not let through.
func refuse(c net.Conn, why string) {
	body := "lizard: " + why + "\n"
	_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}

// splice copies both ways until both ends are done and returns the bytes
// copied from a to b and from b to a. Between two *net.TCPConn, io.Copy
// is splice(2): the bytes never enter this process.
func splice(a, b net.Conn) (aToB, bToA int64) {
	var wg sync.WaitGroup
	cp := func(dst, src net.Conn, n *int64) {
		defer wg.Done()
		*n, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	wg.Add(2)
	go cp(b, a, &aToB)
	go cp(a, b, &bToA)
	wg.Wait()
	a.Close()
	b.Close()
	return aToB, bToA
}

// recorder keeps every byte read through it, for the replay.
type recorder struct {
	r   io.Reader
	buf bytes.Buffer
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.buf.Write(p[:n])
	return n, err
}

// readOnlyConn lets crypto/tls read a ClientHello and write nothing.
type readOnlyConn struct {
	net.Conn
	r io.Reader
}

func (c readOnlyConn) Read(p []byte) (int, error)     { return c.r.Read(p) }
func (readOnlyConn) Write(p []byte) (int, error)      { return 0, io.ErrClosedPipe }
func (readOnlyConn) Close() error                     { return nil }
func (readOnlyConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (readOnlyConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (readOnlyConn) SetWriteDeadline(time.Time) error { return nil }

// replayConn reads what was peeked, then the connection.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// SyscallConn reaches the socket: an Interceptor may tune it.
func (c *replayConn) SyscallConn() (syscall.RawConn, error) { return rawConn(c.Conn) }

func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// countConn counts bytes read from (in: sandbox to upstream) and written
// to (out) the sandbox's connection.
type countConn struct {
	net.Conn
	in, out atomic.Int64
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	return n, err
}

// SyscallConn reaches the socket: an Interceptor may tune it.
func (c *countConn) SyscallConn() (syscall.RawConn, error) { return rawConn(c.Conn) }

func rawConn(c net.Conn) (syscall.RawConn, error) {
	if sc, ok := c.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}

func (c *countConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
