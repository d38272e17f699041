package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/lizard-build/lizard/api"
)

// Desktop is desktop sandboxes' screen, mouse, keyboard, windows and
// stream (docs/desktop.md): c.Desktop().Screenshot(ctx, id, nil), ... A
// sandbox whose template runs no desktop answers ErrConflict saying so.
type Desktop struct{ c *Client }

// Desktop returns the desktop calls.
func (c *Client) Desktop() Desktop { return Desktop{c: c} }

func desktopPath(id, sub string) string { return sandboxPath(id, "/desktop"+sub) }

// Region is a part of the screen, in pixels.
type Region struct{ X, Y, Width, Height int }

// Screenshot returns the screen, or region of it when non-nil, as PNG.
func (d Desktop) Screenshot(ctx context.Context, id string, region *Region) ([]byte, error) {
	var q url.Values
	if region != nil {
		q = url.Values{"x": {strconv.Itoa(region.X)}, "y": {strconv.Itoa(region.Y)},
			"width": {strconv.Itoa(region.Width)}, "height": {strconv.Itoa(region.Height)}}
	}
	resp, cancel, err := d.c.do(ctx, request{method: http.MethodGet, path: desktopPath(id, "/screenshot"), query: q})
	if err != nil {
		return nil, err
	}
	defer cancel()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the screenshot: %w", err)
	}
	return b, nil
}

// Screen returns the screen's size.
func (d Desktop) Screen(ctx context.Context, id string) (api.DesktopScreen, error) {
	var s api.DesktopScreen
	err := d.c.call(ctx, request{method: http.MethodGet, path: desktopPath(id, "/screen")}, &s)
	return s, err
}

// Cursor returns where the pointer is.
func (d Desktop) Cursor(ctx context.Context, id string) (api.DesktopCursor, error) {
	var p api.DesktopCursor
	err := d.c.call(ctx, request{method: http.MethodGet, path: desktopPath(id, "/cursor")}, &p)
	return p, err
}

// Mouse does one mouse action and returns where the pointer is after it.
func (d Desktop) Mouse(ctx context.Context, id string, req api.DesktopMouseRequest) (api.DesktopCursor, error) {
	var p api.DesktopCursor
	err := d.c.call(ctx, request{method: http.MethodPost, path: desktopPath(id, "/mouse"), json: req}, &p)
	return p, err
}

// Keyboard types text or presses keys.
func (d Desktop) Keyboard(ctx context.Context, id string, req api.DesktopKeyboardRequest) error {
	return d.c.call(ctx, request{method: http.MethodPost, path: desktopPath(id, "/keyboard"), json: req}, nil)
}

// Open opens a file's path or a URL as the desktop would (xdg-open).
func (d Desktop) Open(ctx context.Context, id string, target string) error {
	return d.c.call(ctx, request{method: http.MethodPost, path: desktopPath(id, "/open"), json: api.DesktopOpenRequest{Target: target}}, nil)
}

// Launch starts an application by its desktop entry's name.
func (d Desktop) Launch(ctx context.Context, id string, app string) error {
	return d.c.call(ctx, request{method: http.MethodPost, path: desktopPath(id, "/launch"), json: api.DesktopLaunchRequest{App: app}}, nil)
}

// Windows lists the visible windows that have a title.
func (d Desktop) Windows(ctx context.Context, id string) ([]api.DesktopWindow, error) {
	var l api.DesktopWindowList
	if err := d.c.call(ctx, request{method: http.MethodGet, path: desktopPath(id, "/windows")}, &l); err != nil {
		return nil, err
	}
	if l.Windows == nil {
		l.Windows = []api.DesktopWindow{}
	}
	return l.Windows, nil
}

// StartStream starts the stream if it does not run and mints a new viewer
// with a token of its own.
func (d Desktop) StartStream(ctx context.Context, id string, req api.DesktopStreamRequest) (*api.DesktopViewer, error) {
	var v api.DesktopViewer
	if err := d.c.call(ctx, request{method: http.MethodPost, path: desktopPath(id, "/stream"), json: req}, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// StopStream stops the stream and revokes every viewer.
func (d Desktop) StopStream(ctx context.Context, id string) error {
	return d.c.call(ctx, request{method: http.MethodDelete, path: desktopPath(id, "/stream")}, nil)
}

// RevokeViewer revokes one viewer.
func (d Desktop) RevokeViewer(ctx context.Context, id string, viewerID string) error {
	return d.c.call(ctx, request{method: http.MethodDelete, path: desktopPath(id, "/stream/viewers/"+url.PathEscape(viewerID))}, nil)
}
