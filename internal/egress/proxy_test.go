package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/lizard-build/lizard/internal/fdbudget"
	"github.com/lizard-build/lizard/internal/netpolicy"
)

// The proxy and the resolver on loopback: the "sandbox" is this test,
// connecting from 127.0.0.1, the upstreams are servers it starts, and the
// original destination the redirect would have kept is given by OrigDst.
type rig struct {
	table    *Table
	resolver *Resolver
	proxy    *Proxy
	mu       sync.Mutex
	dst      netip.AddrPort // what OrigDst answers
}

const sbAddr = "127.0.0.1"

// newRig starts a resolver and a proxy for sandbox sb1 (project p1) with
// policy p; each of with sets up the table before they start, which the
// race detector then sees as before any connection's goroutine.
func newRig(t *testing.T, p netpolicy.Policy, records map[string]string, in Interceptor, with ...func(*Table)) *rig {
	t.Helper()
	pol, err := netpolicy.Parse(p, "network")
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{table: &Table{}}
	r.table.Set(netip.MustParseAddr(sbAddr), Sandbox{ID: "sb1", Project: "p1", Policy: pol})
	for _, f := range with {
		f(r.table)
	}
	recs := map[string][]netip.Addr{}
	for k, v := range records {
		recs[k] = []netip.Addr{netip.MustParseAddr(v)}
	}
	r.resolver = &Resolver{Table: r.table, Records: recs, Logger: slog.Default(), TCPReadTimeout: 5 * time.Minute}
	if err := r.resolver.Start("127.0.0.1", 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.resolver.Close)
	r.proxy = &Proxy{Table: r.table, Resolver: r.resolver, Logger: slog.Default(), Interceptor: in,
		// A loaded machine may take longer than peekTimeout to open the
		// connections a test holds; none of these tests waits on it.
		PeekTimeout: 5 * time.Minute,
		// Loopback stands for the internet here; 10/8 for what it must not reach.
		Reachable: func(a netip.Addr) bool { return !netip.MustParsePrefix("10.0.0.0/8").Contains(a) },
		OrigDst: func(net.Conn) (netip.AddrPort, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.dst, nil
		},
	}
	if err := r.proxy.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.proxy.Close() })
	return r
}

// to says the sandbox's connection was going to addr (a hard-coded
// address, as far as the proxy cares: it never connects there).
func (r *rig) to(t *testing.T, u string) {
	t.Helper()
	pu, _ := url.Parse(u)
	r.mu.Lock()
	r.dst = netip.MustParseAddrPort(pu.Host)
	r.mu.Unlock()
}

