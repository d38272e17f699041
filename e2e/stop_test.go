package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/netns"
)

// hostLeftovers lists what of sandbox id is still on the host: its
// network namespace, host veth and nftables table.
func hostLeftovers(id string) []string {
	var left []string
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), netns.Name(id)) {
		left = append(left, "network namespace "+netns.Name(id))
	}
	if exec.Command("ip", "link", "show", netns.VethName(id)).Run() == nil {
		left = append(left, "veth "+netns.VethName(id))
	}
	if out, _ := exec.Command("nft", "list", "tables").Output(); strings.Contains(string(out), netns.TableName(id)+"\n") {
		left = append(left, "nftables table "+netns.TableName(id))
	}
	return left
}

// poolAddrs lists the addresses of 169.254.pool.0/24 on host interfaces.
func poolAddrs(pool int) []string {
	out, _ := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	var got []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, " 169.254."+strconv.Itoa(pool)+".") {
			got = append(got, strings.Join(strings.Fields(line)[1:4], " "))
		}
	}
	return got
}

// TestStopDuringTemplateBoot stops a server (SIGTERM) while it boots the
// sandbox for its template snapshot: nothing of that sandbox may stay on
// the host, and a second server on the same address pool (another data
// directory) must work.
func TestStopDuringTemplateBoot(t *testing.T) {
	s := startServer(t)
	boxes := filepath.Join(s.dataDir, "gvisor", "sandboxes")
	var ids []string
	deadline := time.Now().Add(time.Minute)
	for len(ids) == 0 {
		ents, _ := os.ReadDir(boxes)
		for _, e := range ents {
			ids = append(ids, e.Name())
		}
		if time.Now().After(deadline) {
			t.Fatalf("no template sandbox appeared in %s\n%s", boxes, s.logs())
		}
		time.Sleep(2 * time.Millisecond)
	}
	s.stop()
	for _, id := range ids {
		if left := hostLeftovers(id); len(left) > 0 {
			t.Errorf("after SIGTERM during its boot, sandbox %s left %v\n%s", id, left, s.logs())
		}
	}
	if left := poolAddrs(s.pool); len(left) > 0 {
		t.Errorf("after SIGTERM, addresses of the server's pool are still on the host: %v", left)
	}

	second := *s
	second.dataDir = t.TempDir()
	second.start()
	t.Cleanup(second.shutdown)
	second.waitLog(t, 1, "template snapshot made")
	c := second.createProject("lim_stop")
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	if got := run(t, c, sb.SandboxID, "python", "print(6 * 7)").Stdout; strings.TrimSpace(got) != "42" {
		t.Errorf("a sandbox of the second server printed %q, want 42", got)
	}
	for _, id := range ids {
		if left := hostLeftovers(id); len(left) > 0 {
			t.Errorf("after a second server started, the first one's sandbox %s still has %v", id, left)
		}
	}
}
