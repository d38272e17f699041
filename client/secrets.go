package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/lizard-build/lizard/api"
)

// SetSecret seals value as the key's project's secret name, replacing
// any value it had. No call returns it again: a sandbox's network policy
// injects it into its requests (docs/secrets.md).
func (c *Client) SetSecret(ctx context.Context, name string, req api.SetSecretRequest) (*api.Secret, error) {
	var s api.Secret
	if err := c.call(ctx, request{method: http.MethodPut, path: "/secrets/" + url.PathEscape(name), json: req}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ListSecrets lists the key's project's secrets by name, without values.
func (c *Client) ListSecrets(ctx context.Context) ([]api.Secret, error) {
	var list api.SecretList
	if err := c.call(ctx, request{method: http.MethodGet, path: "/secrets"}, &list); err != nil {
		return nil, err
	}
	if list.Secrets == nil {
		list.Secrets = []api.Secret{}
	}
	return list.Secrets, nil
}

// DeleteSecret deletes the secret called name.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.call(ctx, request{method: http.MethodDelete, path: "/secrets/" + url.PathEscape(name)}, nil)
}
