package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/daemon"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/store/pgtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := pgtest.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping PostgreSQL:", err)
	}
	os.Exit(code)
}

const testSecret = "0123456789abcdef0123456789abcdef-fleet-test"

// lockedBuffer is a log the api's goroutines write while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSimulatedNodes: three simulated nodes behind one real `lizard api`
// (the daemon's command, in this process) on PostgreSQL register with
// their leases; creates land on them through the public API and are
// recorded with the node that runs them; runCode is forwarded over the
// internal wire to the fake agent and answered; kill ends the sandbox in
// the node's runtime; and a node killed as by kill -9 is found lost after
// its lease, its sandbox's calls answered 410 naming it, while creates go
// on on the others.
func TestSimulatedNodes(t *testing.T) {
	srv := pgtest.Shared(t)
	dbURL := srv.NewDatabase(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t.Setenv("LIZARD_DATABASE_URL", dbURL)
	t.Setenv("LIZARD_CLUSTER_SECRET", testSecret)
	const lease = 2 * time.Second

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	apiLog := &lockedBuffer{}
	apiDone := make(chan error, 1)
	go func() {
		apiDone <- cli.Run(ctx, []string{"api", "--listen", addr, "--lease", lease.String(), "--metrics-listen=",
			"--creates-per-second=0", "--requests-per-second=0"}, apiLog, apiLog, daemon.Commands()...)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-apiDone:
		case <-time.After(10 * time.Second):
			t.Error("lizard api did not stop")
		}
	})
	waitHealthy(t, "http://"+addr, apiDone, apiLog)
	var out bytes.Buffer
	if err := cli.Run(ctx, []string{"admin", "create-project", "--id", "fleet", "--json"}, &out, &out, daemon.Commands()...); err != nil {
		t.Fatalf("admin create-project: %v: %s", err, out.String())
	}
	var p struct{ APIKey string }
	if err := json.Unmarshal(out.Bytes(), &p); err != nil {
		t.Fatalf("admin create-project: %v: %s", err, out.String())
	}
	c, err := client.New(client.Config{BaseURL: "http://" + addr, APIKey: p.APIKey})
	if err != nil {
		t.Fatal(err)
	}

	shared, err := store.OpenURL(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	ag := httptest.NewServer(agent(5 * time.Millisecond))
	defer ag.Close()
	cfg := simConfig{Secret: testSecret, Lease: lease, Agent: ag.Listener.Addr().String(), Dir: t.TempDir(), Log: slog.New(slog.DiscardHandler)}
	nodes := map[string]*simNode{}
	for i := range 3 {
		name := fmt.Sprintf("sim-%d", i)
		n, err := startSimNode(ctx, cfg, shared, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Kill)
		nodes[name] = n
	}
	listed, err := shared.Nodes().List(ctx)
	if err != nil || len(listed) != 3 {
		t.Fatalf("nodes registered: %+v, %v; want 3", listed, err)
	}
	for _, n := range listed {
		if !n.Live(time.Now()) || n.Addr != nodes[n.Name].Addr {
			t.Fatalf("node %s: lease until %s, address %s; want live at %s", n.Name, n.LeaseUntil, n.Addr, nodes[n.Name].Addr)
		}
	}

	var ids []string
	on := map[string]string{} // sandbox → node
	for range 6 {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("create: %v\napi log:\n%s", err, apiLog.String())
		}
		row, err := shared.GetSandbox(ctx, sb.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		n := nodes[row.Node]
		if n == nil || !n.Runtime.IsRunning(sb.SandboxID) {
			t.Fatalf("sandbox %s recorded on %q, which does not run it", sb.SandboxID, row.Node)
		}
		ids = append(ids, sb.SandboxID)
		on[sb.SandboxID] = row.Node
		ex, err := c.Execute(ctx, sb.SandboxID, api.ExecuteRequest{Code: "1+1"}, nil)
		if err != nil || len(ex.Results) != 1 || ex.Results[0].Data != "2" {
			t.Fatalf("runCode on %s: %+v, %v", row.Node, ex, err)
		}
	}
	if err := c.KillSandbox(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if n := nodes[on[ids[0]]]; n.Runtime.IsRunning(ids[0]) {
		t.Fatalf("killed sandbox %s still runs on %s", ids[0], n.Name)
	}

	// kill -9 of the node of ids[1]: lost after its lease, its sandbox's
	// calls answered 410 with the reason.
	lost := nodes[on[ids[1]]]
	lost.Kill()
	killed := time.Now()
	for {
		_, err := c.Execute(ctx, ids[1], api.ExecuteRequest{Code: "1+1"}, nil)
		var ae *client.Error
		if errors.As(err, &ae) && ae.Status == http.StatusGone {
			if !strings.Contains(ae.Message, "node lost") || !strings.Contains(ae.Message, lost.Name) {
				t.Fatalf("call to a sandbox of the lost node: %v; want 410 naming node lost and %s", err, lost.Name)
			}
			break
		}
		if time.Since(killed) > 3*lease {
			t.Fatalf("call to a sandbox of a node killed %s ago: %v; want 410 within its lease", time.Since(killed), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("node %s lost: noticed %s after its kill (lease %s)", lost.Name, time.Since(killed).Round(10*time.Millisecond), lease)
	for range 3 {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("create after a node was lost: %v", err)
		}
		if row, _ := shared.GetSandbox(ctx, sb.SandboxID); row.Node == lost.Name {
			t.Fatalf("create placed on lost node %s", lost.Name)
		}
	}
}

func waitHealthy(t *testing.T, url string, done <-chan error, log fmt.Stringer) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("lizard api exited: %v\n%s", err, log)
		default:
		}
		if resp, err := http.Get(url + "/v1/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	t.Fatalf("lizard api not healthy within 30s:\n%s", log)
}
