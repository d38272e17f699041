package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/lizard-build/lizard/api"
)

// Paths inside a sandbox may be relative: they start at the home of the
// call's user (/home/user by default).

// FileOption changes a file call.
type FileOption func(url.Values)

// AsUser makes a file call act as user: "root", or "user" (the sandbox
// user, the default). A call may do what its user may do (writing under
// /etc as the sandbox user is refused, errors.Is ErrInvalidArgument), and what it
// makes belongs to its user.
func AsUser(user string) FileOption {
	return func(q url.Values) {
		if user != "" {
			q.Set("user", user)
		}
	}
}

func pathQuery(path string, opts []FileOption) url.Values {
	q := url.Values{"path": {path}}
	for _, o := range opts {
		o(q)
	}
	return q
}

// ReadFile opens a file in the sandbox for reading. The caller closes it;
// ctx bounds the whole read.
func (c *Client) ReadFile(ctx context.Context, id, path string, opts ...FileOption) (io.ReadCloser, error) {
	resp, cancel, err := c.do(ctx, request{method: http.MethodGet, path: sandboxPath(id, "/files"), query: pathQuery(path, opts), stream: true})
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
// parent directories. r is streamed (a file of any size passes through
// in small pieces); the file appears whole once all of it is written.
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader, opts ...FileOption) (*api.EntryInfo, error) {
	var info api.EntryInfo
	// A stream, as far as Config.Timeout goes: a large file takes as long
	// as it takes, bounded by ctx.
	req := request{
		method: http.MethodPut, path: sandboxPath(id, "/files"), query: pathQuery(path, opts),
		body: r, contentType: "application/octet-stream", stream: true,
	}
	if err := c.call(ctx, req, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// ListDir lists a directory in the sandbox.
func (c *Client) ListDir(ctx context.Context, id, path string, opts ...FileOption) ([]api.EntryInfo, error) {
	var list api.EntryList
	if err := c.call(ctx, request{method: http.MethodGet, path: sandboxPath(id, "/files/list"), query: pathQuery(path, opts)}, &list); err != nil {
		return nil, err
	}
	if list.Entries == nil {
		list.Entries = []api.EntryInfo{}
	}
	return list.Entries, nil
}

// Stat describes a file or directory in the sandbox.
func (c *Client) Stat(ctx context.Context, id, path string, opts ...FileOption) (*api.EntryInfo, error) {
	var info api.EntryInfo
	if err := c.call(ctx, request{method: http.MethodGet, path: sandboxPath(id, "/files/stat"), query: pathQuery(path, opts)}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Remove deletes a file or a directory tree in the sandbox.
func (c *Client) Remove(ctx context.Context, id, path string, opts ...FileOption) error {
	return c.call(ctx, request{method: http.MethodDelete, path: sandboxPath(id, "/files"), query: pathQuery(path, opts)}, nil)
}

// MakeDir makes a directory and its parents in the sandbox.
func (c *Client) MakeDir(ctx context.Context, id, path string, opts ...FileOption) (*api.EntryInfo, error) {
	var info api.EntryInfo
	if err := c.call(ctx, request{method: http.MethodPost, path: sandboxPath(id, "/files/mkdir"), query: pathQuery(path, opts)}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Rename moves a file or directory in the sandbox from path to to, as
// rename(2): a file at to is replaced.
func (c *Client) Rename(ctx context.Context, id, path, to string, opts ...FileOption) (*api.EntryInfo, error) {
	var info api.EntryInfo
	q := pathQuery(path, opts)
	q.Set("to", to)
	if err := c.call(ctx, request{method: http.MethodPost, path: sandboxPath(id, "/files/rename"), query: q}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Watcher is an open watch of a directory in a sandbox (WatchDir).
type Watcher struct {
	body   io.ReadCloser
	dec    *json.Decoder
	cancel context.CancelFunc
}

// WatchDir watches directory path in the sandbox, and with recursive every
// directory below it. It returns once the watch is in place: every change
// after that is reported by Next. Close it when done.
func (c *Client) WatchDir(ctx context.Context, id, path string, recursive bool, opts ...FileOption) (*Watcher, error) {
	q := pathQuery(path, opts)
	q.Set("recursive", strconv.FormatBool(recursive))
	ctx, cancel := context.WithCancel(ctx)
	resp, done, err := c.do(ctx, request{method: http.MethodGet, path: sandboxPath(id, "/files/watch"), query: q, stream: true})
	if err != nil {
		cancel()
		return nil, err
	}
	return &Watcher{body: resp.Body, dec: json.NewDecoder(resp.Body), cancel: func() { done(); cancel() }}, nil
}

// Next waits for the next change. It returns io.EOF once the watch has
// ended (the directory was removed, or Close was called), and the sandbox's
// end as its error (errors.Is ErrGone) when the sandbox ended.
func (w *Watcher) Next() (api.FileEvent, error) {
	var ev api.FileEvent
	if err := w.dec.Decode(&ev); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.Canceled) {
			err = io.EOF
		}
		return api.FileEvent{}, err
	}
	if ev.Type == api.EventAbort && ev.Abort != nil {
		return api.FileEvent{}, abortError(ev.Abort)
	}
	return ev, nil
}

// Close ends the watch.
func (w *Watcher) Close() error {
	w.cancel()
	return w.body.Close()
}
