package e2e

// Secrets injected at the egress (docs/secrets.md) against a real server
// and real sandboxes. "The internet" is a namespace this test makes, with
// api.secret.test at 203.0.113.25 (a name only the node resolver's test
// records know) serving HTTPS with a test CA the node is told to trust
// (--egress-extra-roots), and plain HTTP; no packet leaves the machine.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

const (
	secHost     = "api.secret.test"
	secUpstream = "203.0.113.25"
	// secMarker starts every secret value of this test: it is no one's
	// secret, so the sandbox may be searched for it, and it appears
	// nowhere unless a value does.
	secMarker = "LZSECRET"
)

// secUpstreams serves api.secret.test in namespace ns at addr: HTTPS on
// 443 with a certificate from a new test CA (returned as PEM), HTTP on
// 80. Each answers "ok PATH" and records the Authorization it got.
type secUpstreams struct {
	mu     sync.Mutex
	seen   map[string][]string // path -> Authorization values
	static map[string][]string // path -> X-Static values (TestE2BTransformRules)
}

func newSecUpstreams(t *testing.T, ns, addr string) (*secUpstreams, string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lizard secrets test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(2 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: secHost},
		DNSNames: []string{secHost}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(2 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	u := &secUpstreams{seen: map[string][]string{}, static: map[string][]string{}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen[r.URL.Path] = append(u.seen[r.URL.Path], r.Header.Get("Authorization"))
		u.static[r.URL.Path] = append(u.static[r.URL.Path], r.Header.Get("X-Static"))
		u.mu.Unlock()
		fmt.Fprintf(w, "ok %s", r.URL.Path)
	})
	for _, port := range []int{80, 443} {
		ln := listenNS(t, ns, net.JoinHostPort(addr, fmt.Sprint(port)))
		if port == 443 {
			ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: key}}})
		}
		srv := &http.Server{Handler: h}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	return u, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
}

// got returns the Authorization values path was requested with.
func (u *secUpstreams) got(path string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen[path]...)
}

// gotStatic returns the X-Static values path was requested with.
func (u *secUpstreams) gotStatic(path string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.static[path]...)
}

// secClients is Python that requests https://api.secret.test/<tag>-<lib>
// with urllib (the system bundle; its default opener, made once per
// process, unless a fresh context is asked for), requests (certifi), and
// plain HTTP, and prints a JSON object of what each read.
const secClients = `
import json, urllib.request, requests
def _p(f):
    try: return f()
    except Exception as e: return "err:" + type(e).__name__ + ": " + str(e)[:300]
print(json.dumps({
    "urllib": _p(lambda: urllib.request.urlopen("https://api.secret.test/%[1]s-urllib", timeout=15%[2]s).read().decode()),
    "requests": _p(lambda: requests.get("https://api.secret.test/%[1]s-requests", timeout=15).text),
    "plain": _p(lambda: urllib.request.urlopen("http://api.secret.test/%[1]s-plain", timeout=15).read().decode()),
}))
`

// secNode fetches https://api.secret.test/<tag>-node with Node's fetch
// (NODE_EXTRA_CA_CERTS).
const secNode = `fetch("https://api.secret.test/%s-node").then(r => r.text()).then(t => console.log(t), e => console.log("err:" + (e.cause || e)))`

// secScan is Python run in the kernel: the marker's occurrences in the
// kernel's own memory (/proc/self/mem), found as two halves side by side
// so that the code itself never holds it; and a canary made the same way
// but joined, which the scan must find (it sees the memory it reads).
const secScan = `
def _lz_scan(a, b):
    n = 0
    with open('/proc/self/maps') as f:
        maps = f.read().splitlines()
    with open('/proc/self/mem', 'rb', 0) as mem:
        for line in maps:
            addr, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in addr.split('-'))
            if 'r' not in perms or hi - lo > 1 << 30:
                continue
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except (OSError, ValueError, OverflowError):
                continue
            i = data.find(a)
            while i >= 0:
                if data[i + len(a):i + len(a) + len(b)] == b:
                    n += 1
                i = data.find(a, i + 1)
    return n
_lz_canary = "QZCAN" + "ARY-" + str(7 * 6)
print(_lz_scan(b"LZSEC", b"RET"), _lz_scan(b"QZCAN", b"ARY-42"))
del _lz_canary, _lz_scan
`

