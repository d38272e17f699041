package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/lizard-build/lizard/api"
)

// Volumes are the key's project's persistent volumes (docs/volumes.md):
// c.Volumes().Create, List, Get, Delete.
type Volumes struct{ c *Client }

// Volumes returns the key's project's volumes.
func (c *Client) Volumes() Volumes { return Volumes{c: c} }

// Create makes a persistent volume of the key's project.
func (v Volumes) Create(ctx context.Context, req api.CreateVolumeRequest) (*api.Volume, error) {
	var vol api.Volume
	if err := v.c.call(ctx, request{method: http.MethodPost, path: "/volumes", json: req}, &vol); err != nil {
		return nil, err
	}
	return &vol, nil
}

// List lists the key's project's volumes by name.
func (v Volumes) List(ctx context.Context) ([]api.Volume, error) {
	var list api.VolumeList
	if err := v.c.call(ctx, request{method: http.MethodGet, path: "/volumes"}, &list); err != nil {
		return nil, err
	}
	if list.Volumes == nil {
		list.Volumes = []api.Volume{}
	}
	return list.Volumes, nil
}

// Get returns the volume called name.
func (v Volumes) Get(ctx context.Context, name string) (*api.Volume, error) {
	var vol api.Volume
	if err := v.c.call(ctx, request{method: http.MethodGet, path: "/volumes/" + url.PathEscape(name)}, &vol); err != nil {
		return nil, err
	}
	return &vol, nil
}

// Delete deletes the volume called name and its data; a volume a
// live sandbox mounts is refused (ErrConflict).
func (v Volumes) Delete(ctx context.Context, name string) error {
	return v.c.call(ctx, request{method: http.MethodDelete, path: "/volumes/" + url.PathEscape(name)}, nil)
}

// PortURL is the URL at which port of sandbox id is served through the
// API, path-based; requests to it need the project's key or the
// sandbox's access token unless its ports are public (docs/ports.md).
func (c *Client) PortURL(id string, port int) string {
	return c.baseURL + "/v1" + sandboxPath(id, "/ports/"+strconv.Itoa(port)+"/")
}
