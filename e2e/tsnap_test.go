package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// waitLog waits up to 3 minutes for the server log to hold n lines that
// contain every one of parts.
func (s *server) waitLog(t *testing.T, n int, parts ...string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		got := 0
		for _, line := range strings.Split(s.logs(), "\n") {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(line, p)
			}
			if ok {
				got++
			}
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server log has %d of %d lines with %q\n%s", got, n, parts, s.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logField returns field's value on the first server log line holding
// every one of parts.
func logField(t *testing.T, logs, field string, parts ...string) string {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, field+"="); ok {
					return v
				}
			}
		}
	}
	t.Fatalf("no log line with %q has %s=", parts, field)
	return ""
}

// cpuShares reads the cpu.shares of gVisor sandbox id's cgroup (v1).
func cpuShares(t *testing.T, id string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu/lizard", id, "cpu.shares"))
	if err != nil {
		t.Fatalf("reading the CPU share of sandbox %s: %v", id, err)
	}
	return strings.TrimSpace(string(b))
}

// run executes code in language and returns the execution, failing on an
// error.
func run(t *testing.T, c *client.Client, id, lang, code string) *client.Execution {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ex, err := c.Execute(ctx, id, api.ExecuteRequest{Code: code, Language: lang}, nil)
	if err != nil {
		t.Fatalf("Execute(%s %q) in %s: %v", lang, code, id, err)
	}
	if ex.Error != nil {
		t.Fatalf("Execute(%s %q) in %s: %s: %s", lang, code, id, ex.Error.Name, ex.Error.Message)
	}
	return ex
}

// TestTemplateSnapshotCreate checks that creates restore the template
// snapshot: the kernel is up with pandas imported but no names bound, the
// first call is [1], the caller's envs reach Python, bash and JS, copies
// get their own random numbers, and limits apply.
func TestTemplateSnapshotCreate(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_tsnap")
	s.waitLog(t, 1, "template snapshot made")
	envs := map[string]string{"LZ_E2E": "from-create"}
	a := newSandbox(t, c, api.CreateSandboxRequest{Envs: envs})
	s.waitLog(t, 1, "sandbox restored", a.SandboxID, "/templates/interpreter-")

	ex := run(t, c, a.SandboxID, "python", "import sys, os\nprint('pandas' in sys.modules, 'matplotlib.pyplot' in sys.modules, 'pd' in globals(), 'np' in globals(), os.environ['LZ_E2E'], os.environ['LIZARD_SANDBOX_ID'])")
	if want := "True True False False from-create " + a.SandboxID; strings.TrimSpace(ex.Stdout) != want {
		t.Errorf("python: %q, want %q", ex.Stdout, want)
	}
	if ex.ExecutionCount != 1 {
		t.Errorf("first call's execution count = %d, want 1", ex.ExecutionCount)
	}
	if got := strings.TrimSpace(run(t, c, a.SandboxID, "bash", "echo $LZ_E2E $LIZARD_SANDBOX_ID $LIZARD_PROJECT_ID").Stdout); got != "from-create "+a.SandboxID+" proj_tsnap" {
		t.Errorf("bash: %q, want the create's envs and the new identity", got)
	}
	if got := strings.TrimSpace(run(t, c, a.SandboxID, "javascript", "console.log(process.env.LZ_E2E, process.env.LIZARD_SANDBOX_ID)").Stdout); got != "from-create "+a.SandboxID {
		t.Errorf("js: %q, want the create's envs and the new identity", got)
	}
	// A subprocess of the kernel inherits the envs too.
	if got := strings.TrimSpace(run(t, c, a.SandboxID, "python", "import subprocess\nprint(subprocess.run(['sh', '-c', 'echo $LZ_E2E'], capture_output=True, text=True).stdout)").Stdout); got != "from-create" {
		t.Errorf("kernel subprocess: %q, want from-create", got)
	}

	// Two sandboxes from one image draw different numbers.
	b := newSandbox(t, c, api.CreateSandboxRequest{MemoryMb: ptr(int64(256))})
	s.waitLog(t, 1, "sandbox restored", b.SandboxID, "/templates/interpreter-")
	draw := "import random, numpy\nprint(random.random(), numpy.random.random())"
	if ra, rb := run(t, c, a.SandboxID, "python", draw).Stdout, run(t, c, b.SandboxID, "python", draw).Stdout; ra == rb {
		t.Errorf("both sandboxes drew %q; want reseeded generators", ra)
	}
	// memoryMb is honoured by the restored sandbox.
	out := strings.Fields(run(t, c, b.SandboxID, "bash", "grep MemTotal /proc/meminfo").Stdout)
	if len(out) < 2 {
		t.Fatalf("MemTotal: %q", out)
	}
	kb, _ := strconv.ParseInt(out[1], 10, 64)
	if kb > 300<<10 {
		t.Errorf("MemTotal in a sandbox created with memoryMb 256 = %d kB, want at most ~256 MB", kb)
	}
}

