package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/egress"
	"github.com/lizard-build/lizard/internal/netpolicy"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/trace"
	"github.com/lizard-build/lizard/internal/version"
)

// Client is the node.Node of one remote node. Its Create is the node's
// alone: placement and admission are the caller's (package cluster).
type Client struct {
	name string
	base *url.URL
	http *http.Client
	tr   *Transport
}

// NewClient returns the client of node name at addr (host:port), using tr
// for every request.
func NewClient(name, addr string, tr *Transport) *Client {
	return &Client{name: name, base: &url.URL{Scheme: "http", Host: addr}, tr: tr, http: &http.Client{Transport: tr}}
}

// Name is the node's name.
func (c *Client) Name() string { return c.name }

// Addr is where the node is reached.
func (c *Client) Addr() string { return c.base.Host }

// do sends one internal request and decodes its answer into out (nil:
// none expected).
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+"/internal/v1"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	trace.Inject(ctx, req.Header)
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return c.unreachable(err)
	}
	defer resp.Body.Close()
	if refusedStatus(resp) {
		return c.refused()
	}
	if resp.StatusCode >= 300 {
		var we wireError
		if err := json.NewDecoder(resp.Body).Decode(&we); err != nil {
			return &errdefs.Error{Msg: fmt.Sprintf("node %s answered %s; its log has the details", c.name, resp.Status)}
		}
		return we.err(c.name)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return c.unreachable(fmt.Errorf("reading the answer: %w", err))
	}
	return nil
}

// refused is the error for a node that refuses the cluster secret: a
// configuration mistake, not the caller's.
func (c *Client) refused() error {
	return refusedBy(c.name)
}

func refusedBy(name string) error {
	return &errdefs.Error{Kind: errdefs.ErrUnavailable,
		Msg: fmt.Sprintf("node %s refused this API's cluster secret (or throttles this address's checks after failed ones): give every api and node process the same LIZARD_CLUSTER_SECRET", name)}
}

func (c *Client) unreachable(err error) error {
	return &errdefs.Error{Kind: errdefs.ErrUnavailable, Cause: fmt.Errorf("%w: %w", ErrUnreachable, err),
		Msg: fmt.Sprintf("node %s (%s) did not answer (down, restarting or cut off); retry shortly", c.name, c.base.Host)}
}

// Create implements node.Node.
func (c *Client) Create(ctx context.Context, p node.Plan) (node.Sandbox, error) {
	var sb node.Sandbox
	err := c.do(ctx, http.MethodPost, "/sandboxes", toWire(p), &sb)
	return sb, err
}

// Fork implements node.Node.
func (c *Client) Fork(ctx context.Context, parent string, p node.Plan, n int) ([]node.Sandbox, error) {
	var sbs []node.Sandbox
	if err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(parent)+"/fork", forkRequest{Plan: toWire(p), Count: n}, &sbs); err != nil {
		return nil, err
	}
	return sbs, nil
}

// Kill implements node.Node.
func (c *Client) Kill(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil)
}

// SetTimeout implements node.Node.
func (c *Client) SetTimeout(ctx context.Context, id string, ms int64) (node.Sandbox, error) {
	var sb node.Sandbox
	err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/timeout", timeoutRequest{TimeoutMs: &ms}, &sb)
	return sb, err
}

// UpdateNetwork implements node.Node.
func (c *Client) UpdateNetwork(ctx context.Context, id string, p *netpolicy.Policy, cut bool) (node.Sandbox, error) {
	var sb node.Sandbox
	err := c.do(ctx, http.MethodPut, "/sandboxes/"+url.PathEscape(id)+"/network", networkRequest{Network: wirePolicy(p), Cut: cut}, &sb)
	return sb, err
}

// NetworkLog implements node.Node.
func (c *Client) NetworkLog(ctx context.Context, id string) ([]egress.Decision, error) {
	var log []egress.Decision
	err := c.do(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id)+"/network/log", nil, &log)
	return log, err
}