// get sends a GET with Host host through the proxy.
func (r *rig) get(t *testing.T, host, rawReq string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", r.proxy.Port()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if rawReq == "" {
		rawReq = "GET / HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n"
	}
	io.WriteString(c, rawReq)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestProxyHTTP(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream saw %s", r.Host)
	}))
	defer up.Close()
	r := newRig(t, netpolicy.Policy{Default: netpolicy.Deny, Allow: []string{"allowed.test", "*.wild.test", "rebind.test"}, Ports: []int{mustPort(up.URL)}},
		map[string]string{"allowed.test": "127.0.0.1", "a.wild.test": "127.0.0.1", "denied.test": "127.0.0.1", "rebind.test": "10.0.0.1"}, nil)
	r.to(t, up.URL)
	cases := []struct {
		name, host, raw string
		status          int
		body            string
	}{
		{"allowed name", "allowed.test", "", 200, "upstream saw allowed.test"},
		{"wildcard", "a.wild.test", "", 200, "upstream saw a.wild.test"},
		{"denied name", "denied.test", "", 403, "denied by the sandbox's network policy"},
		{"hard-coded address as Host", "127.0.0.1", "", 403, "is an address"},
		{"rebinding to a private address", "rebind.test", "", 403, "resolves only to addresses no sandbox may reach"},
		{"CONNECT", "", "CONNECT denied.test:443 HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 403, "CONNECT is not allowed"},
		{"absolute URL to another host", "", "GET http://denied.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 403, "absolute URL"},
	}
	for _, tc := range cases {
		status, body := r.get(t, tc.host, tc.raw)
		if status != tc.status || !strings.Contains(body, tc.body) {
			t.Errorf("%s: got %d %q, want %d %q", tc.name, status, body, tc.status, tc.body)
		}
	}
	// An update applies to the next connection.
	pol, _ := netpolicy.Parse(netpolicy.Policy{Default: netpolicy.Deny, Ports: []int{mustPort(up.URL)}}, "network")
	r.table.Update("sb1", pol, false)
	if status, _ := r.get(t, "allowed.test", ""); status != 403 {
		t.Errorf("after an update denying it: %d, want 403", status)
	}
	// A decision is logged once its connection ends.
	log := waitLog(t, r.table, len(cases)+1)
	allowed := 0
	for _, d := range log {
		if d.Allowed {
			allowed++
			if d.BytesIn == 0 || d.BytesOut == 0 || d.Addr != "127.0.0.1" {
				t.Errorf("allowed decision without bytes or address: %+v", d)
			}
		}
	}
	if allowed != 2 {
		t.Errorf("log has %d allowed decisions, want 2: %+v", allowed, log)
	}
}

func TestProxyTLS(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "secure hello")
	}))
	defer up.Close()
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	// httptest's certificate is for example.com.
	r := newRig(t, netpolicy.Policy{Default: netpolicy.Deny, Allow: []string{"example.com"}, Ports: []int{mustPort(up.URL)}},
		map[string]string{"example.com": "127.0.0.1", "denied.test": "127.0.0.1"}, nil)
	r.to(t, up.URL)
	dial := func(sni string) (string, error) {
		c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", r.proxy.Port()))
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: roots, InsecureSkipVerify: sni == ""})
		if err := tc.Handshake(); err != nil {
			return "", err
		}
		io.WriteString(tc, "GET / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			return "", err
		}
		b, _ := io.ReadAll(resp.Body)
		return string(b), nil
	}
	if got, err := dial("example.com"); err != nil || got != "secure hello" {
		t.Errorf("allowed SNI: %q, %v", got, err)
	}
	if _, err := dial("denied.test"); err == nil {
		t.Error("denied SNI: handshake succeeded")
	}
	if _, err := dial(""); err == nil {
		t.Error("no SNI (a bare address): handshake succeeded")
	}
}

// interceptor records what it was handed and answers itself.
type interceptor struct{ got chan InterceptConn }

func (i *interceptor) Intercept(ctx context.Context, c InterceptConn) error {
	defer c.Conn.Close()
	req, err := http.ReadRequest(bufio.NewReader(c.Conn))
	if err != nil {
		return err
	}
	up, err := c.Dial(ctx)
	if err != nil {
		return err
	}
	up.Close()
	i.got <- c
	fmt.Fprintf(c.Conn, "HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\nintercepted")
	_ = req
	return nil
}

func TestProxyInterceptor(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	in := &interceptor{got: make(chan InterceptConn, 1)}
	r := newRig(t, netpolicy.Policy{Default: netpolicy.Deny, Allow: []string{"api.test", "plain.test"}, Ports: []int{mustPort(up.URL)},
		Inject: []netpolicy.HeaderRule{{Domain: "api.test", Headers: map[string]string{"Authorization": "Bearer {{ secrets.K }}"}}}},
		map[string]string{"api.test": "127.0.0.1", "plain.test": "127.0.0.1"}, in)
	r.to(t, up.URL)
	if status, body := r.get(t, "api.test", ""); status != 200 || body != "intercepted" {
		t.Fatalf("inject rule: got %d %q", status, body)
	}
	c := <-in.got
	if c.SandboxID != "sb1" || c.Project != "p1" || c.Name != "api.test" || c.TLS || c.Headers["Authorization"] != "Bearer {{ secrets.K }}" || c.Port != mustPort(up.URL) {
		t.Errorf("InterceptConn = %+v", c)
	}
	if status, _ := r.get(t, "plain.test", ""); status != 200 {
		t.Errorf("no inject rule: %d, want the upstream's 200", status)
	}
	select {
	case c := <-in.got:
		t.Errorf("a name without an inject rule was intercepted: %+v", c)
	default:
	}
}

