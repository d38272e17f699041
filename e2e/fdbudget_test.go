package e2e

// The node's file descriptors are one budget per project (package
// fdbudget, docs/security.md): issue 33's red-team had four sandboxes of
// one project hold 1,024 idle connections each through the egress proxy,
// which took all of a node's 20,000 descriptors, and every other
// project's creates failed.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// fdHolder opens N keep-alive connections to hold.test through the proxy,
// holds those it got for HOLD seconds, then closes them and writes what
// happened to /tmp/hold.json.
const fdHolder = `
import json, os, socket, sys, time
n, hold = int(sys.argv[1]), float(sys.argv[2])
conns, errs = [], []
for i in range(n):
    try:
        s = socket.create_connection(("hold.test", 80), timeout=5)
        s.sendall(b"GET / HTTP/1.1\r\nHost: hold.test\r\n\r\n")
        d = s.recv(4096)
        if not d.startswith(b"HTTP/1.1 200"):
            raise Exception("answer %r" % d[:40])
        conns.append(s)
    except Exception as e:
        errs.append(type(e).__name__)
time.sleep(hold)
for s in conns:
    s.close()
with open("/tmp/hold.json.part", "w") as f:
    json.dump({"ok": len(conns), "errs": errs}, f)
os.rename("/tmp/hold.json.part", "/tmp/hold.json")
`

