package control

import (
	"context"
	"fmt"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/egress"
	"github.com/lizard-build/lizard/internal/errdefs"
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
	pol, err := egress.FromAPI(*req, "network")
	if err != nil {
		return err
	}
	if p.Network, err = c.bound(pol); err != nil {
		return err
	}
	return nil
}

// bound checks pol against the server's bound and adds its deny rules.
func (c *Control) bound(pol *egress.Policy) (*egress.Policy, error) {
	if err := pol.Within(c.cfg.NetworkBound, "network"); err != nil {
		return nil, err
	}
	return pol.Tighten(c.cfg.NetworkBound, "network")
}

// checkSecrets refuses a policy whose inject rules name a secret
// projectID does not have (docs/secrets.md): a 400 naming the header.
func (c *Control) checkSecrets(ctx context.Context, projectID string, pol *egress.Policy) error {
	if c.cfg.Secrets == nil {
		return nil
	}
	return inject.Check(ctx, c.cfg.Secrets, projectID, "network", pol)
}

// UpdateNetwork changes projectID's sandbox id's policy by name: the
// fields req gives replace the policy's. It applies to the connections
// the sandbox opens from now on; with req.Cut, those open are ended.
func (c *Control) UpdateNetwork(ctx context.Context, projectID, id string, req api.UpdateNetworkRequest) (api.NetworkPolicy, error) {
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
	sb, err = c.node.UpdateNetwork(ctx, id, pol, req.Cut)
	if err != nil {
		return api.NetworkPolicy{}, err
	}
	return *sb.Shape.Network.API(), nil
}

// NetworkLog returns projectID's sandbox id's egress decisions.
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

// ProjectNetwork returns projectID's default network policy; not found
// if it has none (its sandboxes then get the server's --network-default).
func (c *Control) ProjectNetwork(ctx context.Context, projectID string) (api.NetworkPolicy, error) {
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

// SetProjectNetwork makes req projectID's default network policy, that
// of its sandboxes whose create gives none. It is checked as a create's
// is: a looser policy than the server's bound is refused.
func (c *Control) SetProjectNetwork(ctx context.Context, projectID string, req api.NetworkPolicy) (api.NetworkPolicy, error) {
	pol, err := egress.FromAPI(req, "network")
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

// ClearProjectNetwork removes projectID's default network policy: its
// sandboxes created without one get the server's again.
func (c *Control) ClearProjectNetwork(ctx context.Context, projectID string) error {
	return c.cfg.Store.SetProjectNetwork(ctx, projectID, nil)
}
