package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/lizard-build/lizard/api"
)

// PauseSandbox checkpoints a running sandbox to disk and stops it; its
// timeout clock stops too. Any call on it, or ResumeSandbox, resumes it.
func (c *Client) PauseSandbox(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.PauseSandboxWith(ctx, id, api.PauseRequest{})
}

// PauseSandboxWith is PauseSandbox with options: req.WaitDurable answers
// only once the image is in the image store (Durable).
func (c *Client) PauseSandboxWith(ctx context.Context, id string, req api.PauseRequest) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.call(ctx, request{method: http.MethodPost, path: sandboxPath(id, "/pause"), json: req}, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// ResumeSandbox restores a paused sandbox. req.TimeoutMs, when set,
// replaces the time it had left.
func (c *Client) ResumeSandbox(ctx context.Context, id string, req api.ResumeRequest) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.call(ctx, request{method: http.MethodPost, path: sandboxPath(id, "/resume"), json: req}, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Snapshot saves a running sandbox without stopping it; CreateSandbox
// with SnapshotID makes new sandboxes from it.
func (c *Client) Snapshot(ctx context.Context, id string) (*api.Snapshot, error) {
	var sn api.Snapshot
	if err := c.call(ctx, request{method: http.MethodPost, path: sandboxPath(id, "/snapshots")}, &sn); err != nil {
		return nil, err
	}
	return &sn, nil
}

// Snapshots are the key's project's snapshots: c.Snapshots().List, Get,
// Delete. A snapshot is taken of a sandbox, so that stays c.Snapshot(id).
type Snapshots struct{ c *Client }

// Snapshots returns the key's project's snapshots.
func (c *Client) Snapshots() Snapshots { return Snapshots{c: c} }

// List lists the key's project's snapshots, newest first.
func (s Snapshots) List(ctx context.Context) ([]api.Snapshot, error) {
	var list api.SnapshotList
	if err := s.c.call(ctx, request{method: http.MethodGet, path: "/snapshots"}, &list); err != nil {
		return nil, err
	}
	if list.Snapshots == nil {
		list.Snapshots = []api.Snapshot{}
	}
	return list.Snapshots, nil
}

// Get returns one snapshot.
func (s Snapshots) Get(ctx context.Context, snapshotID string) (*api.Snapshot, error) {
	var sn api.Snapshot
	if err := s.c.call(ctx, request{method: http.MethodGet, path: "/snapshots/" + url.PathEscape(snapshotID)}, &sn); err != nil {
		return nil, err
	}
	return &sn, nil
}

// Delete removes a snapshot and its image.
func (s Snapshots) Delete(ctx context.Context, snapshotID string) error {
	return s.c.call(ctx, request{method: http.MethodDelete, path: "/snapshots/" + url.PathEscape(snapshotID)}, nil)
}

// Fork makes req.Count (default 1) new sandboxes, each a copy of the
// running sandbox id with its own address and reseeded random generators.
func (c *Client) Fork(ctx context.Context, id string, req api.ForkRequest) ([]api.Sandbox, error) {
	var list api.SandboxList
	if err := c.call(ctx, request{method: http.MethodPost, path: sandboxPath(id, "/fork"), json: req}, &list); err != nil {
		return nil, err
	}
	return list.Sandboxes, nil
}
