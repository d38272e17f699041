// Package agentclient is the server's side of the line to the agent inside
// each sandbox: it dials an agent by sandbox ID, waits for it to answer,
// waits for its kernel to be ready, gives a restored sandbox its identity
// (reseed), and carries the public API's proxied calls. It imports only
// api, so that any part of the server (one node, or an API process in front
// of many) can use it.
package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/lizard-build/lizard/api"
)

// Resolver returns the host:port sandbox id's agent listens on, or an
// error if the sandbox is unknown or has ended.
type Resolver func(ctx context.Context, id string) (string, error)

// Secrets returns sandbox id's agent secret, sent as a Bearer token with
// every request to its agent ("" sends none).
type Secrets func(id string) string

// Client talks to agents. It is safe for concurrent use.
type Client struct {
	resolve   Resolver
	transport http.RoundTripper
	direct    http.RoundTripper // transport without the secret (CloseIdle)
}

// New returns a Client that finds agents with resolve and opens them with
// secrets. transport, when not nil, replaces the direct one (tests).
func New(resolve Resolver, secrets Secrets, transport http.RoundTripper) *Client {
	c := &Client{resolve: resolve, direct: transport}
	if c.direct == nil {
		c.direct = &http.Transport{
			// Never through an HTTP proxy from the environment: agents
			// live on this machine's own links.
			Proxy:               nil,
			DialContext:         c.dial,
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     90 * time.Second,
		}
	}
	c.transport = &authTransport{next: c.direct, secrets: secrets}
	return c
}

// authTransport sets the agent's secret on every request that carries none.
type authTransport struct {
	next    http.RoundTripper
	secrets Secrets
}

// CloseIdleConnections drops the kept-alive connections underneath.
func (t *authTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t *authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.secrets == nil || r.Header.Get("Authorization") != "" {
		return t.next.RoundTrip(r)
	}
	id, _, err := net.SplitHostPort(r.URL.Host)
	if err != nil {
		return t.next.RoundTrip(r)
	}
	secret := t.secrets(id)
	if secret == "" {
		return t.next.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+secret)
	return t.next.RoundTrip(r)
}

// Addr is the default agent address of a sandbox whose guest address is
// guest.
func Addr(guest string) string { return net.JoinHostPort(guest, strconv.Itoa(api.AgentPort)) }

// host is the host agent URLs name: the sandbox ID, not its address.
// Addresses are reused once a sandbox ends, and a kept-alive connection to
// the old sandbox's address must never carry a request meant for the new
// one; keying the connection pool by ID makes that impossible.
func host(id string) string { return net.JoinHostPort(id, strconv.Itoa(api.AgentPort)) }

// URL is the base URL of sandbox id's agent, for requests sent through
// Transport.
func URL(id string) *url.URL { return &url.URL{Scheme: "http", Host: host(id)} }

// known is an agent's address a caller knows already (At).
type known struct{ id, addr string }

type knownKey struct{}

// At returns ctx under which requests to sandbox id's agent dial addr
// instead of asking the Resolver: for the caller that has just given the
// sandbox that address (a node starting it), so that each attempt of a
// wait does not read back what it holds. Requests to other sandboxes
// resolve as ever.
func At(ctx context.Context, id, addr string) context.Context {
	return context.WithValue(ctx, knownKey{}, known{id: id, addr: addr})
}

func (c *Client) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	id, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	target := ""
	if k, ok := ctx.Value(knownKey{}).(known); ok && k.id == id {
		target = k.addr
	} else if target, err = c.resolve(ctx, id); err != nil {
		return nil, fmt.Errorf("dialing agent of sandbox %s: %w", id, err)
	}
	d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return d.DialContext(ctx, network, target)
}

// Transport carries requests to agents; the API's proxy uses it.
func (c *Client) Transport() http.RoundTripper { return c.transport }

