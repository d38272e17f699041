package inject

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/egress"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/netpolicy"
	"github.com/lizard-build/lizard/internal/secrets"
	"github.com/lizard-build/lizard/internal/store"
)

const value = "sk-inject-test-5d41402abc4b2a76"

// rig is an Injector serving a loopback listener that stands for the
// egress proxy: each accepted connection is served as conn says.
type rig struct {
	in      *Injector
	audit   *bytes.Buffer
	addr    string
	caPool  *x509.CertPool // what the sandbox trusts: its CA
	secrets *secrets.Store
}

func newRig(t *testing.T, roots *x509.CertPool, conn func() egress.InterceptConn) *rig {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, p := range []string{"p", "q"} {
		if err := st.CreateProject(ctx, p, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	key, err := secrets.LoadOrCreateKey(filepath.Join(t.TempDir(), "k"))
	if err != nil {
		t.Fatal(err)
	}
	audit := &bytes.Buffer{}
	var auditMu sync.Mutex
	sec := &secrets.Store{Store: st, Key: key, Audit: slog.New(slog.NewJSONHandler(lockedWriter{&auditMu, audit}, nil))}
	if _, err := sec.Set(ctx, "p", "TOKEN", value, secrets.Scope{Hosts: rigHosts, AllowHTTP: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := sec.Set(ctx, "p", "STRICT", value, secrets.Scope{Hosts: rigHosts}); err != nil {
		t.Fatal(err)
	}
	r := &rig{audit: audit, secrets: sec}
	r.in = &Injector{Secrets: sec, Authorities: &Authorities{Dir: t.TempDir()}, Roots: roots}
	ca, err := r.in.Authorities.Get("sb1")
	if err != nil {
		t.Fatal(err)
	}
	r.caPool = x509.NewCertPool()
	r.caPool.AppendCertsFromPEM(ca.CertPEM())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	r.addr = ln.Addr().String()
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	go func() {
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			c := conn()
			c.Conn = cn
			wg.Add(1)
			go func() { defer wg.Done(); r.in.Intercept(sctx, c) }()
		}
	}()
	return r
}

// rigHosts are where the rig's secrets may be sent: httptest's TLS
// certificate's name and the plain tests' host.
var rigHosts = []string{"example.com", "api.test"}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// sandboxClient is an HTTP client that reaches every host at r's
// listener, trusting roots: code in a sandbox whose connections the
// proxy hands over.
func (r *rig) sandboxClient(roots *x509.CertPool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", r.addr)
		},
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
}

// upstream records what reaches it and answers with the Authorization
// it got hashed out, so that a test can tell.
type upstream struct {
	srv  *httptest.Server
	hits atomic.Int32
	mu   sync.Mutex
	auth []string
	xoth []string
}

func newUpstream(t *testing.T, tlsOn bool) *upstream {
	u := &upstream{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		u.mu.Lock()
		u.auth = append(u.auth, strings.Join(r.Header.Values("Authorization"), "|"))
		u.xoth = append(u.xoth, r.Header.Get("X-Other"))
		u.mu.Unlock()
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok " + r.URL.Path))
	})
	if tlsOn {
		u.srv = httptest.NewTLSServer(h)
	} else {
		u.srv = httptest.NewServer(h)
	}
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) dial(ctx context.Context) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, "tcp", u.srv.Listener.Addr().String())
}

