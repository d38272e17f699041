package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/lizard-build/lizard/api"
)

// Execution is what a run of code produced, assembled from its stream.
// An error raised by the code is in Error, not returned by Execute.
type Execution struct {
	Results        []api.Result
	Stdout         string
	Stderr         string
	Error          *api.ExecutionError
	ExecutionCount int
}

// Execute runs code in the sandbox. onEvent, when non-nil, is called with
// each event as it arrives (before the run ends), the end event included.
// A stream cut off before its end event fails with ErrTruncated.
func (c *Client) Execute(ctx context.Context, id string, req api.ExecuteRequest, onEvent func(api.ExecuteEvent)) (*Execution, error) {
	resp, cancel, err := c.do(ctx, request{method: http.MethodPost, path: sandboxPath(id, "/execute"), json: req, stream: true})
	if err != nil {
		return nil, err
	}
	defer cancel()
	defer drainClose(resp.Body)
	x := &Execution{Results: []api.Result{}}
	var abort *api.Abort
	err = readStream(ctx, resp.Body, c.maxLine, "execute", func(ev api.ExecuteEvent) bool {
		if ev.Type == api.EventAbort {
			abort = ev.Abort
			return true
		}
		switch ev.Type {
		case api.EventStdout:
			x.Stdout += ev.Text
		case api.EventStderr:
			x.Stderr += ev.Text
		case api.EventResult:
			if ev.Result != nil {
				x.Results = append(x.Results, *ev.Result)
			}
		case api.EventError:
			x.Error = ev.Error
		}
		if ev.ExecutionCount != 0 {
			x.ExecutionCount = ev.ExecutionCount
		}
		if onEvent != nil {
			onEvent(ev)
		}
		return ev.Type == api.EventEnd
	})
	if err != nil {
		return nil, err
	}
	if abort != nil {
		return nil, abortError(abort)
	}
	return x, nil
}

// ProcessResult is what a command produced, assembled from its stream.
type ProcessResult struct {
	Stdout   string
	Stderr   string
	ExitCode int // -1 when the end event carried none
	// Error says why the command could not start or was stopped (timeout);
	// empty when it ran to its end.
	Error string
}

// Exec runs a command in a new process in the sandbox. onEvent, when
// non-nil, is called with each event as it arrives, the end event included.
// A non-zero exit code is a result, not an error.
func (c *Client) Exec(ctx context.Context, id string, req api.ProcessRequest, onEvent func(api.ProcessEvent)) (*ProcessResult, error) {
	resp, cancel, err := c.do(ctx, request{method: http.MethodPost, path: sandboxPath(id, "/process"), json: req, stream: true})
	if err != nil {
		return nil, err
	}
	defer cancel()
	defer drainClose(resp.Body)
	res := &ProcessResult{ExitCode: -1}
	var abort *api.Abort
	err = readStream(ctx, resp.Body, c.maxLine, "process", func(ev api.ProcessEvent) bool {
		if ev.Type == api.EventAbort {
			abort = ev.Abort
			return true
		}
		switch ev.Type {
		case "stdout":
			res.Stdout += ev.Text
		case "stderr":
			res.Stderr += ev.Text
		case "end":
			if ev.ExitCode != nil {
				res.ExitCode = *ev.ExitCode
			}
			res.Error = ev.Error
		}
		if onEvent != nil {
			onEvent(ev)
		}
		return ev.Type == "end"
	})
	if err != nil {
		return nil, err
	}
	if abort != nil {
		return nil, abortError(abort)
	}
	return res, nil
}

// abortError is the API error a stream ended with ("abort" event): the
// same *Error a request gets when it fails before it begins.
func abortError(a *api.Abort) error {
	if a == nil {
		return &Error{Status: http.StatusGone, Code: api.CodeGone, Message: "the sandbox stopped during the call"}
	}
	return &Error{Status: a.Status, Code: a.Code, Message: a.Message}
}

// readStream decodes NDJSON events from body, handing each to handle, until
// handle reports the end event.
func readStream[E any](ctx context.Context, body io.Reader, maxLine int, what string, handle func(E) (end bool)) error {
	// A result line can hold a base64 image of several megabytes, but none
	// the server sends passes api.MaxExecuteLine: a longer one (from an
	// agent replaced by code in the sandbox) ends the stream instead of
	// growing the decoder's buffer without end.
	dec := json.NewDecoder(&boundedLines{r: body, max: maxLine})
	for {
		var ev E
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("reading %s stream: %w", what, ctx.Err())
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return &streamError{what: what}
			}
			// A malformed line or a broken connection: either way the run's
			// outcome is unknown.
			return &streamError{what: what, cause: err}
		}
		if handle(ev) {
			return nil
		}
	}
}

// lineTooLong is a stream's line past max bytes (Config.MaxStreamLine).
type lineTooLong struct{ max int }

func (e lineTooLong) Error() string {
	from := "Config.MaxStreamLine"
	if e.max == api.MaxExecuteLine {
		from = "api.MaxExecuteLine"
	}
	return fmt.Sprintf("a line of the stream is over %d bytes (%s)", e.max, from)
}

func (lineTooLong) Is(target error) bool { return target == ErrLineTooLong }

// boundedLines fails a read once a line passes max bytes.
type boundedLines struct {
	r    io.Reader
	max  int
	line int // bytes of the line under way
}

func (b *boundedLines) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	for rest := p[:n]; ; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			b.line += len(rest)
			break
		}
		if b.line+i > b.max {
			return 0, lineTooLong{b.max}
		}
		b.line, rest = 0, rest[i+1:]
	}
	if b.line > b.max {
		return 0, lineTooLong{b.max}
	}
	return n, err
}

// CreateContext starts a new execution context (its own kernel) in the sandbox.
func (c *Client) CreateContext(ctx context.Context, id string, req api.CreateContextRequest) (*api.Context, error) {
	var cx api.Context
	if err := c.call(ctx, request{method: http.MethodPost, path: sandboxPath(id, "/contexts"), json: req}, &cx); err != nil {
		return nil, err
	}
	return &cx, nil
}

// ListContexts lists the sandbox's contexts.
func (c *Client) ListContexts(ctx context.Context, id string) ([]api.Context, error) {
	var list api.ContextList
	if err := c.call(ctx, request{method: http.MethodGet, path: sandboxPath(id, "/contexts")}, &list); err != nil {
		return nil, err
	}
	if list.Contexts == nil {
		list.Contexts = []api.Context{}
	}
	return list.Contexts, nil
}

// RestartContext restarts a context's kernel: its variables are lost.
func (c *Client) RestartContext(ctx context.Context, id, contextID string) (*api.Context, error) {
	var cx api.Context
	r := request{method: http.MethodPost, path: sandboxPath(id, "/contexts/"+url.PathEscape(contextID)+"/restart")}
	if err := c.call(ctx, r, &cx); err != nil {
		return nil, err
	}
	return &cx, nil
}

// DeleteContext stops a context's kernel and forgets the context.
func (c *Client) DeleteContext(ctx context.Context, id, contextID string) error {
	return c.call(ctx, request{method: http.MethodDelete, path: sandboxPath(id, "/contexts/"+url.PathEscape(contextID))}, nil)
}

// drainClose reads what is left of a stream after its end event (the
// chunked terminator) before closing it, so the connection is reused
// instead of being torn down after every run.
func drainClose(body io.ReadCloser) {
	io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	body.Close()
}
