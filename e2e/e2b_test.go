package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if code != http.StatusCreated && code != http.StatusOK || json.Unmarshal([]byte(body), &sb) != nil || sb.SandboxID == "" || sb.EnvdAccessToken == "" {
		t.Fatalf("E2B create: %d %s", code, body)
	}
	t.Cleanup(func() { c.KillSandbox(context.Background(), sb.SandboxID) })

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
	// Another port of the host form is still the sandbox's own port.
	if code, _, _ := get(t, s.url+"/", "Host", "8000-"+sb.SandboxID+".e2b.test"); code != http.StatusUnauthorized {
		t.Errorf("port 8000 without a credential: %d; want the ports proxy's 401", code)
	}
}
