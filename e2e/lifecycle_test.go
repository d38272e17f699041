package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
)

func ms(v int64) *int64 { return &v }

// newSandbox creates a sandbox and kills it when the test ends.
func newSandbox(t *testing.T, c *client.Client, req api.CreateSandboxRequest) *api.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := c.CreateSandbox(ctx, req)
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	t.Cleanup(func() { c.KillSandbox(context.Background(), sb.SandboxID) })
	return sb
}

func execOK(t *testing.T, c *client.Client, id string, args ...string) string {
	t.Helper()
	res, err := c.Exec(context.Background(), id, api.ProcessRequest{Args: args}, nil)
	if err != nil {
		t.Fatalf("exec %q: %v", args, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d, stderr %q", args, res.ExitCode, res.Stderr)
	}
	return res.Stdout
}

// leftovers lists what a sandbox may leave on the host: its network
// namespace, a link holding its host address, processes naming it, files
// under the data directory and cgroups.
func leftovers(t *testing.T, s *server, sb *api.Sandbox) []string {
	t.Helper()
	var left []string
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), sb.SandboxID) {
		left = append(left, "network namespace: "+string(out))
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(sb.SandboxID)) {
			left = append(left, "process "+p+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	filepath.Walk(s.dataDir, func(path string, info os.FileInfo, err error) error {
		if err == nil && strings.Contains(info.Name(), sb.SandboxID) {
			left = append(left, "file "+path)
		}
		return nil
	})
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/lizard/" + sb.SandboxID)
	for _, cg := range cgroups {
		left = append(left, "cgroup "+cg)
	}
	return left
}

// waitGone waits for a sandbox to leave nothing behind.
func waitGone(t *testing.T, s *server, sb *api.Sandbox) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := leftovers(t, s, sb)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s left behind:\n%s", sb.SandboxID, strings.Join(left, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestLifecycle(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_123")
	ctx := context.Background()

	sb := newSandbox(t, c, api.CreateSandboxRequest{
		Metadata: map[string]string{"purpose": "lifecycle"},
		Envs:     map[string]string{"GREETING": "hello"},
	})
	if sb.State != api.StateRunning || sb.ProjectID != "proj_123" || sb.Template != "interpreter" {
		t.Fatalf("created %+v, want running proj_123 interpreter", sb)
	}
	if sb.TimeoutMs != 300000 || sb.ExpiresAt == nil {
		t.Fatalf("created timeout %d expires %v, want the default 300000 and a deadline", sb.TimeoutMs, sb.ExpiresAt)
	}

	if out := execOK(t, c, sb.SandboxID, "uname", "-a"); !strings.Contains(out, "gvisor") {
		t.Errorf("uname -a = %q, want a gVisor kernel", out)
	}
	if out := execOK(t, c, sb.SandboxID, "bash", "-c", "echo $GREETING"); out != "hello\n" {
		t.Errorf("sandbox env GREETING = %q, want hello", out)
	}

	got, err := c.GetSandbox(ctx, sb.SandboxID)
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("GetSandbox = %+v, %v; want running", got, err)
	}
	other := newSandbox(t, c, api.CreateSandboxRequest{Metadata: map[string]string{"purpose": "other"}})
	list, err := c.ListSandboxes(ctx, client.ListOptions{Metadata: map[string]string{"purpose": "lifecycle"}})
	if err != nil || len(list) != 1 || list[0].SandboxID != sb.SandboxID {
		t.Fatalf("list by metadata = %+v, %v; want just %s", list, err, sb.SandboxID)
	}
	all, err := c.ListSandboxes(ctx, client.ListOptions{})
	if err != nil || len(all) != 2 {
		t.Fatalf("list = %d sandboxes, %v; want 2", len(all), err)
	}

	if err := c.KillSandbox(ctx, sb.SandboxID); err != nil {
		t.Fatalf("KillSandbox: %v", err)
	}
	waitGone(t, s, sb)
	got, err = c.GetSandbox(ctx, sb.SandboxID)
	if err != nil || got.State != api.StateKilled {
		t.Fatalf("after kill GetSandbox = %+v, %v; want state killed", got, err)
	}
	if _, err := c.Exec(ctx, sb.SandboxID, api.ProcessRequest{Cmd: "true"}, nil); !errors.Is(err, client.ErrGone) {
		t.Errorf("exec in a killed sandbox: %v, want ErrGone (410)", err)
	}
	// The neighbour is unharmed.
	execOK(t, c, other.SandboxID, "true")
}

