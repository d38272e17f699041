package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// auditSequence runs one sequence of calls through c (a project key) and
// as, which makes a client of a sandbox's lizardToken: a create with a
// lizardToken, a child made with that token, a pause and a resume, a fork
// and its kill, the child's expiry and the parent's kill. It returns the
// role of each sandbox it made by ID.
func auditSequence(t *testing.T, c *client.Client, as func(key string) *client.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	parent := newSandbox(t, c, api.CreateSandboxRequest{LizardToken: true})
	key := strings.TrimSpace(execOK(t, c, parent.SandboxID, "sh", "-c", "echo $LIZARD_API_KEY"))
	child, err := as(key).CreateSandbox(ctx, api.CreateSandboxRequest{LizardToken: true, TimeoutMs: ptr(int64(3000))})
	if err != nil {
		t.Fatalf("creating a child with the parent's lizardToken: %v", err)
	}
	t.Cleanup(func() { c.KillSandbox(context.Background(), child.SandboxID) })
	if _, err := c.PauseSandbox(ctx, parent.SandboxID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if _, err := c.ResumeSandbox(ctx, parent.SandboxID, api.ResumeRequest{}); err != nil {
		t.Fatalf("resume: %v", err)
	}
	forks, err := c.Fork(ctx, parent.SandboxID, api.ForkRequest{})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	if err := c.KillSandbox(ctx, forks[0].SandboxID); err != nil {
		t.Fatalf("killing the fork: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		sb, err := c.GetSandbox(ctx, child.SandboxID)
		if err == nil && sb.State == api.StateExpired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child did not expire: %+v, %v", sb, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := c.KillSandbox(ctx, parent.SandboxID); err != nil {
		t.Fatalf("killing the parent: %v", err)
	}
	return map[string]string{parent.SandboxID: "parent", child.SandboxID: "child", forks[0].SandboxID: "fork"}
}

// auditKinds reads the audit.log files in dirs and returns, per role, the
// kinds of the lines naming each sandbox of roles, in order; the keys the
// lines name must be the sandbox's own and never a secret.
func auditKinds(t *testing.T, roles map[string]string, dirs ...string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "audit.log"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var l map[string]any
			if line == "" || json.Unmarshal([]byte(line), &l) != nil {
				continue
			}
			id, _ := l["sandbox_id"].(string)
			if role, ok := roles[id]; ok {
				out[role] = append(out[role], l["msg"].(string))
			}
			if strings.Contains(line, "lz_") {
				t.Errorf("audit line holds a key: %s", line)
			}
		}
	}
	return out
}

// TestAuditSameOnClusterAndServe: audit.log holds the same kinds of lines
// for the same sequence of calls on `lizard serve` and on `lizard api` +
// `lizard node` (issue 21): the node writes them, from its events, on
// every path.
func TestAuditSameOnClusterAndServe(t *testing.T) {
	want := map[string][]string{
		"parent": {"key.create", "sandbox.create", "sandbox.kill", "key.revoke", "sandbox.end"},
		"child":  {"key.create", "sandbox.create", "key.revoke", "sandbox.end"},
		"fork":   {"sandbox.create", "sandbox.kill", "sandbox.end"},
	}

	s := startServer(t)
	sc := s.createProject("audit")
	serveRoles := auditSequence(t, sc, s.client)
	serve := auditKinds(t, serveRoles, s.dataDir)

	cl, clients := startCluster(t)
	as := func(key string) *client.Client {
		c, err := client.New(client.Config{BaseURL: cl.apis[1].url, APIKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	clusterRoles := auditSequence(t, clients[0], as)
	var dirs []string
	for _, n := range cl.nodes {
		dirs = append(dirs, n.dataDir)
	}
	got := auditKinds(t, clusterRoles, dirs...)

	if !reflect.DeepEqual(serve, got) {
		t.Errorf("audit kinds differ:\nlizard serve:         %v\nlizard api + node:     %v", serve, got)
	}
	if !reflect.DeepEqual(serve, want) {
		t.Errorf("audit kinds on lizard serve = %v; want %v", serve, want)
	}
}
