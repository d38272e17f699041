// Package client is the Go client of Lizard's HTTP API v1: sandboxes, code
// execution, contexts, processes and files. It speaks the wire types of
// package api and maps error responses back to sentinels (ErrNotFound, ...)
// so that errors.Is works across the wire.
//
// A sandbox's calls are methods of Client taking its ID; a project's
// resources are small types the client hands out, as the Python and
// TypeScript SDKs' Secret, Volume, Template, Network and Events classes:
// c.Secrets(), c.Volumes(), c.Templates(), c.Snapshots(), c.Network(),
// c.Webhooks(), c.Events().
//
//	c, err := client.New(client.Config{}) // LIZARD_API_URL, LIZARD_API_KEY
//	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
//	run, err := c.Execute(ctx, sb.SandboxID, api.ExecuteRequest{Code: "1+1"}, nil)
//	err = c.Secrets().Delete(ctx, "OPENAI_KEY")
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
)

// DefaultBaseURL is where `lizard serve` listens unless told otherwise.
const DefaultBaseURL = "http://127.0.0.1:8080"

// Environment variables read when Config leaves the matching field empty.
const (
	EnvAPIURL = "LIZARD_API_URL"
	EnvAPIKey = "LIZARD_API_KEY"
)

// Config says where the API is and how to call it. Empty fields take their
// defaults; explicit values win over the environment.
type Config struct {
	// BaseURL is the server's address, such as http://127.0.0.1:8080
	// (default: $LIZARD_API_URL, then DefaultBaseURL).
	BaseURL string
	// APIKey is a project's API key (default: $LIZARD_API_KEY). Without
	// one, every call but Health fails with ErrNoAPIKey.
	APIKey string
	// HTTPClient sends the requests (default: a client with no overall
	// timeout, since /execute and /process stream for as long as code runs).
	HTTPClient *http.Client
	// Timeout bounds each call that does not stream (create, get, list,
	// files metadata...); 0 means only ctx bounds it. Streaming calls
	// (Execute, Exec, ReadFile) are bounded by ctx and their own timeoutMs.
	Timeout time.Duration
	// MaxStreamLine bounds one line of a stream (Execute, Exec, process
	// output, template builds): a longer one ends the call with
	// ErrTruncated and ErrLineTooLong instead of being held whole
	// (default: api.MaxExecuteLine, the longest a Lizard server sends).
	MaxStreamLine int
}

// Client calls one Lizard server. It is safe for concurrent use.
type Client struct {
	baseURL string
	apiKey  string
	http    *http.Client
	timeout time.Duration
	maxLine int // Config.MaxStreamLine
}

// New returns a client for cfg, filling empty fields from the environment
// and the defaults.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = os.Getenv(EnvAPIURL)
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if cfg.APIKey == "" {
		cfg.APIKey = os.Getenv(EnvAPIKey)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("invalid Lizard API URL %q: want http(s)://host:port", cfg.BaseURL)
	}
	// Accept the URL with or without the API version, since both are common.
	base := strings.TrimSuffix(strings.TrimRight(cfg.BaseURL, "/"), "/v1")
	if cfg.MaxStreamLine <= 0 {
		cfg.MaxStreamLine = api.MaxExecuteLine
	}
	return &Client{baseURL: base, apiKey: cfg.APIKey, http: cfg.HTTPClient, timeout: cfg.Timeout, maxLine: cfg.MaxStreamLine}, nil
}

// BaseURL returns the server address the client calls, without /v1.
func (c *Client) BaseURL() string { return c.baseURL }

// request describes one call.
type request struct {
	method string
	path   string // under /v1, already escaped
	query  url.Values
	body   io.Reader // sent as is when contentType is set
	json   any       // marshalled when non-nil
	// contentType of body; "application/json" for json.
	contentType string
	noAuth      bool
	stream      bool // the response body outlives the call: no Config.Timeout
}

// do sends r and returns the response when its status is 2xx; otherwise it
// returns the mapped *Error. The caller closes the body.
func (c *Client) do(ctx context.Context, r request) (*http.Response, context.CancelFunc, error) {
	if !r.noAuth && c.apiKey == "" {
		return nil, nil, ErrNoAPIKey
	}
	cancel := context.CancelFunc(func() {})
	if c.timeout > 0 && !r.stream {
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
	}
	body, contentType := r.body, r.contentType
	if r.json != nil {
		b, err := json.Marshal(r.json)
		if err != nil {
			cancel()
			return nil, nil, fmt.Errorf("encoding request: %w", err)
		}
		body, contentType = bytes.NewReader(b), "application/json"
	}
	u := c.baseURL + "/v1" + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("making request: %w", err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json, application/x-ndjson")
	req.Header.Set("User-Agent", "lizard-go")
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		cancel()
		if ctx.Err() != nil {
			// The caller gave up (or Timeout passed): not the server's fault.
			return nil, nil, fmt.Errorf("%s %s: %w", r.method, r.path, ctx.Err())
		}
		return nil, nil, &unreachableError{url: c.baseURL, err: err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer cancel()
		defer resp.Body.Close()
		return nil, nil, readError(resp)
	}
	return resp, cancel, nil
}

// call sends r and decodes a JSON response into out (when non-nil).
func (c *Client) call(ctx context.Context, r request, out any) error {
	resp, cancel, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body) // lets the connection be reused
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decoding response of %s %s: %w", r.method, r.path, err)
	}
	return nil
}

func sandboxPath(id string, rest string) string {
	return "/sandboxes/" + url.PathEscape(id) + rest
}

// unreachableError is a failure to talk to the server at all.
type unreachableError struct {
	url string
	err error
}

func (u *unreachableError) Error() string {
	return fmt.Sprintf("cannot reach Lizard at %s: is `lizard serve` running? (%v)", u.url, u.err)
}

func (u *unreachableError) Unwrap() error { return u.err }

func (u *unreachableError) Is(target error) bool { return target == ErrUnreachable }