func TestInjectHTTPS(t *testing.T) {
	up := newUpstream(t, true)
	roots := x509.NewCertPool()
	roots.AddCert(up.srv.Certificate())
	// httptest's certificate is for example.com.
	r := newRig(t, roots, func() egress.InterceptConn {
		return egress.InterceptConn{SandboxID: "sb1", Project: "p", Name: "example.com", Port: 443, TLS: true,
			Headers: map[string]string{"Authorization": "Bearer {{ secrets.TOKEN }}"}, Dial: up.dial}
	})
	c := r.sandboxClient(r.caPool)
	// Several requests on one kept-alive connection, each injected; the
	// sandbox's own Authorization is replaced, its other headers kept.
	for i := 0; i < 3; i++ {
		req, _ := http.NewRequest("POST", "https://example.com/v1/x", strings.NewReader("body"))
		req.Header.Set("Authorization", "Bearer sandbox-forged")
		req.Header.Set("X-Other", "kept")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok /v1/x" || strings.Contains(string(b), value) {
			t.Fatalf("request %d = %d %q", i, resp.StatusCode, b)
		}
		if resp.TLS == nil || resp.TLS.NegotiatedProtocol == "h2" {
			t.Errorf("request %d went over %v; want HTTP/1.1 over TLS", i, resp.TLS)
		}
	}
	up.mu.Lock()
	for i, a := range up.auth {
		if a != "Bearer "+value || up.xoth[i] != "kept" {
			t.Errorf("upstream request %d had Authorization %q, X-Other %q; want the secret alone and kept", i, a, up.xoth[i])
		}
	}
	up.mu.Unlock()
	// The first use is a line at once; the two after it, within the
	// minute, are counted towards a later one (secrets.TestAuditCoalesced).
	if n := strings.Count(r.audit.String(), `"msg":"secret.use"`); n != 1 || strings.Contains(r.audit.String(), value) {
		t.Errorf("audit trail: %d uses (want 1), value in it: %v\n%s", n, strings.Contains(r.audit.String(), value), r.audit)
	}

	// A client that does not trust the sandbox's CA (its own roots)
	// fails the handshake: nothing is sent.
	hits := up.hits.Load()
	if _, err := r.sandboxClient(roots).Get("https://example.com/"); err == nil {
		t.Errorf("a client trusting only the upstream's roots got through the sandbox's CA")
	}
	if up.hits.Load() != hits {
		t.Errorf("the upstream was reached by a client that refused the handshake")
	}

	// Another host on the same connection is refused (421), not sent.
	req, _ := http.NewRequest("GET", "https://example.com/", nil)
	req.Host = "evil.example"
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("a request for another Host = %v, %v; want 421", resp, err)
	} else {
		resp.Body.Close()
	}

	// A deleted secret: the request is not sent without it (502 naming
	// the secret, never a value).
	if err := r.secrets.Delete(context.Background(), "p", "TOKEN"); err != nil {
		t.Fatal(err)
	}
	hits = up.hits.Load()
	resp, err = c.Get("https://example.com/after-delete")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "TOKEN") || up.hits.Load() != hits {
		t.Errorf("after the secret was deleted = %d %q, upstream hits +%d; want 502 naming TOKEN, none sent", resp.StatusCode, b, up.hits.Load()-hits)
	}
}

func TestInjectVerifiesUpstream(t *testing.T) {
	up := newUpstream(t, true)
	// The node trusts the host's roots only: httptest's certificate is
	// not among them.
	sys, err := x509.SystemCertPool()
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, sys, func() egress.InterceptConn {
		return egress.InterceptConn{SandboxID: "sb1", Project: "p", Name: "example.com", Port: 443, TLS: true,
			Headers: map[string]string{"Authorization": "Bearer {{ secrets.TOKEN }}"}, Dial: up.dial}
	})
	resp, err := r.sandboxClient(r.caPool).Get("https://example.com/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "not trusted") || up.hits.Load() != 0 {
		t.Errorf("an upstream with an untrusted certificate = %d %q, hits %d; want 502, none", resp.StatusCode, b, up.hits.Load())
	}
}

func TestInjectPlainHTTPAndProjects(t *testing.T) {
	up := newUpstream(t, false)
	var project atomic.Value
	project.Store("p")
	r := newRig(t, nil, func() egress.InterceptConn {
		return egress.InterceptConn{SandboxID: "sb1", Project: project.Load().(string), Name: "api.test", Port: 80,
			Headers: map[string]string{"Authorization": "token {{ secrets.TOKEN }}"}, Dial: up.dial}
	})
	c := r.sandboxClient(nil)
	resp, err := c.Get("http://api.test/plain")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	up.mu.Lock()
	if up.auth[0] != "token "+value {
		t.Errorf("plain HTTP upstream got Authorization %q", up.auth[0])
	}
	up.mu.Unlock()
	// A sandbox of project q naming TOKEN gets nothing: q has none.
	project.Store("q")
	c.CloseIdleConnections()
	resp, err = c.Get("http://api.test/other-project")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || strings.Contains(string(b), value) || up.hits.Load() != 1 {
		t.Errorf("another project's sandbox = %d %q, hits %d; want 502, nothing sent", resp.StatusCode, b, up.hits.Load())
	}
}

