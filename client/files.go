package client

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"github.com/lizard-build/lizard/api"
)

// Paths inside a sandbox may be relative: they start at /home/user.

func pathQuery(path string) url.Values { return url.Values{"path": {path}} }

// ReadFile opens a file in the sandbox for reading. The caller closes it;
// ctx bounds the whole read.
func (c *Client) ReadFile(ctx context.Context, id, path string) (io.ReadCloser, error) {
	resp, cancel, err := c.do(ctx, request{method: http.MethodGet, path: sandboxPath(id, "/files"), query: pathQuery(path), stream: true})
	if err != nil {
		return nil, err
	}
	return &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// WriteFile replaces a file in the sandbox with what r holds, creating
// parent directories.
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader) (*api.EntryInfo, error) {
	var info api.EntryInfo
	req := request{
		method: http.MethodPut, path: sandboxPath(id, "/files"), query: pathQuery(path),
		body: r, contentType: "application/octet-stream",
	}
	if err := c.call(ctx, req, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// ListDir lists a directory in the sandbox.
func (c *Client) ListDir(ctx context.Context, id, path string) ([]api.EntryInfo, error) {
	var list api.EntryList
	if err := c.call(ctx, request{method: http.MethodGet, path: sandboxPath(id, "/files/list"), query: pathQuery(path)}, &list); err != nil {
		return nil, err
	}
	if list.Entries == nil {
		list.Entries = []api.EntryInfo{}
	}
	return list.Entries, nil
}

// Stat describes a file or directory in the sandbox.
func (c *Client) Stat(ctx context.Context, id, path string) (*api.EntryInfo, error) {
	var info api.EntryInfo
	if err := c.call(ctx, request{method: http.MethodGet, path: sandboxPath(id, "/files/stat"), query: pathQuery(path)}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Remove deletes a file or a directory tree in the sandbox.
func (c *Client) Remove(ctx context.Context, id, path string) error {
	return c.call(ctx, request{method: http.MethodDelete, path: sandboxPath(id, "/files"), query: pathQuery(path)}, nil)
}

// MakeDir makes a directory and its parents in the sandbox.
func (c *Client) MakeDir(ctx context.Context, id, path string) (*api.EntryInfo, error) {
	var info api.EntryInfo
	if err := c.call(ctx, request{method: http.MethodPost, path: sandboxPath(id, "/files/mkdir"), query: pathQuery(path)}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}