// TestTemplateSnapshotOff checks --template-snapshot=false boots.
func TestTemplateSnapshotOff(t *testing.T) {
	s := startServer(t, "--template-snapshot=false")
	c := s.createProject("proj_tsnap_off")
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	if ex := run(t, c, sb.SandboxID, "python", "1+1"); ex.ExecutionCount != 1 {
		t.Errorf("execution count = %d, want 1", ex.ExecutionCount)
	}
	if strings.Contains(s.logs(), "template snapshot made") || strings.Contains(s.logs(), "sandbox restored") {
		t.Errorf("template snapshot made with --template-snapshot=false\n%s", s.logs())
	}
}

// TestTemplateSnapshotNoPreload checks --preload "": the template
// snapshot's kernel imports nothing beyond its own, so a restored sandbox
// has no pandas in sys.modules until a call imports it, which works.
func TestTemplateSnapshotNoPreload(t *testing.T) {
	s := startServer(t, "--preload", "")
	c := s.createProject("proj_tsnap_nopre")
	s.waitLog(t, 1, "template snapshot made")
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	s.waitLog(t, 1, "sandbox restored", sb.SandboxID, "/templates/interpreter-")
	ex := run(t, c, sb.SandboxID, "python", "import sys\nprint('pandas' in sys.modules, 'numpy' in sys.modules)\nimport pandas as pd\nprint(pd.DataFrame({'x': [1, 2]}).x.sum())")
	if got := strings.TrimSpace(ex.Stdout); got != "False False\n3" {
		t.Errorf("restored without preloads: %q, want False False then 3", got)
	}
	if strings.Contains(s.logs(), "preloaded modules") {
		t.Errorf("the template sandbox preloaded modules under --preload \"\"")
	}
}

// TestWarmPool checks that a create claims a warm sandbox and the pool
// refills, and that pool sandboxes are not listed.
func TestWarmPool(t *testing.T) {
	s := startServer(t, "--warm-pool", "1")
	c := s.createProject("proj_warm")
	s.waitLog(t, 1, "sandbox restored", "role=warm")
	list, err := c.ListSandboxes(context.Background(), client.ListOptions{})
	if err != nil || len(list) != 0 {
		t.Errorf("ListSandboxes with a full pool = %v, %v; want none", list, err)
	}
	// The pool's sandbox yields the CPU until a claim brings it to the
	// foreground.
	warmID := logField(t, s.logs(), "sandbox_id", "sandbox restored", "role=warm")
	if got := cpuShares(t, warmID); got != "64" {
		t.Errorf("cpu.shares of pool sandbox %s = %s; want 64", warmID, got)
	}
	sb := newSandbox(t, c, api.CreateSandboxRequest{Envs: map[string]string{"LZ_E2E": "warm"}})
	s.waitLog(t, 1, "sandbox claimed from the warm pool", sb.SandboxID)
	if got := cpuShares(t, sb.SandboxID); sb.SandboxID != warmID || got != "1024" {
		t.Errorf("claimed sandbox %s (the pool's was %s): cpu.shares %s; want the pool's, 1024", sb.SandboxID, warmID, got)
	}
	ex := run(t, c, sb.SandboxID, "python", "import os\nprint(os.environ['LZ_E2E'], os.environ['LIZARD_SANDBOX_ID'], os.environ['LIZARD_PROJECT_ID'])")
	if want := "warm " + sb.SandboxID + " proj_warm"; strings.TrimSpace(ex.Stdout) != want || ex.ExecutionCount != 1 {
		t.Errorf("claimed sandbox: %q [%d], want %q [1]", ex.Stdout, ex.ExecutionCount, want)
	}
	s.waitLog(t, 2, "sandbox restored", "role=warm") // refilled
	// Non-default limits restore fresh instead of claiming.
	other := newSandbox(t, c, api.CreateSandboxRequest{MemoryMb: ptr(int64(256))})
	s.waitLog(t, 1, "sandbox restored", other.SandboxID, `role=""`)

	// A server on its way out ends its pool: pool sandboxes hold no one's
	// state. Restarted without a pool, it has none to make again.
	s.args = nil
	s.stop()
	if !strings.Contains(s.logs(), `project_id=_lizard state=killed reason="the server stopped"`) {
		t.Errorf("stopping the server did not end its warm sandbox; log:\n%s", s.logs())
	}
	s.start()
	if list, err := c.ListSandboxes(context.Background(), client.ListOptions{}); err != nil || len(list) != 2 {
		t.Errorf("after restart ListSandboxes = %d sandboxes, %v; want the 2 the test made", len(list), err)
	}
}
