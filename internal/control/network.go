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

// planNetwork gives p the policy by name req asks for, within the
// server's bound, or the server's default.
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