func TestAuthorities(t *testing.T) {
	dir := t.TempDir()
	as := &Authorities{Dir: dir}
	a, err := as.Get("sb1")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := a.Leaf("api.example.com", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(a.CertPEM())
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "api.example.com"}); err != nil {
		t.Errorf("the leaf does not verify under its CA: %v", err)
	}
	if again, _ := a.Leaf("api.example.com", time.Now()); again != leaf {
		t.Errorf("a second leaf was minted for the same name")
	}
	// Another node process (a restart) loads the same CA.
	b, err := (&Authorities{Dir: dir}).Get("sb1")
	if err != nil || !bytes.Equal(b.CertPEM(), a.CertPEM()) {
		t.Errorf("reloaded CA differs: %v", err)
	}
	other, _ := as.Get("sb2")
	if bytes.Equal(other.CertPEM(), a.CertPEM()) {
		t.Errorf("two sandboxes share a CA")
	}
	otherPool := x509.NewCertPool()
	otherPool.AppendCertsFromPEM(other.CertPEM())
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: otherPool, DNSName: "api.example.com"}); err == nil {
		t.Errorf("sb1's leaf verifies under sb2's CA")
	}
	// A fork takes a copy of its parent's, kept when the parent goes.
	if err := as.Inherit("fork1", "sb1"); err != nil {
		t.Fatal(err)
	}
	if err := as.Inherit("fork2", "never-had-one"); err != nil {
		t.Errorf("inheriting from a sandbox without a CA: %v", err)
	}
	if f, err := as.Get("fork1"); err != nil || !bytes.Equal(f.CertPEM(), a.CertPEM()) {
		t.Errorf("a fork's CA differs from its parent's: %v", err)
	}
	if err := as.Remove("sb1"); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "sb1", "*")); len(m) != 0 {
		t.Errorf("files left after Remove: %v", m)
	}
	if f, err := (&Authorities{Dir: dir}).Get("fork1"); err != nil || !bytes.Equal(f.CertPEM(), a.CertPEM()) {
		t.Errorf("the fork's CA after its parent's removal: %v", err)
	}
}

func TestCheck(t *testing.T) {
	r := newRig(t, nil, func() egress.InterceptConn { return egress.InterceptConn{} })
	ctx := context.Background()
	p, err := netpolicy.Parse(netpolicy.Policy{Default: "deny", Allow: []string{"api.test"}, Inject: []netpolicy.HeaderRule{
		{Domain: "api.test", Headers: map[string]string{"Authorization": "Bearer {{ secrets.TOKEN }}"}},
		{Domain: "api.test", Headers: map[string]string{"X-A": "x", "X-Key": "{{ secrets.TOKEN }}:{{ secrets.MISSING }}"}},
	}}, "network")
	if err != nil {
		t.Fatal(err)
	}
	err = Check(ctx, r.secrets, "p", "network", p)
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.HasPrefix(err.Error(), "network.inject[1].headers[X-Key] names secret \"MISSING\"") {
		t.Errorf("Check of a policy naming a missing secret = %v; want ErrInvalid naming network.inject[1].headers[X-Key]", err)
	}
	p.Inject = p.Inject[:1]
	if err := Check(ctx, r.secrets, "p", "network", p); err != nil {
		t.Errorf("Check of a policy naming the project's own secret: %v", err)
	}
	// Project q has no TOKEN: p's is not q's to use.
	if err := Check(ctx, r.secrets, "q", "network", p); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "network.inject[0].headers[Authorization]") {
		t.Errorf("Check of another project's secret = %v; want ErrInvalid naming the header", err)
	}
	if err := Check(ctx, r.secrets, "q", "network", nil); err != nil {
		t.Errorf("Check of no policy: %v", err)
	}
	// A rule for a host the secret may not be sent to — the red team's
	// echo server — is refused naming the secret and the host, and so is
	// a wildcard wider than its hosts.
	for _, domain := range []string{"echo.attacker.test", "*.test", "*.example.com"} {
		p, _ := netpolicy.Parse(netpolicy.Policy{Default: "allow", Inject: []netpolicy.HeaderRule{
			{Domain: domain, Headers: map[string]string{"Authorization": "Bearer {{ secrets.TOKEN }}"}}}}, "network")
		err := Check(ctx, r.secrets, "p", "network", p)
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), `secret "TOKEN" for `+domain) {
			t.Errorf("Check of an inject rule for %s = %v; want ErrInvalid naming TOKEN and %s", domain, err, domain)
		}
	}
}