// Metrics implements node.Node.
func (c *Client) Metrics(ctx context.Context, id string) ([]api.SandboxMetric, error) {
	var m api.SandboxMetrics
	if err := c.do(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id)+"/metrics", nil, &m); err != nil {
		return nil, err
	}
	if m.Metrics == nil {
		m.Metrics = []api.SandboxMetric{}
	}
	return m.Metrics, nil
}

// Pause implements node.Node.
func (c *Client) Pause(ctx context.Context, id string) (node.Sandbox, error) {
	var sb node.Sandbox
	err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/pause", nil, &sb)
	return sb, err
}

// Resume implements node.Node.
func (c *Client) Resume(ctx context.Context, id string, timeoutMs *int64) (node.Sandbox, error) {
	var sb node.Sandbox
	err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/resume", timeoutRequest{TimeoutMs: timeoutMs}, &sb)
	return sb, err
}

// MoveOut has the node hand sandbox id to node to (node.Local.MoveOut).
func (c *Client) MoveOut(ctx context.Context, id, to string) (node.Move, error) {
	var r moveResponse
	err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/move", moveRequest{To: to}, &r)
	return node.Move{Sandbox: r.Sandbox, Paused: r.Paused}, err
}

// Snapshot implements node.Node; the image is a path on the node.
func (c *Client) Snapshot(ctx context.Context, id, snapshotID string) (string, int64, error) {
	var r snapshotResponse
	err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/snapshot", snapshotRequest{SnapshotID: snapshotID}, &r)
	return r.Image, r.SizeBytes, err
}

// RemoveImage implements node.Node; image is a path on the node.
func (c *Client) RemoveImage(ctx context.Context, image string) error {
	return c.do(ctx, http.MethodPost, "/images/remove", imageRequest{Image: image}, nil)
}

// Acquire implements node.Node: the call is forwarded to the node, which
// acquires it there (resuming a paused sandbox) and proxies it to the
// agent. The call's context ends, with an ErrUnavailable cause, if the
// node stops answering in the middle of it (Transport).
func (c *Client) Acquire(ctx context.Context, id string) (agentproxy.Call, error) {
	msg := fmt.Sprintf("sandbox %s's node %s stopped answering during the call (its process or machine went down?); "+
		"if it is not back within its lease the sandbox is reported failed (node lost); retry shortly, or create a new sandbox", id, c.name)
	cctx, release := c.forwarded(ctx, msg, false)
	u := *c.base
	u.Path = "/v1/sandboxes/" + id
	return agentproxy.Call{URL: &u, Ctx: cctx, Release: release}, nil
}

// forwarded is the context of a call forwarded to the node: it ends with
// an ErrUnavailable saying msg if the node stops answering, or with the
// error of a node that refuses the call. port: the call goes to a
// sandbox's port, whose Authorization header is the program's.
func (c *Client) forwarded(ctx context.Context, msg string, port bool) (context.Context, func()) {
	cctx, cancel := context.WithCancelCause(ctx)
	gone, _ := ctx.Value(goneKey{}).(func() error)
	cctx = context.WithValue(cctx, callKey{}, call{node: c.name, port: port, fail: func(err error) {
		var e *errdefs.Error
		if errors.As(err, &e) {
			cancel(err)
			return
		}
		if gone != nil {
			if err := gone(); err != nil {
				cancel(err)
				return
			}
		}
		cancel(&errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: msg, Cause: fmt.Errorf("%w: %w", ErrUnreachable, err)})
	}})
	return cctx, func() { cancel(nil) }
}

// goneKey holds, in the context of a call to forward, what says whether
// its sandbox has ended (WithGone).
type goneKey struct{}

// WithGone has a call forwarded under ctx (Acquire, OpenPort) whose node
// stops answering ask gone first: when gone returns an *errdefs.Error (the
// sandbox's row ended: its node was lost), the call ends with it — the
// 410 naming why — rather than with the 503 of a node that may come back
// within its lease. The row, not the API's list of nodes a second old,
// says when the 503s end.
func WithGone(ctx context.Context, gone func() error) context.Context {
	return context.WithValue(ctx, goneKey{}, gone)
}

// Transport implements node.Node.
func (c *Client) Transport() http.RoundTripper { return c.tr }

