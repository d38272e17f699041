package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/lizard-build/lizard/api"
)

// CreateVolume makes a persistent volume of the key's project.
func (c *Client) CreateVolume(ctx context.Context, req api.CreateVolumeRequest) (*api.Volume, error) {
	var v api.Volume
	if err := c.call(ctx, request{method: http.MethodPost, path: "/volumes", json: req}, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// ListVolumes lists the key's project's volumes by name.
func (c *Client) ListVolumes(ctx context.Context) ([]api.Volume, error) {
	var list api.VolumeList
	if err := c.call(ctx, request{method: http.MethodGet, path: "/volumes"}, &list); err != nil {
		return nil, err
	}
	if list.Volumes == nil {
		list.Volumes = []api.Volume{}
	}
	return list.Volumes, nil
}

// GetVolume returns the volume called name.
func (c *Client) GetVolume(ctx context.Context, name string) (*api.Volume, error) {
	var v api.Volume
	if err := c.call(ctx, request{method: http.MethodGet, path: "/volumes/" + url.PathEscape(name)}, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// DeleteVolume deletes the volume called name and its data; a volume a
// live sandbox mounts is refused (ErrConflict).
func (c *Client) DeleteVolume(ctx context.Context, name string) error {
	return c.call(ctx, request{method: http.MethodDelete, path: "/volumes/" + url.PathEscape(name)}, nil)
}

// PortURL is the URL at which port of sandbox id is served through the
// API, path-based; requests to it need the project's key or the
// sandbox's access token unless its ports are public (docs/ports.md).
func (c *Client) PortURL(id string, port int) string {
	return c.baseURL + "/v1" + sandboxPath(id, "/ports/"+strconv.Itoa(port)+"/")
}