func TestProxyCut(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(c, c) // echo
		}
	}()
	addr := "http://" + ln.Addr().String()
	r := newRig(t, netpolicy.Policy{Allow: []string{"echo.test"}, Ports: []int{mustPort(addr)}}, map[string]string{"echo.test": "127.0.0.1"}, nil)
	r.to(t, addr)
	open := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", r.proxy.Port()))
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: echo.test\r\n\r\n")
		br := bufio.NewReader(c)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if l, err := br.ReadString('\n'); err != nil || l != "GET / HTTP/1.1\r\n" {
			t.Fatalf("echo through the proxy: %q, %v", l, err)
		}
		return c, br
	}
	c1, br1 := open()
	defer c1.Close()
	pol, _ := netpolicy.Parse(netpolicy.Policy{Default: netpolicy.Deny, Ports: []int{mustPort(addr)}}, "network")
	r.table.Update("sb1", pol, false)
	io.WriteString(c1, "still here\n")
	br1.ReadString('\n') // Host line
	br1.ReadString('\n') // blank line
	if l, err := br1.ReadString('\n'); err != nil || l != "still here\n" {
		t.Errorf("an open connection after an update without cut: %q, %v", l, err)
	}
	r.table.Update("sb1", pol, true)
	c1.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(br1); err != nil {
		t.Errorf("after cut: want the connection closed (EOF), got %v", err)
	}
}

func TestResolver(t *testing.T) {
	r := newRig(t, netpolicy.Policy{Default: netpolicy.Deny, Allow: []string{"allowed.test", "*.wild.test"}},
		map[string]string{"allowed.test": "203.0.113.10", "x.wild.test": "203.0.113.11", "denied.test": "203.0.113.12"}, nil)
	server := fmt.Sprintf("127.0.0.1:%d", r.resolver.Port())
	ask := func(from, net_, name string, qtype uint16) (*dns.Msg, error) {
		c := &dns.Client{Net: net_, Timeout: 3 * time.Second}
		if net_ == "tcp" {
			c.Dialer = &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		} else {
			c.Dialer = &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(from)}}
		}
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		resp, _, err := c.Exchange(m, server)
		return resp, err
	}
	cases := []struct {
		from, net, name string
		qtype           uint16
		rcode           int
		answer          string
	}{
		{sbAddr, "udp", "allowed.test.", dns.TypeA, dns.RcodeSuccess, "203.0.113.10"},
		{sbAddr, "tcp", "ALLOWED.test.", dns.TypeA, dns.RcodeSuccess, "203.0.113.10"},
		{sbAddr, "udp", "x.wild.test.", dns.TypeA, dns.RcodeSuccess, "203.0.113.11"},
		{sbAddr, "udp", "denied.test.", dns.TypeA, dns.RcodeNameError, ""},
		{sbAddr, "udp", "allowed.test.", dns.TypeAAAA, dns.RcodeSuccess, ""},
		{sbAddr, "udp", "nowhere.wild.test.", dns.TypeA, dns.RcodeNameError, ""},
		{"127.0.0.2", "udp", "allowed.test.", dns.TypeA, dns.RcodeRefused, ""}, // not a sandbox
	}
	for _, tc := range cases {
		resp, err := ask(tc.from, tc.net, tc.name, tc.qtype)
		if err != nil {
			t.Errorf("%s %s from %s: %v", tc.name, dns.TypeToString[tc.qtype], tc.from, err)
			continue
		}
		var got string
		if len(resp.Answer) > 0 {
			got = resp.Answer[0].(*dns.A).A.String()
		}
		if resp.Rcode != tc.rcode || got != tc.answer {
			t.Errorf("%s %s from %s = %s %q, want %s %q", tc.name, dns.TypeToString[tc.qtype], tc.from,
				dns.RcodeToString[resp.Rcode], got, dns.RcodeToString[tc.rcode], tc.answer)
		}
	}
	log := r.table.Log("sb1")
	if len(log) != 6 || log[3].Allowed || log[3].Name != "denied.test" || log[3].Kind != KindDNS {
		t.Errorf("log = %+v", log)
	}
}

