package control_test

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/egress"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/netpolicy"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
)

// TestProjectNetwork checks the precedence of a sandbox's policy by name
// (its create's own, its project's default, the server's) and that a
// project's default is held to the server's bound.
func TestProjectNetwork(t *testing.T) {
	ctx := context.Background()
	mustPolicy := func(a api.NetworkPolicy) *netpolicy.Policy {
		t.Helper()
		p, err := netpolicy.FromAPI(a, "network")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// As the API shows them (lists never null).
	canon := func(a api.NetworkPolicy) api.NetworkPolicy { return *mustPolicy(a).API() }
	server := api.NetworkPolicy{Default: "deny", Allow: []string{"server.example.com"}}
	e := newEnv(t, func(c *control.Config) {
		c.NetworkDefault = mustPolicy(server)
		c.NetworkBound = mustPolicy(api.NetworkPolicy{Default: "deny", Allow: []string{"*.example.com", "pypi.org"}})
	}, func(c *node.Config) {
		// A real enforcer, knowing no names: nothing here resolves.
		enf, err := egress.Start(egress.Config{Records: map[string][]netip.Addr{}, Logger: nodetest.Discard()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { enf.Close() })
		c.Egress = enf
	})
	policyOf := func(sb api.Sandbox) *api.NetworkPolicy {
		t.Helper()
		return e.Row(t, sb.SandboxID).Shape.Network.API()
	}
	if _, err := e.c.Project("p1").Network().Get(ctx); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("ProjectNetwork before a set = %v; want not found", err)
	}
	project := canon(api.NetworkPolicy{Default: "deny", Allow: []string{"pypi.org"}})
	if got, err := e.c.Project("p1").Network().Set(ctx, project); err != nil || !reflect.DeepEqual(got, project) {
		t.Fatalf("SetProjectNetwork = %+v, %v; want %+v", got, err, project)
	}
	if got, err := e.c.Project("p1").Network().Get(ctx); err != nil || !reflect.DeepEqual(got, project) {
		t.Errorf("ProjectNetwork = %+v, %v; want %+v", got, err, project)
	}
	own := canon(api.NetworkPolicy{Default: "deny", Allow: []string{"a.example.com"}})
	for _, tc := range []struct {
		name    string
		project string
		network *api.NetworkPolicy
		want    api.NetworkPolicy
	}{
		{"create's own", "p1", &own, own},
		{"project's default", "p1", nil, project},
		{"server's default", "p2", nil, canon(server)},
	} {
		sb := e.create(t, tc.project, api.CreateSandboxRequest{Network: tc.network})
		if got := policyOf(sb); got == nil || !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("%s: policy = %+v; want %+v", tc.name, got, tc.want)
		}
	}
	// Bad and looser defaults are refused naming the field, and leave
	// the one set as it was.
	for _, tc := range []struct {
		req  api.NetworkPolicy
		want string
	}{
		{api.NetworkPolicy{Default: "maybe"}, "network.default"},
		{api.NetworkPolicy{Default: "deny", Allow: []string{"bad name!"}}, "network.allow[0]"},
		{api.NetworkPolicy{Default: "allow"}, "network.default: allow is looser than the server permits"},
		{api.NetworkPolicy{Default: "deny", Allow: []string{"other.org"}}, `network.allow[0]: "other.org" is not within what the server permits`},
	} {
		_, err := e.c.Project("p1").Network().Set(ctx, tc.req)
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetProjectNetwork(%+v) = %v; want invalid naming %q", tc.req, err, tc.want)
		}
	}
	if got, err := e.c.Project("p1").Network().Get(ctx); err != nil || !reflect.DeepEqual(got, project) {
		t.Errorf("ProjectNetwork after refused sets = %+v, %v; want %+v", got, err, project)
	}
	// Cleared, p1's sandboxes get the server's again.
	if err := e.c.Project("p1").Network().Clear(ctx); err != nil {
		t.Fatal(err)
	}
	if got := policyOf(e.create(t, "p1", api.CreateSandboxRequest{})); got == nil || !reflect.DeepEqual(*got, canon(server)) {
		t.Errorf("policy after a clear = %+v; want the server's %+v", got, server)
	}
}

