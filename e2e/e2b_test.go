package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/testenv"
)

// TestE2BCluster runs E2B's code interpreter SDK (pinned in
// test/requirements.txt) against lizard api + lizard node with only
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set: a create and run_code
// through one api process, then connect, run_code and list through the
// other, then the sandbox killed under a running cell, whose call must end
// with the SDK's TimeoutException within 2 s (e2e/testdata/e2b_interpreter.py
// asserts each). Then the two files of examples/e2b (TestE2BExamples) run
// at once, the Python one through one api process and the JavaScript one
// through the other. The single-machine suite is
// sdk/python/tests/e2e/test_e2b.py.
func TestE2BCluster(t *testing.T) {
	node := e2bNodeExample(t)
	c, clients := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Python(t), filepath.Join(testenv.RepoRoot(t), "e2e", "testdata", "e2b_interpreter.py"))
	cmd.Env = append(os.Environ(),
		"E2B_API_URL="+c.apis[0].url+"/e2b",
		"E2B_SANDBOX_URL="+c.apis[0].url+"/e2b/sandbox",
		"E2B_API_KEY="+c.key,
		"OTHER_API="+c.apis[1].url,
	)
	out, err := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || lines[len(lines)-1] != "ok" {
		t.Fatalf("e2b_interpreter.py: %v\n%s", err, out)
	}
	var figures struct {
		KillEndS float64 `json:"killEndS"`
	}
	if len(lines) < 2 || json.Unmarshal([]byte(lines[len(lines)-2]), &figures) != nil {
		t.Fatalf("no figures in the script's output:\n%s", out)
	}
	t.Logf("run_code ended %.3fs after its sandbox was killed", figures.KillEndS)
	if figures.KillEndS > 2 {
		t.Errorf("run_code ended %.3fs after the kill; want within 2s", figures.KillEndS)
	}
	runE2BExamples(t, node, [2]string{c.apis[0].url, c.apis[1].url}, c.key)
	list, err := clients[0].ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list {
		if sb.State == "running" || sb.State == "paused" {
			t.Errorf("sandbox %s left %s", sb.SandboxID, sb.State)
		}
	}
}

