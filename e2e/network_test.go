package e2e

// Network policies by name (docs/network.md) against a real server and
// real sandboxes. "The internet" is a namespace this test makes, with
// 203.0.113.21 (allowed.test, api.wild.test) and 203.0.113.22
// (denied.test), each serving HTTP on 80, HTTPS on 443 with a test CA and
// a greeting on 8000; names come only from the node resolver's test
// records (--egress-test-hosts), so no packet leaves this machine.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

const (
	npAllowed = "203.0.113.21"
	npDenied  = "203.0.113.22"
)

// npServers serves, in namespace ns at each address, HTTP on 80 and HTTPS
// on 443 (a certificate for every test name, signed by the CA returned as
// PEM), answering "hello http|https HOST via ADDR".
func npServers(t *testing.T, ns string, addrs ...string) string {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lizard test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, DNSNames: []string{"allowed.test", "api.wild.test", "denied.test"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	for _, a := range addrs {
		for _, port := range []int{80, 443} {
			ln := listenNS(t, ns, net.JoinHostPort(a, fmt.Sprint(port)))
			scheme := "http"
			if port == 443 {
				ln, scheme = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}}), "https"
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "hello %s %s via %s", scheme, r.Host, a)
			})}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })
		}
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// listenNS listens on addr inside namespace name.
func listenNS(t *testing.T, name, addr string) net.Listener {
	t.Helper()
	errc := make(chan error, 1)
	var ln net.Listener
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with us
		ns, err := netns.GetFromName(name)
		if err == nil {
			defer ns.Close()
			err = netns.Set(ns)
		}
		if err == nil {
			ln, err = net.Listen("tcp4", addr)
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("listening on %s in %s: %v", addr, name, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// npProbes is Python that runs each probe named in a JSON list and
// prints a JSON object of results: "ok:<what it read>" or "err:<why>".
const npProbes = `
import json, socket, ssl, struct
def tcp(ip, port, payload=b"", timeout=3, wrap=None):
    try:
        s = socket.create_connection((ip, port), timeout=timeout)
        if wrap: s = wrap(s)
        if payload: s.sendall(payload)
        data = b""
        while True:
            b = s.recv(4096)
            if not b: break
            data += b
        return "ok:" + data.decode(errors="replace")
    except Exception as e:
        return "err:" + type(e).__name__ + ": " + str(e)
def get(ip, host, port=80):
    return tcp(ip, port, ("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host).encode())
def tls(ip, sni):
    ctx = ssl.create_default_context(cadata=CA)
    if sni is None:
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return tcp(ip, 443, ("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (sni or "x")).encode(),
               wrap=lambda s: ctx.wrap_socket(s, server_hostname=sni))
def resolve(name):
    try: return "ok:" + socket.gethostbyname(name)
    except Exception as e: return "err:" + type(e).__name__
def dns(server, name):
    q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
    try:
        s.sendto(q, (server, 53))
        d, _ = s.recvfrom(512)
        return "ok:rcode=%d answers=%d" % (d[3] & 15, struct.unpack(">H", d[6:8])[0])
    except Exception as e:
        return "err:" + type(e).__name__
def v6():
    try:
        socket.create_connection(("2001:db8::1", 80), timeout=2); return "ok:"
    except Exception as e:
        return "err:" + type(e).__name__
print(json.dumps({k: eval(v) for k, v in PROBES.items()}))
`

type probeSet map[string]string // name -> Python expression

func runProbes(t *testing.T, c *client.Client, id, ca string, probes probeSet) map[string]string {
	t.Helper()
	pj, _ := json.Marshal(probes)
	cj, _ := json.Marshal(ca)
	out := runPy(t, c, id, "import json\nCA = "+string(cj)+"\nPROBES = json.loads("+fmt.Sprintf("%q", string(pj))+")\n"+npProbes)
	var got map[string]string
	if err := json.Unmarshal([]byte(strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])), &got); err != nil {
		t.Fatalf("probes printed %q: %v", out, err)
	}
	return got
}

// expect checks each probe's result starts with want (a prefix) and
// contains the rest after a "|".
func expect(t *testing.T, where string, got map[string]string, want map[string]string) {
	t.Helper()
	for k, w := range want {
		prefix, sub, _ := strings.Cut(w, "|")
		if g := got[k]; !strings.HasPrefix(g, prefix) || !strings.Contains(g, sub) {
			t.Errorf("%s: %s = %q, want %q...%q", where, k, g, prefix, sub)
		}
	}
}

func TestNetworkPolicy(t *testing.T) {
	s := startServer(t, "--egress=internet", "--egress-allow=203.0.113.16/28",
		"--egress-test-hosts=allowed.test="+npAllowed+",api.wild.test="+npAllowed+",denied.test="+npDenied+",rebind.test=10.0.0.1")
	testNet(t, "lizt-np", "lzt-np0", "198.51.100.21", []string{npAllowed, npDenied})
	ca := npServers(t, "lizt-np", npAllowed, npDenied)
	c := s.createProject("np_a")
	ctx := context.Background()

	sb := newSandbox(t, c, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Default: "deny",
		Allow: []string{"allowed.test", "*.wild.test", "rebind.test"}}})
	if sb.Network == nil || sb.Network.Default != "deny" || len(sb.Network.Allow) != 3 {
		t.Fatalf("created sandbox's network = %+v", sb.Network)
	}
	id := sb.SandboxID

	base := probeSet{
		"resolve allowed":   `resolve("allowed.test")`,
		"resolve wildcard":  `resolve("api.wild.test")`,
		"resolve denied":    `resolve("denied.test")`,
		"http allowed":      `get("allowed.test", "allowed.test")`,
		"http wildcard":     `get("api.wild.test", "api.wild.test")`,
		"http denied":       `get("` + npDenied + `", "denied.test")`,
		"spoofed Host":      `get("` + npDenied + `", "allowed.test")`,
		"bare address Host": `get("` + npAllowed + `", "` + npAllowed + `")`,
		"CONNECT":           `tcp("` + npAllowed + `", 80, b"CONNECT denied.test:443 HTTP/1.1\r\nHost: allowed.test\r\n\r\n")`,
		"absolute URL":      `tcp("` + npAllowed + `", 80, b"GET http://denied.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")`,
		"https allowed":     `tls("allowed.test", "allowed.test")`,
		"spoofed SNI":       `tls("` + npDenied + `", "allowed.test")`,
		"https denied":      `tls("` + npDenied + `", "denied.test")`,
		"DoH, no SNI":       `tls("` + npDenied + `", None)`,
		"raw TCP":           `tcp("` + npAllowed + `", 8000, timeout=2)`,
		"DNS elsewhere":     `dns("` + npDenied + `", "denied.test")`,
		"DNS elsewhere ok":  `dns("` + npDenied + `", "allowed.test")`,
		"IPv6":              `v6()`,
		"rebinding":         `get("rebind.test", "rebind.test")`,
	}
	want := map[string]string{
		"resolve allowed":   "ok:" + npAllowed,
		"resolve wildcard":  "ok:" + npAllowed,
		"resolve denied":    "err:",
		"http allowed":      "ok:HTTP/1.1 200|hello http allowed.test via " + npAllowed,
		"http wildcard":     "ok:HTTP/1.1 200|hello http api.wild.test via " + npAllowed,
		"http denied":       "ok:HTTP/1.1 403|denied by the sandbox's network policy",
		"spoofed Host":      "ok:HTTP/1.1 200|via " + npAllowed, // the proxy's address for the name, not the one dialled
		"bare address Host": "ok:HTTP/1.1 403|is an address",
		"CONNECT":           "ok:HTTP/1.1 403|CONNECT",
		"absolute URL":      "ok:HTTP/1.1 403|absolute URL",
		"https allowed":     "ok:HTTP/1.1 200|hello https allowed.test via " + npAllowed,
		"spoofed SNI":       "ok:HTTP/1.1 200|via " + npAllowed,
		"https denied":      "err:",
		"DoH, no SNI":       "err:",
		"raw TCP":           "err:",
		"DNS elsewhere":     "ok:rcode=3", // answered by the node's resolver: NXDOMAIN
		"DNS elsewhere ok":  "ok:rcode=0 answers=1",
		"IPv6":              "err:",
		"rebinding":         "ok:HTTP/1.1 403|no sandbox may reach",
	}
	expect(t, "at create", runProbes(t, c, id, ca, base), want)

	// An update while it runs applies to the next connection.
	if _, err := c.UpdateNetwork(ctx, id, api.UpdateNetworkRequest{
		Allow: &[]string{"allowed.test", "*.wild.test", "rebind.test", "denied.test", npAllowed + ":8000"}}); err != nil {
		t.Fatalf("UpdateNetwork: %v", err)
	}
	expect(t, "after allowing denied.test", runProbes(t, c, id, ca, probeSet{
		"http denied": base["http denied"], "https denied": base["https denied"], "resolve denied": base["resolve denied"], "raw TCP": base["raw TCP"],
	}), map[string]string{
		"http denied": "ok:HTTP/1.1 200|hello http denied.test via " + npDenied, "https denied": "ok:HTTP/1.1 200|hello https denied.test",
		"resolve denied": "ok:" + npDenied, "raw TCP": "ok:hello from " + npAllowed,
	})
	pol, err := c.UpdateNetwork(ctx, id, api.UpdateNetworkRequest{Deny: &[]string{"denied.test"}})
	if err != nil || len(pol.Deny) != 1 || len(pol.Allow) != 5 {
		t.Fatalf("UpdateNetwork deny = %+v, %v", pol, err)
	}
	expect(t, "after denying it again", runProbes(t, c, id, ca, probeSet{"http denied": base["http denied"]}),
		map[string]string{"http denied": want["http denied"]})

	// A connection open before an update goes on; a cut ends it.
	keep := `import socket
ks = socket.create_connection(("allowed.test", 80), timeout=3)
def kreq():
    try:
        ks.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
        return "ok:" + ks.recv(4096).decode(errors="replace")
    except Exception as e:
        return "err:" + type(e).__name__
print(kreq())`
	if got := runPy(t, c, id, keep); !strings.Contains(got, "200 OK") {
		t.Fatalf("a kept-alive connection through the proxy: %q", got)
	}
	denyBoth := &[]string{"denied.test", "allowed.test"}
	if _, err := c.UpdateNetwork(ctx, id, api.UpdateNetworkRequest{Deny: denyBoth}); err != nil {
		t.Fatal(err)
	}
	if got := runPy(t, c, id, "print(kreq())"); !strings.Contains(got, "200 OK") {
		t.Errorf("the open connection after an update without cut: %q, want it to go on", got)
	}
	expect(t, "new connections after denying allowed.test", runProbes(t, c, id, ca, probeSet{
		"resolve allowed": base["resolve allowed"], "http allowed": `get("` + npAllowed + `", "allowed.test")`}),
		map[string]string{"resolve allowed": "err:", "http allowed": "ok:HTTP/1.1 403"})
	if _, err := c.UpdateNetwork(ctx, id, api.UpdateNetworkRequest{Deny: denyBoth, Cut: true}); err != nil {
		t.Fatal(err)
	}
	if got := runPy(t, c, id, "print(kreq())"); strings.Contains(got, "200 OK") || !strings.HasPrefix(got, "ok:") && !strings.HasPrefix(got, "err:") {
		t.Errorf("the open connection after an update with cut: %q, want it ended", got)
	}
	if _, err := c.UpdateNetwork(ctx, id, api.UpdateNetworkRequest{Deny: &[]string{"denied.test"}}); err != nil {
		t.Fatal(err)
	}

	// The log names each decision.
	log, err := c.NetworkLog(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var sawDenied, sawAllowed bool
	for _, e := range log {
		sawDenied = sawDenied || !e.Allowed && e.Name == "denied.test" && e.Kind == "http"
		sawAllowed = sawAllowed || e.Allowed && e.Name == "allowed.test" && e.Kind == "tls" && e.Addr == npAllowed && e.Port == 443 && e.BytesIn > 0
	}
	if !sawDenied || !sawAllowed {
		t.Errorf("log lacks a denied http denied.test or an allowed tls allowed.test with bytes: %+v", log)
	}

	// The policy survives a pause and a resume, and a fork takes it.
	persisted := probeSet{"http denied": base["http denied"], "http allowed": base["http allowed"], "resolve denied": base["resolve denied"]}
	persistedWant := map[string]string{"http denied": want["http denied"], "http allowed": want["http allowed"], "resolve denied": want["resolve denied"]}
	if _, err := c.PauseSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResumeSandbox(ctx, id, api.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	expect(t, "after pause and resume", runProbes(t, c, id, ca, persisted), persistedWant)
	forks, err := c.Fork(ctx, id, api.ForkRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.KillSandbox(context.Background(), forks[0].SandboxID) })
	if forks[0].Network == nil || len(forks[0].Network.Deny) != 1 {
		t.Errorf("fork's network = %+v, want its parent's", forks[0].Network)
	}
	expect(t, "in a fork", runProbes(t, c, forks[0].SandboxID, ca, persisted), persistedWant)
	snap, err := c.Snapshot(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	restored := newSandbox(t, c, api.CreateSandboxRequest{SnapshotID: snap.SnapshotID})
	if restored.Network == nil || len(restored.Network.Deny) != 1 {
		t.Errorf("restored sandbox's network = %+v, want the snapshot's", restored.Network)
	}
	expect(t, "restored from a snapshot", runProbes(t, c, restored.SandboxID, ca, persisted), persistedWant)

	// Bad input: 400 naming the field, nothing applied.
	many := make([]string, 1001)
	for i := range many {
		many[i] = fmt.Sprintf("h%d.example.com", i)
	}
	for _, tc := range []struct {
		name  string
		do    func() error
		field string
	}{
		{"create: wildcard not leftmost", func() error {
			_, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{"api.*.example.com"}}})
			return err
		}, "network.allow[0]"},
		{"create: bad default", func() error {
			_, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Default: "sometimes"}})
			return err
		}, "network.default"},
		{"update: bad CIDR", func() error {
			_, err := c.UpdateNetwork(ctx, id, api.UpdateNetworkRequest{Allow: &[]string{"ok.test", "203.0.113.0/40"}})
			return err
		}, "network.allow[1]"},
		{"update: too many rules", func() error {
			_, err := c.UpdateNetwork(ctx, id, api.UpdateNetworkRequest{Deny: &many})
			return err
		}, "network:"},
		{"update: header not a token", func() error {
			_, err := c.UpdateNetwork(ctx, id, api.UpdateNetworkRequest{Inject: &[]api.HeaderRule{{Domain: "allowed.test", Headers: map[string]string{"Bad Header": "x"}}}})
			return err
		}, "network.inject[0].headers"},
		{"update: bad port", func() error {
			_, err := c.UpdateNetwork(ctx, id, api.UpdateNetworkRequest{Ports: &[]int{443, 70000}})
			return err
		}, "network.ports[1]"},
	} {
		var ce *client.Error
		if err := tc.do(); !errors.As(err, &ce) || ce.Status != 400 || !strings.HasPrefix(ce.Message, tc.field) {
			t.Errorf("%s: %v, want a 400 naming %s", tc.name, err, tc.field)
		}
	}
	if got, _ := c.GetSandbox(ctx, id); got == nil || len(got.Network.Deny) != 1 || len(got.Network.Allow) != 5 {
		t.Errorf("after refused updates the policy changed: %+v", got)
	}

	// Another project can neither read nor change it.
	other := s.createProject("np_b")
	if _, err := other.UpdateNetwork(ctx, id, api.UpdateNetworkRequest{Default: ptr("allow")}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("another project's update: %v, want not found", err)
	}
	if _, err := other.NetworkLog(ctx, id); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("another project's log read: %v, want not found", err)
	}
	// A project's default policy: its sandboxes created without one get
	// it; another project's get the server's (here none), as do its own
	// once it is cleared.
	def := api.NetworkPolicy{Default: "deny", Allow: []string{"allowed.test"}}
	if _, err := c.Network().Set(ctx, def); err != nil {
		t.Fatalf("Network().Set: %v", err)
	}
	if got, err := c.Network().Get(ctx); err != nil || got.Default != "deny" || strings.Join(got.Allow, ",") != "allowed.test" {
		t.Errorf("Network().Get = %+v, %v; want %+v", got, err, def)
	}
	withDef := newSandbox(t, c, api.CreateSandboxRequest{})
	if got, err := c.GetSandbox(ctx, withDef.SandboxID); err != nil || got.Network == nil || got.Network.Default != "deny" || strings.Join(got.Network.Allow, ",") != "allowed.test" {
		t.Errorf("a sandbox created without a policy has %+v, %v; want the project's %+v", got, err, def)
	}
	expect(t, "with the project's default", runProbes(t, c, withDef.SandboxID, ca, probeSet{
		"resolve allowed": base["resolve allowed"], "resolve denied": base["resolve denied"]}),
		map[string]string{"resolve allowed": want["resolve allowed"], "resolve denied": "err:"})
	if sb := newSandbox(t, other, api.CreateSandboxRequest{}); sb.Network != nil {
		t.Errorf("another project's sandbox has %+v; want the server's default, none", sb.Network)
	}
	if _, err := other.Network().Get(ctx); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("another project's default: %v, want not found", err)
	}
	var bad *client.Error
	if _, err := c.Network().Set(ctx, api.NetworkPolicy{Allow: []string{"api.*.example.com"}}); !errors.As(err, &bad) || bad.Status != 400 || !strings.HasPrefix(bad.Message, "network.allow[0]") {
		t.Errorf("a bad default: %v, want a 400 naming network.allow[0]", err)
	}
	if err := c.Network().Clear(ctx); err != nil {
		t.Fatalf("Network().Clear: %v", err)
	}
	if _, err := c.Network().Get(ctx); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the default once cleared: %v, want not found", err)
	}

	// A sandbox made without a policy keeps the server's egress: no update.
	plain := newSandbox(t, c, api.CreateSandboxRequest{})
	if plain.Network != nil {
		t.Errorf("a sandbox created without a policy once the default is cleared has %+v; want none", plain.Network)
	}
	var ce *client.Error
	if _, err := c.UpdateNetwork(ctx, plain.SandboxID, api.UpdateNetworkRequest{Default: ptr("deny")}); !errors.As(err, &ce) || ce.Status != 409 {
		t.Errorf("update of a sandbox without a policy: %v, want 409", err)
	}
}

