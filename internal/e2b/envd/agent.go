package envd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// Agent is what envd needs of one sandbox's agent: its background
// processes (docs/processes.md) and files (docs/files.md). The services
// are written against it so that tests can fake it; httpAgent is the real
// one.
type Agent interface {
	StartProcess(ctx context.Context, req api.ProcessStartRequest) (api.ProcessInfo, error)
	ListProcesses(ctx context.Context) ([]api.ProcessInfo, error)
	// ProcessOutput replays pid's kept output, then follows it to its
	// "end" event.
	ProcessOutput(ctx context.Context, pid int) (Stream[api.ProcessOutputEvent], error)
	SendStdin(ctx context.Context, pid int, data []byte) error
	CloseStdin(ctx context.Context, pid int) error
	Signal(ctx context.Context, pid int, signal string) error
	Resize(ctx context.Context, pid int, size api.PtySize) error

	// The file calls act as user: "" the sandbox user, or "root" (the
	// agent's user parameter, docs/files.md). Stat and List describe a
	// symlink as envd does (the agent's resolveSymlinks): its target's
	// type and mode, and the resolved path as SymlinkTarget.
	Stat(ctx context.Context, user, path string) (api.EntryInfo, error)
	List(ctx context.Context, user, path string) ([]api.EntryInfo, error)
	MakeDir(ctx context.Context, user, path string) (api.EntryInfo, error)
	Rename(ctx context.Context, user, from, to string) (api.EntryInfo, error)
	Remove(ctx context.Context, user, path string) error
	// Watch returns once the watch is in place. With includeEntry each
	// create, write and chmod event carries its file's entry, resolved
	// as Stat's, read by the agent as it sends the event.
	Watch(ctx context.Context, user, path string, recursive, includeEntry bool) (Stream[api.FileEvent], error)
	ReadFile(ctx context.Context, user, path string) (io.ReadCloser, error)
	// WriteFile replaces path with body, its metadata (extended
	// attributes, docs/files.md) md alone.
	WriteFile(ctx context.Context, user, path string, md map[string]string, body io.Reader) (api.EntryInfo, error)
}

// Stream is a sequence of events read from the agent. Next returns io.EOF
// after the last one; Close ends it early.
type Stream[T any] interface {
	Next() (T, error)
	Close() error
}

// httpAgent calls a sandbox's agent over HTTP: base is its URL (on a
// node, the sandbox's path there), client carries the calls.
type httpAgent struct {
	base   *url.URL
	client *http.Client
}

func (a *httpAgent) url(path string, q url.Values) string {
	u := *a.base
	u.Path += path
	u.RawPath = ""
	u.RawQuery = q.Encode()
	return u.String()
}

// do sends a request and returns the response of a 2xx answer, else the
// agent's error as an errdefs.Error of the status's kind.
func (a *httpAgent) do(ctx context.Context, method, path string, q url.Values, contentType string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.url(path, q), body)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, agentError(resp)
}

// agentError is the error an agent answered with, of the kind its status
// has in errdefs' table, with the agent's message for the caller.
func agentError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body api.Error
	msg := string(bytes.TrimSpace(raw))
	if json.Unmarshal(raw, &body) == nil && body.Message != "" {
		msg = body.Message
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	for _, k := range errdefs.Kinds() {
		if k.Status == resp.StatusCode {
			return &errdefs.Error{Kind: k.Err, Msg: msg}
		}
	}
	return &errdefs.Error{Msg: msg, Cause: fmt.Errorf("agent answered %d", resp.StatusCode)}
}