// TestDescriptorBudget: project A's two sandboxes hold all the
// descriptors A may (--max-descriptors-per-project 300: 50 proxied
// connections); A's next connections are reset and its next call is a
// 429 naming the flag, both counted; project B's create, runCode, proxied
// connection and a webhook delivery still work; once A's connections
// close, A works again.
func TestDescriptorBudget(t *testing.T) {
	const (
		budget  = 300 // 50 connections of 6
		perSb   = 30  // each of A's two sandboxes asks 30: 10 are refused
		holdFor = 45  // seconds A holds them
		upAddr  = "203.0.113.33"
	)
	metricsAddr := freeAddr(t)
	s := startServer(t, "--egress=internet", "--egress-allow=203.0.113.32/28", "--egress-test-hosts=hold.test="+upAddr,
		"--webhook-allow-private", fmt.Sprintf("--max-descriptors-per-project=%d", budget), "--metrics-listen", metricsAddr)
	murl := "http://" + metricsAddr + "/metrics"
	testNet(t, "lizt-fd", "lzt-fd0", "198.51.100.33", []string{upAddr})
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })}
	go up.Serve(listenNS(t, "lizt-fd", upAddr+":80"))
	t.Cleanup(func() { up.Close() })
	if !s.logged(`msg="file descriptors" limit=`) {
		t.Errorf("the server's log says nothing of its descriptor limit:\n%s", s.logs())
	}

	ctx := context.Background()
	policy := &api.NetworkPolicy{Default: "deny", Allow: []string{"hold.test"}}
	a, b := s.createProject("fd_a"), s.createProject("fd_b")
	rcv := newReceiver(t, nil)
	wh, err := b.Webhooks().Create(ctx, api.CreateWebhookRequest{URL: rcv.srv.URL + "/hook"})
	if err != nil {
		t.Fatalf("Webhooks().Create: %v", err)
	}
	rcv.mu.Lock()
	rcv.secret = wh.Secret
	rcv.mu.Unlock()

	var as []string
	for range 2 {
		sb := newSandbox(t, a, api.CreateSandboxRequest{Network: policy})
		as = append(as, sb.SandboxID)
		if out := runPy(t, a, sb.SandboxID, fmt.Sprintf("open('/tmp/hold.py', 'w').write(%q)", fdHolder)); strings.HasPrefix(out, "error") {
			t.Fatalf("writing the holder: %s", out)
		}
	}
	for _, id := range as {
		if _, err := a.StartProcess(ctx, id, api.ProcessStartRequest{
			Args: []string{"python3", "/tmp/hold.py", fmt.Sprint(perSb), fmt.Sprint(holdFor)}}); err != nil {
			t.Fatalf("starting the holder in %s: %v", id, err)
		}
	}
	started := time.Now()
	// A holds its budget once both holders are done opening.
	deadline := started.Add(30 * time.Second)
	for {
		m := scrape(t, murl)
		if m[`lizard_descriptors{kind="tenants_held"}`] >= budget-6 && m[`lizard_descriptor_refusals_total{bound="project",kind="egress"}`] >= 2*perSb-budget/6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A's holders did not take its budget within 30 s: held %v, egress refusals %v", m[`lizard_descriptors{kind="tenants_held"}`],
				m[`lizard_descriptor_refusals_total{bound="project",kind="egress"}`])
		}
		time.Sleep(500 * time.Millisecond)
	}

	// A's next call is refused with a 429 that says what to do.
	_, err = a.Execute(ctx, as[0], api.ExecuteRequest{Code: "1"}, nil)
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusTooManyRequests || !strings.Contains(ae.Message, "--max-descriptors-per-project 300") {
		// The StartProcess call's 2 may still have been held when the
		// holders met the budget: A then holds 294 and a call fits.
		if m := scrape(t, murl); err != nil || m[`lizard_descriptors{kind="tenants_held"}`] == budget {
			t.Errorf("A's runCode at its budget: %v; want 429 naming --max-descriptors-per-project 300", err)
		}
	}

	// B is not affected: create, runCode, a proxied connection, a webhook.
	sb := newSandbox(t, b, api.CreateSandboxRequest{Network: policy})
	if out := runPy(t, b, sb.SandboxID, "print(6*7)"); strings.TrimSpace(out) != "42" {
		t.Errorf("B's runCode with A at its budget: %q; want 42", out)
	}
	out := runPy(t, b, sb.SandboxID, `import urllib.request
print(urllib.request.urlopen("http://hold.test/", timeout=10).read().decode())`)
	if strings.TrimSpace(out) != "hello" {
		t.Errorf("B's proxied request with A at its budget: %q; want hello", out)
	}
	if evs := rcv.events(sb.SandboxID, 1, 30*time.Second); len(evs) == 0 {
		t.Errorf("no webhook delivery of B's sandbox's events with A at its budget")
	}
	if time.Since(started) > holdFor*time.Second {
		t.Fatalf("B's checks took %v, past A's %d s of holding: the test proved nothing; lengthen holdFor", time.Since(started), holdFor)
	}

	// Once A's holders close their connections, A works again, and each
	// saw exactly its share refused, as resets.
	var ok int
	for _, id := range as {
		var res struct {
			OK   int      `json:"ok"`
			Errs []string `json:"errs"`
		}
		deadline := time.Now().Add(holdFor*time.Second + time.Minute)
		for {
			out, err := a.Execute(ctx, id, api.ExecuteRequest{Code: "print(open('/tmp/hold.json').read())"}, nil)
			if err == nil && out.Error == nil {
				if err := json.Unmarshal([]byte(out.Stdout), &res); err != nil {
					t.Fatalf("holder's result %q: %v", out.Stdout, err)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("A's sandbox %s once its holder ended: %v %+v", id, err, out)
			}
			time.Sleep(time.Second)
		}
		ok += res.OK
		for _, e := range res.Errs {
			if e != "ConnectionResetError" && e != "BrokenPipeError" {
				t.Errorf("a refused connection of A raised %s; want it reset", e)
			}
		}
		if res.OK+len(res.Errs) != perSb {
			t.Errorf("holder of %s: %d ok and %d errors; want %d in all", id, res.OK, len(res.Errs), perSb)
		}
	}
	if ok > budget/6 || ok < budget/6-1 {
		t.Errorf("A held %d connections; want %d (or one fewer, the holders' start call held 2 for a moment)", ok, budget/6)
	}
	m := scrape(t, murl)
	if held := m[`lizard_descriptors{kind="tenants_held"}`]; held > 10 {
		t.Errorf("tenants hold %v descriptors after every connection closed; want only what calls in flight hold", held)
	}
	// The server raises its limit to the kernel's fs.nr_open when it may
	// (CAP_SYS_RESOURCE), else its soft limit to the hard one it was given.
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if got := m[`lizard_descriptors{kind="limit"}`]; got < float64(lim.Max) {
		t.Errorf("the node's descriptor limit is %v; want it raised at start to at least the hard limit %d", got, lim.Max)
	}
}
