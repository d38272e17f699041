package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
)

// proxy passes /v1/sandboxes/{id}/<agent path> to the sandbox's agent as
// <agent path>, for the public agent paths only (api.AgentPublicPaths): the
// agent's internal endpoints are never reachable through the API. Bodies
// stream both ways unbuffered: uploads are not bound by the JSON limit, and
// NDJSON events reach the client as the agent writes them.
//
// The outgoing request carries the call's context (node.Call): a client
// that disconnects cancels the agent's work, and a sandbox that stops ends
// the call at once with why. A call that has not answered yet gets the
// error (410 gone, naming how the sandbox ended); a stream already under
// way gets one last "abort" event carrying it, so that SDKs raise the same
// typed error either way; a WebSocket (a process's, /processes/{pid}/ws)
// gets a close frame carrying it (closingSocket).
func (s *Server) proxy(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	id := r.PathValue("id")
	prefix := "/v1/sandboxes/" + id
	// A file upload is the one body bounded here, by the operator's
	// --max-file-mb (the agent bounds the others by its JSON limit). It
	// streams: the bound counts bytes, it does not hold them.
	var upload *boundedBody
	if r.Method == http.MethodPut && strings.TrimPrefix(r.URL.Path, prefix) == "/files" && s.maxFile > 0 {
		if r.ContentLength > s.maxFile {
			s.fail(w, r, fileTooLarge(s.maxFile))
			return
		}
		upload = &boundedBody{ReadCloser: r.Body, left: s.maxFile}
		r.Body = upload
	}
	// Acquire resumes a paused sandbox, and holds off a pause until the
	// call has ended.
	ctx := r.Context()
	if follows(r) {
		ctx = node.Following(ctx)
	}
	call, err := s.c.Acquire(ctx, project, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer call.Release()
	// Without full duplex, net/http consumes what is left of the request
	// body when the response headers go out; the transport may still be
	// forwarding that body to the agent, and would then fail the write and
	// close the agent connection under the streaming response.
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
		s.log.Warn("enabling full duplex for the proxy", "err", err)
	}
	target := call.URL
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = target.Scheme
			pr.Out.URL.Host = target.Host
			// target.Path is "" for an agent, or the sandbox's path on the
			// node that runs it (a cluster).
			pr.Out.URL.Path = target.Path + strings.TrimPrefix(pr.In.URL.Path, prefix)
			if pr.In.URL.RawPath != "" {
				pr.Out.URL.RawPath = target.Path + strings.TrimPrefix(pr.In.URL.RawPath, prefix)
			}
			pr.Out.Host = target.Host
			// The agent is not to see the caller's key.
			pr.Out.Header.Del("Authorization")
		},
		Transport:     s.c.Transport(),
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ModifyResponse: func(resp *http.Response) error {
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson") {
				resp.Body = &abortingBody{ReadCloser: resp.Body, ctx: call.Ctx}
			}
			if conn, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
				resp.Body = &closingSocket{ReadWriteCloser: conn, ctx: call.Ctx}
				if offersSocketProtocol(r.Header) {
					resp.Header.Set("Sec-WebSocket-Protocol", SocketProtocol)
				}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log := s.log.With("sandbox_id", id, "project_id", project, "method", r.Method, "path", r.URL.Path)
			if cause := stopCause(call.Ctx); cause != nil {
				log.Info("sandbox stopped during a proxied call", "err", cause)
				s.fail(w, r, cause)
				return
			}
			if upload != nil && upload.over {
				s.fail(w, r, fileTooLarge(s.maxFile))
				return
			}
			if r.Context().Err() != nil {
				log.Debug("client went away during a proxied request", "err", err)
				return
			}
			log.Warn("agent did not answer", "err", err)
			s.fail(w, r, s.agentFailed(r.Context(), project, id))
		},
	}
	rp.ServeHTTP(w, r.WithContext(call.Ctx))
}

// follows reports whether r follows a process (its output, its WebSocket,
// a wait for its end) or watches a directory, which a pause ends rather
// than waits for (node.Following).
func follows(r *http.Request) bool {
	p := r.Pattern
	return strings.HasSuffix(p, "/processes/{pid}/output") || strings.HasSuffix(p, "/processes/{pid}/ws") ||
		strings.HasSuffix(p, "/files/watch") ||
		(strings.HasSuffix(p, "/processes/{pid}") && r.URL.Query().Get("wait") == "1")
}

// stopCause is why a call's context ended if its sandbox stopped, or nil.
func stopCause(ctx context.Context) error {
	var e *errdefs.Error
	if cause := context.Cause(ctx); ctx.Err() != nil && errors.As(cause, &e) {
		return cause
	}
	return nil
}

// stopWait bounds how long a stream whose agent connection broke waits
// to learn whether its sandbox has died.
const stopWait = 2 * time.Second

// waitStopCause waits up to d for ctx to end, and returns why if its
// sandbox stopped.
func waitStopCause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return stopCause(ctx)
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
	cause := stopCause(b.ctx)
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
	status, code, msg := classify(cause)
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

func fileTooLarge(limit int64) error {
	return &errdefs.Error{Kind: errdefs.ErrTooLarge,
		Msg: fmt.Sprintf("the file is larger than this server's bound of %d MiB (--max-file-mb)", limit>>20)}
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
			return 0, errors.New("file upload past --max-file-mb")
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
