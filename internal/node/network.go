package node

// A sandbox's policy by name is enforced by the node's egress.Enforcer:
// its table knows the sandbox from its spec on (spec.go), its rules send
// the sandbox's DNS and HTTP/TLS to the enforcer's resolver and proxy
// (netns.Names), and an update replaces both at once.

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentclient"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/secrets/inject"

	"github.com/lizard-build/lizard/internal/egress"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/netpolicy"
	"github.com/lizard-build/lizard/internal/store"
)

// network is what enforces the node's sandboxes' policies by name: the
// egress enforcer's table and rules, and the certificate authorities of
// the policies that inject secrets (trust.go).
type network struct {
	enforcer *egress.Enforcer
	allow    sandbox.Prefixes
	tokenAPI func(host string) (env []string, port int)
	cas      *inject.Authorities
	agents   *agentclient.Client
	log      *slog.Logger
	// shaped is Local.Shaped: a row's plan.
	shaped func(Plan, store.Shape) Plan
}

var errNoEgress = &errdefs.Error{Kind: errdefs.ErrUnavailable,
	Msg: "this server does not enforce network policies by name (its egress resolver and proxy are not running)"}

// names are the rules of plan p's policy by name, nil without one.
func (nw *network) names(p Plan) *netns.Names {
	if p.Network == nil || !p.Internet || nw.enforcer == nil {
		return nil
	}
	return nw.enforcer.Names(p.Network)
}

// link and egressRules are running sandbox sb's link and rules as its
// spec made them.
func (nw *network) egressRules(sb store.Sandbox) (netns.Link, netns.Egress, error) {
	host, err1 := netip.ParseAddr(sb.HostAddr)
	guest, err2 := netip.ParseAddr(sb.GuestAddr)
	if err1 != nil || err2 != nil {
		return netns.Link{}, netns.Egress{}, fmt.Errorf("parsing the addresses of sandbox %s", sb.ID)
	}
	p := nw.shaped(Plan{}, sb.Shape)
	e := netns.Egress{Internet: p.Internet, AllowTo: nw.allow, Names: nw.names(p)}
	if sb.Shape.Token && nw.tokenAPI != nil {
		_, e.APIPort = nw.tokenAPI(sb.HostAddr)
	}
	return netns.Link{HostAddr: host, GuestAddr: guest, PrefixLen: netns.SlotPrefixLen}, e, nil
}

// readopt puts running sandbox sb, kept over a restart, back in the path
// of this process's resolver and proxy (their ports are new).
func (nw *network) readopt(sb store.Sandbox) error {
	if sb.Shape.Network == nil || nw.enforcer == nil {
		return nil
	}
	l, e, err := nw.egressRules(sb)
	if err != nil {
		return err
	}
	nw.enforcer.Table.Set(l.GuestAddr, egress.Sandbox{ID: sb.ID, Project: sb.ProjectID, Policy: sb.Shape.Network})
	return netns.UpdateEgress(sb.ID, l, e)
}

// UpdateNetwork implements Node: sandbox id's policy becomes p for every
// connection opened from now on (the proxy and resolver read it from the
// table at each, and its address rules are replaced in one nftables
// transaction); with cut, those open are ended too. A paused sandbox
// takes it at its resume.
func (n *Local) UpdateNetwork(ctx context.Context, id string, p *netpolicy.Policy, cut bool) (Sandbox, error) {
	unlock := n.locks.Lock(id)
	defer unlock()
	sb, err := n.get(ctx, id)
	if err != nil {
		return SandboxOf(sb), err
	}
	if err := check(sb, WantLive); err != nil {
		return SandboxOf(sb), err
	}
	if sb.Shape.Network == nil {
		// Its runtime was set up without the redirects (and a warm or
		// restored image may hold a resolver setting to match).
		return SandboxOf(sb), &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf("sandbox %s was created without a network policy; give one (network) at create to change it later", id)}
	}
	running := sb.State == api.StateRunning
	if running && injects(p) {
		// Trusted before the first connection the new rules intercept.
		if err := n.network.trustEgress(ctx, id, p, false, ""); err != nil {
			return SandboxOf(sb), err
		}
	}
	if err := n.cfg.Store.SetNetwork(ctx, id, p); err != nil {
		return SandboxOf(sb), err
	}
	old := sb.Shape.Network
	sb.Shape.Network = p
	// Without an enforcer the node has no internet to give (--egress
	// none): the policy is recorded, and nothing else leaves anyway.
	if running && n.cfg.Egress != nil {
		l, e, err := n.network.egressRules(sb)
		if err != nil {
			return SandboxOf(sb), err
		}
		n.cfg.Egress.Table.Update(id, p, cut)
		if err := netns.UpdateEgress(id, l, e); err != nil {
			return SandboxOf(sb), err
		}
		if cut {
			if err := netns.CutFlows(l); err != nil {
				return SandboxOf(sb), err
			}
		}
	}
	if running && injects(old) && !injects(p) {
		if err := n.network.trustEgress(ctx, id, p, true, ""); err != nil {
			return SandboxOf(sb), err
		}
	}
	return seam(n.cfg.Store.GetSandbox(ctx, id))
}

// NetworkLog implements Node: sandbox id's egress decisions, oldest first.
func (n *Local) NetworkLog(ctx context.Context, id string) ([]egress.Decision, error) {
	if _, err := n.get(ctx, id); err != nil {
		return nil, err
	}
	if n.cfg.Egress == nil {
		return []egress.Decision{}, nil
	}
	log := n.cfg.Egress.Table.Log(id)
	if log == nil {
		log = []egress.Decision{}
	}
	return log, nil
}
