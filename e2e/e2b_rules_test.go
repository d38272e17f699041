package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/testenv"
)

// e2bRulesUpstream is api.secret.test (and leak.secret.test, a name the
// policy does not allow) for TestE2BTransformRules, in a namespace of the
// test's.
const e2bRulesUpstream = "203.0.113.53"

// e2bRulesScript creates a sandbox through E2B's SDK with an allow list
// and transform rules — a header holding the project's secret as E2B's
// ${e2b.secrets.NAME} and a plain one for the allowed name, and a rule
// for a name outside the allow list — requests each from inside with
// curl, then clears the rules with update_network and sets them again.
// It prints the sandbox's ID and what curl read each time, as JSON.
const e2bRulesScript = `
import json
from e2b import ALL_TRAFFIC, Sandbox
rules = {
    "api.secret.test": [{"transform": {"headers": {"Authorization": "Bearer ${e2b.secrets.TOKEN}", "X-Static": "static-1"}}}],
    "leak.secret.test": [{"transform": {"headers": {"X-Static": "leak"}}}],
}
allow = {"allow_out": ["api.secret.test"], "deny_out": [ALL_TRAFFIC]}
sb = Sandbox.create(timeout=180, network={**allow, "rules": rules})
def curl(args):
    return sb.commands.run("curl -sS -m 15 -w ' %{http_code}' " + args + " 2>&1 || true", timeout=60).stdout.strip()
out = {"id": sb.sandbox_id, "info": json.dumps(sb.get_info().network, sort_keys=True, default=str)}
out["tls"] = curl("-H 'Authorization: Bearer mine' -H 'X-Static: mine' https://api.secret.test/e2b-tls")
out["plain"] = curl("http://api.secret.test/e2b-plain")
out["leak"] = curl("--resolve leak.secret.test:80:` + e2bRulesUpstream + ` http://leak.secret.test/e2b-leak")
sb.update_network(allow)
out["cleared"] = curl("http://api.secret.test/e2b-cleared")
sb.update_network({**allow, "rules": rules})
out["again"] = curl("http://api.secret.test/e2b-again")
print(json.dumps(out))
`

