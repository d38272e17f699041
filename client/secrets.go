package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/lizard-build/lizard/api"
)

// Secrets are the key's project's secrets (docs/secrets.md): c.Secrets().Set,
// List, Delete.
type Secrets struct{ c *Client }

// Secrets returns the key's project's secrets.
func (c *Client) Secrets() Secrets { return Secrets{c: c} }

// Set seals value as the key's project's secret name, replacing
// any value it had. No call returns it again: a sandbox's network policy
// injects it into its requests (docs/secrets.md).
func (s Secrets) Set(ctx context.Context, name string, req api.SetSecretRequest) (*api.Secret, error) {
	var sec api.Secret
	if err := s.c.call(ctx, request{method: http.MethodPut, path: "/secrets/" + url.PathEscape(name), json: req}, &sec); err != nil {
		return nil, err
	}
	return &sec, nil
}

// List lists the key's project's secrets by name, without values.
func (s Secrets) List(ctx context.Context) ([]api.Secret, error) {
	var list api.SecretList
	if err := s.c.call(ctx, request{method: http.MethodGet, path: "/secrets"}, &list); err != nil {
		return nil, err
	}
	if list.Secrets == nil {
		list.Secrets = []api.Secret{}
	}
	return list.Secrets, nil
}

// Delete deletes the secret called name.
func (s Secrets) Delete(ctx context.Context, name string) error {
	return s.c.call(ctx, request{method: http.MethodDelete, path: "/secrets/" + url.PathEscape(name)}, nil)
}
