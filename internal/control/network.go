package control

import (
	"context"
	"fmt"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/egress"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/netpolicy"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/secrets/inject"
)

// planNetwork gives p the policy by name req asks for (the create's own,
// else its project's default), within the server's bound, or the
// server's default.
func (c *Control) planNetwork(p *node.Plan, req *api.NetworkPolicy) error {
	if req == nil {
		p.Network = c.cfg.NetworkDefault
		return nil
	}
	pol, err := netpolicy.FromAPI(*req, "network")
	if err != nil {
		return err
	}
	if p.Network, err = c.bound(pol); err != nil {
		return err
	}
	return nil
}

// bound checks pol against the server's bound and adds its deny rules.
func (c *Control) bound(pol *netpolicy.Policy) (*netpolicy.Policy, error) {
	if err := pol.Within(c.cfg.NetworkBound, "network"); err != nil {
		return nil, err
	}
	return pol.Tighten(c.cfg.NetworkBound, "network")
}

// checkSecrets refuses a policy whose inject rules name a secret
// the project does not have (docs/secrets.md): a 400 naming the header.
func (c *Control) checkSecrets(ctx context.Context, projectID string, pol *netpolicy.Policy) error {
	if c.cfg.Secrets == nil {
		return nil
	}
	return inject.Check(ctx, c.cfg.Secrets, projectID, "network", pol)
}

// UpdateNetwork changes the project's sandbox id's policy by name: the
// fields req gives replace the policy's. It applies to the connections
// the sandbox opens from now on; with req.Cut, those open are ended.
func (c *Control) UpdateNetwork(ctx context.Context, projectID, id string, req api.UpdateNetworkRequest) (api.NetworkPolicy, error) {
	return c.UpdateNetworkBy(ctx, projectID, "", id, req)
}

// UpdateNetworkBy is UpdateNetwork asked for with the lizardToken of
// sandbox by ("": with a project key), which may only narrow the policy:
// code in a sandbox lifted its own from deny to allow with the key it
// holds.
func (c *Control) UpdateNetworkBy(ctx context.Context, projectID, by, id string, req api.UpdateNetworkRequest) (api.NetworkPolicy, error) {
	sb, err := c.lookup(ctx, projectID, id)
	if err != nil {
		return api.NetworkPolicy{}, err
	}
	if sb.Shape.Network == nil {
		return api.NetworkPolicy{}, &errdefs.Error{Kind: errdefs.ErrConflict,
			Msg: fmt.Sprintf("sandbox %s was created without a network policy; give one (network) at create to change it later", id)}
	}
	pol, err := sb.Shape.Network.Patch(req, "network")
	if err != nil {
		return api.NetworkPolicy{}, err
	}
	if pol, err = c.bound(pol); err != nil {
		return api.NetworkPolicy{}, err
	}
	if err := c.checkSecrets(ctx, projectID, pol); err != nil {
		return api.NetworkPolicy{}, err
	}
	if by != "" {
		if why := pol.Widening(sb.Shape.Network); why != "" {
			return api.NetworkPolicy{}, narrowOnly(by, fmt.Sprintf("sandbox %s's policy", id), why)
		}
	}
	sb, err = c.node.UpdateNetwork(ctx, id, pol, req.Cut)
	if err != nil {
		return api.NetworkPolicy{}, err
	}
	return *sb.Shape.Network.API(), nil
}

// narrowOnly is the refusal of a wider egress asked for with sandbox
// by's key: what (a policy) would allow why.
func narrowOnly(by, what, why string) error {
	return &errdefs.Error{Kind: errdefs.ErrForbidden, Msg: fmt.Sprintf(
		"this key was minted for sandbox %s (lizardToken), which may only narrow network policies, and %s would be wider (%s): a project key may widen it", by, what, why)}
}