// CloseIdle drops kept-alive connections. A sandbox about to be
// checkpointed must have none: the image would keep them established, and
// a sandbox restored from it at the same address could collide with them.
func (c *Client) CloseIdle() {
	if t, ok := c.direct.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

// ErrStopped means the sandbox stopped while its agent was awaited.
var ErrStopped = errors.New("sandbox stopped before its agent answered")

// Wait polls sandbox id's /health until it answers 200, ctx ends, or
// alive (checked every half second) says the sandbox has stopped, in which
// case the error wraps ErrStopped.
func (c *Client) Wait(ctx context.Context, id string, alive func(context.Context) error) error {
	client := &http.Client{Transport: c.transport, Timeout: 2 * time.Second}
	u := URL(id).String() + "/health"
	// Watched beside the attempts, as in ReseedWhenUp: an attempt to a
	// dead sandbox hangs for its whole timeout.
	wctx, stop := watchAlive(ctx, alive)
	defer stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		req, err := http.NewRequestWithContext(wctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("agent health answered %s", resp.Status)
		}
		if wctx.Err() == nil || last == nil {
			// An attempt cut short by the deadline says less than the one before.
			last = err
		}
		if stopped := context.Cause(wctx); ctx.Err() == nil && errors.Is(stopped, ErrStopped) {
			return fmt.Errorf("%w; last health check: %v", stopped, last)
		}
		select {
		case <-wctx.Done():
			if stopped := context.Cause(wctx); ctx.Err() == nil && errors.Is(stopped, ErrStopped) {
				return fmt.Errorf("%w; last health check: %v", stopped, last)
			}
			return fmt.Errorf("waiting for %s: %w (last: %v)", u, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// Ready waits for the agent's default kernel and its preloads.
func (c *Client) Ready(ctx context.Context, id string) error {
	resp, err := c.call(ctx, http.MethodGet, id, api.AgentReadyPath, nil, "", 3*time.Minute)
	if err != nil {
		return fmt.Errorf("waiting for the kernel of sandbox %s: %w", id, err)
	}
	resp.Body.Close()
	return nil
}

// ReseedWhenUp is Reseed sent as soon as the agent of a sandbox just
// restored accepts a connection: the identity rides on the first request,
// with no health check before it (a restored agent is listening the moment
// its sandbox runs). Only a request that never reached the agent (the
// connection refused or unreachable) is sent again; alive, checked every
// half second, ends the wait if the sandbox stops (ErrStopped).
func (c *Client) ReseedWhenUp(ctx context.Context, r api.ReseedRequest, auth string, alive func(context.Context) error) error {
	// alive is watched beside the attempts, not between them: to a dead
	// sandbox's address a dial hangs (nothing answers the SYN) until its
	// timeout, and a request until the caller's deadline.
	wctx, stop := watchAlive(ctx, alive)
	defer stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		err := c.Reseed(wctx, r, auth)
		if stopped := context.Cause(wctx); ctx.Err() == nil && errors.Is(stopped, ErrStopped) {
			return fmt.Errorf("%w; last attempt: %v", stopped, err)
		}
		var op *net.OpError
		if err == nil || !errors.As(err, &op) || op.Op != "dial" {
			return err
		}
		select {
		case <-wctx.Done():
			if stopped := context.Cause(wctx); ctx.Err() == nil && errors.Is(stopped, ErrStopped) {
				return fmt.Errorf("%w; last attempt: %v", stopped, err)
			}
			return fmt.Errorf("reseeding sandbox %s: %w (last: %v)", r.SandboxID, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// watchAlive returns ctx cancelled, with a cause wrapping ErrStopped, as
// soon as alive (checked every half second) says the sandbox has stopped;
// stop ends the watch. A nil alive watches nothing.
func watchAlive(ctx context.Context, alive func(context.Context) error) (_ context.Context, stop func()) {
	if alive == nil {
		return ctx, func() {}
	}
	wctx, cancel := context.WithCancelCause(ctx)
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				if err := alive(wctx); err != nil && wctx.Err() == nil {
					cancel(fmt.Errorf("%w: %v", ErrStopped, err))
					return
				}
			}
		}
	}()
	return wctx, func() { cancel(nil) }
}

// Reseed gives a restored sandbox its identity: its ID, the environment
// for every kernel and process from now on, (unless r.KeepSeeds) fresh
// seeds for every kernel's random generators, and (r.Secret) its own
// agent secret. auth, when set, is the secret the agent holds now: a copy
// holds its source's until this call.
func (c *Client) Reseed(ctx context.Context, r api.ReseedRequest, auth string) error {
	resp, err := c.call(ctx, http.MethodPost, r.SandboxID, api.AgentReseedPath, r, auth, time.Minute)
	if err != nil {
		return fmt.Errorf("reseeding sandbox %s: %w", r.SandboxID, err)
	}
	resp.Body.Close()
	return nil
}

// Trust has sandbox id's agent trust certPEM as its egress CA ("":
// trust none again).
func (c *Client) Trust(ctx context.Context, id, certPEM string) error {
	resp, err := c.call(ctx, http.MethodPost, id, api.AgentTrustPath, api.TrustRequest{CertPEM: certPEM}, "", time.Minute)
	if err != nil {
		return fmt.Errorf("installing the egress CA in sandbox %s: %w", id, err)
	}
	resp.Body.Close()
	return nil
}

// MaxEnvBytes bounds the environment Env takes from an agent: more than
// a boot can be given anyway (Linux's ARG_MAX is 2 MiB with the args).
const MaxEnvBytes = 1 << 20

// Env asks sandbox id's agent for the environment it gives code.
func (c *Client) Env(ctx context.Context, id string) ([]string, error) {
	resp, err := c.call(ctx, http.MethodGet, id, api.AgentEnvPath, nil, "", 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("asking sandbox %s for its environment: %w", id, err)
	}
	defer resp.Body.Close()
	var e api.AgentEnv
	if err := json.NewDecoder(io.LimitReader(resp.Body, MaxEnvBytes)).Decode(&e); err != nil {
		return nil, fmt.Errorf("asking sandbox %s for its environment (at most %d bytes): %w", id, MaxEnvBytes, err)
	}
	return e.Env, nil
}

// Disk asks sandbox id's agent what its root filesystem holds.
func (c *Client) Disk(ctx context.Context, id string) (api.DiskUsage, error) {
	var d api.DiskUsage
	resp, err := c.call(ctx, http.MethodGet, id, api.AgentDiskPath, nil, "", 2*time.Second)
	if err != nil {
		return d, fmt.Errorf("asking sandbox %s for its disk use: %w", id, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		return d, fmt.Errorf("asking sandbox %s for its disk use: %w", id, err)
	}
	return d, nil
}

// call sends one request to path of sandbox id's agent: body, when not
// nil, as JSON; auth, when set, as the secret instead of the one the
// transport gives; timeout bounds the whole exchange, body read included
// (0: none). It returns a 200 or 204 answer, whose body the caller
// closes; another status is an error with the agent's message.
func (c *Client) call(ctx context.Context, method, id, path string, body any, auth string, timeout time.Duration) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encoding the request to %s: %w", path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, URL(id).String()+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := (&http.Client{Transport: c.transport, Timeout: timeout}).Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, fmt.Errorf("the agent's %s answered %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	return resp, nil
}
