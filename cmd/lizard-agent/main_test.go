package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/testenv"
	"github.com/lizard-build/lizard/internal/version"
)

// TestVersionFlag: lizard-agent --version prints its version and exits,
// without needing to be process 1 or root.
func TestVersionFlag(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "lizard-agent")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	for _, arg := range []string{"--version", "-v", "version"} {
		out, err := exec.Command(bin, arg).CombinedOutput()
		if err != nil {
			t.Fatalf("lizard-agent %s: %v\n%s", arg, err, out)
		}
		if want := "lizard-agent " + version.Version + " ("; !strings.HasPrefix(string(out), want) {
			t.Errorf("lizard-agent %s printed %q, want it to start %q", arg, out, want)
		}
	}
}

// TestSudoByName: called sudo (the link the agent makes in a sandbox),
// the binary is sudo's client and nothing of the agent: it reads sudo's
// options and, with no agent to ask, says so, exit status 1.
func TestSudoByName(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "lizard-agent")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	sudo := filepath.Join(dir, "sudo")
	if err := os.Symlink(bin, sudo); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"-V"}, 0, "Sudo version "},
		{[]string{"-x", "id"}, 1, "sudo: invalid option -- 'x'\nusage: sudo"},
		{[]string{"--version"}, 0, "Sudo version "},
	} {
		out, _ := exec.Command(sudo, tc.args...).CombinedOutput()
		cmd := exec.Command(sudo, tc.args...)
		cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != tc.code || !strings.HasPrefix(string(out), tc.out) {
			t.Errorf("sudo %q = %d, %q; want %d, %q...", tc.args, code, out, tc.code, tc.out)
		}
	}
}

// TestRunsAsPID1 starts the static agent binary as process 1 of a new PID
// namespace, as in a sandbox, and checks that orphans are reaped, the
// agent's own exit statuses survive, and SIGTERM ends it cleanly.
func TestRunsAsPID1(t *testing.T) {
	testenv.RequiresRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "lizard-agent")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	addr := freeAddr(t)
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--listen", addr, "--user", "", "--home", t.TempDir(),
		"--runtime-dir", t.TempDir(), "--python", "/nonexistent/python")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	init := cmd.Process.Pid
	t.Cleanup(func() {
		syscall.Kill(init, syscall.SIGKILL) // ends the whole namespace
		cmd.Wait()
		if t.Failed() {
			t.Logf("agent output:\n%s", logs.String())
		}
	})
	base := "http://" + addr
	waitHealthy(t, base)

	// The agent itself is the supervisor's only child.
	if kids := children(init); len(kids) != 1 {
		t.Fatalf("process 1 has children %v, want just the agent", kids)
	}
	agent := children(init)[0]

	// An orphan: the subshell exits at once, its sleep is reparented to
	// process 1, which must reap it when it ends.
	if code, _ := process(t, base, api.ProcessRequest{Cmd: "(sleep 1 >/dev/null 2>&1 &); exit 0"}); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	if kids := children(init); len(kids) != 2 {
		t.Errorf("process 1 has children %v, want the agent and the orphaned sleep", kids)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(children(init)) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("orphan not reaped: process 1 has children %v (states %v)", children(init), states(children(init)))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The agent still gets the exit statuses of what it starts itself.
	if code, _ := process(t, base, api.ProcessRequest{Cmd: "exit 7"}); code != 7 {
		t.Errorf("exit code %d, want 7 (status stolen by the reaper?)", code)
	}
	if children(init)[0] != agent {
		t.Errorf("agent process changed")
	}

	// SIGTERM to process 1 reaches the agent, which shuts down cleanly.
	if err := syscall.Kill(init, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("agent ended with %v after SIGTERM, want exit 0", err)
		}
		if !strings.Contains(logs.String(), "shutting down") {
			t.Errorf("agent did not log a graceful shutdown")
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("agent still running 15s after SIGTERM")
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitHealthy(t *testing.T, base string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/health")
		if err == nil {
			var h api.Health
			json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if h.Version != version.Version {
					t.Fatalf("agent's /health says version %q, want %q", h.Version, version.Version)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not healthy: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func process(t *testing.T, base string, req api.ProcessRequest) (int, string) {
	t.Helper()
	body, _ := json.Marshal(req)
	resp, err := http.Post(base+"/process", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev api.ProcessEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type == "end" && ev.ExitCode != nil {
			return *ev.ExitCode, out.String()
		}
		out.WriteString(ev.Text)
	}
	t.Fatalf("no end event")
	return 0, ""
}

// children lists the host pids whose parent is pid (zombies included).
func children(pid int) []int {
	var kids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := stat(p); ppid == pid {
			kids = append(kids, p)
		}
	}
	return kids
}

func states(pids []int) []string {
	var s []string
	for _, p := range pids {
		_, st := stat(p)
		s = append(s, fmt.Sprintf("%d:%s", p, st))
	}
	return s
}

// stat returns the parent pid and state letter from /proc/PID/stat.
func stat(pid int) (int, string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, ""
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return 0, ""
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid, fields[0]
}