// expectInjected runs the clients in sandbox id and checks each reached
// the upstream with value as its bearer token, and that no answer held
// it.
func expectInjected(t *testing.T, c *client.Client, id, tag, value string, up *secUpstreams, fresh bool) {
	t.Helper()
	ctxArg := ""
	if fresh {
		ctxArg = ", context=__import__('ssl').create_default_context()"
	}
	out := runPy(t, c, id, fmt.Sprintf(secClients, tag, ctxArg))
	var got map[string]string
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil {
		t.Fatalf("%s: the clients printed %q: %v", tag, out, err)
	}
	got["node"] = strings.TrimSpace(execOK(t, c, id, "node", "-e", fmt.Sprintf(secNode, tag)))
	for _, lib := range []string{"urllib", "requests", "plain", "node"} {
		path := "/" + tag + "-" + lib
		if got[lib] != "ok "+path {
			t.Errorf("%s: %s read %q; want %q", tag, lib, got[lib], "ok "+path)
			continue
		}
		if auth := up.got(path); len(auth) != 1 || auth[0] != "Bearer "+value {
			t.Errorf("%s: the upstream got %s's request with Authorization %q; want the secret", tag, lib, auth)
		}
	}
}

// expectNoSecret checks sandbox id holds no secret of this test: not in
// the environment of its code, of any process (/proc/*/environ, read as
// root), its files, nor its kernel's memory.
func expectNoSecret(t *testing.T, c *client.Client, id, where string, memory bool) {
	t.Helper()
	ctx := context.Background()
	env := execOK(t, c, id, "env")
	// As root, to read every process's environment (the agent's too).
	p, err := c.StartProcess(ctx, id, api.ProcessStartRequest{Args: []string{"sh", "-c",
		`for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f"; done 2>/dev/null; ` +
			`grep -rl --binary-files=text -e "LZSEC""RET" /etc /home /tmp /root /usr/local /var /run /dev/shm /opt/lizard/venv/lib/python3*/site-packages/certifi 2>/dev/null; true`},
		User: "root"})
	if err != nil {
		t.Fatalf("%s: scanning the sandbox: %v", where, err)
	}
	res, err := c.ConnectProcess(ctx, id, p.Pid, nil)
	if err != nil {
		t.Fatalf("%s: scanning the sandbox: %v", where, err)
	}
	for what, s := range map[string]string{"env": env, "/proc/*/environ or a file": res.Stdout} {
		if strings.Contains(s, secMarker) {
			t.Errorf("%s: %s shows a secret:\n%s", where, what, s)
		}
	}
	if !strings.Contains(res.Stdout, "LIZARD_SANDBOX_ID=") {
		t.Errorf("%s: the scan read no process environment: %q", where, res.Stdout)
	}
	if !memory {
		return
	}
	scan := strings.Fields(runPy(t, c, id, secScan))
	if len(scan) != 2 || scan[0] != "0" || scan[1] == "0" {
		t.Errorf("%s: kernel memory scan = %v; want 0 secrets and the canary found", where, scan)
	}
}

func secValue() string {
	b := make([]byte, 12)
	rand.Read(b)
	return secMarker + hex.EncodeToString(b)
}