func waitLog(t *testing.T, tb *Table, n int) []Decision {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		log := tb.Log("sb1")
		if len(log) >= n || time.Now().After(deadline) {
			if len(log) != n {
				t.Errorf("log has %d decisions, want %d: %+v", len(log), n, log)
			}
			return log
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// conns is how many connections sandbox id holds through the proxy.
func (t *Table) conns(id string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b := t.boxes[id]; b != nil {
		return len(b.conns)
	}
	return 0
}

// waitConns waits until sandbox id holds n connections: how long a
// loaded machine takes to accept them is its business, not the bound's.
func waitConns(t *testing.T, tb *Table, id string, n int) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); tb.conns(id) < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d of %d connections after 2 minutes", id, tb.conns(id), n)
		}
	}
}

func mustPort(u string) int {
	pu, _ := url.Parse(u)
	_, p, _ := net.SplitHostPort(pu.Host)
	var n int
	fmt.Sscan(p, &n)
	return n
}

// A sandbox holds at most MaxConns connections through the proxy: one
// that opens connections and sends nothing cannot take the node's file
// descriptors, which the API's listener and other sandboxes share.
func TestProxyMaxConns(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	r := newRig(t, netpolicy.Policy{Default: netpolicy.Deny, Allow: []string{"allowed.test"}, Ports: []int{mustPort(up.URL)}},
		map[string]string{"allowed.test": "127.0.0.1"}, nil)
	r.to(t, up.URL)
	dial := func() net.Conn {
		c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", r.proxy.Port()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// closed reports whether the proxy closed c within wait.
	closed := func(c net.Conn, wait time.Duration) bool {
		c.SetReadDeadline(time.Now().Add(wait))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
	held := make([]net.Conn, MaxConns)
	for i := range held {
		held[i] = dial()
	}
	waitConns(t, r.table, "sb1", MaxConns)
	// refused reports whether the proxy reset a new connection: at once,
	// which the dial itself may see.
	refused := func() bool {
		c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", r.proxy.Port()))
		if err != nil {
			return errors.Is(err, syscall.ECONNRESET)
		}
		defer c.Close()
		return closed(c, 30*time.Second)
	}
	if !refused() {
		t.Fatalf("connection %d was not closed: want each past %d closed at once", MaxConns+1, MaxConns)
	}
	if closed(held[0], 100*time.Millisecond) {
		t.Errorf("a connection within the bound was closed")
	}
	held[0].Close()
	time.Sleep(200 * time.Millisecond)
	if status, body := r.get(t, "allowed.test", ""); status != 200 || body != "ok" {
		t.Errorf("a request once one was closed = %d %q; want 200 ok", status, body)
	}
}

// TestResolverTCPConns: the resolver's TCP side keeps no connection of
// an address that is not a sandbox (it would stay open as long as it
// asked something every few seconds), and a sandbox's count among its
// MaxConns.
func TestResolverTCPConns(t *testing.T) {
	r := newRig(t, netpolicy.Policy{Default: netpolicy.Deny, Allow: []string{"allowed.test"}}, map[string]string{"allowed.test": "203.0.113.10"}, nil)
	server := fmt.Sprintf("127.0.0.1:%d", r.resolver.Port())
	// dial returns nil when the resolver reset the connection at once,
	// which the dial itself may see.
	dial := func(from string) *dns.Conn {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp4", server)
		if errors.Is(err, syscall.ECONNRESET) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return &dns.Conn{Conn: c}
	}
	// answered reports whether c gets an answer to a query.
	answered := func(c *dns.Conn) bool {
		if c == nil {
			return false
		}
		m := new(dns.Msg)
		m.SetQuestion("allowed.test.", dns.TypeA)
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if err := c.WriteMsg(m); err != nil {
			return false
		}
		_, err := c.ReadMsg()
		return err == nil
	}
	if answered(dial("127.0.0.2")) {
		t.Error("a TCP query from an address that is no sandbox was answered; want its connection closed")
	}
	held := make([]*dns.Conn, MaxConns)
	for i := range held {
		held[i] = dial(sbAddr)
	}
	if !answered(held[0]) {
		t.Fatal("the sandbox's first TCP connection got no answer")
	}
	waitConns(t, r.table, "sb1", MaxConns)
	if answered(dial(sbAddr)) {
		t.Fatalf("TCP connection %d was answered; want each past %d closed", MaxConns+1, MaxConns)
	}
	held[0].Close()
	time.Sleep(200 * time.Millisecond)
	if !answered(dial(sbAddr)) {
		t.Error("a TCP query once one of the sandbox's connections closed got no answer")
	}
}

// TestUnsetClosesConns: a pause (Unset) closes the sandbox's connections
// through the proxy and the resolver's TCP side, as an end does: its
// address is released and may be a new sandbox's while it is paused, and
// the frozen processes lose their connections on restore anyway. Its log
// stays for the resume, which connects again.
func TestUnsetClosesConns(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(c, c) // echo
		}
	}()
	addr := "http://" + ln.Addr().String()
	r := newRig(t, netpolicy.Policy{Allow: []string{"echo.test"}, Ports: []int{mustPort(addr)}}, map[string]string{"echo.test": "127.0.0.1"}, nil)
	r.to(t, addr)
	echo := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", r.proxy.Port()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: echo.test\r\n\r\n")
		return c, bufio.NewReader(c)
	}
	c1, br1 := echo()
	c1.SetReadDeadline(time.Now().Add(5 * time.Second))
	if l, err := br1.ReadString('\n'); err != nil || l != "GET / HTTP/1.1\r\n" {
		t.Fatalf("echo through the proxy: %q, %v", l, err)
	}
	dc, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", r.resolver.Port()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	d1 := &dns.Conn{Conn: dc}
	m := new(dns.Msg)
	m.SetQuestion("echo.test.", dns.TypeA)
	d1.SetDeadline(time.Now().Add(5 * time.Second))
	if err := d1.WriteMsg(m); err != nil {
		t.Fatal(err)
	}
	if _, err := d1.ReadMsg(); err != nil {
		t.Fatalf("a TCP query before the pause: %v", err)
	}
	logged := len(r.table.Log("sb1"))

	r.table.Unset("sb1")
	// closed reports whether r ends well within the resolver's 8 s idle
	// timeout (a reset counts: the proxy may close a connection it has not
	// read).
	closed := func(r io.Reader, c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := io.ReadAll(r)
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
	if !closed(dc, dc) {
		t.Error("the resolver's TCP connection stayed open after Unset; want it closed")
	}
	if !closed(br1, c1) {
		t.Error("the proxied connection stayed open after Unset; want it closed")
	}
	if c2, br2 := echo(); !closed(br2, c2) {
		t.Error("a connection from the address while paused was kept; want it closed")
	}
	if n := len(r.table.Log("sb1")); n != logged {
		t.Errorf("the log after Unset has %d decisions, want the %d before kept", n, logged)
	}

	pol, _ := netpolicy.Parse(netpolicy.Policy{Allow: []string{"echo.test"}, Ports: []int{mustPort(addr)}}, "network")
	r.table.Set(netip.MustParseAddr(sbAddr), Sandbox{ID: "sb1", Project: "p1", Policy: pol}) // the resume
	c3, br3 := echo()
	c3.SetReadDeadline(time.Now().Add(5 * time.Second))
	if l, err := br3.ReadString('\n'); err != nil || l != "GET / HTTP/1.1\r\n" {
		t.Errorf("echo through the proxy after the resume: %q, %v", l, err)
	}
}