func TestExpiry(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_exp")
	ctx := context.Background()

	// extended gets its new deadline right after its create, before
	// anything else: on a loaded machine the other creates may take
	// longer than its first 1.5 s.
	extended := newSandbox(t, c, api.CreateSandboxRequest{TimeoutMs: ms(1500)})
	if _, err := c.SetTimeout(ctx, extended.SandboxID, 60_000); err != nil {
		t.Fatalf("SetTimeout: %v", err)
	}
	short := newSandbox(t, c, api.CreateSandboxRequest{TimeoutMs: ms(1500)})
	forever := newSandbox(t, c, api.CreateSandboxRequest{TimeoutMs: ms(0)})
	if forever.ExpiresAt != nil {
		t.Errorf("timeoutMs 0 gave a deadline %v, want none", forever.ExpiresAt)
	}

	deadline := time.Now().Add(15 * time.Second)
	for {
		got, err := c.GetSandbox(ctx, short.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == api.StateExpired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox with timeoutMs 1500 still %s after 15 s", got.State)
		}
		time.Sleep(200 * time.Millisecond)
	}
	waitGone(t, s, short)
	for _, sb := range []*api.Sandbox{extended, forever} {
		got, err := c.GetSandbox(ctx, sb.SandboxID)
		if err != nil || got.State != api.StateRunning {
			t.Errorf("sandbox %s = %+v, %v; want still running", sb.SandboxID, got, err)
		}
	}
}

func TestRestartKeepsSandboxes(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_restart")
	ctx := context.Background()

	live := newSandbox(t, c, api.CreateSandboxRequest{})
	run, err := c.Execute(ctx, live.SandboxID, api.ExecuteRequest{Code: "x = 41"}, nil)
	if err != nil || run.Error != nil {
		t.Fatalf("x = 41: %+v, %v", run, err)
	}
	dead := newSandbox(t, c, api.CreateSandboxRequest{})

	s.stop()
	// While the server is down, the second sandbox dies: its runsc processes
	// are killed, as a crash or an OOM kill would.
	pids := sandboxPids(dead.SandboxID)
	if len(pids) == 0 {
		t.Fatalf("found no processes of sandbox %s", dead.SandboxID)
	}
	for _, p := range pids {
		p.Kill()
	}
	for deadline := time.Now().Add(10 * time.Second); len(sandboxPids(dead.SandboxID)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("processes of sandbox %s survived SIGKILL", dead.SandboxID)
		}
	}
	s.start()

	got, err := c.GetSandbox(ctx, live.SandboxID)
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("after restart live sandbox = %+v, %v; want running", got, err)
	}
	run, err = c.Execute(ctx, live.SandboxID, api.ExecuteRequest{Code: "x + 1"}, nil)
	if err != nil || run.Error != nil || len(run.Results) != 1 || run.Results[0].Data != "42" {
		t.Fatalf("x + 1 after restart = %+v, %v; want 42", run, err)
	}
	got, err = c.GetSandbox(ctx, dead.SandboxID)
	if err != nil || got.State != api.StateFailed {
		t.Fatalf("after restart dead sandbox = %+v, %v; want failed", got, err)
	}
	waitGone(t, s, dead)
}