// call sends a JSON request (in, when non-nil) and decodes the answer into
// out (when non-nil).
func (a *httpAgent) call(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	resp, err := a.do(ctx, method, path, q, ct, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	return decodeAnswer(resp.Body, method+" "+path, out)
}

// maxAnswerBytes bounds one JSON answer of the agent (a list, a stat, a
// process's info): code in the sandbox can replace the agent and answer
// without end, which would be held whole in the API process. The largest
// legitimate one is a directory's list: maxListEntries (100,000) entries
// at about 670 bytes each (~200 for a short path).
const maxAnswerBytes = 64 << 20

// errAnswerTooLarge marks an agent's answer over maxAnswerBytes: a 502 on
// envd's HTTP routes, UNAVAILABLE on its RPCs, as for an agent that did
// not answer.
var errAnswerTooLarge = fmt.Errorf("agent's answer over its bound: %w", errdefs.ErrBadGateway)

// decodeAnswer decodes the agent's answer to what from body into out,
// reading at most maxAnswerBytes of it.
func decodeAnswer(body io.Reader, what string, out any) error {
	lr := &io.LimitedReader{R: body, N: maxAnswerBytes + 1}
	if err := json.NewDecoder(lr).Decode(out); err != nil {
		if lr.N <= 0 {
			return &errdefs.Error{Kind: errAnswerTooLarge,
				Msg: fmt.Sprintf("the sandbox's answer to %s was too large: over %d MiB", what, maxAnswerBytes>>20)}
		}
		return fmt.Errorf("reading the agent's answer to %s: %w", what, err)
	}
	return nil
}

func pidPath(pid int, rest string) string { return "/processes/" + strconv.Itoa(pid) + rest }

func (a *httpAgent) StartProcess(ctx context.Context, req api.ProcessStartRequest) (api.ProcessInfo, error) {
	var info api.ProcessInfo
	err := a.call(ctx, http.MethodPost, "/processes", nil, req, &info)
	return info, err
}

func (a *httpAgent) ListProcesses(ctx context.Context) ([]api.ProcessInfo, error) {
	var list api.ProcessList
	err := a.call(ctx, http.MethodGet, "/processes", nil, nil, &list)
	return list.Processes, err
}

func (a *httpAgent) ProcessOutput(ctx context.Context, pid int) (Stream[api.ProcessOutputEvent], error) {
	return openStream[api.ProcessOutputEvent](ctx, a, pidPath(pid, "/output"), nil)
}

func (a *httpAgent) SendStdin(ctx context.Context, pid int, data []byte) error {
	resp, err := a.do(ctx, http.MethodPost, pidPath(pid, "/stdin"), nil, "application/octet-stream", bytes.NewReader(data))
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func (a *httpAgent) CloseStdin(ctx context.Context, pid int) error {
	return a.call(ctx, http.MethodPost, pidPath(pid, "/stdin/close"), nil, nil, nil)
}

func (a *httpAgent) Signal(ctx context.Context, pid int, signal string) error {
	return a.call(ctx, http.MethodPost, pidPath(pid, "/signal"), nil, api.ProcessSignalRequest{Signal: signal}, nil)
}

func (a *httpAgent) Resize(ctx context.Context, pid int, size api.PtySize) error {
	return a.call(ctx, http.MethodPost, pidPath(pid, "/resize"), nil, size, nil)
}

// fileQuery is a file call's query: its path, and its user unless the
// sandbox user (the agent's default).
func fileQuery(user, p string) url.Values {
	q := url.Values{"path": {p}}
	if user != "" {
		q.Set("user", user)
	}
	return q
}

func withTo(q url.Values, to string) url.Values {
	q.Set("to", to)
	return q
}

// resolving is q asking the agent to describe symlinks as envd does: by
// their target's type and mode, with the resolved absolute path.
func resolving(q url.Values) url.Values {
	q.Set("resolveSymlinks", "true")
	return q
}

func (a *httpAgent) Stat(ctx context.Context, user, path string) (api.EntryInfo, error) {
	var e api.EntryInfo
	err := a.call(ctx, http.MethodGet, "/files/stat", resolving(fileQuery(user, path)), nil, &e)
	return e, err
}

func (a *httpAgent) List(ctx context.Context, user, path string) ([]api.EntryInfo, error) {
	var l api.EntryList
	err := a.call(ctx, http.MethodGet, "/files/list", resolving(fileQuery(user, path)), nil, &l)
	return l.Entries, err
}

func (a *httpAgent) MakeDir(ctx context.Context, user, path string) (api.EntryInfo, error) {
	var e api.EntryInfo
	err := a.call(ctx, http.MethodPost, "/files/mkdir", fileQuery(user, path), nil, &e)
	return e, err
}

func (a *httpAgent) Rename(ctx context.Context, user, from, to string) (api.EntryInfo, error) {
	var e api.EntryInfo
	err := a.call(ctx, http.MethodPost, "/files/rename", withTo(fileQuery(user, from), to), nil, &e)
	return e, err
}

func (a *httpAgent) Remove(ctx context.Context, user, path string) error {
	return a.call(ctx, http.MethodDelete, "/files", fileQuery(user, path), nil, nil)
}

func (a *httpAgent) Watch(ctx context.Context, user, path string, recursive, includeEntry bool) (Stream[api.FileEvent], error) {
	q := fileQuery(user, path)
	q.Set("recursive", strconv.FormatBool(recursive))
	if includeEntry {
		q.Set("includeEntry", "true")
		resolving(q)
	}
	return openStream[api.FileEvent](ctx, a, "/files/watch", q)
}

func (a *httpAgent) ReadFile(ctx context.Context, user, path string) (io.ReadCloser, error) {
	resp, err := a.do(ctx, http.MethodGet, "/files", fileQuery(user, path), "", nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

func (a *httpAgent) WriteFile(ctx context.Context, user, path string, md map[string]string, body io.Reader) (api.EntryInfo, error) {
	var e api.EntryInfo
	q := fileQuery(user, path)
	for k, v := range md {
		q.Set("metadata["+k+"]", v)
	}
	resp, err := a.do(ctx, http.MethodPut, "/files", q, "application/octet-stream", body)
	if err != nil {
		return e, err
	}
	defer resp.Body.Close()
	err = decodeAnswer(resp.Body, "an upload", &e)
	return e, err
}

// ndjson reads one JSON value a line from an agent's stream.
type ndjson[T any] struct {
	body io.ReadCloser
	sc   *bufio.Scanner
}

func openStream[T any](ctx context.Context, a *httpAgent, path string, q url.Values) (Stream[T], error) {
	resp, err := a.do(ctx, http.MethodGet, path, q, "", nil)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	// A terminal's output event carries up to the agent's chunk as base64.
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	return &ndjson[T]{body: resp.Body, sc: sc}, nil
}

func (s *ndjson[T]) Next() (T, error) {
	var v T
	if !s.sc.Scan() {
		if err := s.sc.Err(); err != nil {
			return v, err
		}
		return v, io.EOF
	}
	if err := json.Unmarshal(s.sc.Bytes(), &v); err != nil {
		return v, fmt.Errorf("reading the agent's stream: %w", err)
	}
	return v, nil
}

func (s *ndjson[T]) Close() error { return s.body.Close() }

// errUnsupported marks what Lizard's agent cannot do for an envd call.
var errUnsupported = errors.New("not supported by Lizard")