// TestResolverLookupsBounded: a sandbox has at most MaxLookups of its
// queries forwarded upstream at once, and one past them is answered
// SERVFAIL at once. Each forward holds a node UDP socket (and a
// goroutine) for up to the upstream's timeout: a sandbox sending
// queries for names its policy allows that the upstream never answered
// held one per query, without bound, the file descriptors the API's
// listener and every other sandbox share.
func TestResolverLookupsBounded(t *testing.T) {
	pol, err := netpolicy.Parse(netpolicy.Policy{Default: netpolicy.Deny, Allow: []string{"*.slow.test"}}, "network")
	if err != nil {
		t.Fatal(err)
	}
	// The upstream reads every query and answers none, counting the
	// sockets they came from (each forward dials its own).
	up, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	var mu sync.Mutex
	sources := map[string]bool{}
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := up.ReadFrom(buf)
			if err != nil {
				return
			}
			mu.Lock()
			sources[from.String()] = true
			mu.Unlock()
		}
	}()
	table := &Table{}
	table.Set(netip.MustParseAddr(sbAddr), Sandbox{ID: "sb1", Project: "p1", Policy: pol})
	res := &Resolver{Table: table, Upstream: []string{up.LocalAddr().String()}, Logger: slog.Default()}
	if err := res.Start("127.0.0.1", 0); err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	c, err := net.Dial("udp4", fmt.Sprintf("127.0.0.1:%d", res.Port()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Those past the bound are answered SERVFAIL at once (read as they
	// come: the socket's buffer holds a few hundred).
	servfail := make(chan int)
	go func() {
		n := 0
		buf := make([]byte, 512)
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		for {
			k, err := c.Read(buf)
			if err != nil {
				servfail <- n
				return
			}
			m := new(dns.Msg)
			if m.Unpack(buf[:k]) == nil && m.Rcode == dns.RcodeServerFailure {
				n++
			}
		}
	}()
	const sent = 1000
	for i := range sent {
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("n%d.slow.test.", i), dns.TypeA)
		b, _ := m.Pack()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 {
			time.Sleep(10 * time.Millisecond) // within the resolver's socket buffer
		}
	}
	n := <-servfail
	mu.Lock()
	forwarded := len(sources)
	mu.Unlock()
	if forwarded > MaxLookups {
		t.Errorf("%d of %d queries were forwarded at once; want at most %d", forwarded, sent, MaxLookups)
	}
	if n < sent/2 {
		t.Errorf("%d of %d queries were answered SERVFAIL within 2 s; want those past the bound at once", n, sent)
	}
}

// TestResolverLogBounded: a sandbox's failed lookups are at most a line of
// the node's log a second: code in the sandbox asks for names whose
// lookup fails (an upstream answering SERVFAIL) at its own rate, and the
// node's log is a file on the host outside every bound of the sandbox.
func TestResolverLogBounded(t *testing.T) {
	pol, err := netpolicy.Parse(netpolicy.Policy{Default: netpolicy.Allow}, "network")
	if err != nil {
		t.Fatal(err)
	}
	up := &dns.Server{Addr: "127.0.0.1:0", Net: "udp", Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(q, dns.RcodeServerFailure)
		w.WriteMsg(m)
	})}
	started := make(chan struct{})
	up.NotifyStartedFunc = func() { close(started) }
	go up.ListenAndServe()
	<-started
	defer up.Shutdown()
	var mu sync.Mutex
	logs := &strings.Builder{}
	table := &Table{}
	table.Set(netip.MustParseAddr(sbAddr), Sandbox{ID: "sb1", Project: "p1", Policy: pol})
	res := &Resolver{Table: table, Upstream: []string{up.PacketConn.LocalAddr().String()},
		Logger: slog.New(slog.NewTextHandler(lockedBuilder{&mu, logs}, nil))}
	if err := res.Start("127.0.0.1", 0); err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	c := &dns.Client{Timeout: 3 * time.Second}
	for i := range 50 {
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("n%d.failing.test.", i), dns.TypeA)
		resp, _, err := c.Exchange(m, fmt.Sprintf("127.0.0.1:%d", res.Port()))
		if err != nil || resp.Rcode != dns.RcodeServerFailure {
			t.Fatalf("query %d: %v %v; want SERVFAIL", i, resp, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "resolving for a sandbox"); n < 1 || n > 2 {
		t.Errorf("%d log lines for 50 failed lookups within a second or so; want at most one a second:\n%s", n, logs)
	}
}