// sandboxPids finds the host processes of a sandbox by its ID on their
// command lines.
func sandboxPids(id string) []*os.Process {
	var ps []*os.Process
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if !bytes.Contains(b, []byte(id)) {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(filepath.Base(filepath.Dir(p)), &pid); err == nil {
			if proc, err := os.FindProcess(pid); err == nil {
				ps = append(ps, proc)
			}
		}
	}
	return ps
}

func TestBadInput(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_a")
	otherProject := s.createProject("proj_b")
	ctx := context.Background()
	sb := newSandbox(t, c, api.CreateSandboxRequest{})

	key := s.keys[c]
	do := func(method, path, auth, body string) (int, api.Error) {
		req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e api.Error
		b, _ := io.ReadAll(resp.Body)
		json.Unmarshal(b, &e)
		return resp.StatusCode, e
	}

	var first api.Error
	for i, auth := range []string{"", "Basic abc", "Bearer nonsense", "Bearer lz_00000000_" + strings.Repeat("a", 43), "Bearer " + key + "x"} {
		code, e := do("GET", "/v1/sandboxes", auth, "")
		if code != 401 || e.Code != api.CodeUnauthenticated {
			t.Errorf("auth %q: %d %+v, want 401 unauthenticated", auth, code, e)
		}
		if i == 0 {
			first = e
		} else if e != first {
			t.Errorf("auth %q: body %+v differs from %+v: a 401 must not say why", auth, e, first)
		}
	}

	bearer := "Bearer " + key
	tests := []struct {
		name, method, path, body string
		status                   int
		code, mention            string
	}{
		{"malformed JSON", "POST", "/v1/sandboxes", `{"timeoutMs": `, 400, api.CodeInvalidArgument, ""},
		{"wrong type", "POST", "/v1/sandboxes", `{"timeoutMs": "soon"}`, 400, api.CodeInvalidArgument, "timeoutMs"},
		{"negative timeout", "POST", "/v1/sandboxes", `{"timeoutMs": -5}`, 400, api.CodeInvalidArgument, "timeoutMs"},
		{"unknown template", "POST", "/v1/sandboxes", `{"template": "nope"}`, 404, api.CodeNotFound, "nope"}, // as an unknown snapshotId (api/openapi.yaml)
		{"oversized body", "POST", "/v1/sandboxes", `{"metadata": {"a": "` + strings.Repeat("x", 2<<20) + `"}}`, 413, api.CodeTooLarge, ""},
		{"unknown sandbox", "GET", "/v1/sandboxes/doesnotexist", "", 404, api.CodeNotFound, ""},
		{"bad timeout body", "POST", "/v1/sandboxes/" + sb.SandboxID + "/timeout", `{"timeoutMs": true}`, 400, api.CodeInvalidArgument, "timeoutMs"},
	}
	for _, tc := range tests {
		code, e := do(tc.method, tc.path, bearer, tc.body)
		if code != tc.status || e.Code != tc.code || !strings.Contains(e.Message, tc.mention) || e.Message == "" {
			t.Errorf("%s: %d %+v, want %d %s mentioning %q", tc.name, code, e, tc.status, tc.code, tc.mention)
		}
	}

	// Another project's sandbox does not exist for this key.
	if _, err := otherProject.GetSandbox(ctx, sb.SandboxID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("other project's GetSandbox: %v, want ErrNotFound", err)
	}
	if err := otherProject.KillSandbox(ctx, sb.SandboxID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("other project's KillSandbox: %v, want ErrNotFound", err)
	}
	if _, err := otherProject.Exec(ctx, sb.SandboxID, api.ProcessRequest{Cmd: "true"}, nil); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("other project's Exec: %v, want ErrNotFound", err)
	}
	// None of it hurt the sandbox, and a failed create left nothing behind.
	execOK(t, c, sb.SandboxID, "true")
	list, err := c.ListSandboxes(ctx, client.ListOptions{})
	if err != nil || len(list) != 1 {
		t.Errorf("after bad creates, list = %d sandboxes, %v; want 1", len(list), err)
	}
}