// TestNetworkPolicyCluster: in a cluster the API passes the policy to the
// node, which enforces it. Only names are resolved and a denied name is
// refused by the proxy before it connects anywhere: no address here needs
// a listener, and no packet leaves the machine.
func TestNetworkPolicyCluster(t *testing.T) {
	_, clients := startClusterWith(t, 1, 1, nil, []string{"--egress=internet", "--egress-allow=203.0.113.16/28",
		"--egress-test-hosts=allowed.test=" + npAllowed + ",denied.test=" + npDenied}, []string{"--egress=internet"})
	c := clients[0]
	ctx := context.Background()
	sb := newSandbox(t, c, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Default: "deny", Allow: []string{"allowed.test"}}})
	probes := probeSet{"resolve allowed": `resolve("allowed.test")`, "resolve denied": `resolve("denied.test")`,
		"http denied": `get("` + npDenied + `", "denied.test")`}
	expect(t, "at create", runProbes(t, c, sb.SandboxID, "", probes), map[string]string{
		"resolve allowed": "ok:" + npAllowed, "resolve denied": "err:", "http denied": "ok:HTTP/1.1 403|denied by the sandbox's network policy"})
	if _, err := c.UpdateNetwork(ctx, sb.SandboxID, api.UpdateNetworkRequest{Allow: &[]string{"allowed.test", "denied.test"}}); err != nil {
		t.Fatal(err)
	}
	expect(t, "after the update", runProbes(t, c, sb.SandboxID, "", probeSet{"resolve denied": probes["resolve denied"]}),
		map[string]string{"resolve denied": "ok:" + npDenied})
	log, err := c.NetworkLog(ctx, sb.SandboxID)
	if err != nil || len(log) < 4 {
		t.Errorf("log through the API = %+v, %v; want the node's decisions", log, err)
	}
	// The API applies the project's default at create; the node enforces it.
	if _, err := c.Network().Set(ctx, api.NetworkPolicy{Default: "deny", Allow: []string{"allowed.test"}}); err != nil {
		t.Fatal(err)
	}
	withDef := newSandbox(t, c, api.CreateSandboxRequest{})
	if withDef.Network == nil || withDef.Network.Default != "deny" {
		t.Errorf("a sandbox created without a policy has %+v; want the project's default", withDef.Network)
	}
	expect(t, "with the project's default", runProbes(t, c, withDef.SandboxID, "", probeSet{"resolve denied": probes["resolve denied"]}),
		map[string]string{"resolve denied": "err:"})
}
