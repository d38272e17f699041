package envd

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// Agent is what envd needs of one sandbox's agent: its background
// processes (docs/processes.md) and files (docs/files.md). The services
// are written against it so that tests can fake it; clientAgent is the real
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

// clientAgent is Agent over the Go client (package client), whose
// requests the agent proxy's transport carries to the sandbox's agent
// (agentproxy.Transport): envd is one more client of the agent's API, as
// MCP is of the public one, and keeps no calls of its own.
type clientAgent struct {
	c  *client.Client
	id string
}

// newAgent is sandbox id's agent over tr, a transport of the sandbox's
// call (agentproxy.Transport), which takes the public API's paths.
func newAgent(id string, tr http.RoundTripper) *clientAgent {
	// The transport keeps the key from the agent; the client will not
	// send a request without one.
	c, err := client.New(client.Config{BaseURL: "http://sandbox", APIKey: "agent-call", HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		panic(err) // a constant URL
	}
	return &clientAgent{c: c, id: id}
}

// agentError is err with the agent's answer (a *client.Error) as an
// errdefs.Error of the kind its status has in errdefs' table, with the
// agent's message for the caller.
func agentError(err error) error {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return err
	}
	msg := ce.Message
	if msg == "" {
		msg = http.StatusText(ce.Status)
	}
	return errdefs.OfStatus(ce.Status, msg)
}

// maxAnswerBytes bounds one JSON answer of the agent (a list, a stat, a
// process's info), read through the transport (agentproxy.Transport's
// MaxJSON): code in the sandbox can replace the agent and answer without
// end, which would be held whole in the API process. The largest
// legitimate one is a directory's list: maxListEntries (100,000) entries
// at about 670 bytes each (~200 for a short path).
const maxAnswerBytes = 64 << 20

// asUser makes a file call act as user ("" the sandbox user).
func asUser(user string) client.FileOption { return client.AsUser(user) }

// resolving asks the agent to describe symlinks as envd does: by their
// target's type and mode, with the resolved absolute path.
var resolving client.FileOption = func(q url.Values) { q.Set("resolveSymlinks", "true") }

func deref[T any](v *T, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, agentError(err)
	}
	return *v, nil
}

func (a *clientAgent) StartProcess(ctx context.Context, req api.ProcessStartRequest) (api.ProcessInfo, error) {
	return deref(a.c.StartProcess(ctx, a.id, req))
}

func (a *clientAgent) ListProcesses(ctx context.Context) ([]api.ProcessInfo, error) {
	list, err := a.c.ListProcesses(ctx, a.id)
	return list, agentError(err)
}

// ProcessOutput follows pid's output with the client's ConnectProcess.
// That reads to the end before it returns, so it runs beside the stream;
// the process is asked for first, so that one that does not exist fails
// here, before a follower has said it started.
func (a *clientAgent) ProcessOutput(ctx context.Context, pid int) (Stream[api.ProcessOutputEvent], error) {
	if _, err := a.c.GetProcess(ctx, a.id, pid); err != nil {
		return nil, agentError(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &pushed[api.ProcessOutputEvent]{next: make(chan pushedItem[api.ProcessOutputEvent]), ctx: ctx, cancel: cancel}
	go func() {
		_, err := a.c.ConnectProcess(ctx, a.id, pid, s.push)
		if err == nil {
			err = io.EOF
		}
		s.end(agentError(err))
	}()
	return s, nil
}

func (a *clientAgent) SendStdin(ctx context.Context, pid int, data []byte) error {
	return agentError(a.c.SendStdin(ctx, a.id, pid, data))
}

func (a *clientAgent) CloseStdin(ctx context.Context, pid int) error {
	return agentError(a.c.CloseStdin(ctx, a.id, pid))
}

func (a *clientAgent) Signal(ctx context.Context, pid int, signal string) error {
	return agentError(a.c.Signal(ctx, a.id, pid, signal))
}

func (a *clientAgent) Resize(ctx context.Context, pid int, size api.PtySize) error {
	return agentError(a.c.Resize(ctx, a.id, pid, size.Cols, size.Rows))
}

func (a *clientAgent) Stat(ctx context.Context, user, path string) (api.EntryInfo, error) {
	return deref(a.c.Stat(ctx, a.id, path, asUser(user), resolving))
}

func (a *clientAgent) List(ctx context.Context, user, path string) ([]api.EntryInfo, error) {
	list, err := a.c.ListDir(ctx, a.id, path, asUser(user), resolving)
	return list, agentError(err)
}

func (a *clientAgent) MakeDir(ctx context.Context, user, path string) (api.EntryInfo, error) {
	return deref(a.c.MakeDir(ctx, a.id, path, asUser(user)))
}

func (a *clientAgent) Rename(ctx context.Context, user, from, to string) (api.EntryInfo, error) {
	return deref(a.c.Rename(ctx, a.id, from, to, asUser(user)))
}

func (a *clientAgent) Remove(ctx context.Context, user, path string) error {
	return agentError(a.c.Remove(ctx, a.id, path, asUser(user)))
}

func (a *clientAgent) Watch(ctx context.Context, user, path string, recursive, includeEntry bool) (Stream[api.FileEvent], error) {
	opts := []client.FileOption{asUser(user)}
	if includeEntry {
		opts = append(opts, func(q url.Values) { q.Set("includeEntry", "true") }, resolving)
	}
	w, err := a.c.WatchDir(ctx, a.id, path, recursive, opts...)
	if err != nil {
		return nil, agentError(err)
	}
	return dirWatch{w}, nil
}

// dirWatch is a client.Watcher as a Stream, its errors as envd's.
type dirWatch struct{ w *client.Watcher }

func (w dirWatch) Next() (api.FileEvent, error) {
	ev, err := w.w.Next()
	return ev, agentError(err)
}

func (w dirWatch) Close() error { return w.w.Close() }

func (a *clientAgent) ReadFile(ctx context.Context, user, path string) (io.ReadCloser, error) {
	body, err := a.c.ReadFile(ctx, a.id, path, asUser(user))
	return body, agentError(err)
}

func (a *clientAgent) WriteFile(ctx context.Context, user, path string, md map[string]string, body io.Reader) (api.EntryInfo, error) {
	metadata := func(q url.Values) {
		for k, v := range md {
			q.Set("metadata["+k+"]", v)
		}
	}
	return deref(a.c.WriteFile(ctx, a.id, path, body, asUser(user), metadata))
}

// pushed is a Stream of the events a callback is given (ConnectProcess's
// onEvent), and then of the error it ended with.
type pushed[T any] struct {
	next   chan pushedItem[T]
	ctx    context.Context
	cancel context.CancelFunc
	err    error // once the last item was taken
}

type pushedItem[T any] struct {
	v    T
	err  error
	last bool
}

func (s *pushed[T]) push(v T) {
	select {
	case s.next <- pushedItem[T]{v: v}:
	case <-s.ctx.Done():
	}
}

func (s *pushed[T]) end(err error) {
	select {
	case s.next <- pushedItem[T]{err: err, last: true}:
	case <-s.ctx.Done():
	}
}

func (s *pushed[T]) Next() (T, error) {
	var zero T
	if s.err != nil {
		return zero, s.err
	}
	select {
	case it := <-s.next:
		if it.last {
			s.err = it.err
			return zero, it.err
		}
		return it.v, nil
	case <-s.ctx.Done():
		return zero, io.EOF
	}
}

func (s *pushed[T]) Close() error {
	s.cancel()
	return nil
}

// errUnsupported marks what Lizard's agent cannot do for an envd call.
var errUnsupported = errors.New("not supported by Lizard")
