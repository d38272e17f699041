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
	"strconv"
	"strings"

	"github.com/coder/websocket"

	"github.com/lizard-build/lizard/api"
)

// Background processes and terminals (docs/processes.md).

func processPath(id string, pid int, rest string) string {
	return sandboxPath(id, "/processes/"+strconv.Itoa(pid)+rest)
}

// StartProcess starts a background process (a terminal, with req.Pty) and
// returns at once. It keeps running when the client goes away.
func (c *Client) StartProcess(ctx context.Context, id string, req api.ProcessStartRequest) (*api.ProcessInfo, error) {
	var info api.ProcessInfo
	if err := c.call(ctx, request{method: http.MethodPost, path: sandboxPath(id, "/processes"), json: req}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// ListProcesses lists the sandbox's background processes, running ones
// first, then those that ended lately.
func (c *Client) ListProcesses(ctx context.Context, id string) ([]api.ProcessInfo, error) {
	var list api.ProcessList
	if err := c.call(ctx, request{method: http.MethodGet, path: sandboxPath(id, "/processes")}, &list); err != nil {
		return nil, err
	}
	if list.Processes == nil {
		list.Processes = []api.ProcessInfo{}
	}
	return list.Processes, nil
}

// GetProcess describes one background process.
func (c *Client) GetProcess(ctx context.Context, id string, pid int) (*api.ProcessInfo, error) {
	var info api.ProcessInfo
	if err := c.call(ctx, request{method: http.MethodGet, path: processPath(id, pid, "")}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// WaitProcess waits for a background process to end and describes it
// (ExitCode set).
func (c *Client) WaitProcess(ctx context.Context, id string, pid int) (*api.ProcessInfo, error) {
	var info api.ProcessInfo
	r := request{method: http.MethodGet, path: processPath(id, pid, ""), query: url.Values{"wait": {"1"}}, stream: true}
	if err := c.call(ctx, r, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// ConnectProcess replays a background process's kept output, then follows
// it to its end, calling onEvent (when non-nil) with each event, the end
// included. The result holds the stdout and stderr text it saw (a
// terminal's bytes go to Stdout) and the exit code. Cancelling ctx leaves
// the process running. A sandbox that ends meanwhile fails it with the
// typed gone error (errors.Is(err, ErrGone)).
func (c *Client) ConnectProcess(ctx context.Context, id string, pid int, onEvent func(api.ProcessOutputEvent)) (*ProcessResult, error) {
	resp, cancel, err := c.do(ctx, request{method: http.MethodGet, path: processPath(id, pid, "/output"), stream: true})
	if err != nil {
		return nil, err
	}
	defer cancel()
	defer drainClose(resp.Body)
	res := &ProcessResult{ExitCode: -1}
	var stdout, stderr strings.Builder
	var abort *api.Abort
	err = readStream(ctx, resp.Body, c.maxLine, "process output", func(ev api.ProcessOutputEvent) bool {
		switch ev.Type {
		case api.EventAbort:
			abort = ev.Abort
			return true
		case api.EventStdout:
			stdout.WriteString(ev.Text)
		case api.EventStderr:
			stderr.WriteString(ev.Text)
		case api.OutputPty:
			stdout.Write(ev.Data)
		case api.EventEnd:
			if ev.ExitCode != nil {
				res.ExitCode = *ev.ExitCode
			}
			res.Error = ev.Error
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
	res.Stdout, res.Stderr = stdout.String(), stderr.String()
	return res, nil
}

// SendStdin writes data to a process's stdin (a terminal's input). It
// returns once the process has taken it.
func (c *Client) SendStdin(ctx context.Context, id string, pid int, data []byte) error {
	r := request{method: http.MethodPost, path: processPath(id, pid, "/stdin"), body: bytes.NewReader(data), contentType: "application/octet-stream"}
	return c.call(ctx, r, nil)
}

// CloseStdin closes a process's stdin: it reads end of file.
func (c *Client) CloseStdin(ctx context.Context, id string, pid int) error {
	return c.call(ctx, request{method: http.MethodPost, path: processPath(id, pid, "/stdin/close")}, nil)
}

// Signal sends a signal ("TERM", "KILL", "USR1", "9"...) to a process's
// group.
func (c *Client) Signal(ctx context.Context, id string, pid int, signal string) error {
	r := request{method: http.MethodPost, path: processPath(id, pid, "/signal"), json: api.ProcessSignalRequest{Signal: signal}}
	return c.call(ctx, r, nil)
}

// Resize sets a terminal's size.
func (c *Client) Resize(ctx context.Context, id string, pid int, cols, rows int) error {
	r := request{method: http.MethodPost, path: processPath(id, pid, "/resize"), json: api.PtySize{Cols: cols, Rows: rows}}
	return c.call(ctx, r, nil)
}

// Terminal is a connection to a process's WebSocket (usually a
// terminal's): raw output bytes one way, input and resizes the other.
// Any number of connections may be open to one process; closing one leaves
// the process running.
type Terminal struct {
	conn *websocket.Conn
}

// ConnectTerminal opens a WebSocket to a background process.
func (c *Client) ConnectTerminal(ctx context.Context, id string, pid int) (*Terminal, error) {
	if c.apiKey == "" {
		return nil, ErrNoAPIKey
	}
	u := "ws" + strings.TrimPrefix(c.baseURL, "http") + "/v1" + processPath(id, pid, "/ws")
	h := http.Header{}
	h.Set("Authorization", "Bearer "+c.apiKey)
	h.Set("User-Agent", "lizard-go")
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.http, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, readError(resp)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connecting to process %d: %w", pid, ctx.Err())
		}
		return nil, &unreachableError{url: c.baseURL, err: err}
	}
	conn.SetReadLimit(4 << 20)
	return &Terminal{conn: conn}, nil
}

// Write sends p as input.
func (t *Terminal) Write(p []byte) (int, error) {
	if err := t.conn.Write(context.Background(), websocket.MessageBinary, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Resize sets the terminal's size.
func (t *Terminal) Resize(ctx context.Context, cols, rows int) error {
	return t.control(ctx, api.ProcessControl{Type: "resize", Cols: cols, Rows: rows})
}

// CloseInput closes the process's stdin (not possible for a terminal).
func (t *Terminal) CloseInput(ctx context.Context) error {
	return t.control(ctx, api.ProcessControl{Type: "eof"})
}

func (t *Terminal) control(ctx context.Context, m api.ProcessControl) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return t.conn.Write(ctx, websocket.MessageText, b)
}

// Next returns the next message from the process: output bytes, or a
// control message (dropped, error, and last end, after which the
// connection is done). A sandbox that ends meanwhile fails it with the
// typed gone error (errors.Is(err, ErrGone)).
func (t *Terminal) Next(ctx context.Context) ([]byte, *api.ProcessControl, error) {
	typ, msg, err := t.conn.Read(ctx)
	if err != nil {
		return nil, nil, socketError(err)
	}
	if typ == websocket.MessageBinary {
		return msg, nil, nil
	}
	var m api.ProcessControl
	if err := json.Unmarshal(msg, &m); err != nil {
		return nil, nil, fmt.Errorf("reading terminal: a control message %q: %w", msg, err)
	}
	return nil, &m, nil
}

// Wait copies the process's output (its kept output first) to out until
// the process ends, and returns its exit code. onControl, when non-nil,
// sees the other control messages (dropped, error).
func (t *Terminal) Wait(ctx context.Context, out io.Writer, onControl func(api.ProcessControl)) (int, error) {
	for {
		data, m, err := t.Next(ctx)
		if err != nil {
			return -1, err
		}
		if m == nil {
			if _, err := out.Write(data); err != nil {
				return -1, fmt.Errorf("writing terminal output: %w", err)
			}
			continue
		}
		if m.Type != api.EventEnd {
			if onControl != nil {
				onControl(*m)
			}
			continue
		}
		code := -1
		if m.ExitCode != nil {
			code = *m.ExitCode
		}
		t.conn.Close(websocket.StatusNormalClosure, "")
		return code, nil
	}
}

// Close leaves the process running.
func (t *Terminal) Close() error {
	return t.conn.Close(websocket.StatusNormalClosure, "")
}

// socketError maps how a process's WebSocket ended: a close code of
// 4000+status (the server's word that the sandbox ended) is that status's
// *Error, so errors.Is(err, ErrGone) holds as for any other call.
func socketError(err error) error {
	var ce websocket.CloseError
	if errors.As(err, &ce) && ce.Code >= 4000 && ce.Code < 4600 {
		status := int(ce.Code) - 4000
		return &Error{Status: status, Code: codeFor(status), Message: ce.Reason}
	}
	return &streamError{what: "terminal", cause: err}
}