// TestSecretsInjected: a project's secret reaches an HTTPS upstream in
// the Authorization header of requests from Python (urllib, requests),
// Node and plain HTTP, through the sandbox's own CA, while the sandbox
// never holds it (environment, /proc, files, kernel memory), nor its
// fork, nor a sandbox restored from its snapshot; the same after a
// pause (the checkpoint on the host holds no value either). Another
// project cannot use it; a policy naming a secret its project lacks is a
// 400 naming the header; a policy given inject rules while the sandbox
// runs installs its CA then.
func TestSecretsInjected(t *testing.T) {
	up, ca := func() (*secUpstreams, string) {
		testNet(t, "lizt-sec", "lzt-sec0", "198.51.100.25", []string{secUpstream})
		return newSecUpstreams(t, "lizt-sec", secUpstream)
	}()
	roots := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(roots, []byte(ca), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--egress=internet", "--egress-allow=203.0.113.24/30",
		"--egress-test-hosts="+secHost+"="+secUpstream, "--egress-extra-roots="+roots)
	c := s.createProject("sec_a")
	other := s.createProject("sec_b")
	ctx := context.Background()
	value, otherValue := secValue(), secValue()
	// Plain HTTP is asked for: expectInjected's clients include it.
	if _, err := c.Secrets().Set(ctx, "TOKEN", api.SetSecretRequest{Value: value, Hosts: []string{secHost}, AllowHTTP: true}); err != nil {
		t.Fatal(err)
	}
	inject := []api.HeaderRule{{Domain: secHost, Headers: map[string]string{"Authorization": "Bearer {{ secrets.TOKEN }}"}}}
	policy := &api.NetworkPolicy{Default: "deny", Allow: []string{secHost}, Inject: inject}

	sb := newSandbox(t, c, api.CreateSandboxRequest{Network: policy})
	id := sb.SandboxID
	expectInjected(t, c, id, "create", value, up, false)
	expectNoSecret(t, c, id, "at create", true)

	// The sandbox's own Authorization is replaced, not added to.
	out := runPy(t, c, id, `import requests; print(requests.get("https://api.secret.test/forged", headers={"Authorization": "Bearer mine"}, timeout=15).text)`)
	if got := up.got("/forged"); strings.TrimSpace(out) != "ok /forged" || len(got) != 1 || got[0] != "Bearer "+value {
		t.Errorf("a request with its own Authorization read %q, the upstream got %q; want the secret alone", out, got)
	}

	// A fork is another sandbox, with a copy of its parent's CA (which
	// TLS contexts in its processes' memory hold: urllib's default
	// opener) and the same injection.
	forks, err := c.Fork(ctx, id, api.ForkRequest{})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	t.Cleanup(func() { c.KillSandbox(context.Background(), forks[0].SandboxID) })
	expectInjected(t, c, forks[0].SandboxID, "fork", value, up, false)
	expectNoSecret(t, c, forks[0].SandboxID, "in a fork", true)
	caOf := func(id string) string {
		return execOK(t, c, id, "sed", "-n", "/BEGIN lizard egress CA/,/END lizard egress CA/p", "/etc/ssl/certs/ca-certificates.crt")
	}
	if a, b := caOf(id), caOf(forks[0].SandboxID); a == "" || a != b {
		t.Errorf("the fork trusts another egress CA than its parent's: parent %q, fork %q", a, b)
	}

	// A sandbox restored from a snapshot gets a CA of its own: a TLS
	// context made before the snapshot must be made again (a fresh one
	// for urllib here).
	snap, err := c.Snapshot(ctx, id)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	restored := newSandbox(t, c, api.CreateSandboxRequest{SnapshotID: snap.SnapshotID})
	if a, b := caOf(id), caOf(restored.SandboxID); b == "" || a == b {
		t.Errorf("the restored sandbox trusts its source's egress CA (or none): source %q, restored %q", a, b)
	}
	expectInjected(t, c, restored.SandboxID, "restored", value, up, true)
	expectNoSecret(t, c, restored.SandboxID, "restored from a snapshot", false)

	// Paused, its checkpoint is on the host: neither it nor anything else
	// in the data directory (database, audit trail, logs) holds a value.
	if _, err := c.PauseSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	noValueOnDisk(t, s, value)
	if _, err := c.ResumeSandbox(ctx, id, api.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	expectInjected(t, c, id, "resumed", value, up, false)

	// Another project: naming TOKEN, which it does not have, is a 400
	// naming the header; with a TOKEN of its own, its sandboxes send
	// that one.
	var ce *client.Error
	_, err = other.CreateSandbox(ctx, api.CreateSandboxRequest{Network: policy})
	if !errors.As(err, &ce) || ce.Status != 400 || !strings.HasPrefix(ce.Message, "network.inject[0].headers[Authorization]") {
		t.Errorf("another project's create naming TOKEN: %v; want a 400 naming network.inject[0].headers[Authorization]", err)
	}
	if _, err := other.Secrets().Set(ctx, "TOKEN", api.SetSecretRequest{Value: otherValue, Hosts: []string{secHost}, AllowHTTP: true}); err != nil {
		t.Fatal(err)
	}
	osb := newSandbox(t, other, api.CreateSandboxRequest{Network: policy})
	expectInjected(t, other, osb.SandboxID, "other", otherValue, up, false)

	// A policy given inject rules while the sandbox runs: no CA before
	// (TLS to the upstream goes through unterminated, which the sandbox
	// cannot verify, and carries no header), the CA and the header after.
	late := newSandbox(t, c, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Default: "deny", Allow: []string{secHost}}})
	if got := caOf(late.SandboxID); got != "" {
		t.Errorf("a sandbox without inject rules trusts an egress CA: %q", got)
	}
	out = runPy(t, c, late.SandboxID, `import requests; print(requests.get("https://api.secret.test/late-before", verify=False, timeout=15).text)`)
	if got := up.got("/late-before"); !strings.Contains(out, "ok /late-before") || len(got) != 1 || got[0] != "" {
		t.Errorf("before the update: read %q, the upstream got Authorization %q; want none", out, got)
	}
	if _, err := c.UpdateNetwork(ctx, late.SandboxID, api.UpdateNetworkRequest{Inject: &inject}); err != nil {
		t.Fatalf("UpdateNetwork adding inject rules: %v", err)
	}
	expectInjected(t, c, late.SandboxID, "late", value, up, false)
	// An update naming a secret the project lacks changes nothing.
	bad := []api.HeaderRule{{Domain: secHost, Headers: map[string]string{"X-Key": "{{ secrets.NOPE }}"}}}
	if _, err := c.UpdateNetwork(ctx, late.SandboxID, api.UpdateNetworkRequest{Inject: &bad}); !errors.As(err, &ce) || ce.Status != 400 || !strings.HasPrefix(ce.Message, "network.inject[0].headers[X-Key]") {
		t.Errorf("an update naming an unknown secret: %v; want a 400 naming network.inject[0].headers[X-Key]", err)
	}

	// Rules added while it is paused: its resume has it trust the CA.
	asleep := newSandbox(t, c, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Default: "deny", Allow: []string{secHost}}})
	if _, err := c.PauseSandbox(ctx, asleep.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateNetwork(ctx, asleep.SandboxID, api.UpdateNetworkRequest{Inject: &inject}); err != nil {
		t.Fatalf("UpdateNetwork adding inject rules to a paused sandbox: %v", err)
	}
	if _, err := c.ResumeSandbox(ctx, asleep.SandboxID, api.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := caOf(asleep.SandboxID); got == "" {
		t.Errorf("a sandbox given inject rules while paused trusts no egress CA after its resume")
	}
	expectInjected(t, c, asleep.SandboxID, "paused-late", value, up, false)

	// The audit trail names each use, by secret and sandbox, never a value.
	audit, err := os.ReadFile(filepath.Join(s.dataDir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(audit), `"msg":"secret.use"`) || !strings.Contains(string(audit), `"sandbox_id":"`+id+`"`) {
		t.Errorf("the audit trail has no secret.use by %s", id)
	}
	noValueOnDisk(t, s, value)
	noValueOnDisk(t, s, otherValue)
}

// TestSecretsInjectedCluster: in a cluster the api process seals the
// secret and checks the policy, and the node, holding the same key
// (LIZARD_SECRETS_KEY), opens it for the sandbox's requests and audits
// the use in its own audit trail.
func TestSecretsInjectedCluster(t *testing.T) {
	testNet(t, "lizt-sec", "lzt-sec0", "198.51.100.25", []string{secUpstream})
	up, ca := newSecUpstreams(t, "lizt-sec", secUpstream)
	roots := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(roots, []byte(ca), 0o600); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	cl, clients := startClusterWith(t, 1, 1, []string{"LIZARD_SECRETS_KEY=" + base64.StdEncoding.EncodeToString(key)},
		[]string{"--egress=internet", "--egress-allow=203.0.113.24/30", "--egress-test-hosts=" + secHost + "=" + secUpstream,
			"--egress-extra-roots=" + roots}, []string{"--egress=internet"})
	c := clients[0]
	value := secValue()
	if _, err := c.Secrets().Set(context.Background(), "TOKEN", api.SetSecretRequest{Value: value, Hosts: []string{secHost}, AllowHTTP: true}); err != nil {
		t.Fatal(err)
	}
	var ce *client.Error
	bad := &api.NetworkPolicy{Default: "deny", Allow: []string{secHost},
		Inject: []api.HeaderRule{{Domain: secHost, Headers: map[string]string{"Authorization": "{{ secrets.NOPE }}"}}}}
	if _, err := c.CreateSandbox(context.Background(), api.CreateSandboxRequest{Network: bad}); !errors.As(err, &ce) || ce.Status != 400 {
		t.Errorf("a create naming an unknown secret through the api process: %v; want 400", err)
	}
	sb := newSandbox(t, c, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Default: "deny", Allow: []string{secHost},
		Inject: []api.HeaderRule{{Domain: secHost, Headers: map[string]string{"Authorization": "Bearer {{ secrets.TOKEN }}"}}}}})
	expectInjected(t, c, sb.SandboxID, "cluster", value, up, false)
	audit, err := os.ReadFile(filepath.Join(cl.nodes[0].dataDir, "audit.log"))
	if err != nil || !strings.Contains(string(audit), `"msg":"secret.use"`) || strings.Contains(string(audit), value) {
		t.Errorf("the node's audit trail: %v; want secret.use without the value", err)
	}
}
