package client

import (
	"context"
	"net/http"
	"net/url"
	"sort"

	"github.com/lizard-build/lizard/api"
)

// Health asks the server whether it serves. It needs no API key.
func (c *Client) Health(ctx context.Context) (*api.Health, error) {
	var h api.Health
	if err := c.call(ctx, request{method: http.MethodGet, path: "/health", noAuth: true}, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// CreateSandbox boots a sandbox and returns it once it runs.
func (c *Client) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.call(ctx, request{method: http.MethodPost, path: "/sandboxes", json: req}, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// GetSandbox returns one sandbox of the key's project, ended ones included.
func (c *Client) GetSandbox(ctx context.Context, id string) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.call(ctx, request{method: http.MethodGet, path: sandboxPath(id, "")}, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// ListOptions filters ListSandboxes; the filters combine with AND.
type ListOptions struct {
	// Metadata keeps sandboxes whose metadata has every one of these pairs.
	Metadata map[string]string
	// State keeps sandboxes in this state (api.State*); empty means any.
	State string
}

// ListSandboxes lists the key's project's sandboxes.
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) ([]api.Sandbox, error) {
	q := url.Values{}
	keys := make([]string, 0, len(opts.Metadata))
	for k := range opts.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys) // a stable URL is easier to read in logs
	for _, k := range keys {
		q.Add("metadata", k+"="+opts.Metadata[k])
	}
	if opts.State != "" {
		q.Set("state", opts.State)
	}
	var list api.SandboxList
	if err := c.call(ctx, request{method: http.MethodGet, path: "/sandboxes", query: q}, &list); err != nil {
		return nil, err
	}
	if list.Sandboxes == nil {
		list.Sandboxes = []api.Sandbox{}
	}
	return list.Sandboxes, nil
}

// KillSandbox ends a sandbox at once. Killing an ended sandbox succeeds.
func (c *Client) KillSandbox(ctx context.Context, id string) error {
	return c.call(ctx, request{method: http.MethodDelete, path: sandboxPath(id, "")}, nil)
}

// SetTimeout resets the sandbox's deadline to ms milliseconds from now;
// 0 means it never expires.
func (c *Client) SetTimeout(ctx context.Context, id string, ms int64) (*api.Sandbox, error) {
	var sb api.Sandbox
	r := request{method: http.MethodPost, path: sandboxPath(id, "/timeout"), json: api.SetTimeoutRequest{TimeoutMs: &ms}}
	if err := c.call(ctx, r, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// AgentHealth asks the agent inside the sandbox whether it serves.
func (c *Client) AgentHealth(ctx context.Context, id string) (*api.Health, error) {
	var h api.Health
	if err := c.call(ctx, request{method: http.MethodGet, path: sandboxPath(id, "/health")}, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// Metrics returns the sandbox's CPU, memory and disk samples of the last
// minutes, oldest first (none while it is paused or just started).
func (c *Client) Metrics(ctx context.Context, id string) ([]api.SandboxMetric, error) {
	var m api.SandboxMetrics
	if err := c.call(ctx, request{method: http.MethodGet, path: sandboxPath(id, "/metrics")}, &m); err != nil {
		return nil, err
	}
	if m.Metrics == nil {
		m.Metrics = []api.SandboxMetric{}
	}
	return m.Metrics, nil
}
