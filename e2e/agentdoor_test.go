package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
)

// TestAgentDoor: only the server opens a sandbox's agent. Code inside the
// sandbox cannot use its own agent (which runs as root), a local user of
// the host without the sandbox's secret gets nothing but /health, and
// every kind of sandbox — booted, restored from the template snapshot,
// forked, created from a snapshot, resumed — answers the API, whose
// server holds each one's secret.
func TestAgentDoor(t *testing.T) {
	s := startServer(t)
	c := s.createProject("door")
	ctx := context.Background()
	first := newSandbox(t, c, api.CreateSandboxRequest{})
	s.waitLog(t, 1, "template snapshot made")
	restored := newSandbox(t, c, api.CreateSandboxRequest{})
	forks, err := c.Fork(ctx, restored.SandboxID, api.ForkRequest{Count: 1})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	t.Cleanup(func() { c.KillSandbox(context.Background(), forks[0].SandboxID) })
	snap, err := c.Snapshot(ctx, first.SandboxID)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	fromSnap := newSandbox(t, c, api.CreateSandboxRequest{SnapshotID: snap.SnapshotID})
	resumed := newSandbox(t, c, api.CreateSandboxRequest{})
	if _, err := c.PauseSandbox(ctx, resumed.SandboxID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if _, err := c.ResumeSandbox(ctx, resumed.SandboxID, api.ResumeRequest{}); err != nil {
		t.Fatalf("resume: %v", err)
	}

	for name, id := range map[string]string{
		"booted": first.SandboxID, "template snapshot": restored.SandboxID, "fork": forks[0].SandboxID,
		"from a snapshot": fromSnap.SandboxID, "resumed": resumed.SandboxID,
	} {
		t.Run(name, func(t *testing.T) {
			guest := s.guestAddr(t, id)
			// Through the API: the server's secret opens it.
			if _, err := c.WriteFile(ctx, id, "/tmp/through-api", strings.NewReader("ok")); err != nil {
				t.Errorf("writing a file through the API: %v", err)
			}
			// From inside: refused, over its own address and loopback.
			out := runPy(t, c, id, fmt.Sprintf(`import urllib.request, urllib.error
for host in (%q, "127.0.0.1"):
    req = urllib.request.Request("http://%%s:%d/files?path=/etc/passwd" %% host, data=b"root::0:0::/root:/bin/sh\n", method="PUT")
    try:
        print(host, urllib.request.urlopen(req, timeout=5).status)
    except urllib.error.HTTPError as e:
        print(host, e.code)
    except Exception as e:
        print(host, type(e).__name__)
print(open("/etc/passwd").read().startswith("root::0:0"))`, guest, api.AgentPort))
			if !strings.Contains(out, guest+" 401") || !strings.Contains(out, "127.0.0.1 401") || !strings.Contains(out, "False") {
				t.Errorf("code inside calling its own agent:\n%s\nwant 401 on both addresses and /etc/passwd untouched", out)
			}
			// From the host, without the secret.
			hc := &http.Client{Timeout: 5 * time.Second}
			base := fmt.Sprintf("http://%s:%d", guest, api.AgentPort)
			resp, err := hc.Get(base + "/files/list?path=/")
			if err != nil {
				t.Fatalf("host without the secret: %v", err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 401 {
				t.Errorf("host without the secret: GET /files/list = %d; want 401", resp.StatusCode)
			}
			req, _ := http.NewRequest("POST", base+"/reseed", strings.NewReader(`{"sandboxId":"x","secret":"mine"}`))
			req.Header.Set("Authorization", "Bearer guessed")
			if resp, err = hc.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode != 401 {
					t.Errorf("host with a guessed secret: POST /reseed = %d; want 401", resp.StatusCode)
				}
			}
			if resp, err = hc.Get(base + "/health"); err != nil || resp.StatusCode != 200 {
				t.Errorf("host: GET /health = %v %v; want 200 (health needs no secret)", resp, err)
			} else {
				resp.Body.Close()
			}
		})
	}
}

// TestAgentProcHidden: code running as root inside a sandbox (a process
// the caller started with user "root") cannot reach the agent's host
// files through /proc: writing to the agent's stdout or stderr, which are
// the sandbox's console log on the host, wrote to the host's disk outside
// every bound of the sandbox (25 MB in a second) and past the agent's log
// budget; its environment held its secret and, in a copy restored from
// another sandbox's image, that sandbox's ID and secret.
func TestAgentProcHidden(t *testing.T) {
	s := startServer(t)
	c := s.createProject("prochidden")
	ctx := context.Background()
	booted := newSandbox(t, c, api.CreateSandboxRequest{})
	s.waitLog(t, 1, "template snapshot made")
	restored := newSandbox(t, c, api.CreateSandboxRequest{})
	const mib = 1 << 20
	for name, id := range map[string]string{"booted": booted.SandboxID, "template snapshot": restored.SandboxID} {
		t.Run(name, func(t *testing.T) {
			log := filepath.Join(s.dataDir, "gvisor", "sandboxes", id, "console.log")
			before, err := os.Stat(log)
			if err != nil {
				t.Fatal(err)
			}
			// Each of the agent's processes (the supervisor and the agent).
			p, err := c.StartProcess(ctx, id, api.ProcessStartRequest{Args: []string{"sh", "-c", `
for d in /proc/[0-9]*; do
  case "$(tr '\0' ' ' < $d/cmdline 2>/dev/null)" in /opt/lizard/bin/lizard-agent*) echo "agent $d" ;; *) continue ;; esac
  for fd in 1 2; do
    head -c ` + fmt.Sprint(mib) + ` /dev/zero 2>/dev/null > $d/fd/$fd && echo "wrote $d/fd/$fd"
  done
  tr '\0' '\n' < $d/environ
done; true`}, User: "root"})
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.ConnectProcess(ctx, id, p.Pid, nil)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(res.Stdout, "agent /proc/"); n != 2 {
				t.Errorf("found %d agent processes (the supervisor and the agent); want 2:\n%s", n, res.Stdout)
			}
			after, err := os.Stat(log)
			if err != nil {
				t.Fatal(err)
			}
			if grew := after.Size() - before.Size(); grew >= mib || strings.Contains(res.Stdout, "wrote") {
				t.Errorf("root inside wrote to the agent's stdout or stderr: the console log on the host grew by %d bytes\n%s", grew, res.Stdout)
			}
			if strings.Contains(res.Stdout, "LIZARD_AGENT_SECRET") || strings.Contains(res.Stdout, "LIZARD_SANDBOX_ID") {
				t.Errorf("root inside read the agent's environment:\n%s", res.Stdout)
			}
		})
	}
}
