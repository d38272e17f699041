package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// servePorts starts, inside sandbox id, python -m http.server on 8000
// (serving /home/user, whose index.html says "hello from the sandbox")
// and the WebSocket echo server of testdata/wsecho.py on 8765.
func servePorts(t *testing.T, c *client.Client, id string) {
	t.Helper()
	src, err := os.ReadFile("testdata/wsecho.py")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(context.Background(), id, "/home/user/wsecho.py", strings.NewReader(string(src))); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	py(t, c, id, `
import subprocess, sys
open('/home/user/index.html', 'w').write('hello from the sandbox')
for args in (['-m', 'http.server', '8000', '--bind', '0.0.0.0'], ['/home/user/wsecho.py', '8765']):
    subprocess.Popen([sys.executable] + args, cwd='/home/user', start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)`)
}

// get fetches u with headers h (name, value pairs).
func get(t *testing.T, u string, h ...string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for i := 0; i+1 < len(h); i += 2 {
		if strings.EqualFold(h[i], "Host") {
			req.Host = h[i+1]
			continue
		}
		req.Header.Set(h[i], h[i+1])
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// waitPort waits until u answers 200 (the server in the sandbox is up).
func waitPort(t *testing.T, u string, h ...string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, _ := get(t, u, h...)
		if code == http.StatusOK {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %s after 30 s; want 200", u, code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// wsDial opens a WebSocket to u (http://...) with headers h, by hand: the
// module has no WebSocket client, and the handshake and frames are small.
func wsDial(u string, h http.Header) (net.Conn, *bufio.Reader, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return nil, nil, err
	}
	conn, err := net.DialTimeout("tcp", pu.Host, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	key := make([]byte, 16)
	rand.Read(key)
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n",
		pu.RequestURI(), pu.Host, base64.StdEncoding.EncodeToString(key))
	for k, vs := range h {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	if _, err := conn.Write([]byte(b.String())); err != nil {
		conn.Close()
		return nil, nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(resp.Body)
		conn.Close()
		return nil, nil, fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	return conn, br, nil
}

// wsSend writes one masked text frame (short messages only).
func wsSend(conn net.Conn, msg string) error {
	mask := make([]byte, 4)
	rand.Read(mask)
	frame := []byte{0x81, 0x80 | byte(len(msg))}
	frame = append(frame, mask...)
	for i := range len(msg) {
		frame = append(frame, msg[i]^mask[i%4])
	}
	_, err := conn.Write(frame)
	return err
}

// wsRecv reads one unmasked frame's payload.
func wsRecv(conn net.Conn, br *bufio.Reader, d time.Duration) (string, error) {
	conn.SetReadDeadline(time.Now().Add(d))
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return "", err
	}
	n := int(hdr[1] & 0x7f)
	if n == 126 {
		var ext [2]byte
		if _, err := io.ReadFull(br, ext[:]); err != nil {
			return "", err
		}
		n = int(binary.BigEndian.Uint16(ext[:]))
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(br, p); err != nil {
		return "", err
	}
	if hdr[0]&0x0f == 0x8 {
		return "", fmt.Errorf("close frame %x", p)
	}
	return string(p), nil
}

// TestPorts reaches servers inside a sandbox through the API: HTTP and
// WebSocket, with the project's key, the sandbox's access token (query,
// header, the cookie the query sets) or neither (401), a closed port
// (502), the agent's port (404), a paused sandbox (409), a public
// sandbox, and a killed one (its WebSocket closed, then 410).
func TestPorts(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_ports")
	key := s.keys[c]
	ctx := context.Background()
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	id := sb.SandboxID
	if !strings.HasPrefix(sb.AccessToken, "lzp_") || sb.PublicPorts {
		t.Fatalf("created sandbox: accessToken %q publicPorts %v; want a token, not public", sb.AccessToken, sb.PublicPorts)
	}
	servePorts(t, c, id)
	base := c.PortURL(id, 8000)
	if want := s.url + "/v1/sandboxes/" + id + "/ports/8000/"; base != want {
		t.Fatalf("PortURL = %s; want %s", base, want)
	}
	auth := "Bearer " + key
	if body := waitPort(t, base+"index.html", "Authorization", auth); body != "hello from the sandbox" {
		t.Fatalf("GET through the port with the key = %q", body)
	}

	// Credentials.
	if code, body, h := get(t, base+"index.html"); code != http.StatusUnauthorized || !strings.Contains(body, "access token") {
		t.Errorf("no credential: %d %s %v; want 401 saying how to get in", code, body, h)
	}
	if code, _, _ := get(t, base+"index.html", "Authorization", "Bearer lz_0123456789abcdef_0123456789abcdef0123456789abcdef0123456789abcdef"); code != http.StatusUnauthorized {
		t.Errorf("a wrong key: %d; want 401", code)
	}
	code, body, h := get(t, base+"index.html?lizard_access_token="+sb.AccessToken)
	if code != http.StatusOK || body != "hello from the sandbox" {
		t.Errorf("token in the query: %d %q; want 200", code, body)
	}
	cookie := h.Get("Set-Cookie")
	if !strings.Contains(cookie, "lizard_access_token="+sb.AccessToken) || !strings.Contains(cookie, "Path=/v1/sandboxes/"+id+"/ports/8000;") || !strings.Contains(cookie, "HttpOnly") {
		t.Errorf("token in the query set cookie %q; want it HttpOnly under the port's path", cookie)
	}
	if code, _, _ := get(t, base+"index.html", "Cookie", "lizard_access_token="+sb.AccessToken); code != http.StatusOK {
		t.Errorf("token in the cookie: %d; want 200", code)
	}
	if code, _, _ := get(t, base+"index.html", "X-Lizard-Access-Token", sb.AccessToken); code != http.StatusOK {
		t.Errorf("token in the header: %d; want 200", code)
	}
	other := newSandbox(t, c, api.CreateSandboxRequest{PublicPorts: true})
	if code, _, _ := get(t, c.PortURL(other.SandboxID, 8000)+"x", "X-Lizard-Access-Token", sb.AccessToken); code == http.StatusUnauthorized {
		t.Errorf("a public sandbox refused a request carrying another's token")
	}
	if code, _, _ := get(t, base+"index.html", "X-Lizard-Access-Token", other.AccessToken); code != http.StatusUnauthorized {
		t.Errorf("another sandbox's token: %d; want 401", code)
	}
	// A public sandbox needs nothing; closed port: 502 saying so.
	code, body, _ = get(t, c.PortURL(other.SandboxID, 8000))
	if code != http.StatusBadGateway || !strings.Contains(body, "nothing listens on port 8000") {
		t.Errorf("public sandbox, nothing on the port: %d %s; want 502 saying nothing listens", code, body)
	}
	// Another project's key does not open it.
	c2 := s.createProject("proj_ports2")
	if code, _, _ := get(t, base+"index.html", "Authorization", "Bearer "+s.keys[c2]); code != http.StatusNotFound {
		t.Errorf("another project's key: %d; want 404", code)
	}
	// The agent's port is not a port of the sandbox's.
	if code, body, _ := get(t, c.PortURL(id, api.AgentPort)+"health", "Authorization", auth); code != http.StatusNotFound || !strings.Contains(body, "agent") {
		t.Errorf("the agent's port: %d %s; want 404", code, body)
	}
	for _, p := range []string{"0", "70000", "abc", "080"} {
		if code, _, _ := get(t, s.url+"/v1/sandboxes/"+id+"/ports/"+p+"/", "Authorization", auth); code != http.StatusBadRequest {
			t.Errorf("port %s: %d; want 400", p, code)
		}
	}
	// The program sees neither the key nor the token.
	got := py(t, c, id, `
import subprocess, sys, textwrap
src = textwrap.dedent('''
    import http.server, json
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            b = json.dumps({"path": self.path, "headers": dict(self.headers)}).encode()
            self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
        def log_message(self, *a): pass
    http.server.ThreadingHTTPServer(("0.0.0.0", 8001), H).serve_forever()
''')
open('/home/user/echohdr.py', 'w').write(src)
subprocess.Popen([sys.executable, '/home/user/echohdr.py'], start_new_session=True)
print('ok')`)
	if got != "ok" {
		t.Fatal(got)
	}
	seen := waitPort(t, c.PortURL(id, 8001)+"a/b?x=1&lizard_access_token="+sb.AccessToken, "X-Lizard-Access-Token", sb.AccessToken,
		"Cookie", "lizard_access_token="+sb.AccessToken+"; app=1")
	if strings.Contains(seen, sb.AccessToken) || strings.Contains(seen, key) || !strings.Contains(seen, `"path": "/a/b?x=1"`) || !strings.Contains(seen, "app=1") {
		t.Errorf("the program saw %s; want /a/b?x=1, its own cookie, and no Lizard credential", seen)
	}
	seen = waitPort(t, c.PortURL(id, 8001)+"k", "Authorization", auth)
	if strings.Contains(seen, key) {
		t.Errorf("the program saw the project's key: %s", seen)
	}

	// A streamed answer arrives as it is written, not when it ends.
	py(t, c, id, `
import subprocess, sys, textwrap
src = textwrap.dedent('''
    import http.server, time
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_GET(self):
            self.send_response(200); self.send_header("Transfer-Encoding", "chunked"); self.end_headers()
            for part in (b"first", b"second"):
                self.wfile.write(b"%x\\r\\n%s\\r\\n" % (len(part), part)); self.wfile.flush()
                time.sleep(3)
            self.wfile.write(b"0\\r\\n\\r\\n")
        def log_message(self, *a): pass
    http.server.ThreadingHTTPServer(("0.0.0.0", 8002), H).serve_forever()
''')
open('/home/user/chunks.py', 'w').write(src)
subprocess.Popen([sys.executable, '/home/user/chunks.py'], start_new_session=True)`)
	waitListening := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, c.PortURL(id, 8002), nil)
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusBadGateway && time.Now().Before(waitListening) {
			resp.Body.Close()
			time.Sleep(200 * time.Millisecond)
			continue
		}
		// Measured between the chunks, not from the request, so that a
		// loaded machine's slow start does not count.
		buf := make([]byte, 5)
		_, err = io.ReadFull(resp.Body, buf)
		first := time.Now()
		rest, _ := io.ReadAll(resp.Body)
		gap := time.Since(first)
		resp.Body.Close()
		if err != nil || string(buf) != "first" || string(rest) != "second" || gap < 1500*time.Millisecond {
			t.Errorf("streamed answer: %q then %q %s later (%v); want the first chunk as soon as it is written, 3 s before the second", buf, rest, gap, err)
		}
		break
	}

	// WebSocket, through the path.
	hdr := http.Header{"Authorization": {auth}}
	if _, _, err := wsDial(c.PortURL(id, 8765)+"ws", nil); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("WebSocket without a key: %v; want 401", err)
	}
	waitPort(t, c.PortURL(id, 8765), "Authorization", auth)
	conn, br, err := wsDial(c.PortURL(id, 8765)+"ws", hdr)
	if err != nil {
		t.Fatalf("WebSocket through the port: %v", err)
	}
	defer conn.Close()
	for _, msg := range []string{"hello", "world"} {
		if err := wsSend(conn, msg); err != nil {
			t.Fatal(err)
		}
		if got, err := wsRecv(conn, br, 10*time.Second); err != nil || got != msg {
			t.Fatalf("WebSocket echo = %q, %v; want %q", got, err, msg)
		}
	}

	// The CLI prints a URL a browser can open: it carries the token.
	cmd := exec.Command(s.bin, "sandbox", "url", id, "8000")
	cmd.Env = append(os.Environ(), "LIZARD_API_URL="+s.url, "LIZARD_API_KEY="+key)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("lizard sandbox url: %v", err)
	}
	if u := strings.TrimSpace(string(out)); u != base+"?lizard_access_token="+sb.AccessToken {
		t.Errorf("lizard sandbox url = %s; want %s with the token", u, base)
	} else if code, body, _ := get(t, u); code != http.StatusOK || body != "hello from the sandbox" {
		t.Errorf("the CLI's URL: %d %.80s; want index.html", code, body)
	}

	// Paused: 409 (this server does not resume on access).
	if _, err := c.PauseSandbox(ctx, other.SandboxID); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := get(t, c.PortURL(other.SandboxID, 8000)); code != http.StatusConflict || !strings.Contains(body, "paused") {
		t.Errorf("paused sandbox: %d %s; want 409", code, body)
	}

	// Killed: the open WebSocket closes, and the port is gone.
	if err := c.KillSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := wsRecv(conn, br, 10*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("WebSocket after the kill: %v; want it closed", err)
	}
	if code, _, _ := get(t, base, "Authorization", auth); code != http.StatusGone {
		t.Errorf("killed sandbox's port: %d; want 410", code)
	}
}

// TestPortsDomainResume: with --ports-domain, <port>-<id>.<domain> serves
// the port; with --ports-resume, a paused sandbox resumes when reached.
func TestPortsDomainResume(t *testing.T) {
	s := startServer(t, "--ports-domain=sandboxes.test", "--ports-resume")
	c := s.createProject("proj_portsdom")
	ctx := context.Background()
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	if sb.PortsDomain != "sandboxes.test" {
		t.Errorf("portsDomain = %q; want sandboxes.test", sb.PortsDomain)
	}
	servePorts(t, c, sb.SandboxID)
	host := "8000-" + sb.SandboxID + ".sandboxes.test"
	if body := waitPort(t, s.url+"/index.html", "Host", host, "X-Lizard-Access-Token", sb.AccessToken); body != "hello from the sandbox" {
		t.Errorf("host-based port = %q", body)
	}
	if code, _, _ := get(t, s.url+"/index.html", "Host", host); code != http.StatusUnauthorized {
		t.Errorf("host-based port without a credential: %d; want 401", code)
	}
	if code, _, _ := get(t, s.url+"/v1/health", "Host", "api.sandboxes.test"); code != http.StatusOK {
		t.Errorf("another host under the domain: %d; want the API as usual", code)
	}
	if _, err := c.PauseSandbox(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	// The server in the sandbox was restored with it.
	if code, body, _ := get(t, s.url+"/index.html", "Host", host, "X-Lizard-Access-Token", sb.AccessToken); code != http.StatusOK || body != "hello from the sandbox" {
		t.Errorf("paused sandbox reached with --ports-resume: %d %q; want it resumed and answering", code, body)
	}
	if got, _ := c.GetSandbox(ctx, sb.SandboxID); got == nil || got.State != api.StateRunning {
		t.Errorf("after access the sandbox is %+v; want running", got)
	}
}

// hostileApp is a program that serves, on port 8003 inside the sandbox,
// /set: an answer that tries to reach beyond its port (a service worker
// scope of /, cookies for / and another domain, Lizard's own cookie, a
// Clear-Site-Data, a CSP that asks for the same origin, and a Connection
// header naming CSP), and anything else: the request as it arrived (path,
// headers), after noting its path in a log that /log returns.
const hostileApp = `
import subprocess, sys, textwrap
src = textwrap.dedent('''
    import http.server, json
    seen = []
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def answer(self, body, headers=()):
            self.send_response(200)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def do_GET(self):
            if self.path == "/log":
                return self.answer(json.dumps(seen).encode())
            seen.append(self.path)
            if self.path == "/set":
                return self.answer(b"<p>set</p>", [
                    ("Service-Worker-Allowed", "/"),
                    ("Set-Cookie", "app=1; Path=/; Domain=127.0.0.1; HttpOnly"),
                    ("Set-Cookie", "lizard_access_token=forged; Path=/"),
                    ("Clear-Site-Data", '"*"'),
                    ("Content-Security-Policy", "sandbox allow-same-origin allow-scripts"),
                    ("Connection", "Content-Security-Policy"),
                ])
            body = b""
            if self.headers.get("Transfer-Encoding") == "chunked":
                while n := int(self.rfile.readline().strip() or b"0", 16):
                    body += self.rfile.read(n)
                    self.rfile.readline()
                self.rfile.readline()
            elif n := int(self.headers.get("Content-Length") or 0):
                body = self.rfile.read(n)
            body = body.decode()
            self.answer(json.dumps({"path": self.path, "headers": dict(self.headers), "body": body}).encode())
        do_POST = do_GET
        def log_message(self, *a): pass
    http.server.ThreadingHTTPServer(("0.0.0.0", 8003), H).serve_forever()
''')
open('/home/user/hostile.py', 'w').write(src)
subprocess.Popen([sys.executable, '/home/user/hostile.py'], start_new_session=True)
print('ok')`

// send makes one request without following redirects; h is name, value
// pairs (Host sets the Host).
func send(t *testing.T, method, u, body string, h ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	for i := 0; i+1 < len(h); i += 2 {
		if strings.EqualFold(h[i], "Host") {
			req.Host = h[i+1]
			continue
		}
		req.Header.Add(h[i], h[i+1])
	}
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// rawHTTP writes req on a new connection to addr and returns everything
// the server answers until it closes or goes quiet for 3 s.
func rawHTTP(t *testing.T, addr, req string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	buf := make([]byte, 4096)
	for {
		conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		n, err := conn.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			return out.String()
		}
	}
}

// TestPortsConfined: what a program serves through a port cannot reach
// beyond it (issue 20). On the path form, which shares the API's and the
// console's origin, every answer carries a CSP sandbox (no script runs in
// that origin) on top of the program's own, no Service-Worker-Allowed or
// Clear-Site-Data, and its cookies only under the port's path; on the
// host form its cookies lose Domain. A page opened with the token in its
// URL is redirected to the URL without it, and the program never sees the
// token (query, escaped query, cookie, Referer). A page of the API's origin
// cannot load the path form's content as a script or a service worker. Clients cannot strip the
// X-Forwarded-* headers, smuggle a request past the proxy, or reach
// another project's port, 0, 65536, the agent's port or a leading-zero
// port through the Host.
func TestPortsConfined(t *testing.T) {
	const domain = "ports.test"
	s := startServer(t, "--ports-domain="+domain)
	c := s.createProject("proj_confined")
	key := s.keys[c]
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	id, token := sb.SandboxID, sb.AccessToken
	if got := py(t, c, id, hostileApp); got != "ok" {
		t.Fatal(got)
	}
	prefix := "/v1/sandboxes/" + id + "/ports/8003"
	base := s.url + prefix
	host := "8003-" + id + "." + domain
	auth := "Bearer " + key
	waitPort(t, base+"/log", "Authorization", auth)

	// The path form: the CSP sandbox on top of the program's, the rest gone.
	resp, _ := send(t, "GET", base+"/set", "", "Authorization", auth)
	csp := resp.Header.Values("Content-Security-Policy")
	if !slices.Contains(csp, "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads") {
		t.Errorf("path form: Content-Security-Policy %q; want Lizard's sandbox policy among them", csp)
	}
	if v := resp.Header.Get("Service-Worker-Allowed") + resp.Header.Get("Clear-Site-Data"); v != "" {
		t.Errorf("path form: Service-Worker-Allowed/Clear-Site-Data reached the client: %q", v)
	}
	if got, want := resp.Header.Values("Set-Cookie"), []string{"app=1; HttpOnly; Path=" + prefix}; !slices.Equal(got, want) {
		t.Errorf("path form: Set-Cookie %q; want %q (under the port's path, no Domain, not Lizard's cookie)", got, want)
	}
	// A page of the API's origin loading a port's content as code: refused
	// (the console's CSP trusts 'self'); as a page, served.
	for dest, want := range map[string]int{"script": http.StatusBadRequest, "serviceworker": http.StatusBadRequest, "document": http.StatusOK} {
		if resp, body := send(t, "GET", base+"/set", "", "Authorization", auth, "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Dest", dest); resp.StatusCode != want {
			t.Errorf("path form, same-origin %s: %d %.100s; want %d", dest, resp.StatusCode, body, want)
		}
	}
	// The host form: its own origin keeps its service worker scope; the
	// cookie loses Domain (no cookie for sibling sandboxes).
	resp, _ = send(t, "GET", s.url+"/set", "", "Host", host, "Authorization", auth)
	if resp.Header.Get("Service-Worker-Allowed") != "/" || resp.Header.Get("Clear-Site-Data") != "" {
		t.Errorf("host form: Service-Worker-Allowed %q, Clear-Site-Data %q; want / and none", resp.Header.Get("Service-Worker-Allowed"), resp.Header.Get("Clear-Site-Data"))
	}
	if got, want := resp.Header.Values("Set-Cookie"), []string{"app=1; Path=/; HttpOnly"}; !slices.Equal(got, want) {
		t.Errorf("host form: Set-Cookie %q; want %q", got, want)
	}

	// A page opened with the token: 303 to the same URL without it, with
	// the cookie; the program is not asked.
	for _, tc := range []struct{ name, url, host, want string }{
		{"path", base + "/page?x=1&lizard_access_token=" + token + "&y=%2F", "", prefix + "/page?x=1&y=%2F"},
		{"path, the port itself", base + "?lizard_access_token=" + token, "", prefix},
		{"host", s.url + "/page?lizard_access_token=" + token, host, "/page"},
		{"host, a path that looks like a host", s.url + "//evil.test/x?lizard_access_token=" + token, host, "/.//evil.test/x"},
	} {
		h := []string{"Sec-Fetch-Mode", "navigate", "Accept", "text/html"}
		if tc.host != "" {
			h = append(h, "Host", tc.host)
		}
		resp, _ := send(t, "GET", tc.url, "", h...)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != tc.want {
			t.Errorf("%s: opened with the token: %d Location %q; want 303 to %q", tc.name, resp.StatusCode, resp.Header.Get("Location"), tc.want)
		}
		if ck := resp.Header.Get("Set-Cookie"); !strings.Contains(ck, "lizard_access_token="+token) || !strings.Contains(ck, "HttpOnly") {
			t.Errorf("%s: the redirect set cookie %q; want the token, HttpOnly", tc.name, ck)
		}
	}
	resp, _ = send(t, "GET", base+"/page?lizard_access_token="+token, "", "Sec-Fetch-Mode", "navigate")
	if ck := resp.Header.Get("Set-Cookie"); !strings.Contains(ck, "Path="+prefix+";") {
		t.Errorf("path form: the token's cookie %q; want Path=%s (the port itself and all under it)", ck, prefix)
	}
	// The page's next request, with the cookie and the old URL as
	// Referer: the program sees neither, and the page arrives.
	resp, seen := send(t, "GET", base+"/next", "", "Cookie", "lizard_access_token="+token+"; app=1",
		"Referer", base+"/page?x=1&lizard_access_token="+token)
	if resp.StatusCode != http.StatusOK || strings.Contains(seen, token) || !strings.Contains(seen, `"Referer": "`+base+`/page?x=1"`) || !strings.Contains(seen, "app=1") {
		t.Errorf("the page's next request: %d, the program saw %s; want 200, the Referer without the token, its own cookie", resp.StatusCode, seen)
	}
	// Clients that are not browsers keep the query form (no redirect);
	// an escaped parameter name is the token too, and never passed on.
	for _, q := range []string{"lizard_access_token=" + token, "lizard%5Faccess%5Ftoken=" + token} {
		resp, seen = send(t, "GET", base+"/api?"+q+"&z=1", "")
		if resp.StatusCode != http.StatusOK || strings.Contains(seen, token) || !strings.Contains(seen, `"path": "/api?z=1"`) {
			t.Errorf("token as %s from a non-browser: %d, the program saw %s; want 200, /api?z=1 and no token", q[:10], resp.StatusCode, seen)
		}
	}

	// Header games: Connection cannot take Lizard's X-Forwarded-* away,
	// nor can a client's own reach the program.
	_, seen = send(t, "GET", base+"/hdr", "", "Authorization", auth, "Connection", "X-Forwarded-For, X-Forwarded-Prefix, X-Forwarded-Host",
		"X-Forwarded-For", "203.0.113.66", "X-Forwarded-Host", "evil.test")
	for _, want := range []string{`"X-Forwarded-For": "127.0.0.1"`, `"X-Forwarded-Prefix": "` + prefix + `"`, `"X-Forwarded-Host": "127.0.0.1:`} {
		if !strings.Contains(seen, want) {
			t.Errorf("Connection naming X-Forwarded-*: the program saw %s; want %s", seen, want)
		}
	}
	_, seen = send(t, "GET", s.url+"/hdr", "", "Host", host, "Authorization", auth, "X-Forwarded-Prefix", "/evil")
	if strings.Contains(seen, "/evil") || strings.Contains(seen, key) {
		t.Errorf("host form: the program saw %s; want no client X-Forwarded-Prefix and no key", seen)
	}

	// Smuggling: the proxy frames each request itself, on a connection of
	// its own, so a second request hidden in a body never reaches the
	// program; ambiguous framing is refused.
	addr := strings.TrimPrefix(s.url, "http://")
	smuggled := "GET " + prefix + "/smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	chunk := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len("hello"), "hello")
	out := rawHTTP(t, addr, "POST "+prefix+"/post HTTP/1.1\r\nHost: "+addr+"\r\nAuthorization: "+auth+
		"\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"+chunk+smuggled)
	if !strings.Contains(out, `"body": "hello"`) {
		t.Errorf("Transfer-Encoding with Content-Length: %q; want the chunked body to reach the program", out)
	}
	out = rawHTTP(t, addr, "POST "+prefix+"/post HTTP/1.1\r\nHost: "+addr+"\r\nAuthorization: "+auth+
		"\r\nContent-Length: 5\r\nContent-Length: 60\r\n\r\nhello"+smuggled)
	if !strings.HasPrefix(out, "HTTP/1.1 400") {
		t.Errorf("two Content-Lengths: %.60q; want 400", out)
	}
	out = rawHTTP(t, addr, "POST "+prefix+"/post HTTP/1.1\r\nHost: "+addr+"\r\nAuthorization: "+auth+
		"\r\nTransfer-Encoding: identity, chunked\r\n\r\n"+chunk+smuggled)
	if strings.HasPrefix(out, "HTTP/1.1 200") && !strings.Contains(out, `"body": "hello"`) {
		t.Errorf("Transfer-Encoding: identity, chunked: %.200q; want a refusal or the chunked body", out)
	}
	_, log := send(t, "GET", base+"/log", "", "Authorization", auth)
	if strings.Contains(log, "smuggled") {
		t.Errorf("a smuggled request reached the program: %s", log)
	}

	// Host games under the ports domain.
	c2 := s.createProject("proj_confined2")
	for _, tc := range []struct {
		host string
		h    []string
		want int
	}{
		{host, []string{"Authorization", "Bearer " + s.keys[c2]}, http.StatusNotFound}, // another project's key
		{host, []string{"X-Lizard-Access-Token", newSandbox(t, c2, api.CreateSandboxRequest{}).AccessToken}, http.StatusUnauthorized},
		{"0-" + id + "." + domain, []string{"Authorization", auth}, http.StatusBadRequest},
		{"65536-" + id + "." + domain, []string{"Authorization", auth}, http.StatusBadRequest},
		{"08003-" + id + "." + domain, []string{"Authorization", auth}, http.StatusBadRequest},
		// The agent's port is never a port of the sandbox: under a ports
		// domain it is E2B's host form of envd (docs/e2b.md), which takes
		// its own token or a key in X-API-Key and serves envd's paths only.
		{fmt.Sprintf("%d-%s.%s", api.AgentPort, id, domain), []string{"Authorization", auth}, http.StatusUnauthorized},
		{fmt.Sprintf("%d-%s.%s", api.AgentPort, id, domain), []string{"X-API-Key", strings.TrimPrefix(auth, "Bearer ")}, http.StatusNotFound},
		{strings.ToUpper(host) + ":80", []string{"Authorization", auth}, http.StatusOK},
	} {
		resp, body := send(t, "GET", s.url+"/log", "", append([]string{"Host", tc.host}, tc.h...)...)
		if resp.StatusCode != tc.want {
			t.Errorf("Host %s %s: %d %.100s; want %d", tc.host, tc.h[0], resp.StatusCode, body, tc.want)
		}
	}
}

// TestPortsInFlight: a sandbox has at most 1024 requests to its ports
// under way through the API. No key's bounds cover them (a token or
// public ports open them) and each holds the server's file descriptors
// for as long as the program keeps it; before the bound, one program
// that never answered, and a client opening requests to it, could hold
// every descriptor of the server.
func TestPortsInFlight(t *testing.T) {
	const most = 1024
	s := startServer(t)
	c := s.createProject("proj_ports_inflight")
	id := newSandbox(t, c, api.CreateSandboxRequest{}).SandboxID
	// A program that answers /quick at once and holds every other request.
	py(t, c, id, `
import subprocess, sys, textwrap
src = textwrap.dedent('''
    import asyncio
    async def serve(r, w):
        line = await r.readline()
        while (await r.readline()) not in (b"\\r\\n", b""):
            pass
        if b"/quick" not in line:
            await asyncio.sleep(120)
        w.write(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\nConnection: close\\r\\n\\r\\nok"); await w.drain(); w.close()
    async def main():
        srv = await asyncio.start_server(serve, "0.0.0.0", 8004, backlog=4096)
        await srv.serve_forever()
    asyncio.run(main())
''')
open('/home/user/hold.py', 'w').write(src)
subprocess.Popen([sys.executable, '/home/user/hold.py'], start_new_session=True)`)
	auth := "Bearer " + s.keys[c]
	base := c.PortURL(id, 8004)
	if body := waitPort(t, base+"quick", "Authorization", auth); body != "ok" {
		t.Fatalf("GET /quick through the port = %q", body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := &http.Transport{MaxConnsPerHost: 0, DisableKeepAlives: true}
	hc := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for range most {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A held request that fails early (a loaded machine's refused
			// connection) is sent again, so that most stay under way.
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"hold", nil)
				req.Header.Set("Authorization", auth)
				if resp, err := hc.Do(req); err == nil {
					resp.Body.Close()
				}
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	// Once the held requests are all under way, one more is refused.
	var code int
	var body string
	for deadline := time.Now().Add(120 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if code, body, _ = get(t, base+"quick", "Authorization", auth); code == http.StatusTooManyRequests {
			break
		}
	}
	if code != http.StatusTooManyRequests || !strings.Contains(body, "1024 requests to its ports under way") {
		t.Errorf("a request past %d under way: %d %.200s; want 429 naming the bound", most, code, body)
	}
	cancel()
	wg.Wait()
	tr.CloseIdleConnections()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if code, body, _ = get(t, base+"quick", "Authorization", auth); code == http.StatusOK || time.Now().After(deadline) {
			break
		}
	}
	if code != http.StatusOK || body != "ok" {
		t.Errorf("once the held requests ended: %d %.200s; want 200 ok", code, body)
	}
}

// TestPortsLogBounded: a program's answers that break off (a body shorter
// than its length) write nothing to the server's log at its default
// level. Before, each was a warning of the API process ("ReverseProxy
// read error during body copy"): a program and its clients, who need no
// key for a public port, wrote the server's log at their request rate.
func TestPortsLogBounded(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_ports_log")
	id := newSandbox(t, c, api.CreateSandboxRequest{}).SandboxID
	py(t, c, id, `
import subprocess, sys, textwrap
src = textwrap.dedent('''
    import asyncio
    async def serve(r, w):
        line = await r.readline()
        while (await r.readline()) not in (b"\\r\\n", b""):
            pass
        if b"/quick" in line:
            w.write(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\nConnection: close\\r\\n\\r\\nok")
        else:
            w.write(b"HTTP/1.1 200 OK\\r\\nContent-Length: 100\\r\\nConnection: close\\r\\n\\r\\nshort")
        await w.drain(); w.close()
    async def main():
        srv = await asyncio.start_server(serve, "0.0.0.0", 8005)
        await srv.serve_forever()
    asyncio.run(main())
''')
open('/home/user/short.py', 'w').write(src)
subprocess.Popen([sys.executable, '/home/user/short.py'], start_new_session=True)`)
	auth := "Bearer " + s.keys[c]
	base := c.PortURL(id, 8005)
	if body := waitPort(t, base+"quick", "Authorization", auth); body != "ok" {
		t.Fatalf("GET /quick through the port = %q", body)
	}
	const sent = 30
	for range sent {
		req, _ := http.NewRequest(http.MethodGet, base+"short", nil)
		req.Header.Set("Authorization", auth)
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	time.Sleep(200 * time.Millisecond)
	if n := strings.Count(s.logs(), "during body copy"); n > 0 {
		t.Errorf("%d lines of the server's log for %d answers broken off by the program; want none", n, sent)
	}
}

// TestPortsHost: a sandbox created with portsHost (E2B's maskRequestHost)
// has its ports' requests carry that Host, ${PORT} the port, in the path
// and the host form alike, the caller's in X-Forwarded-Host; one that is
// not a host is refused at create.
func TestPortsHost(t *testing.T) {
	const domain = "ports.test"
	s := startServer(t, "--ports-domain="+domain)
	c := s.createProject("proj_portshost")
	auth := "Bearer " + s.keys[c]
	for _, bad := range []string{"app.test\r\nX-Evil: 1", "app test", "app.test/path", "ünï.test"} {
		_, err := c.CreateSandbox(context.Background(), api.CreateSandboxRequest{PortsHost: bad})
		if !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("portsHost %q: %v; want a 400", bad, err)
		}
	}
	sb := newSandbox(t, c, api.CreateSandboxRequest{PortsHost: "app.test:${PORT}"})
	if got, err := c.GetSandbox(context.Background(), sb.SandboxID); err != nil || got.PortsHost != "app.test:${PORT}" {
		t.Fatalf("get: %+v %v; want portsHost app.test:${PORT}", got, err)
	}
	if got := py(t, c, sb.SandboxID, hostileApp); got != "ok" {
		t.Fatal(got)
	}
	base := s.url + "/v1/sandboxes/" + sb.SandboxID + "/ports/8003"
	waitPort(t, base+"/log", "Authorization", auth)
	host := "8003-" + sb.SandboxID + "." + domain
	for _, tc := range []struct{ name, url, host, forwarded string }{
		{"path form", base + "/hdr", "", strings.TrimPrefix(s.url, "http://")},
		{"host form", s.url + "/hdr", host, host},
	} {
		h := []string{"Authorization", auth}
		if tc.host != "" {
			h = append(h, "Host", tc.host)
		}
		resp, seen := send(t, "GET", tc.url, "", h...)
		var got struct{ Headers map[string]string }
		if err := json.Unmarshal([]byte(seen), &got); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %.200s (%v)", tc.name, resp.StatusCode, seen, err)
		}
		if got.Headers["Host"] != "app.test:8003" || got.Headers["X-Forwarded-Host"] != tc.forwarded {
			t.Errorf("%s: the program saw Host %q, X-Forwarded-Host %q; want app.test:8003 and %q", tc.name, got.Headers["Host"], got.Headers["X-Forwarded-Host"], tc.forwarded)
		}
	}
}