// TestInjectScope: at the moment a request goes out the secret's scope is
// checked again — a host it may not be sent to (the policy predates a
// narrowing), and plain HTTP unless it allows it — and nothing is sent.
// Before, a policy naming any host got the value, over plain HTTP too.
func TestInjectScope(t *testing.T) {
	up := newUpstream(t, false)
	var name, header atomic.Value
	name.Store("api.test")
	header.Store("token {{ secrets.STRICT }}")
	r := newRig(t, nil, func() egress.InterceptConn {
		return egress.InterceptConn{SandboxID: "sb1", Project: "p", Name: name.Load().(string), Port: 80,
			Headers: map[string]string{"Authorization": header.Load().(string)}, Dial: up.dial}
	})
	c := r.sandboxClient(nil)
	refused := func(what, host, want string) {
		t.Helper()
		c.CloseIdleConnections()
		resp, err := c.Get("http://" + host + "/")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), want) || strings.Contains(string(b), value) || up.hits.Load() != 0 {
			t.Errorf("%s = %d %q, %d sent; want 403 saying %q, nothing sent", what, resp.StatusCode, b, up.hits.Load(), want)
		}
	}
	refused("plain HTTP with a secret that does not allow it", "api.test", "may not be sent over plain HTTP")
	header.Store("token {{ secrets.TOKEN }}")
	name.Store("echo.attacker.test")
	refused("a host not among the secret's", "echo.attacker.test", "may not be sent to echo.attacker.test")
	// Narrowed after the policy was set: the old host gets nothing.
	if _, err := r.secrets.Set(context.Background(), "p", "TOKEN", value, secrets.Scope{Hosts: []string{"example.com"}, AllowHTTP: true}); err != nil {
		t.Fatal(err)
	}
	name.Store("api.test")
	refused("a host the secret was narrowed away from", "api.test", "may not be sent to api.test")
}

// TestInjectLogBounded: a sandbox's failed handshakes and requests are
// at most a line of the node's log a second each: code in the sandbox
// makes one per connection or request, at its own rate, and the node's
// log is a file on the host outside every bound of the sandbox.
func TestInjectLogBounded(t *testing.T) {
	up := newUpstream(t, true)
	roots := x509.NewCertPool()
	roots.AddCert(up.srv.Certificate())
	var mu sync.Mutex
	logs := &bytes.Buffer{}
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, logs}, nil))
	r := newRig(t, roots, func() egress.InterceptConn {
		return egress.InterceptConn{SandboxID: "sb1", Project: "p", Name: "example.com", Port: 443, TLS: true,
			Headers: map[string]string{"Authorization": "Bearer {{ secrets.MISSING }}"}, Dial: up.dial}
	})
	r.in.Logger = logger
	// A client with its own roots refuses the sandbox's CA; one trusting
	// it asks for a secret that does not exist (502), each time anew.
	refusing, trusting := r.sandboxClient(roots), r.sandboxClient(r.caPool)
	trusting.Transport.(*http.Transport).DisableKeepAlives = true
	for i := 0; i < 50; i++ {
		if _, err := refusing.Get("https://example.com/"); err == nil {
			t.Fatal("a client trusting only the upstream's roots got through")
		}
		resp, err := trusting.Get("https://example.com/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("a request naming a missing secret = %d; want 502", resp.StatusCode)
		}
	}
	time.Sleep(100 * time.Millisecond) // the last handshake's line
	mu.Lock()
	defer mu.Unlock()
	for _, msg := range []string{"egress TLS handshake with the sandbox failed", "egress request with secrets failed"} {
		if n := strings.Count(logs.String(), msg); n < 1 || n > 2 {
			t.Errorf("%d lines %q for 50 failures within a second or so; want at most one a second", n, msg)
		}
	}
}

// TestInjectHeaderBounded: a request's headers through the injection are
// read up to maxRequestHeader, as much as the proxy reads to find a
// plain request's Host; past it the sandbox gets 431 and nothing is sent.
// Before, the server's default held up to 1 MiB of them for each of the
// sandbox's 1024 connections through the proxy.
func TestInjectHeaderBounded(t *testing.T) {
	up := newUpstream(t, false)
	r := newRig(t, nil, func() egress.InterceptConn {
		return egress.InterceptConn{SandboxID: "sb1", Project: "p", Name: "api.test", Port: 80,
			Headers: map[string]string{"Authorization": "token {{ secrets.TOKEN }}"}, Dial: up.dial}
	})
	c := r.sandboxClient(nil)
	for _, tc := range []struct {
		size   int
		status int
	}{
		{8 << 10, http.StatusOK},
		{maxRequestHeader + 8<<10, http.StatusRequestHeaderFieldsTooLarge}, // Go's server allows 4 KiB over
		{512 << 10, http.StatusRequestHeaderFieldsTooLarge},
	} {
		hits := up.hits.Load()
		req, _ := http.NewRequest("GET", "http://api.test/", nil)
		req.Header.Set("X-Big", strings.Repeat("x", tc.size))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%d bytes of headers: %v", tc.size, err)
		}
		resp.Body.Close()
		sent := up.hits.Load() - hits
		if resp.StatusCode != tc.status || (tc.status != http.StatusOK && sent != 0) {
			t.Errorf("%d bytes of headers = %d, %d sent; want %d", tc.size, resp.StatusCode, sent, tc.status)
		}
	}
}
