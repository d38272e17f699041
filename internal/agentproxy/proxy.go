// Package agentproxy is the one way to a sandbox's agent: a call to
// /v1/sandboxes/{id}/<agent path> passed on to that path of the sandbox's agent, by whoever reaches the agent
// next — the public API's server on one machine, the API towards the
// sandbox's node and the node's internal API towards the agent in a
// cluster. The public concerns (the caller's key, its project owning the
// sandbox, which paths are public, the socket key) are the server's, done
// once before the call gets here. The E2B surface's interpreter and envd
// reach the agent through it too (Transport), so a call's outcome, its
// span and its end are the same whichever surface made it.
package agentproxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync/atomic"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// Proxy passes calls to sandboxes' agents. Bodies stream both ways
// unbuffered: uploads are not bound by a JSON limit, and NDJSON events
// reach the client as the agent writes them.
//
// The outgoing request carries the call's context (Call): a client that
// disconnects cancels the agent's work, and a sandbox that stops ends the
// call at once with why. A call that has not answered yet gets the error
// (410 gone, naming how the sandbox ended); a stream already under way
// gets one last "abort" event carrying it, so that SDKs raise the same
// typed error either way; a WebSocket (a process's, /processes/{pid}/ws)
// gets a close frame carrying it (closingSocket).
type Proxy struct {
	// Acquire starts the call, resuming a paused sandbox and holding off
	// a pause until the call has ended: a Node's, or the control plane's,
	// which checks the caller's project first.
	Acquire func(ctx context.Context, id string) (Call, error)
	// Transport carries the call unless the Call names its own.
	Transport http.RoundTripper
	// MaxUpload bounds a file upload's body (PUT /files), in bytes; 0: no
	// bound here. TooLarge is the error for one past it.
	MaxUpload int64
	TooLarge  error
	// Answered, when set, amends the agent's response (the public API's
	// WebSocket subprotocol).
	Answered func(r *http.Request, resp *http.Response)
	// Fail answers a call that failed with err.
	Fail func(w http.ResponseWriter, r *http.Request, err error)
	// Unanswered is the error for a call whose agent did not answer or
	// broke off before its response began (unanswered's).
	Unanswered func(ctx context.Context, id string) error
	// Observe, when set, is told how each run ended (Transport.Observe).
	Observe func(Outcome)
	Log     *slog.Logger
}

// Classify maps an error to its one status, code and client message, by
// the one table (errdefs.Kinds). Only messages written for the client
// (errdefs.Error) reach it; every other cause stays in the log.
func Classify(err error) (status int, code, msg string) {
	k, msg := errdefs.Public(err)
	return k.Status, k.Code, msg
}