// TestE2BHostForm: with --ports-domain, E2B's SDKs without E2B_SANDBOX_URL
// call https://<port>-<id>.<domain> (behind the operator's TLS). Ports
// 49999 (the code interpreter) and 49983 (envd) there are E2B's sandbox
// calls, answered by the E2B surface with its auth, not ports of the
// sandbox, where nothing listens on them.
func TestE2BHostForm(t *testing.T) {
	s := startServer(t, "--ports-domain=e2b.test")
	c := s.createProject("proj_e2bhost")
	key := s.keys[c]
	jsonBody := []string{"Content-Type", "application/json"}
	post := func(u, body string, h ...string) (int, string) {
		t.Helper()
		resp, b := send(t, http.MethodPost, u, body, append(jsonBody, h...)...)
		return resp.StatusCode, b
	}
	code, body := post(s.url+"/e2b/sandboxes", `{"templateID":"code-interpreter-v1","timeout":120}`, "X-API-Key", key)
	var sb struct {
		SandboxID          string `json:"sandboxID"`
		EnvdAccessToken    string `json:"envdAccessToken"`
		TrafficAccessToken string `json:"trafficAccessToken"`
	}
	if code != http.StatusCreated && code != http.StatusOK || json.Unmarshal([]byte(body), &sb) != nil || sb.SandboxID == "" || sb.EnvdAccessToken == "" {
		t.Fatalf("E2B create: %d %s", code, body)
	}
	t.Cleanup(func() { c.KillSandbox(context.Background(), sb.SandboxID) })
	if sb.TrafficAccessToken == "" || sb.TrafficAccessToken == sb.EnvdAccessToken {
		t.Errorf("trafficAccessToken %q, envdAccessToken %q; want a token of its own", sb.TrafficAccessToken, sb.EnvdAccessToken)
	}

	interp := "49999-" + sb.SandboxID + ".e2b.test"
	if code, body := post(s.url+"/execute", `{"code":"6*7"}`, "Host", interp, "X-Access-Token", sb.EnvdAccessToken); code != http.StatusOK || !strings.Contains(body, `"42"`) {
		t.Errorf("run_code through the host form: %d %s; want a result 42", code, body)
	}
	if code, body := post(s.url+"/execute", `{"code":"6*7"}`, "Host", interp); code != http.StatusUnauthorized {
		t.Errorf("run_code through the host form without a token: %d %s; want 401", code, body)
	}
	envd := "49983-" + sb.SandboxID + ".e2b.test"
	if code, body := post(s.url+"/process.Process/List", `{}`, "Host", envd, "X-Access-Token", sb.EnvdAccessToken); code != http.StatusOK || !strings.Contains(body, "processes") && body != "{}" {
		t.Errorf("envd List through the host form: %d %s; want 200 and the processes", code, body)
	}
	// upload_url/download_url: E2B's signed URLs, used as they are, with
	// no header but the host.
	sign := func(path, op string) string {
		sum := sha256.Sum256([]byte(path + ":" + op + "::" + sb.EnvdAccessToken))
		return "/files?path=" + url.QueryEscape(path) + "&signature=v1_" + url.QueryEscape(base64.RawStdEncoding.EncodeToString(sum[:]))
	}
	if resp, body := send(t, http.MethodPost, s.url+sign("/tmp/signed.txt", "write"), "signed", "Host", envd, "Content-Type", "application/octet-stream"); resp.StatusCode != http.StatusOK {
		t.Errorf("upload to a signed URL: %d %s; want 200", resp.StatusCode, body)
	}
	if code, body, _ := get(t, s.url+sign("/tmp/signed.txt", "read"), "Host", envd); code != http.StatusOK || body != "signed" {
		t.Errorf("download from a signed URL: %d %q; want 200 and the upload", code, body)
	}
	if code, body, _ := get(t, s.url+sign("/tmp/signed.txt", "write"), "Host", envd); code != http.StatusUnauthorized {
		t.Errorf("download with an upload's signature: %d %s; want 401", code, body)
	}
	// A signed URL acts as the user it signs (issue 33): without one, the
	// sandbox user, who may not write /etc; E2B's SDK raises its
	// InvalidArgumentException for the 400. With username=root, root.
	if resp, body := send(t, http.MethodPost, s.url+sign("/etc/signed.txt", "write"), "signed", "Host", envd, "Content-Type", "application/octet-stream"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "permission denied") {
		t.Errorf("upload to /etc through a signed URL without a user: %d %s; want 400 saying permission denied", resp.StatusCode, body)
	}
	signAs := func(path, op, user string) string {
		sum := sha256.Sum256([]byte(path + ":" + op + ":" + user + ":" + sb.EnvdAccessToken))
		return "/files?path=" + url.QueryEscape(path) + "&username=" + user + "&signature=v1_" + url.QueryEscape(base64.RawStdEncoding.EncodeToString(sum[:]))
	}
	if resp, body := send(t, http.MethodPost, s.url+signAs("/etc/signed.txt", "write", "user"), "signed", "Host", envd, "Content-Type", "application/octet-stream"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("upload to /etc through a URL signed for user: %d %s; want 400", resp.StatusCode, body)
	}
	if resp, body := send(t, http.MethodPost, s.url+signAs("/etc/signed.txt", "write", "root"), "signed", "Host", envd, "Content-Type", "application/octet-stream"); resp.StatusCode != http.StatusOK {
		t.Errorf("upload to /etc through a URL signed for root: %d %s; want 200", resp.StatusCode, body)
	}
	if info, err := c.Stat(context.Background(), sb.SandboxID, "/etc/signed.txt"); err != nil || info.Owner != "root" {
		t.Errorf("/etc/signed.txt uploaded as root: %+v, %v; want owned by root", info, err)
	}
	// Another port of the host form is still the sandbox's own port.
	if code, _, _ := get(t, s.url+"/", "Host", "8000-"+sb.SandboxID+".e2b.test"); code != http.StatusUnauthorized {
		t.Errorf("port 8000 without a credential: %d; want the ports proxy's 401", code)
	}

	// The trafficAccessToken opens the sandbox's ports, as E2B's SDK's
	// users send it (e2b-traffic-access-token), and nothing that runs
	// code: it was the envdAccessToken, and ran commands as root.
	serve := `import subprocess; subprocess.Popen(["python3", "-m", "http.server", "8000", "--directory", "/tmp"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)`
	if code, body := post(s.url+"/execute", `{"code":`+strconv.Quote(serve)+`}`, "Host", interp, "X-Access-Token", sb.EnvdAccessToken); code != http.StatusOK {
		t.Fatalf("starting a server on port 8000: %d %s", code, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, _ := get(t, s.url+"/signed.txt", "Host", "8000-"+sb.SandboxID+".e2b.test", "e2b-traffic-access-token", sb.TrafficAccessToken)
		if code == http.StatusOK && body == "signed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("port 8000 with the trafficAccessToken: %d %q; want 200 and the file", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, body, _ := get(t, s.url+"/v1/sandboxes/"+sb.SandboxID+"/ports/8000/signed.txt", "e2b-traffic-access-token", sb.TrafficAccessToken); code != http.StatusOK || body != "signed" {
		t.Errorf("port 8000, path form, with the trafficAccessToken: %d %q; want 200 and the file", code, body)
	}
	for _, tc := range []struct{ what, method, path, host, body string }{
		{"envd's process List", http.MethodPost, "/process.Process/List", envd, `{}`},
		{"envd's process Start", http.MethodPost, "/process.Process/Start", envd, `{"process":{"cmd":"/bin/sh","args":["-c","echo x > /etc/ld.so.preload"]}}`},
		{"envd's /files read", http.MethodGet, "/files?path=/tmp/signed.txt", envd, ""},
		{"envd's /files write", http.MethodPost, "/files?path=/tmp/owned.txt", envd, "owned"},
		{"the interpreter's /execute", http.MethodPost, "/execute", interp, `{"code":"6*7"}`},
	} {
		for _, header := range []string{"E2B-Traffic-Access-Token", "X-Access-Token"} {
			resp, body := send(t, tc.method, s.url+tc.path, tc.body, "Host", tc.host, "Content-Type", "application/json", header, sb.TrafficAccessToken)
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s with the trafficAccessToken in %s: %d %s; want 401", tc.what, header, resp.StatusCode, body)
			}
		}
	}
	if code, body := post(s.url+"/execute", `{"code":"import os; print(os.path.exists('/tmp/owned.txt'))"}`, "Host", interp, "X-Access-Token", sb.EnvdAccessToken); code != http.StatusOK || !strings.Contains(body, "False") {
		t.Errorf("after the refused write: %d %s; want /tmp/owned.txt absent", code, body)
	}
}

