package agentproxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/chunkcopy"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/trace"
)

// Transport is the proxy's RoundTripper face: it carries requests in the
// public API's form, /v1/sandboxes/{id}/<agent path>, over one call
// (Call) to <agent path> of that sandbox's agent — or of the node that
// runs it, in a cluster — so that a surface builds an ordinary HTTP client
// (the Go client, client.Client) on it. Whatever the surface, a call to
// the agent is a span of its own, its caller's key does not reach the
// agent, a run's outcome is read (Call.Outcome, Observe), a stream cut by
// the sandbox's end ends with an abort event, a WebSocket with a close
// frame, and a call the sandbox's end broke fails with why (StopCause).
//
// Requests carry Call.Ctx, or a context derived from it: the call ends
// when the sandbox stops.
type Transport struct {
	Call Call
	// Base carries the call unless Call.Transport does.
	Base http.RoundTripper
	// Observe, when set, is told how each run (POST /execute, /process)
	// ended, once its stream has (the API process's metrics).
	Observe func(Outcome)
	// MaxJSON, when set, bounds a JSON answer read through the transport
	// (envd's, which decodes them): past it the read fails with an error
	// of kind ErrAnswerTooLarge, so that an agent replaced by code in the
	// sandbox cannot have an answer without end held whole.
	MaxJSON int64
}

// ErrAnswerTooLarge marks an agent's JSON answer past Transport.MaxJSON:
// a bad gateway, as an agent that did not answer.
var ErrAnswerTooLarge = fmt.Errorf("agent's answer over its bound: %w", errdefs.ErrBadGateway)

// sandboxPrefix heads the paths Transport takes.
const sandboxPrefix = "/v1/sandboxes/"

// agentPath splits a public API path into its sandbox ID and the agent
// path after it.
func agentPath(p string) (id, rest string, ok bool) {
	after, ok := strings.CutPrefix(p, sandboxPrefix)
	if !ok {
		return "", "", false
	}
	id, rest, _ = strings.Cut(after, "/")
	return id, "/" + rest, id != ""
}

// agentRoutes names an agent path by its public pattern, for span names
// that hold no sandbox ID or pid.
var agentRoutes = func() *http.ServeMux {
	mux := http.NewServeMux()
	for _, p := range api.AgentPublicPaths {
		mux.Handle(p, http.NotFoundHandler())
	}
	return mux
}()

// route is the public pattern of agent path p, or "/other".
func route(method, p string) string {
	r := &http.Request{Method: method, URL: &url.URL{Path: p}}
	if _, pattern := agentRoutes.Handler(r); pattern != "" {
		return pattern
	}
	return "/other"
}

func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	id, rest, ok := agentPath(req.URL.Path)
	if !ok {
		return nil, fmt.Errorf("agentproxy: %s is not a sandbox's agent path (/v1/sandboxes/{id}/...)", req.URL.Path)
	}
	call := t.Call
	target := call.URL
	base := call.Transport
	if base == nil {
		base = t.Base
	}
	out := req.Clone(req.Context())
	out.URL.Scheme, out.URL.Host = target.Scheme, target.Host
	// target.Path is "" for an agent, or the sandbox's path on the node
	// that runs it (a cluster).
	out.URL.Path = target.Path + rest
	out.URL.RawPath = ""
	if req.URL.RawPath != "" {
		if _, rawRest, ok := agentPath(req.URL.RawPath); ok {
			out.URL.RawPath = target.Path + rawRest
		}
	}
	out.Host = target.Host
	// The agent is not to see the caller's key.
	out.Header.Del("Authorization")

	run := op(req.Method, rest)
	if req.Method == http.MethodPut && rest == "/files" && out.ContentLength < 0 && out.Body != nil && out.Body != http.NoBody {
		// Here, not in Proxy: ReverseProxy wraps the body in a reader of
		// its own, which would hide WriteTo.
		out.Body = gathered{out.Body}
	}
	var head *headReader
	if run == OpExecute && out.Body != nil && out.Body != http.NoBody {
		head = &headReader{r: out.Body}
		out.Body = head
	}
	// A call to the agent itself (target.Path "") is a span of its own,
	// whose children are the steps the agent reports it timed
	// (trace.AgentSpans); a call to a node is its internal API's span,
	// and the outcome is set on the caller's.
	agent := target.Path == ""
	ctx := req.Context()
	var sp trace.Span
	if agent {
		ctx, sp = trace.StartClient(ctx, "agent "+req.Method+" "+route(req.Method, rest), trace.Sandbox(id))
		out = out.WithContext(ctx)
	}
	endSpan := func(err error) {
		if sp != nil {
			trace.End(sp, err)
		}
	}
	trace.Inject(ctx, out.Header)
	sent := time.Now()
	observe := func(o Outcome) {
		trace.Annotate(ctx, trace.String(trace.KeyOutcome, o.Result))
		if t.Observe != nil {
			t.Observe(o)
		}
	}
	resp, err := base.RoundTrip(out)
	if err != nil {
		if cause := StopCause(call.Ctx); cause != nil {
			err = cause
		}
		if run != "" {
			observe(Outcome{Op: run, Language: head.language(), Result: ResultRejected, Took: time.Since(sent)})
		}
		endSpan(err)
		return nil, err
	}
	if agent && resp.StatusCode != http.StatusSwitchingProtocols {
		// (A WebSocket's body is its connection, which must stay one: it
		// has no trailer.)
		trace.AgentSpans(ctx, resp, sent, trace.Sandbox(id))
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson") {
		if run != "" && resp.StatusCode == http.StatusOK {
			notable := call.Outcome
			if !agent {
				notable = nil // the node's own proxy tells it
			}
			resp.Body = newOutcomeBody(resp.Body, Outcome{Op: run, Language: head.language()}, sent, notable, func(o Outcome) {
				o.Language = head.language()
				observe(o)
			})
			run = ""
		}
		resp.Body = &abortingBody{ReadCloser: resp.Body, ctx: call.Ctx}
	}
	if run != "" && resp.StatusCode != http.StatusOK {
		observe(Outcome{Op: run, Language: head.language(), Result: ResultRejected, Took: time.Since(sent)})
	}
	if conn, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = &closingSocket{ReadWriteCloser: conn, ctx: call.Ctx}
	}
	if t.MaxJSON > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		what := req.Method + " " + rest
		if req.Method == http.MethodPut && rest == "/files" {
			what = "an upload"
		}
		resp.Body = &boundedAnswer{ReadCloser: resp.Body, max: t.MaxJSON, what: what}
	}
	if sp != nil {
		resp.Body = spanBody(resp.Body, sp)
	}
	return resp, nil
}

