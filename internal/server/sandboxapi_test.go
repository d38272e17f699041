package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
)

// TestSandboxListenersFollowLifecycle checks that a lizardToken sandbox
// is served the API on its host address while it runs, not while it is
// paused, and on its new host address once resumed; and that a sandbox
// without a token gets no listener. Sandbox links come from a loopback
// pool here, so that the test can connect to their host addresses.
func TestSandboxListenersFollowLifecycle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	pool, err := netns.ParsePool("127.77.0.0/24")
	if err != nil {
		t.Fatal(err)
	}
	e := nodetest.New(t, func(c *node.Config) {
		c.Pool = pool
		c.TokenAPI = func(host string) ([]string, int) {
			return []string{"LIZARD_API_URL=http://" + net.JoinHostPort(host, strconv.Itoa(port))}, port
		}
	})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "api") })
	listeners := NewSandboxListeners(port, h, nodetest.Discard())
	t.Cleanup(listeners.CloseAll)
	e.Node.Subscribe(listeners.Handle)
	serves := func(host string) bool {
		resp, err := http.Get("http://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b) == "api"
	}

	ctx := context.Background()
	p := nodetest.Plan(0)
	p.Token = true
	sb := e.Create(t, p)
	plain := e.Create(t, nodetest.Plan(0))
	if !serves(sb.HostAddr) || serves(plain.HostAddr) {
		t.Fatalf("API on the token sandbox's %s: %v, on the plain one's %s: %v; want only the first",
			sb.HostAddr, serves(sb.HostAddr), plain.HostAddr, serves(plain.HostAddr))
	}
	if _, err := e.Node.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if serves(sb.HostAddr) {
		t.Error("API listener still open while paused")
	}
	// Another sandbox takes the slot the paused one left.
	e.Create(t, nodetest.Plan(0))
	r, err := e.Node.Resume(ctx, sb.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.HostAddr == sb.HostAddr || !serves(r.HostAddr) {
		t.Errorf("after resume on %s (was %s): served %v; want the API on the new host address", r.HostAddr, sb.HostAddr, serves(r.HostAddr))
	}
	if err := e.Node.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if serves(r.HostAddr) {
		t.Error("API listener still open after the sandbox was killed")
	}
}