// e2bNetScript creates a sandbox through E2B's SDK with E2B's network
// options (allowOut names, denyOut ALL_TRAFFIC: an allow list), probes
// from inside it, widens it with update_network and probes again; it
// prints the sandbox's ID and both probes' results as JSON.
const e2bNetScript = `
import json
from e2b import ALL_TRAFFIC
from e2b_code_interpreter import Sandbox
PROBE = r'''
import json, socket
def get(host, ip=None):
    try:
        s = socket.create_connection((ip or host, 80), timeout=3)
        s.sendall(("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host).encode())
        d = b""
        while True:
            b = s.recv(4096)
            if not b: break
            d += b
        return "ok:" + d.decode(errors="replace")
    except Exception as e:
        return "err:" + type(e).__name__
def resolve(n):
    try: return "ok:" + socket.gethostbyname(n)
    except Exception as e: return "err:" + type(e).__name__
print(json.dumps({"resolve allowed": resolve("allowed.test"), "resolve denied": resolve("denied.test"),
                  "http allowed": get("allowed.test"), "http denied": get("denied.test", "` + e2bNetDenied + `")}))
'''
def probe(sb):
    ex = sb.run_code(PROBE)
    assert ex.error is None, ex.error
    return json.loads(ex.logs.stdout[-1])
sb = Sandbox.create(timeout=120, network={"allow_out": ["Allowed.test"], "deny_out": [ALL_TRAFFIC]})
before = probe(sb)
sb.update_network({"allow_out": ["allowed.test", "denied.test"], "deny_out": [ALL_TRAFFIC]})
print(json.dumps({"id": sb.sandbox_id, "before": before, "after": probe(sb)}))
`

const (
	e2bNetAllowed = "203.0.113.33"
	e2bNetDenied  = "203.0.113.34"
)

// TestE2BNetwork: E2B's network options at create and update_network,
// through E2B's SDK, become Lizard's policy by name (docs/e2b.md) and are
// enforced: a name outside the allow list does not resolve and its HTTP
// is refused by the node's proxy, an allowed one answers, until the update
// allows it too. Names come from the node resolver's test records and the
// servers stand in a namespace of the test's (as in TestNetworkPolicy).
func TestE2BNetwork(t *testing.T) {
	s := startServer(t, "--egress=internet", "--egress-allow=203.0.113.32/28",
		"--egress-test-hosts=allowed.test="+e2bNetAllowed+",denied.test="+e2bNetDenied)
	testNet(t, "lizt-e2bnp", "lzt-e2bnp0", "198.51.100.33", []string{e2bNetAllowed, e2bNetDenied})
	npServers(t, "lizt-e2bnp", e2bNetAllowed, e2bNetDenied)
	c := s.createProject("proj_e2bnet")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Python(t), "-c", e2bNetScript)
	cmd.Env = append(os.Environ(), "E2B_API_URL="+s.url+"/e2b", "E2B_SANDBOX_URL="+s.url+"/e2b/sandbox", "E2B_API_KEY="+s.keys[c])
	out, err := cmd.Output()
	var got struct {
		ID            string
		Before, After map[string]string
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || json.Unmarshal([]byte(lines[len(lines)-1]), &got) != nil || got.ID == "" {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("the E2B script: %v\n%s\n%s", err, out, stderr)
	}
	t.Cleanup(func() { c.KillSandbox(context.Background(), got.ID) })
	expect(t, "at create", got.Before, map[string]string{
		"resolve allowed": "ok:" + e2bNetAllowed,
		"resolve denied":  "err:",
		"http allowed":    "ok:HTTP/1.1 200|hello http allowed.test via " + e2bNetAllowed,
		"http denied":     "ok:HTTP/1.1 403|denied by the sandbox's network policy",
	})
	expect(t, "after update_network", got.After, map[string]string{
		"resolve denied": "ok:" + e2bNetDenied,
		"http denied":    "ok:HTTP/1.1 200|hello http denied.test via " + e2bNetDenied,
	})
	sb, err := c.GetSandbox(ctx, got.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n := sb.Network; n == nil || n.Default != "deny" || strings.Join(n.Allow, ",") != "allowed.test,denied.test" || len(n.Deny) != 0 {
		t.Errorf("the sandbox's policy through Lizard's API = %+v; want default deny, allow allowed.test and denied.test", n)
	}
}