// Subscribe implements node.Node. A remote node's events stay on its
// machine (its log and audit); the API learns of ends from the database.
func (c *Client) Subscribe(func(node.Event)) {}

var _ node.Node = (*Client)(nil)

// callKey holds, in a forwarded call's context, its node and what ends
// the call when the node stops answering or refuses it.
type callKey struct{}

type call struct {
	node string
	port bool
	fail func(error)
}

// Transport carries requests to nodes: it adds the cluster secret and, on
// forwarded agent calls, the caller; and it ends a forwarded call whose
// node stops answering (Client.Acquire).
type Transport struct {
	Secret string
	Base   http.RoundTripper // default a pooled transport
}

// NewTransport returns the transport of a cluster whose secret is secret.
func NewTransport(secret string) *Transport {
	b := http.DefaultTransport.(*http.Transport).Clone()
	b.MaxIdleConnsPerHost = 64
	b.IdleConnTimeout = 90 * time.Second
	b.ResponseHeaderTimeout = 0 // creates and NDJSON streams take their time
	return &Transport{Secret: secret, Base: b}
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(HeaderVersion, version.Version)
	fc, forwarded := r.Context().Value(callKey{}).(call)
	if forwarded && fc.port {
		r.Header.Set(HeaderSecret, t.Secret)
	} else {
		r.Header.Set("Authorization", "Bearer "+t.Secret)
	}
	if c, ok := auth.CallerOf(r.Context()); ok {
		r.Header.Set(HeaderProject, c.ProjectID)
		r.Header.Set(HeaderKeyID, c.KeyID)
		if c.SandboxID != "" {
			r.Header.Set(HeaderCallerSandbox, c.SandboxID)
		}
		if c.Remote != "" {
			r.Header.Set(HeaderRemote, c.Remote)
		}
	}
	resp, err := t.Base.RoundTrip(r)
	if err != nil {
		if forwarded && r.Context().Err() == nil {
			fc.fail(err)
		}
		return nil, err
	}
	if !forwarded {
		return resp, nil
	}
	if refusedStatus(resp) || (resp.StatusCode == http.StatusUnauthorized && !fc.port) {
		// Not the caller's key, which the API has checked: the node
		// refused the cluster secret. (A port's own 401 is the program's.)
		resp.Body.Close()
		err := refusedBy(fc.node)
		fc.fail(err)
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgraded connection (a WebSocket to a port): its body is the
		// connection itself, which the proxy must be able to write.
		return resp, nil
	}
	resp.Body = &failingBody{ReadCloser: resp.Body, ctx: r.Context(), fail: fc.fail}
	return resp, nil
}

// failingBody ends its call when the node's connection breaks under a
// response (an NDJSON stream cut by the node's death), so that the API
// tells the client why instead of cutting the stream.
type failingBody struct {
	io.ReadCloser
	ctx  context.Context
	fail func(error)
}

func (b *failingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && b.ctx.Err() == nil {
		b.fail(err)
	}
	return n, err
}

// presentedSecret is the cluster secret r carries: in HeaderSecret on a
// forwarded port call (whose Authorization is the caller's), else as
// Authorization's bearer token.
func presentedSecret(r *http.Request) string {
	if s := r.Header.Get(HeaderSecret); s != "" {
		return s
	}
	s, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return s
}

// refusedStatus reports whether a node's answer is its refusal of the
// cluster secret: a 401, or a 429 throttling this address's failures,
// marked in HeaderSecret (a port's own 401 or 429 is the program's).
func refusedStatus(resp *http.Response) bool {
	return (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusTooManyRequests) && resp.Header.Get(HeaderSecret) == "refused"
}

// MakeVolume implements node.Node: the volume is made on this node's disk.
func (c *Client) MakeVolume(ctx context.Context, id string, size int64) error {
	return c.do(ctx, http.MethodPost, "/volumes", volumeRequest{ID: id, SizeBytes: size}, nil)
}

// RemoveVolume implements node.Node.
func (c *Client) RemoveVolume(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/volumes/"+url.PathEscape(id), nil, nil)
}