// TestSandboxKeyNarrowsOnly: a key minted for a sandbox (CreateBy,
// ForkBy, UpdateNetworkBy with its ID) may only narrow — its own policy
// or another's — and makes no sandbox (create, fork, create from a
// snapshot) whose egress is wider than its own sandbox's; a child that
// names none gets its sandbox's. A project key may widen. Before, code in
// a lizardToken sandbox PATCHed its own policy from deny to allow.
func TestSandboxKeyNarrowsOnly(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil, func(c *node.Config) {
		enf, err := egress.Start(egress.Config{Records: map[string][]netip.Addr{}, Logger: nodetest.Discard()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { enf.Close() })
		c.Egress = enf
	})
	deny := api.NetworkPolicy{Default: "deny", Allow: []string{"a.example.com", "*.pypi.org"}}
	parent := e.create(t, "p1", api.CreateSandboxRequest{LizardToken: true, Network: &deny})
	by := parent.SandboxID
	// An update writes the sandbox's nftables table on the host, which the
	// fake runtime never removes as a real one's end does.
	t.Cleanup(func() { netns.Remove(by) })
	forbidden := func(what string, err error, want string) {
		t.Helper()
		if !errors.Is(err, errdefs.ErrForbidden) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "project key") {
			t.Errorf("%s = %v; want forbidden saying %q and that a project key may", what, err, want)
		}
	}
	allow, none := "allow", []string{}
	_, err := e.c.UpdateNetworkBy(ctx, "p1", by, by, api.UpdateNetworkRequest{Default: &allow})
	forbidden("its own policy lifted to allow", err, "default: allow")
	wider := []string{"a.example.com", "evil.test"}
	_, err = e.c.UpdateNetworkBy(ctx, "p1", by, by, api.UpdateNetworkRequest{Allow: &wider})
	forbidden("its own policy given a name", err, `"evil.test"`)
	if got := e.Row(t, by).Shape.Network; got.Default != "deny" || len(got.Allow) != 2 {
		t.Errorf("after refused updates the policy is %+v; want it unchanged", got.Wire())
	}
	narrower := []string{"a.example.com"}
	if _, err := e.c.UpdateNetworkBy(ctx, "p1", by, by, api.UpdateNetworkRequest{Allow: &narrower}); err != nil {
		t.Errorf("narrowing with its own key: %v", err)
	}

	// Children: one naming no policy gets its sandbox's; a wider one, one
	// with inject rules, or with allowInternet where it has none, is refused.
	kid, err := e.c.CreateBy(ctx, "p1", by, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("a child naming no policy: %v", err)
	}
	if got := e.Row(t, kid.SandboxID).Shape.Network; got == nil || got.Default != "deny" || !reflect.DeepEqual(got.Allow, narrower) {
		t.Errorf("a child naming no policy got %+v; want its parent's", got)
	}
	_, err = e.c.CreateBy(ctx, "p1", by, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Default: "allow"}})
	forbidden("a child with default allow", err, "default: allow")
	inject := []api.HeaderRule{{Domain: "a.example.com", Headers: map[string]string{"X-Echo": "x"}}}
	_, err = e.c.CreateBy(ctx, "p1", by, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Default: "deny", Allow: narrower, Inject: inject}})
	forbidden("a child with an inject rule its parent lacks", err, "inject[0]")
	if _, err := e.c.CreateBy(ctx, "p1", by, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Default: "deny", Allow: none}}); err != nil {
		t.Errorf("a narrower child: %v", err)
	}

	// A sandbox of the project's with a wider policy: its fork and a
	// restore of its snapshot, asked for with the narrow sandbox's key,
	// are refused; with a project key they are made.
	wide := e.create(t, "p1", api.CreateSandboxRequest{Network: &api.NetworkPolicy{Default: "allow"}})
	_, err = e.c.ForkBy(ctx, "p1", by, wide.SandboxID, api.ForkRequest{})
	forbidden("a fork of a wider sandbox", err, "default: allow")
	snap, err := e.c.Snapshot(ctx, "p1", wide.SandboxID, api.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.c.CreateBy(ctx, "p1", by, api.CreateSandboxRequest{SnapshotID: snap.SnapshotID})
	forbidden("a restore of a wider sandbox's snapshot", err, "default: allow")
	if _, err := e.c.ForkBy(ctx, "p1", by, by, api.ForkRequest{}); err != nil {
		t.Errorf("a fork of its own sandbox: %v", err)
	}
	if _, err := e.c.Fork(ctx, "p1", wide.SandboxID, api.ForkRequest{}); err != nil {
		t.Errorf("a fork of the wide sandbox with a project key: %v", err)
	}
	// A project key widens what it likes.
	if _, err := e.c.UpdateNetwork(ctx, "p1", by, api.UpdateNetworkRequest{Default: &allow}); err != nil {
		t.Errorf("widening with a project key: %v", err)
	}

	// A sandbox without internet: its children have none unless asked,
	// and asking is refused.
	no := false
	offline := e.create(t, "p1", api.CreateSandboxRequest{AllowInternet: &no})
	kid, err = e.c.CreateBy(ctx, "p1", offline.SandboxID, api.CreateSandboxRequest{})
	if err != nil || e.Row(t, kid.SandboxID).Shape.Internet {
		t.Errorf("a child of a sandbox without internet = %v; want made, without internet", err)
	}
	yes := true
	_, err = e.c.CreateBy(ctx, "p1", offline.SandboxID, api.CreateSandboxRequest{AllowInternet: &yes})
	forbidden("a child with internet of a sandbox without", err, "allowInternet")
}