// ServeHTTP passes r, a call to /v1/sandboxes/{id}/<agent path>, on to
// <agent path> of sandbox id's agent.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	prefix := "/v1/sandboxes/" + id
	// A file upload's bound streams: it counts bytes, it does not hold
	// them.
	var upload *boundedBody
	if r.Method == http.MethodPut && strings.TrimPrefix(r.URL.Path, prefix) == "/files" && p.MaxUpload > 0 {
		if r.ContentLength > p.MaxUpload {
			p.Fail(w, r, p.TooLarge)
			return
		}
		upload = &boundedBody{ReadCloser: r.Body, left: p.MaxUpload}
		r.Body = upload
	}
	ctx := r.Context()
	if follows(r) {
		ctx = Following(ctx)
	}
	call, err := p.Acquire(ctx, id)
	if err != nil {
		if o := op(r.Method, r.URL.Path); o != "" && p.Observe != nil {
			p.Observe(Outcome{Op: o, Language: "unknown", Result: ResultRejected})
		}
		p.Fail(w, r, err)
		return
	}
	defer call.Release()
	// Without full duplex, net/http consumes what is left of the request
	// body when the response headers go out; the transport may still be
	// forwarding that body to the agent, and would then fail the write and
	// close the agent connection under the streaming response.
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
		p.Log.Warn("enabling full duplex for the proxy", "err", err)
	}
	// In full duplex the server closes the connection after an answer
	// that went out before the request's body was read to its end (a
	// node that did not answer: the body was never sent; a refused
	// upload), without saying so: the client would keep the connection,
	// and its next request on it, a create or a call of another sandbox,
	// would fail without a status ("server closed idle connection"). Such
	// an answer says Connection: close.
	body := &readBody{ReadCloser: r.Body}
	if r.Body == nil || r.Body == http.NoBody {
		body.eof.Store(true)
	} else {
		r.Body = body
	}
	closeUnread := func(h http.Header) {
		if !body.eof.Load() {
			h.Set("Connection", "close")
		}
	}
	rp := &httputil.ReverseProxy{
		// The request stays in the public API's form: Transport takes it
		// to the agent.
		Rewrite:       func(*httputil.ProxyRequest) {},
		Transport:     &Transport{Call: call, Base: p.Transport, Observe: p.Observe},
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(p.Log.Handler(), slog.LevelWarn),
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode >= http.StatusBadRequest {
				// A refused upload (too large, the disk full) may be
				// answered before its body has all been sent.
				closeUnread(resp.Header)
			}
			if p.Answered != nil {
				p.Answered(r, resp)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			closeUnread(w.Header())
			log := p.Log.With("sandbox_id", id, "method", r.Method, "path", r.URL.Path)
			if cause := StopCause(call.Ctx); cause != nil {
				log.Info("sandbox stopped during a proxied call", "err", cause)
				p.Fail(w, r, cause)
				return
			}
			if upload != nil && upload.over {
				w.Header().Set("Connection", "close") // as in ModifyResponse
				p.Fail(w, r, p.TooLarge)
				return
			}
			if r.Context().Err() != nil {
				log.Debug("client went away during a proxied request", "err", err)
				return
			}
			log.Warn("agent did not answer", "err", err)
			p.Fail(w, r, p.Unanswered(r.Context(), id))
		},
	}
	rp.ServeHTTP(w, r.WithContext(call.Ctx))
}

// follows reports whether r follows a process (its output, its WebSocket,
// a wait for its end) or watches a directory, which a pause ends rather
// than waits for (Following).
func follows(r *http.Request) bool {
	p := r.Pattern
	return strings.HasSuffix(p, "/processes/{pid}/output") || strings.HasSuffix(p, "/processes/{pid}/ws") ||
		strings.HasSuffix(p, "/files/watch") ||
		(strings.HasSuffix(p, "/processes/{pid}") && r.URL.Query().Get("wait") == "1")
}

// abortingBody ends an NDJSON stream cut by its sandbox's end with one
// more line, {"type":"abort","abort":{"code":...,"message":...}}, instead
// of a broken connection.
type abortingBody struct {
	io.ReadCloser
	ctx  context.Context
	tail *strings.Reader
	// midLine: the last byte passed on was not a newline.
	midLine bool
}

func (b *abortingBody) Read(p []byte) (int, error) {
	if b.tail != nil {
		return b.tail.Read(p)
	}
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.midLine = p[n-1] != '\n'
	}
	if err == nil || errors.Is(err, io.EOF) {
		return n, err
	}
	cause := StopCause(b.ctx)
	if cause == nil {
		// The agent's connection broke before the sandbox's end was
		// noticed (its agent or runtime killed: the node looks at the
		// sandboxes of calls in flight every 250 ms). Wait a moment for
		// it, so that the stream of a sandbox that died ends with its
		// abort event rather than cut.
		cause = waitStopCause(b.ctx, stopWait)
	}
	if cause == nil {
		return n, err
	}
	status, code, msg := Classify(cause)
	line, _ := json.Marshal(struct {
		Type  string    `json:"type"`
		Abort api.Abort `json:"abort"`
	}{api.EventAbort, api.Abort{Status: status, Code: code, Message: msg}})
	tail := string(line) + "\n"
	if b.midLine {
		// A line cut in the middle is ended first, so the event parses.
		tail = "\n" + tail
	}
	b.tail = strings.NewReader(tail)
	return n, nil
}

// readBody is a request body that tells whether it was read to its end.
type readBody struct {
	io.ReadCloser
	eof atomic.Bool // read by the handler, set by the transport's writer
}

func (b *readBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof.Store(true)
	}
	return n, err
}

// boundedBody passes on at most left bytes of an upload, then fails the
// read (which ends the agent's request) and says so in over.
type boundedBody struct {
	io.ReadCloser
	left int64
	over bool
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more than the bound tells a file at the bound from
		// one past it.
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n > 0 {
			b.over = true
			return 0, errors.New("file upload past its bound")
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}