type lockedBuilder struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (l lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// One project's sandboxes hold at most its budget of the node's
// descriptors through the proxy and the resolver together, whatever each
// sandbox's own bound: the next connection is reset at once, logged as
// refused, and another project's sandbox still connects (issue 33: four
// sandboxes of one project took the node's 20,000 descriptors).
func TestProxyProjectBudget(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	pol := netpolicy.Policy{Default: netpolicy.Deny, Allow: []string{"allowed.test"}, Ports: []int{mustPort(up.URL)}}
	var refusals []string
	var mu sync.Mutex
	r := newRig(t, pol, map[string]string{"allowed.test": "127.0.0.1"}, nil, func(tb *Table) {
		tb.Budget = fdbudget.New(1000, 10*fdbudget.Egress.Cost(), slog.Default())
		tb.Budget.Refused = func(k fdbudget.Kind, bound string) {
			mu.Lock()
			refusals = append(refusals, string(k)+"/"+bound)
			mu.Unlock()
		}
	})
	r.to(t, up.URL)
	parsed, err := netpolicy.Parse(pol, "network")
	if err != nil {
		t.Fatal(err)
	}
	// sb1's project p1 gets a second sandbox, sb3; p2 has sb2.
	r.table.Set(netip.MustParseAddr("127.0.0.3"), Sandbox{ID: "sb3", Project: "p1", Policy: parsed})
	r.table.Set(netip.MustParseAddr("127.0.0.2"), Sandbox{ID: "sb2", Project: "p2", Policy: parsed})
	connect := func(from string) (net.Conn, error) {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", r.proxy.Port()))
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}
	dial := func(from string) net.Conn {
		c, err := connect(from)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// get's reset may come as early as the dial.
	get := func(from string) (string, error) {
		c, err := connect(from)
		if err != nil {
			return "", err
		}
		defer c.Close()
		// A reset that arrives before the request is written is the
		// write's error; the read after it sees only the end (EOF).
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"); err != nil {
			return "", err
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "", err
		}
		b, _ := io.ReadAll(resp.Body)
		return string(b), nil
	}
	// Five idle connections from each of p1's two sandboxes: its ten.
	var held []net.Conn
	for i := 0; i < 5; i++ {
		held = append(held, dial(sbAddr), dial("127.0.0.3"))
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if p1, _ := r.table.Budget.Held("p1"); p1 == 10*fdbudget.Egress.Cost() {
			break
		}
		if time.Now().After(deadline) {
			p1, _ := r.table.Budget.Held("p1")
			t.Fatalf("p1 holds %d descriptors after 10 connections; want %d", p1, 10*fdbudget.Egress.Cost())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The eleventh, from either sandbox, is reset at once.
	for _, from := range []string{sbAddr, "127.0.0.3"} {
		if body, err := get(from); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("an 11th connection of p1 from %s: %q, %v; want it reset", from, body, err)
		}
	}
	// p2 is not affected.
	if body, err := get("127.0.0.2"); err != nil || body != "ok" {
		t.Errorf("p2's request with p1 at its budget: %q, %v; want ok", body, err)
	}
	log := waitLog(t, r.table, 1)
	if d := log[len(log)-1]; d.Kind != KindTCP || d.Allowed || !strings.Contains(d.Reason, "--max-descriptors-per-project") {
		t.Errorf("sb1's log ends with %+v; want a tcp refusal naming the flag", d)
	}
	mu.Lock()
	if len(refusals) != 2 || refusals[0] != "egress/project" {
		t.Errorf("refusals told: %v; want two egress/project", refusals)
	}
	mu.Unlock()
	// A connection closed gives its descriptors back.
	held[0].Close()
	deadline = time.Now().Add(5 * time.Second)
	for {
		body, err := get(sbAddr)
		if err == nil && body == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("p1 once a connection closed: %q, %v; want ok", body, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