// spanBody ends sp when body is closed, or read to its end: the call's
// span lasts as long as its response.
func spanBody(body io.ReadCloser, sp trace.Span) io.ReadCloser {
	var once sync.Once
	end := func() { once.Do(func() { sp.End() }) }
	if rwc, ok := body.(io.ReadWriteCloser); ok {
		return &spanConn{ReadWriteCloser: rwc, end: end}
	}
	return &spanReader{ReadCloser: body, end: end}
}

type spanReader struct {
	io.ReadCloser
	end func()
}

func (s *spanReader) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		s.end()
	}
	return n, err
}

func (s *spanReader) Close() error {
	err := s.ReadCloser.Close() // the outcome first, on the span
	s.end()
	return err
}

// spanConn is spanReader for a WebSocket's connection, which stays one.
type spanConn struct {
	io.ReadWriteCloser
	end func()
}

func (s *spanConn) Close() error {
	err := s.ReadWriteCloser.Close()
	s.end()
	return err
}

// Client is an HTTP client over call: its requests, in the public API's
// form, go to the call's sandbox's agent (Transport).
func Client(call Call, base http.RoundTripper, observe func(Outcome)) *http.Client {
	return &http.Client{Transport: &Transport{Call: call, Base: base, Observe: observe}}
}

// boundedAnswer fails a read past max bytes (Transport.MaxJSON).
type boundedAnswer struct {
	io.ReadCloser
	max, read int64
	what      string
}

func (b *boundedAnswer) Read(p []byte) (int, error) {
	if b.read >= b.max {
		// One byte more than the bound tells an answer at the bound from
		// one past it.
		var one [1]byte
		if n, err := b.ReadCloser.Read(one[:]); n == 0 {
			return 0, err
		}
		return 0, &errdefs.Error{Kind: ErrAnswerTooLarge,
			Msg: fmt.Sprintf("the sandbox's answer to %s was too large: over %d MiB", b.what, b.max>>20)}
	}
	if int64(len(p)) > b.max-b.read {
		p = p[:b.max-b.read]
	}
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	return n, err
}

// uploadChunk is how much of an upload of unknown length (chunked, as
// the SDKs stream an iterator) the proxy passes on to the agent in one
// HTTP chunk. Passed on as it was read, in io.Copy's 32 KiB pieces, each
// piece was an HTTP chunk of its own, written in three pieces (4 KiB, the
// rest, the CRLF) and flushed; inside gVisor every one of those is
// netstack's work and agent reads: 4.6-7.8 CPU-seconds of the sandbox's
// runsc per GB uploaded, 1.6-1.9 in 1 MiB chunks, and the SDK's streamed
// upload went from 78-90 to 330-458 MB/s (docs/performance.md, "Files and
// transfers"). The agent writes the file in 1 MiB writes (copyChunk)
// anyway; an upload holds one chunk of memory here (maxGathering).
const uploadChunk = 1 << 20

// maxGathering bounds the uploads gathered at once in one process (an API
// server, a node), so what they hold is at most maxGathering uploadChunks
// (64 MiB) however many a project has under way (up to 1024 calls each);
// an upload past them is passed on as it is read, as before gathering.
const maxGathering = 64

// gathering holds a token for each upload being gathered.
var gathering = make(chan struct{}, maxGathering)

// gathered passes an upload of unknown length on in uploadChunk pieces:
// the transport copies a request body with io.Copy, which takes WriteTo.
type gathered struct{ io.ReadCloser }

func (g gathered) WriteTo(w io.Writer) (int64, error) {
	select {
	case gathering <- struct{}{}:
		defer func() { <-gathering }()
	default:
		return io.Copy(w, struct{ io.Reader }{g.ReadCloser})
	}
	// Only io.EOF is the body's end: a client that broke off
	// (io.ErrUnexpectedEOF) or an upload past its bound fails the copy, so
	// the agent never renames a cut file into place.
	return chunkcopy.Copy(w, g.ReadCloser, make([]byte, uploadChunk))
}
