package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/testenv"
	"github.com/lizard-build/lizard/internal/version"
)

// TestClusterVersions runs a cluster whose node n2 registers as a version
// this lizard api does not work with (LIZARD_NODE_VERSION, the test-only
// override): `lizard node list` shows both versions, a call to the
// sandbox it ran before is a 503 naming both versions, and every create
// goes to n1; with n1 stopped, a create is a 503 naming n2 and its version.
func TestClusterVersions(t *testing.T) {
	c, cl := startClusterOf(t, 2, 1, nil)
	var major, minor int
	if _, err := fmt.Sscanf(version.Version, "%d.%d.", &major, &minor); err != nil {
		t.Fatal(err)
	}
	other := fmt.Sprintf("%d.0.0", major+1)
	if major == 0 {
		other = fmt.Sprintf("0.%d.0", minor+1)
	}
	ctx := context.Background()
	// A sandbox on n2 before its restart as the other version: its
	// calls are then refused, not sent across versions.
	// The sandboxes on n1 stay until one lands on n2: placement takes
	// the less loaded node, and between two empty ones it may pick n1
	// every time (the one reporting more free memory).
	var onN2 string
	var onN1 []string
	for range 12 {
		sb := newSandbox(t, cl[0], api.CreateSandboxRequest{})
		if c.nodeOf(sb.SandboxID) == "n2" {
			onN2 = sb.SandboxID
			break
		}
		onN1 = append(onN1, sb.SandboxID)
	}
	for _, id := range onN1 {
		cl[0].KillSandbox(ctx, id)
	}
	if onN2 == "" {
		t.Fatalf("12 creates, none placed on n2 (%d on n1)", len(onN1))
	}
	py(t, cl[0], onN2, "x = 1")
	n2 := c.node("n2")
	n2.env = append(slices.Clone(n2.env), "LIZARD_NODE_VERSION="+other)
	n2.restart()

	admin, err := client.New(client.Config{BaseURL: c.apis[0].url, APIKey: c.secret})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := admin.ListNodes(ctx)
		if err != nil {
			t.Fatalf("ListNodes: %v", err)
		}
		got := map[string]api.NodeInfo{}
		for _, n := range l.Nodes {
			got[n.Name] = n
		}
		if got["n1"].Version == version.Version && got["n1"].Compatible && got["n2"].Version == other && !got["n2"].Compatible && got["n2"].Live {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/nodes = %+v; want n1 at %s (compatible) and n2 at %s (not), both live", l.Nodes, version.Version, other)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cmd := exec.Command(testenv.Binary(t, "lizard"), "node", "list", "--api-url", c.apis[0].url)
	cmd.Env = append(os.Environ(), "LIZARD_CLUSTER_SECRET="+c.secret)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), version.Version) || !strings.Contains(string(out), other) {
		t.Fatalf("lizard node list = %s, %v; want both versions", out, err)
	}
	t.Logf("lizard node list:\n%s", out)

	_, err = cl[0].Execute(ctx, onN2, api.ExecuteRequest{Code: "x"}, nil)
	if !isStatus(err, 503) || !strings.Contains(err.Error(), "node n2 runs Lizard "+other) || !strings.Contains(err.Error(), "(Lizard "+version.Version+")") {
		t.Fatalf("a call to a sandbox on n2 (%s) = %v; want a 503 naming n2 and both versions", other, err)
	}
	t.Logf("the refused call: %v", err)

	for range 3 {
		sb := newSandbox(t, cl[0], api.CreateSandboxRequest{})
		if node := c.nodeOf(sb.SandboxID); node != "n1" {
			t.Fatalf("sandbox %s was placed on %s, which registered as %s; want n1", sb.SandboxID, node, other)
		}
		if err := cl[0].KillSandbox(ctx, sb.SandboxID); err != nil {
			t.Fatal(err)
		}
	}

	// Stopping, n1 offers no address slots: only n2 is left.
	c.node("n1").stop()
	_, err = cl[0].CreateSandbox(ctx, api.CreateSandboxRequest{})
	if !isStatus(err, 503) || !strings.Contains(err.Error(), "n2 ("+other+")") {
		t.Fatalf("a create with only n2 (%s) live = %v; want a 503 naming n2 and its version", other, err)
	}
	t.Logf("the refused create: %v", err)
}
