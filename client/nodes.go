package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/lizard-build/lizard/api"
)

// DrainNode drains a cluster node (docs/cluster.md): it takes no new
// sandboxes and its sandboxes move to the other nodes. The client's key
// must be the cluster secret. It returns once the moves are done.
func (c *Client) DrainNode(ctx context.Context, name string) (*api.NodeDrain, error) {
	var d api.NodeDrain
	if err := c.call(ctx, request{method: http.MethodPost, path: "/nodes/" + url.PathEscape(name) + "/drain"}, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// UndrainNode makes a drained node take new sandboxes again.
func (c *Client) UndrainNode(ctx context.Context, name string) (*api.NodeState, error) {
	var s api.NodeState
	if err := c.call(ctx, request{method: http.MethodPost, path: "/nodes/" + url.PathEscape(name) + "/undrain"}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ListNodes lists a cluster's registered nodes with their versions. The
// client's key must be the cluster secret.
func (c *Client) ListNodes(ctx context.Context) (*api.NodeList, error) {
	var l api.NodeList
	if err := c.call(ctx, request{method: http.MethodGet, path: "/nodes"}, &l); err != nil {
		return nil, err
	}
	return &l, nil
}
