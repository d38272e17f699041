package client

import (
	"context"
	"net/http"

	"github.com/lizard-build/lizard/api"
)

// UpdateNetwork changes the sandbox's network policy by name
// (docs/network.md): the fields u gives replace the policy's. Connections
// opened from now on follow it; open ones are ended only with u.Cut.
func (c *Client) UpdateNetwork(ctx context.Context, id string, u api.UpdateNetworkRequest) (*api.NetworkPolicy, error) {
	var p api.NetworkPolicy
	if err := c.call(ctx, request{method: http.MethodPatch, path: sandboxPath(id, "/network"), json: u}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// NetworkLog returns the sandbox's newest egress decisions, oldest first.
func (c *Client) NetworkLog(ctx context.Context, id string) ([]api.NetworkLogEntry, error) {
	var l api.NetworkLog
	if err := c.call(ctx, request{method: http.MethodGet, path: sandboxPath(id, "/network/log")}, &l); err != nil {
		return nil, err
	}
	if l.Entries == nil {
		l.Entries = []api.NetworkLogEntry{}
	}
	return l.Entries, nil
}

// Network is the key's project's default network policy
// (docs/network.md), that of its sandboxes created without one:
// c.Network().Get, Set, Clear. A sandbox's own policy stays
// c.UpdateNetwork(id, ...).
type Network struct{ c *Client }

// Network returns the key's project's default network policy.
func (c *Client) Network() Network { return Network{c: c} }

// Get returns the key's project's default network policy, that
// of its sandboxes created without one; a not-found error if it has none.
func (n Network) Get(ctx context.Context) (*api.NetworkPolicy, error) {
	var p api.NetworkPolicy
	if err := n.c.call(ctx, request{method: http.MethodGet, path: "/network/default"}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Set makes p the key's project's default network policy.
func (n Network) Set(ctx context.Context, p api.NetworkPolicy) (*api.NetworkPolicy, error) {
	var out api.NetworkPolicy
	if err := n.c.call(ctx, request{method: http.MethodPut, path: "/network/default", json: p}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Clear removes the key's project's default network policy:
// its sandboxes created without one get the server's again.
func (n Network) Clear(ctx context.Context) error {
	return n.c.call(ctx, request{method: http.MethodDelete, path: "/network/default"}, nil)
}