// ownEgress is the egress of sandbox by, whose key (lizardToken) asks
// for another sandbox: whether it reaches the internet, and its policy.
func (c *Control) ownEgress(ctx context.Context, by string) (bool, *netpolicy.Policy, error) {
	sb, err := c.cfg.Store.GetSandbox(ctx, by)
	if err != nil {
		return false, nil, fmt.Errorf("looking up sandbox %s, whose key asks: %w", by, err)
	}
	if !sb.Shape.Recorded {
		return c.cfg.Internet, nil, nil
	}
	return sb.Shape.Internet, sb.Shape.Network, nil
}

// noWider refuses a sandbox asked for with sandbox by's key (a create, a
// fork, a create from a snapshot, E2B's create) whose egress — internet,
// policy — is wider than by's own: a key minted for a sandbox makes
// nothing that reaches further than the sandbox that holds it, nor
// injects a secret its own policy does not. by "" (a project key) may.
func (c *Control) noWider(ctx context.Context, by string, internet bool, pol *netpolicy.Policy) error {
	if by == "" || !internet {
		return nil // nothing leaves a sandbox without internet
	}
	ownNet, own, err := c.ownEgress(ctx, by)
	if err != nil {
		return err
	}
	why := ""
	switch {
	case !ownNet:
		why = "allowInternet, where the sandbox has no internet"
	case own == nil && pol != nil && len(pol.Inject) > 0:
		why = "inject rules, where the sandbox's policy has none"
	case own == nil:
	case pol == nil:
		why = "no policy, all the internet the server allows, where the sandbox's policy limits it"
	default:
		why = pol.Widening(own)
	}
	if why == "" {
		return nil
	}
	return narrowOnly(by, "the new sandbox's egress", why)
}

// NetworkLog returns the project's sandbox id's egress decisions.
func (c *Control) NetworkLog(ctx context.Context, projectID, id string) (api.NetworkLog, error) {
	if _, err := c.lookup(ctx, projectID, id); err != nil {
		return api.NetworkLog{}, err
	}
	log, err := c.node.NetworkLog(ctx, id)
	if err != nil {
		return api.NetworkLog{}, err
	}
	return egress.LogAPI(log), nil
}

// Get returns the project's default network policy; not found
// if it has none (its sandboxes then get the server's --network-default).
func (pn Network) Get(ctx context.Context) (api.NetworkPolicy, error) {
	c, projectID := pn.c, pn.project
	pol, err := c.cfg.Store.ProjectNetwork(ctx, projectID)
	if err != nil {
		return api.NetworkPolicy{}, err
	}
	if pol == nil {
		return api.NetworkPolicy{}, &errdefs.Error{Kind: errdefs.ErrNotFound,
			Msg: "this project has no default network policy; its sandboxes created without one get the server's (docs/network.md)"}
	}
	return *pol.API(), nil
}

// Set makes req the project's default network policy, that
// of its sandboxes whose create gives none. It is checked as a create's
// is: a looser policy than the server's bound is refused.
func (pn Network) Set(ctx context.Context, req api.NetworkPolicy) (api.NetworkPolicy, error) {
	c, projectID := pn.c, pn.project
	pol, err := netpolicy.FromAPI(req, "network")
	if err != nil {
		return api.NetworkPolicy{}, err
	}
	// Stored as given: the bound's deny rules are added at each create,
	// so that a later bound applies to it too.
	bounded, err := c.bound(pol)
	if err != nil {
		return api.NetworkPolicy{}, err
	}
	if err := c.checkSecrets(ctx, projectID, bounded); err != nil {
		return api.NetworkPolicy{}, err
	}
	if err := c.cfg.Store.SetProjectNetwork(ctx, projectID, pol); err != nil {
		return api.NetworkPolicy{}, err
	}
	return *pol.API(), nil
}

// Clear removes the project's default network policy: its
// sandboxes created without one get the server's again.
func (pn Network) Clear(ctx context.Context) error {
	c, projectID := pn.c, pn.project
	return c.cfg.Store.SetProjectNetwork(ctx, projectID, nil)
}
