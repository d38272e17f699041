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
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
)

// TestProjectNetwork checks the precedence of a sandbox's policy by name
// (its create's own, its project's default, the server's) and that a
// project's default is held to the server's bound.
func TestProjectNetwork(t *testing.T) {
	ctx := context.Background()
	mustPolicy := func(a api.NetworkPolicy) *egress.Policy {
		t.Helper()
		p, err := egress.FromAPI(a, "network")
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
	if _, err := e.c.ProjectNetwork(ctx, "p1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("ProjectNetwork before a set = %v; want not found", err)
	}
	project := canon(api.NetworkPolicy{Default: "deny", Allow: []string{"pypi.org"}})
	if got, err := e.c.SetProjectNetwork(ctx, "p1", project); err != nil || !reflect.DeepEqual(got, project) {
		t.Fatalf("SetProjectNetwork = %+v, %v; want %+v", got, err, project)
	}
	if got, err := e.c.ProjectNetwork(ctx, "p1"); err != nil || !reflect.DeepEqual(got, project) {
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
		_, err := e.c.SetProjectNetwork(ctx, "p1", tc.req)
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetProjectNetwork(%+v) = %v; want invalid naming %q", tc.req, err, tc.want)
		}
	}
	if got, err := e.c.ProjectNetwork(ctx, "p1"); err != nil || !reflect.DeepEqual(got, project) {
		t.Errorf("ProjectNetwork after refused sets = %+v, %v; want %+v", got, err, project)
	}
	// Cleared, p1's sandboxes get the server's again.
	if err := e.c.ClearProjectNetwork(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	if got := policyOf(e.create(t, "p1", api.CreateSandboxRequest{})); got == nil || !reflect.DeepEqual(*got, canon(server)) {
		t.Errorf("policy after a clear = %+v; want the server's %+v", got, server)
	}
}