// TestE2BTransformRules: E2B's network transform rules, through E2B's
// SDK, are Lizard's inject rules (docs/e2b.md): the headers reach the
// upstream over HTTPS and plain HTTP, the secret as E2B's placeholder
// names it, replacing what the sandbox sent; a rule for a name the
// allow list leaves out sends nothing; update_network without rules
// clears them and with rules sets them again. Refused before anything
// runs: a rule putting the secret on a host outside the secret's hosts,
// CR/LF in a value, more domains than E2B's bound; a sandbox's own key
// adding a rule (403), by update or create. get_info shows the
// rules as E2B's, the secret as its placeholder.
func TestE2BTransformRules(t *testing.T) {
	testNet(t, "lizt-e2bsec", "lzt-e2bsec0", "198.51.100.53", []string{e2bRulesUpstream})
	up, ca := newSecUpstreams(t, "lizt-e2bsec", e2bRulesUpstream)
	roots := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(roots, []byte(ca), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--egress=internet", "--egress-allow=203.0.113.52/30",
		"--egress-test-hosts="+secHost+"="+e2bRulesUpstream+",leak.secret.test="+e2bRulesUpstream, "--egress-extra-roots="+roots)
	c := s.createProject("proj_e2brules")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	value := secValue()
	if _, err := c.Secrets().Set(ctx, "TOKEN", api.SetSecretRequest{Value: value, Hosts: []string{secHost}, AllowHTTP: true}); err != nil {
		t.Fatal(err)
	}

	// Refused at create, each naming what to change, no sandbox made.
	for _, tc := range []struct{ what, rules, want string }{
		{"the secret for a host outside its hosts", `{"leak.secret.test":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.TOKEN}"}}}]}`,
			"not one of the hosts it may be sent to"},
		{"CR LF smuggling a header", `{"api.secret.test":[{"transform":{"headers":{"X-Static":"a\r\nAuthorization: Bearer ${e2b.secrets.TOKEN}"}}}]}`,
			"a control character such as CR or LF"},
		{"11 domains", func() string {
			d := make([]string, 11)
			for i := range d {
				d[i] = fmt.Sprintf(`"d%d.test":[{"transform":{"headers":{"X":"1"}}}]`, i)
			}
			return "{" + strings.Join(d, ",") + "}"
		}(), "11 domains, at most 10"},
	} {
		body := `{"templateID":"base","network":{"allowOut":["api.secret.test"],"denyOut":["0.0.0.0/0"],"rules":` + tc.rules + `}}`
		req, _ := http.NewRequestWithContext(ctx, "POST", s.url+"/e2b/v2/sandboxes", strings.NewReader(body))
		req.Header.Set("X-API-Key", s.keys[c])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tc.want) {
			t.Errorf("create with %s: %d %s; want 400 saying %q", tc.what, resp.StatusCode, b, tc.want)
		}
	}
	if list, err := c.ListSandboxes(ctx, client.ListOptions{}); err != nil || len(list) != 0 {
		t.Errorf("after the refused creates: %d sandboxes, %v; want none", len(list), err)
	}

	// A sandbox's own key (code inside holds it) may add no rule, through
	// E2B's update or create: a rule sends the project's secret.
	own := newSandbox(t, c, api.CreateSandboxRequest{LizardToken: true, Network: &api.NetworkPolicy{Default: "deny", Allow: []string{secHost}}})
	ownKey := strings.TrimSpace(execOK(t, c, own.SandboxID, "sh", "-c", "echo $LIZARD_API_KEY"))
	secretRules := `{"api.secret.test":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.TOKEN}"}}}]}`
	for _, call := range []struct{ method, path, body string }{
		{"PUT", "/e2b/sandboxes/" + own.SandboxID + "/network", `{"allowOut":["api.secret.test"],"denyOut":["0.0.0.0/0"],"rules":` + secretRules + `}`},
		{"POST", "/e2b/v2/sandboxes", `{"templateID":"base","network":{"allowOut":["api.secret.test"],"denyOut":["0.0.0.0/0"],"rules":` + secretRules + `}}`},
	} {
		req, _ := http.NewRequestWithContext(ctx, call.method, s.url+call.path, strings.NewReader(call.body))
		req.Header.Set("X-API-Key", ownKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "inject") {
			t.Errorf("%s %s with the sandbox's own key: %d %s; want 403 naming the inject rule", call.method, call.path, resp.StatusCode, b)
		}
	}
	if sb, err := c.GetSandbox(ctx, own.SandboxID); err != nil || sb.Network == nil || len(sb.Network.Inject) != 0 {
		t.Errorf("after the refused update the policy is %+v (%v); want no inject rules", sb.Network, err)
	}
	c.KillSandbox(ctx, own.SandboxID)

	cmd := exec.CommandContext(ctx, testenv.Python(t), "-c", e2bRulesScript)
	cmd.Env = append(os.Environ(), "E2B_API_URL="+s.url+"/e2b", "E2B_SANDBOX_URL="+s.url+"/e2b/sandbox", "E2B_API_KEY="+s.keys[c])
	out, err := cmd.Output()
	var got map[string]string
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || json.Unmarshal([]byte(lines[len(lines)-1]), &got) != nil || got["id"] == "" {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("the E2B script: %v\n%s\n%s", err, out, stderr)
	}
	t.Cleanup(func() { c.KillSandbox(context.Background(), got["id"]) })
	if strings.Contains(string(out), value) {
		t.Errorf("the sandbox read the secret: %s", out)
	}
	for _, tc := range []struct {
		probe, path, read string
		auth, static      []string
	}{
		{"tls", "/e2b-tls", "ok /e2b-tls 200", []string{"Bearer " + value}, []string{"static-1"}},
		{"plain", "/e2b-plain", "ok /e2b-plain 200", []string{"Bearer " + value}, []string{"static-1"}},
		{"leak", "/e2b-leak", "403", nil, nil},
		{"cleared", "/e2b-cleared", "ok /e2b-cleared 200", []string{""}, []string{""}},
		{"again", "/e2b-again", "ok /e2b-again 200", []string{"Bearer " + value}, []string{"static-1"}},
	} {
		if !strings.Contains(got[tc.probe], tc.read) {
			t.Errorf("%s: curl read %q; want %q", tc.probe, got[tc.probe], tc.read)
		}
		if a, st := up.got(tc.path), up.gotStatic(tc.path); fmt.Sprint(a) != fmt.Sprint(tc.auth) || fmt.Sprint(st) != fmt.Sprint(tc.static) {
			t.Errorf("%s: the upstream got Authorization %q, X-Static %q; want %q, %q", tc.probe, a, st, tc.auth, tc.static)
		}
	}
	// get_info says the policy in E2B's words, the secret as its placeholder.
	for _, want := range []string{`"allow_out": ["api.secret.test"]`, `"deny_out": ["0.0.0.0/0"]`, `"Authorization": "Bearer ${e2b.secrets.TOKEN}"`, `"X-Static": "leak"`} {
		if !strings.Contains(got["info"], want) {
			t.Errorf("get_info().network = %s; want it to hold %s", got["info"], want)
		}
	}
	sb, err := c.GetSandbox(ctx, got["id"])
	if err != nil {
		t.Fatal(err)
	}
	if n := sb.Network; n == nil || len(n.Inject) != 2 || n.Inject[0].Domain != secHost || n.Inject[0].Headers["Authorization"] != "Bearer {{ secrets.TOKEN }}" {
		t.Errorf("the sandbox's policy through Lizard's API = %+v; want inject rules for %s (the secret as {{ secrets.TOKEN }}) and leak.secret.test", n, secHost)
	}
}
