package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/testenv"
	"github.com/lizard-build/lizard/internal/version"
)

// TestUpgradeMixedCluster rolls a PostgreSQL cluster of the previous release
// (upgradeFrom: two `lizard node`, two `lizard api`) to this build one
// process at a time, as a Helm upgrade does — the api Deployment and the
// node DaemonSet roll at once, so for a while an api and a node of each
// version serve side by side on the database this build migrated:
//
//   - this build's api with the old node: a create lands there and its
//     code runs (and the old api runs code in that sandbox too);
//   - the old api with this build's node: the same;
//   - the sandbox the old node started runs on across its node's upgrade.
//
// Both builds are Lizard 0.1.0: no release since has changed the version,
// so the pair is adjacent (Compatible). A pair that is not cannot be two
// real builds yet: upgradeFrom predates the version on the wire — its node
// registers none and its api sends none (both taken as 0.1.0) and checks
// none — so only a node of this build can stand for another version
// (LIZARD_NODE_VERSION, for tests and rehearsals). The test ends with
// that: this build's node registered as the next minor release, a call
// through this build's api to its sandbox is the api's 503 naming the node
// and both versions, and a create goes to the other node; the same call
// through the 0.1.0 api, which sends it, is the node's 503 naming both.
func TestUpgradeMixedCluster(t *testing.T) {
	testenv.RequiresRoot(t)
	old := buildAt(t, upgradeFrom)
	oldBin, newBin := filepath.Join(old, "lizard"), testenv.Binary(t, "lizard")
	ctx := context.Background()
	c, cl := startClusterBin(t, oldBin, 2, 2, nil, []string{"--runsc", testenv.Binary(t, "runsc")}, nil)
	oldAPI, newAPI := cl[0], cl[1]
	n1, n2 := c.node("n1"), c.node("n2")

	// n2 stops, to come back as this build; then api 2 is replaced by
	// this build's, which migrates the database under the running 0.1.0
	// api and node. n1 (0.1.0) is the one node taking sandboxes.
	n2.stop()
	c.apis[1].stop()
	c.apis[1].bin = newBin
	c.apis[1].start()
	if v := healthVersion(t, c.apis[1].url); v != version.Version {
		t.Fatalf("api 2 serves %q after its upgrade; want %s", v, version.Version)
	}
	onOld := newSandbox(t, newAPI, api.CreateSandboxRequest{})
	if n := c.nodeOf(onOld.SandboxID); n != "n1" {
		t.Fatalf("this build's api placed %s on %s; want n1, the %s node", onOld.SandboxID, n, upgradeFromVersion)
	}
	if got := py(t, newAPI, onOld.SandboxID, "x = 6 * 7\nprint(x)"); got != "42" {
		t.Errorf("code through this build's api on the %s node printed %q; want 42", upgradeFromVersion, got)
	}
	if got := py(t, oldAPI, onOld.SandboxID, "print(x + 1)"); got != "43" {
		t.Errorf("code through the %s api, on the schema this build migrated, printed %q; want 43", upgradeFromVersion, got)
	}

	// n2 back as this build: all four run, an api and a node of each.
	// The old api's create lands on this build's node (n1 marked draining
	// for it, which the 0.1.0 api's placement skips too; not stopped: a
	// node down past its lease loses its running sandboxes).
	n2.bin = newBin
	n2.start()
	if _, err := c.db.Exec(`UPDATE nodes SET draining = 1 WHERE name = 'n1'`); err != nil {
		t.Fatal(err)
	}
	onNew := newSandbox(t, oldAPI, api.CreateSandboxRequest{})
	if _, err := c.db.Exec(`UPDATE nodes SET draining = 0`); err != nil {
		t.Fatal(err)
	}
	if n := c.nodeOf(onNew.SandboxID); n != "n2" {
		t.Fatalf("the %s api placed %s on %s; want n2, this build's node", upgradeFromVersion, onNew.SandboxID, n)
	}
	if got := py(t, oldAPI, onNew.SandboxID, "y = 7\nprint(y)"); got != "7" {
		t.Errorf("code through the %s api on this build's node printed %q; want 7", upgradeFromVersion, got)
	}
	if got := py(t, newAPI, onNew.SandboxID, "print(y * 2)"); got != "14" {
		t.Errorf("code through this build's api on this build's node printed %q; want 14", got)
	}

	// n1 upgraded on its data directory: the sandbox its 0.1.0 process
	// started keeps running, and answers the old api.
	n1.stop()
	n1.bin = newBin
	n1.start()
	if got := py(t, oldAPI, onOld.SandboxID, "print(x)"); got != "42" {
		t.Errorf("x in the sandbox started by the %s node, after the node's upgrade = %q; want 42", upgradeFromVersion, got)
	}

	// Versions that do not work together: n2 registered as the next
	// minor release. This build's api refuses to send it the call, naming
	// both; creates go to n1.
	var major, minor int
	if _, err := fmt.Sscanf(version.Version, "%d.%d.", &major, &minor); err != nil {
		t.Fatal(err)
	}
	next := fmt.Sprintf("%d.%d.0", major, minor+1)
	n2.env = append(slices.Clone(n2.env), "LIZARD_NODE_VERSION="+next)
	n2.restart()
	// Seen by the api once it reads n2's row again (its list is kept
	// for a second or so).
	admin := clientFor(t, c.apis[1].url, c.secret)
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := admin.ListNodes(ctx)
		if err != nil {
			t.Fatalf("ListNodes: %v", err)
		}
		i := slices.IndexFunc(l.Nodes, func(n api.NodeInfo) bool { return n.Name == "n2" })
		if i >= 0 && l.Nodes[i].Version == next && !l.Nodes[i].Compatible && l.Nodes[i].Live {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/nodes = %+v; want n2 live at %s, not compatible", l.Nodes, next)
		}
		time.Sleep(200 * time.Millisecond)
	}
	_, err := newAPI.Execute(ctx, onNew.SandboxID, api.ExecuteRequest{Code: "y"}, nil)
	if !isStatus(err, 503) || !strings.Contains(err.Error(), "node n2 runs Lizard "+next) || !strings.Contains(err.Error(), "(Lizard "+version.Version+")") {
		t.Fatalf("a call through this build's api to a sandbox on n2, registered as %s = %v; want a 503 naming n2 and both versions", next, err)
	}
	t.Logf("the refused call: %v", err)
	// The 0.1.0 api checks no node's version and sends the call; the
	// node refuses it, naming both versions (an api without the version
	// header is taken as 0.1.0).
	_, err = oldAPI.Execute(ctx, onNew.SandboxID, api.ExecuteRequest{Code: "y"}, nil)
	if !isStatus(err, 503) || !strings.Contains(err.Error(), "this node runs Lizard "+next) || !strings.Contains(err.Error(), "(Lizard "+upgradeFromVersion+")") {
		t.Fatalf("a call through the %s api to a sandbox on n2, registered as %s = %v; want the node's 503 naming both versions", upgradeFromVersion, next, err)
	}
	t.Logf("refused by the node: %v", err)
	sb := newSandbox(t, newAPI, api.CreateSandboxRequest{})
	if n := c.nodeOf(sb.SandboxID); n != "n1" {
		t.Fatalf("this build's api placed %s on %s, registered as %s; want n1", sb.SandboxID, n, next)
	}
}
