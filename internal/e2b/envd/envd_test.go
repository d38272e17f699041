package envd

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/e2b/envd/proto/filesystem"
	"github.com/lizard-build/lizard/internal/e2b/envd/proto/filesystem/filesystemconnect"
	"github.com/lizard-build/lizard/internal/e2b/envd/proto/process"
	"github.com/lizard-build/lizard/internal/e2b/envd/proto/process/processconnect"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// fakeAgent is an Agent whose methods are its function fields; a method
// whose field is nil fails the test.
type fakeAgent struct {
	t             *testing.T
	startProcess  func(api.ProcessStartRequest) (api.ProcessInfo, error)
	listProcesses func() ([]api.ProcessInfo, error)
	processOutput func(pid int) (Stream[api.ProcessOutputEvent], error)
	sendStdin     func(pid int, data []byte) error
	closeStdin    func(pid int) error
	signal        func(pid int, sig string) error
	resize        func(pid int, size api.PtySize) error
	stat          func(path string) (api.EntryInfo, error)
	list          func(path string) ([]api.EntryInfo, error)
	makeDir       func(path string) (api.EntryInfo, error)
	rename        func(from, to string) (api.EntryInfo, error)
	remove        func(path string) error
	watch         func(ctx context.Context, path string, recursive, includeEntry bool) (Stream[api.FileEvent], error)
	readFile      func(path string) (io.ReadCloser, error)
	writeFile     func(path string, body []byte) (api.EntryInfo, error)
	metadata      map[string]map[string]string // each WriteFile's, when not nil

	mu    sync.Mutex
	users []string // the user each file call named, in order
}

// as records a file call's user.
func (a *fakeAgent) as(user string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.users = append(a.users, user)
}

func must[F any](t *testing.T, f F, name string) F {
	t.Helper()
	if reflect.ValueOf(f).IsNil() {
		t.Fatalf("unexpected agent call %s", name)
	}
	return f
}

func (a *fakeAgent) StartProcess(_ context.Context, r api.ProcessStartRequest) (api.ProcessInfo, error) {
	return must(a.t, a.startProcess, "StartProcess")(r)
}
func (a *fakeAgent) ListProcesses(context.Context) ([]api.ProcessInfo, error) {
	return must(a.t, a.listProcesses, "ListProcesses")()
}
func (a *fakeAgent) ProcessOutput(_ context.Context, pid int) (Stream[api.ProcessOutputEvent], error) {
	return must(a.t, a.processOutput, "ProcessOutput")(pid)
}
func (a *fakeAgent) SendStdin(_ context.Context, pid int, d []byte) error {
	return must(a.t, a.sendStdin, "SendStdin")(pid, d)
}
func (a *fakeAgent) CloseStdin(_ context.Context, pid int) error {
	return must(a.t, a.closeStdin, "CloseStdin")(pid)
}
func (a *fakeAgent) Signal(_ context.Context, pid int, s string) error {
	return must(a.t, a.signal, "Signal")(pid, s)
}
func (a *fakeAgent) Resize(_ context.Context, pid int, s api.PtySize) error {
	return must(a.t, a.resize, "Resize")(pid, s)
}
func (a *fakeAgent) Stat(_ context.Context, u, p string) (api.EntryInfo, error) {
	a.as(u)
	return must(a.t, a.stat, "Stat")(p)
}
func (a *fakeAgent) List(_ context.Context, u, p string) ([]api.EntryInfo, error) {
	a.as(u)
	return must(a.t, a.list, "List")(p)
}
func (a *fakeAgent) MakeDir(_ context.Context, u, p string) (api.EntryInfo, error) {
	a.as(u)
	return must(a.t, a.makeDir, "MakeDir")(p)
}
func (a *fakeAgent) Rename(_ context.Context, u, f, to string) (api.EntryInfo, error) {
	a.as(u)
	return must(a.t, a.rename, "Rename")(f, to)
}
func (a *fakeAgent) Remove(_ context.Context, u, p string) error {
	a.as(u)
	return must(a.t, a.remove, "Remove")(p)
}
func (a *fakeAgent) Watch(ctx context.Context, u, p string, r, entries bool) (Stream[api.FileEvent], error) {
	a.as(u)
	return must(a.t, a.watch, "Watch")(ctx, p, r, entries)
}
func (a *fakeAgent) ReadFile(_ context.Context, u, p string) (io.ReadCloser, error) {
	a.as(u)
	return must(a.t, a.readFile, "ReadFile")(p)
}
func (a *fakeAgent) WriteFile(_ context.Context, u, p string, md map[string]string, body io.Reader) (api.EntryInfo, error) {
	a.as(u)
	b, err := io.ReadAll(body)
	if err != nil {
		return api.EntryInfo{}, err
	}
	if a.metadata != nil {
		a.metadata[p] = md
	}
	e, err := must(a.t, a.writeFile, "WriteFile")(p, b)
	if err == nil && e.Metadata == nil {
		e.Metadata = md // as the agent answers what it kept
	}
	return e, err
}

// sliceStream replays events, then blocks until closed or its context
// ends (end: nil) or returns end.
type sliceStream[T any] struct {
	events []T
	end    error
	ctx    context.Context
	closed chan struct{}
	once   sync.Once
}

func newStream[T any](ctx context.Context, end error, events ...T) *sliceStream[T] {
	return &sliceStream[T]{events: events, end: end, ctx: ctx, closed: make(chan struct{})}
}

func (s *sliceStream[T]) Next() (T, error) {
	var zero T
	if len(s.events) > 0 {
		ev := s.events[0]
		s.events = s.events[1:]
		return ev, nil
	}
	if s.end != nil {
		return zero, s.end
	}
	select {
	case <-s.closed:
		return zero, io.EOF
	case <-s.ctx.Done():
		return zero, s.ctx.Err()
	}
}

func (s *sliceStream[T]) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

// env is envd served over a fake agent; stop ends the session's context
// as a sandbox that stops would (cause: ErrGone).
type env struct {
	url     string
	handler *handler
	agent   *fakeAgent
	stop    context.CancelCauseFunc
	openErr error
	ended   func() bool // the session's; nil: none
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{agent: &fakeAgent{t: t}}
	sandboxCtx, stop := context.WithCancelCause(context.Background())
	e.stop = stop
	t.Cleanup(func() { stop(nil) })
	open := func(ctx context.Context) (*session, error) {
		if e.openErr != nil {
			return nil, sandboxError("sb1", e.openErr)
		}
		// As agentproxy.Call's: it ends with the caller's or the sandbox's.
		ctx, cancel := context.WithCancelCause(ctx)
		stopWatch := context.AfterFunc(sandboxCtx, func() { cancel(context.Cause(sandboxCtx)) })
		return &session{sandbox: "sb1", project: "p1", agent: e.agent, ctx: ctx, release: func() { stopWatch(); cancel(nil) }, ended: e.ended}, nil
	}
	h := newHandler(open, slog.New(slog.DiscardHandler), 1<<20)
	e.handler = h
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

func (e *env) proc() processconnect.ProcessClient {
	return processconnect.NewProcessClient(http.DefaultClient, e.url)
}

func (e *env) fs() filesystemconnect.FilesystemClient {
	return filesystemconnect.NewFilesystemClient(http.DefaultClient, e.url)
}

func codeOf(err error) connect.Code { return connect.CodeOf(err) }

func intp(n int) *int { return &n }

func pidSel(pid uint32) *process.ProcessSelector {
	return &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
}

func TestStartMapsRequestAndEvents(t *testing.T) {
	e := newEnv(t)
	var got api.ProcessStartRequest
	e.agent.startProcess = func(r api.ProcessStartRequest) (api.ProcessInfo, error) {
		got = r
		return api.ProcessInfo{Pid: 42}, nil
	}
	e.agent.processOutput = func(pid int) (Stream[api.ProcessOutputEvent], error) {
		if pid != 42 {
			t.Errorf("output of pid %d, want 42", pid)
		}
		return newStream(context.Background(), nil,
			api.ProcessOutputEvent{Type: api.EventStdout, Text: "hi\n"},
			api.ProcessOutputEvent{Type: api.OutputDropped, Dropped: 5},
			api.ProcessOutputEvent{Type: api.EventStderr, Text: "oops"},
			api.ProcessOutputEvent{Type: api.EventEnd, ExitCode: intp(3), Error: "ran too long"},
		), nil
	}
	cwd, tag := "/tmp", "web"
	req := connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "echo hi"}, Envs: map[string]string{"A": "1"}, Cwd: &cwd},
		Tag:     &tag,
	})
	req.Header().Set("Authorization", "Basic cm9vdDo=") // root:
	req.Header().Set("Connect-Timeout-Ms", "5000")
	stream, err := e.proc().Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var events []*process.ProcessEvent
	for stream.Receive() {
		events = append(events, stream.Msg().GetEvent())
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	// The deadline kills the process alone, as envd's does (the Desktop SDK's open()).
	want := api.ProcessStartRequest{Args: []string{"/bin/bash", "-l", "-c", "echo hi"}, Cwd: "/tmp", Envs: map[string]string{"A": "1"}, Tag: "web", User: "root", Stdin: true, TimeoutKills: "process"}
	if got.TimeoutMs == nil || *got.TimeoutMs < 4000 || *got.TimeoutMs > 5000 {
		t.Errorf("timeoutMs = %v, want about 5000 (the Connect-Timeout-Ms)", got.TimeoutMs)
	}
	got.TimeoutMs = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("start request = %+v, want %+v", got, want)
	}
	if len(events) != 4 {
		t.Fatalf("got %d events, want start, stdout, stderr, end: %v", len(events), events)
	}
	if events[0].GetStart().GetPid() != 42 {
		t.Errorf("start = %v, want pid 42", events[0])
	}
	if string(events[1].GetData().GetStdout()) != "hi\n" || string(events[2].GetData().GetStderr()) != "oops" {
		t.Errorf("data = %v, %v", events[1], events[2])
	}
	end := events[3].GetEnd()
	if end.GetExitCode() != 3 || !end.GetExited() || end.GetError() != "ran too long" || end.GetStatus() != "exit status 3" {
		t.Errorf("end = %v", end)
	}
}

func TestStartPtyAndStdinFalse(t *testing.T) {
	e := newEnv(t)
	var got []api.ProcessStartRequest
	e.agent.startProcess = func(r api.ProcessStartRequest) (api.ProcessInfo, error) {
		got = append(got, r)
		return api.ProcessInfo{Pid: 7}, nil
	}
	e.agent.processOutput = func(int) (Stream[api.ProcessOutputEvent], error) {
		return newStream(context.Background(), nil,
			api.ProcessOutputEvent{Type: api.OutputPty, Data: []byte("\x1b[1m$ ")},
			api.ProcessOutputEvent{Type: api.EventEnd, ExitCode: intp(0)}), nil
	}
	no := false
	for _, r := range []*process.StartRequest{
		{Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-i", "-l"}}, Pty: &process.PTY{Size: &process.PTY_Size{Cols: 80, Rows: 24}}},
		{Process: &process.ProcessConfig{Cmd: "cat"}, Stdin: &no},
	} {
		stream, err := e.proc().Start(context.Background(), connect.NewRequest(r))
		if err != nil {
			t.Fatal(err)
		}
		var pty []byte
		for stream.Receive() {
			pty = append(pty, stream.Msg().GetEvent().GetData().GetPty()...)
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if r.Pty != nil && string(pty) != "\x1b[1m$ " {
			t.Errorf("pty data = %q", pty)
		}
	}
	if p := got[0].Pty; p == nil || *p != (api.PtySize{Cols: 80, Rows: 24}) || got[0].User != "" {
		t.Errorf("pty start = %+v, want an 80x24 terminal as the sandbox user", got[0])
	}
	if got[1].Stdin || got[1].Pty != nil || got[1].TimeoutMs != nil {
		t.Errorf("stdin=false start = %+v, want stdin closed, no terminal, no timeout", got[1])
	}
}

func TestStartErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		openErr error
		agent   error
		cmd     string
		code    connect.Code
		msg     string
	}{
		{name: "no cmd", cmd: "", code: connect.CodeInvalidArgument, msg: "cmd"},
		{name: "agent 400", cmd: "nope", agent: errdefs.Invalidf("args: program nope not found"), code: connect.CodeInvalidArgument, msg: "nope not found"},
		{name: "sandbox gone", cmd: "ls", openErr: &errdefs.Error{Kind: errdefs.ErrGone, Msg: "sandbox sb1 was killed"}, code: connect.CodeUnavailable, msg: "was not found"},
		{name: "sandbox unknown", cmd: "ls", openErr: &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: "no sandbox sb1"}, code: connect.CodeUnavailable, msg: "was not found"},
		{name: "unauthenticated", cmd: "ls", openErr: &errdefs.Error{Kind: errdefs.ErrUnauthenticated, Msg: "bad token"}, code: connect.CodeUnauthenticated, msg: "bad token"},
		{name: "internal", cmd: "ls", agent: errors.New("boom"), code: connect.CodeInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.openErr = tc.openErr
			e.agent.startProcess = func(api.ProcessStartRequest) (api.ProcessInfo, error) { return api.ProcessInfo{}, tc.agent }
			stream, err := e.proc().Start(context.Background(), connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: tc.cmd}}))
			if err == nil {
				for stream.Receive() {
					t.Errorf("unexpected event %v", stream.Msg())
				}
				err = stream.Err()
			}
			if codeOf(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v (%v), want %v containing %q", err, codeOf(err), tc.code, tc.msg)
			}
		})
	}
}

// TestStreamEndsWhenSandboxStops: a sandbox that stops under a process's
// output stream or a watch ends it at once. A process followed when its
// sandbox ends has its connection dropped (no Connect status: E2B's proxy
// drops it, and the SDKs then ask /health and raise "killed or reached its
// end of life"); a watch ends with UNAVAILABLE and E2B's "was not found",
// which the SDKs raise as SandboxNotRunningException.
func TestStreamEndsWhenSandboxStops(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cause   error
		dropped bool // the process's stream: connection dropped
		code    connect.Code
		msg     string
	}{
		{"killed", &errdefs.Error{Kind: errdefs.ErrGone, Msg: "sandbox sb1 was killed"}, true, connect.CodeUnavailable, "sandbox sb1 was not found: sandbox sb1 was killed"},
		// A pause ends the streams that follow (agentproxy.Following): the SDKs'
		// TimeoutException, naming the pause.
		{"paused", &errdefs.Error{Kind: errdefs.ErrConflict, Msg: "sandbox sb1 was paused during the call; retry it"}, false, connect.CodeCanceled, "was paused"},
	} {
		t.Run(tc.name, func(t *testing.T) { testStreamEnds(t, tc.cause, tc.dropped, tc.code, tc.msg) })
	}
}

func testStreamEnds(t *testing.T, cause error, dropped bool, code connect.Code, msg string) {
	e := newEnv(t)
	e.agent.listProcesses = func() ([]api.ProcessInfo, error) { return nil, nil }
	e.agent.processOutput = func(int) (Stream[api.ProcessOutputEvent], error) {
		return newStream[api.ProcessOutputEvent](context.Background(), nil), nil
	}
	e.agent.stat = func(p string) (api.EntryInfo, error) { return api.EntryInfo{Path: p, Type: "dir"}, nil }
	e.agent.watch = func(ctx context.Context, p string, r, _ bool) (Stream[api.FileEvent], error) {
		return newStream[api.FileEvent](ctx, nil), nil
	}
	ps, err := e.proc().Connect(context.Background(), connect.NewRequest(&process.ConnectRequest{Process: pidSel(9)}))
	if err != nil {
		t.Fatal(err)
	}
	if !ps.Receive() || ps.Msg().GetEvent().GetStart().GetPid() != 9 {
		t.Fatalf("first event = %v, %v; want start of pid 9", ps.Msg(), ps.Err())
	}
	ws, err := e.fs().WatchDir(context.Background(), connect.NewRequest(&filesystem.WatchDirRequest{Path: "/tmp"}))
	if err != nil {
		t.Fatal(err)
	}
	if !ws.Receive() || ws.Msg().GetStart() == nil {
		t.Fatalf("first watch event = %v, %v; want start", ws.Msg(), ws.Err())
	}
	began := time.Now()
	e.stop(cause)
	for ps.Receive() {
	}
	for ws.Receive() {
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("streams ended %v after the sandbox, want within 2s", d)
	}
	errs := []error{ws.Err()}
	if dropped {
		// Read as a transport failure: the body cut short, no end message.
		if err := ps.Err(); !droppedConn(err) || strings.Contains(err.Error(), "was not found") {
			t.Errorf("process stream err = %v (code %v), want its connection dropped (reset), no status", err, codeOf(err))
		}
	} else {
		errs = append(errs, ps.Err())
	}
	for _, err := range errs {
		if codeOf(err) != code || !strings.Contains(err.Error(), msg) {
			t.Errorf("stream err = %v, want %v with %q", err, code, msg)
		}
	}
}

// droppedConn reports whether a stream ended with its connection reset
// rather than with a status: a failed read, as the SDKs 2.45 take a
// dropped connection (a body merely cut short is a protocol error to
// them, read by its code).
func droppedConn(err error) bool {
	return errors.Is(err, syscall.ECONNRESET)
}

// TestStreamDroppedWhenSandboxEndedElsewhere: in a cluster a kill through
// another lizard api cuts the agent's output without ending this call;
// the record saying the sandbox ended drops the stream's connection all
// the same, and an output that fails while the sandbox lives is still an
// error status.
func TestStreamDroppedWhenSandboxEndedElsewhere(t *testing.T) {
	for _, ended := range []bool{true, false} {
		e := newEnv(t)
		e.ended = func() bool { return ended }
		e.agent.processOutput = func(int) (Stream[api.ProcessOutputEvent], error) {
			return newStream[api.ProcessOutputEvent](context.Background(), errors.New("connection reset by peer")), nil
		}
		ps, err := e.proc().Connect(context.Background(), connect.NewRequest(&process.ConnectRequest{Process: pidSel(9)}))
		if err != nil {
			t.Fatal(err)
		}
		for ps.Receive() {
		}
		err = ps.Err()
		if dropped := droppedConn(err); dropped != ended {
			t.Errorf("sandbox ended %v: stream err %v (code %v); want dropped %v", ended, err, codeOf(err), ended)
		}
		if !ended && codeOf(err) != connect.CodeInternal && codeOf(err) != connect.CodeUnavailable {
			t.Errorf("output failed in a live sandbox: %v; want an error status", err)
		}
	}
}

func TestKeepalive(t *testing.T) {
	e := newEnv(t)
	e.agent.processOutput = func(int) (Stream[api.ProcessOutputEvent], error) {
		return newStream[api.ProcessOutputEvent](context.Background(), nil), nil
	}
	req := connect.NewRequest(&process.ConnectRequest{Process: pidSel(1)})
	req.Header().Set("Keepalive-Ping-Interval", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ps, err := e.proc().Connect(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	ps.Receive() // start
	if !ps.Receive() || ps.Msg().GetEvent().GetKeepalive() == nil {
		t.Errorf("second event = %v, %v; want a keepalive within the interval", ps.Msg(), ps.Err())
	}
}

func TestConnectByTag(t *testing.T) {
	e := newEnv(t)
	e.agent.listProcesses = func() ([]api.ProcessInfo, error) {
		return []api.ProcessInfo{{Pid: 5, Tag: "web", Running: false}, {Pid: 6, Tag: "web", Running: true}}, nil
	}
	e.agent.processOutput = func(pid int) (Stream[api.ProcessOutputEvent], error) {
		if pid != 6 {
			t.Errorf("pid %d, want the running one, 6", pid)
		}
		return newStream(context.Background(), nil, api.ProcessOutputEvent{Type: api.EventEnd, ExitCode: intp(0)}), nil
	}
	ps, err := e.proc().Connect(context.Background(), connect.NewRequest(&process.ConnectRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: "web"}}}))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ps.Receive() {
		n++
	}
	if ps.Err() != nil || n != 2 {
		t.Errorf("got %d events, err %v; want start and end", n, ps.Err())
	}
	ps, _ = e.proc().Connect(context.Background(), connect.NewRequest(&process.ConnectRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: "db"}}}))
	for ps.Receive() {
	}
	if codeOf(ps.Err()) != connect.CodeNotFound {
		t.Errorf("unknown tag: %v, want not_found", ps.Err())
	}
}

func TestProcessUnaryCalls(t *testing.T) {
	e := newEnv(t)
	var calls []string
	rec := func(s string) { calls = append(calls, s) }
	notFound := &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: "process 99 not found"}
	fail := func(pid int) error {
		if pid == 99 {
			return notFound
		}
		return nil
	}
	e.agent.listProcesses = func() ([]api.ProcessInfo, error) {
		return []api.ProcessInfo{
			{Pid: 3, Tag: "t", Args: []string{"/bin/bash", "-l", "-c", "sleep 9"}, Cwd: "/home/user", Running: true},
			{Pid: 4, Args: []string{"true"}, Running: false},
		}, nil
	}
	e.agent.sendStdin = func(pid int, d []byte) error { rec("stdin " + string(d)); return fail(pid) }
	e.agent.closeStdin = func(pid int) error { rec("close"); return fail(pid) }
	e.agent.signal = func(pid int, s string) error { rec("signal " + s); return fail(pid) }
	e.agent.resize = func(pid int, s api.PtySize) error {
		rec("resize " + string(rune('0'+s.Cols/10)) + string(rune('0'+s.Rows/10)))
		return fail(pid)
	}
	ctx := context.Background()
	c := e.proc()

	list, err := c.List(ctx, connect.NewRequest(&process.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if ps := list.Msg.GetProcesses(); len(ps) != 1 || ps[0].GetPid() != 3 || ps[0].GetTag() != "t" ||
		ps[0].GetConfig().GetCmd() != "/bin/bash" || !reflect.DeepEqual(ps[0].GetConfig().GetArgs(), []string{"-l", "-c", "sleep 9"}) || ps[0].GetConfig().GetCwd() != "/home/user" {
		t.Errorf("list = %v, want the running process 3 only", ps)
	}
	if _, err := c.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: pidSel(3), Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("a")}}})); err != nil {
		t.Error(err)
	}
	if _, err := c.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: pidSel(3), Input: &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: []byte("b")}}})); err != nil {
		t.Error(err)
	}
	if _, err := c.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: pidSel(3)})); err != nil {
		t.Error(err)
	}
	for _, sig := range []process.Signal{process.Signal_SIGNAL_SIGTERM, process.Signal_SIGNAL_SIGKILL} {
		if _, err := c.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: pidSel(3), Signal: sig})); err != nil {
			t.Error(err)
		}
	}
	if _, err := c.Update(ctx, connect.NewRequest(&process.UpdateRequest{Process: pidSel(3), Pty: &process.PTY{Size: &process.PTY_Size{Cols: 120, Rows: 40}}})); err != nil {
		t.Error(err)
	}
	in := c.StreamInput(ctx)
	in.Send(&process.StreamInputRequest{Event: &process.StreamInputRequest_Start{Start: &process.StreamInputRequest_StartEvent{Process: pidSel(3)}}})
	in.Send(&process.StreamInputRequest{Event: &process.StreamInputRequest_Keepalive{Keepalive: &process.StreamInputRequest_KeepAlive{}}})
	in.Send(&process.StreamInputRequest{Event: &process.StreamInputRequest_Data{Data: &process.StreamInputRequest_DataEvent{Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("c")}}}}})
	if _, err := in.CloseAndReceive(); err != nil {
		t.Error(err)
	}
	want := []string{"stdin a", "stdin b", "close", "signal TERM", "signal KILL", "resize <4", "stdin c"}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("agent calls = %q, want %q", calls, want)
	}

	// Errors: an unknown pid is not_found (the SDKs' kill returns false);
	// an unspecified signal and a missing selector are invalid.
	for name, call := range map[string]func() error{
		"signal 99": func() error {
			_, err := c.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: pidSel(99), Signal: process.Signal_SIGNAL_SIGKILL}))
			return err
		},
		"stdin 99": func() error {
			_, err := c.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: pidSel(99), Input: &process.ProcessInput{}}))
			return err
		},
		"close 99": func() error {
			_, err := c.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: pidSel(99)}))
			return err
		},
		"resize 99": func() error {
			_, err := c.Update(ctx, connect.NewRequest(&process.UpdateRequest{Process: pidSel(99), Pty: &process.PTY{Size: &process.PTY_Size{Cols: 1, Rows: 1}}}))
			return err
		},
	} {
		if err := call(); codeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "process 99 not found") {
			t.Errorf("%s: %v, want not_found", name, err)
		}
	}
	if _, err := c.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: pidSel(3)})); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("unspecified signal: %v, want invalid_argument", err)
	}
	if _, err := c.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{})); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("no selector: %v, want invalid_argument", err)
	}
	e.agent.closeStdin = func(int) error { return &errdefs.Error{Kind: errdefs.ErrConflict, Msg: "stdin is closed"} }
	if _, err := c.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: pidSel(3)})); codeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("conflict: %v, want failed_precondition", err)
	}
}

var modTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func fileEntry(p, typ string) api.EntryInfo {
	return api.EntryInfo{Name: p[strings.LastIndex(p, "/")+1:], Path: p, Type: typ, Size: 5, Mode: 0o644, ModTime: modTime, Permissions: "-rw-r--r--", Owner: "user", Group: "user"}
}

// linkTo is e as the agent describes a symlink to target, resolved.
func linkTo(e api.EntryInfo, target string) api.EntryInfo {
	e.SymlinkTarget = target
	return e
}

func TestFilesystemCalls(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.fs()
	notFound := &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: "/nope does not exist"}
	e.agent.stat = func(p string) (api.EntryInfo, error) {
		switch p {
		case "/nope", "/new":
			return api.EntryInfo{}, notFound
		case "/link":
			// The agent describes a link resolved, as envd does.
			e := fileEntry(p, "file")
			e.SymlinkTarget = "/etc/hosts"
			return e, nil
		}
		return fileEntry(p, "dir"), nil
	}
	e.agent.makeDir = func(p string) (api.EntryInfo, error) { return fileEntry(p, "dir"), nil }
	e.agent.rename = func(f, to string) (api.EntryInfo, error) {
		if f == "/nope" {
			return api.EntryInfo{}, notFound
		}
		return fileEntry(to, "file"), nil
	}
	e.agent.remove = func(p string) error {
		if p == "/nope" {
			return notFound
		}
		return nil
	}
	tree := map[string][]api.EntryInfo{
		"/d":     {fileEntry("/d/a", "dir"), fileEntry("/d/f", "file"), linkTo(fileEntry("/d/l", "dir"), "/d/a")},
		"/d/a":   {fileEntry("/d/a/b", "dir")},
		"/d/a/b": {fileEntry("/d/a/b/c", "file")},
	}
	e.agent.list = func(p string) ([]api.EntryInfo, error) {
		if l, ok := tree[p]; ok {
			return l, nil
		}
		return nil, errdefs.Invalidf("path: %s is not a directory", p)
	}

	st, err := c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "/link"}))
	if err != nil {
		t.Fatal(err)
	}
	if en := st.Msg.GetEntry(); en.GetName() != "link" || en.GetType() != filesystem.FileType_FILE_TYPE_FILE || en.GetIsSymlink() ||
		en.GetSymlinkTarget() != "/etc/hosts" || en.GetMode() != 0o644 || en.GetPermissions() != "-rw-r--r--" || en.GetOwner() != "user" ||
		en.GetSize() != 5 || !en.GetModifiedTime().AsTime().Equal(modTime) {
		t.Errorf("stat = %v", en)
	}
	if _, err := c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "/nope"})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("stat of a missing file: %v, want not_found", err)
	}
	md, err := c.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: "/new"}))
	if err != nil || md.Msg.GetEntry().GetType() != filesystem.FileType_FILE_TYPE_DIRECTORY {
		t.Errorf("make_dir = %v, %v", md, err)
	}
	if _, err := c.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: "/d"})); codeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("make_dir of an existing dir: %v, want already_exists (make_dir → False)", err)
	}
	mv, err := c.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: "/a", Destination: "/b"}))
	if err != nil || mv.Msg.GetEntry().GetPath() != "/b" {
		t.Errorf("move = %v, %v", mv, err)
	}
	if _, err := c.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: "/nope", Destination: "/b"})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("move of a missing file: %v, want not_found", err)
	}
	if _, err := c.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: "/a"})); err != nil {
		t.Error(err)
	}
	// envd's remove is RemoveAll: a missing path is no error (E2B's
	// test_remove_non_existing_file, and recursive watch tests that start
	// by removing a directory).
	if _, err := c.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: "/nope"})); err != nil {
		t.Errorf("remove of a missing file: %v, want success as envd's RemoveAll", err)
	}
	for _, tc := range []struct {
		depth uint32
		want  []string
	}{
		{0, []string{"/d/a", "/d/f", "/d/l"}},
		{1, []string{"/d/a", "/d/f", "/d/l"}},
		{2, []string{"/d/a", "/d/a/b", "/d/f", "/d/l"}},
		{9, []string{"/d/a", "/d/a/b", "/d/a/b/c", "/d/f", "/d/l"}},
	} {
		l, err := c.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: "/d", Depth: tc.depth}))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, en := range l.Msg.GetEntries() {
			got = append(got, en.GetPath())
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("list depth %d = %v, want %v", tc.depth, got, tc.want)
		}
	}
	if _, err := c.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: "/d/f"})); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("list of a file: %v, want invalid_argument", err)
	}
}

func TestWatchDirAndWatchers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.fs()
	e.agent.stat = func(p string) (api.EntryInfo, error) {
		if p == "/nope" {
			return api.EntryInfo{}, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: "/nope does not exist"}
		}
		return fileEntry(p, "file"), nil
	}
	var recursive bool
	e.agent.watch = func(ctx context.Context, p string, r, entries bool) (Stream[api.FileEvent], error) {
		recursive = r
		// The agent reads the entry beside the event when asked.
		var a *api.EntryInfo
		if entries {
			f := fileEntry(p+"/a.txt", "file")
			a = &f
		}
		return newStream(ctx, nil,
			api.FileEvent{Type: api.FileCreate, Name: "a.txt", Entry: a},
			api.FileEvent{Type: api.FileWrite, Name: "a.txt", Entry: a},
			api.FileEvent{Type: api.FileRename, Name: "a.txt"},
			api.FileEvent{Type: api.FileRemove, Name: "b.txt"},
			api.FileEvent{Type: api.FileChmod, Name: "c"},
		), nil
	}
	wantTypes := []filesystem.EventType{filesystem.EventType_EVENT_TYPE_CREATE, filesystem.EventType_EVENT_TYPE_WRITE,
		filesystem.EventType_EVENT_TYPE_RENAME, filesystem.EventType_EVENT_TYPE_REMOVE, filesystem.EventType_EVENT_TYPE_CHMOD}

	wctx, cancel := context.WithCancel(ctx)
	ws, err := c.WatchDir(wctx, connect.NewRequest(&filesystem.WatchDirRequest{Path: "/d", Recursive: true, IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	var got []filesystem.EventType
	for ws.Receive() {
		if fe := ws.Msg().GetFilesystem(); fe != nil {
			got = append(got, fe.GetType())
			if fe.GetType() == filesystem.EventType_EVENT_TYPE_CREATE && fe.GetEntry().GetPath() != "/d/a.txt" {
				t.Errorf("create's entry = %v, want /d/a.txt", fe.GetEntry())
			}
			if fe.GetType() == filesystem.EventType_EVENT_TYPE_REMOVE && fe.Entry != nil {
				t.Errorf("remove carries an entry: %v", fe.GetEntry())
			}
		}
		if len(got) == len(wantTypes) {
			cancel()
		}
	}
	cancel()
	if !reflect.DeepEqual(got, wantTypes) || !recursive {
		t.Errorf("watch events = %v (recursive %v), want %v", got, recursive, wantTypes)
	}
	if ws, err := c.WatchDir(ctx, connect.NewRequest(&filesystem.WatchDirRequest{Path: "/nope"})); err == nil {
		for ws.Receive() {
		}
		if codeOf(ws.Err()) != connect.CodeNotFound {
			t.Errorf("watch of a missing dir: %v, want not_found", ws.Err())
		}
	}

	// Polled: the events wait for GetWatcherEvents; a removed watcher is
	// not found.
	cw, err := c.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "/d"}))
	if err != nil {
		t.Fatal(err)
	}
	id := cw.Msg.GetWatcherId()
	var polled []filesystem.EventType
	for deadline := time.Now().Add(5 * time.Second); len(polled) < len(wantTypes) && time.Now().Before(deadline); {
		r, err := c.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range r.Msg.GetEvents() {
			polled = append(polled, ev.GetType())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !reflect.DeepEqual(polled, wantTypes) {
		t.Errorf("polled events = %v, want %v", polled, wantTypes)
	}
	if _, err := c.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Error(err)
	}
	if _, err := c.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("events of a removed watcher: %v, want not_found", err)
	}

	// A watcher whose sandbox stopped reports it on the next poll.
	cw, err = c.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "/d"}))
	if err != nil {
		t.Fatal(err)
	}
	e.stop(&errdefs.Error{Kind: errdefs.ErrGone, Msg: "sandbox sb1 expired"})
	time.Sleep(100 * time.Millisecond)
	e.openErr = nil
	var last error
	for range 3 {
		_, last = c.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: cw.Msg.GetWatcherId()}))
		if last != nil {
			break
		}
	}
	if codeOf(last) != connect.CodeUnavailable || !strings.Contains(last.Error(), "was not found") {
		t.Errorf("poll after the sandbox stopped: %v, want unavailable, not found", last)
	}
}

// TestWatcherBounds: a sandbox holds at most maxSandboxWatchers polled
// watchers, and one that ended is forgotten after endedWatcherTTL even if
// nobody polls it.
func TestWatcherBounds(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.fs()
	e.agent.stat = func(p string) (api.EntryInfo, error) { return fileEntry(p, "dir"), nil }
	e.agent.watch = func(ctx context.Context, p string, r, _ bool) (Stream[api.FileEvent], error) {
		return newStream[api.FileEvent](ctx, nil), nil
	}
	for i := range maxSandboxWatchers {
		if _, err := c.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "/d"})); err != nil {
			t.Fatalf("watcher %d: %v", i, err)
		}
	}
	_, err := c.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "/d"}))
	if codeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "RemoveWatcher") {
		t.Errorf("watcher %d: %v, want resource_exhausted naming RemoveWatcher", maxSandboxWatchers+1, err)
	}
	old := endedWatcherTTL
	endedWatcherTTL = 50 * time.Millisecond
	t.Cleanup(func() { endedWatcherTTL = old })
	e.stop(&errdefs.Error{Kind: errdefs.ErrGone, Msg: "sandbox sb1 was killed"})
	deadline := time.Now().Add(5 * time.Second)
	for {
		h := e.handler.watchers
		h.mu.Lock()
		n := len(h.byID)
		h.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d ended watchers still held", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestFilesHTTP(t *testing.T) {
	e := newEnv(t)
	written := map[string]string{}
	e.agent.writeFile = func(p string, b []byte) (api.EntryInfo, error) {
		if strings.HasPrefix(p, "/full") {
			return api.EntryInfo{}, &errdefs.Error{Kind: errdefs.ErrTooLarge, Msg: "the sandbox's disk is full"}
		}
		written[p] = string(b)
		return fileEntry(p, "file"), nil
	}
	e.agent.stat = func(p string) (api.EntryInfo, error) {
		if p == "/nope" {
			return api.EntryInfo{}, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: "/nope does not exist"}
		}
		f := fileEntry(p, "file")
		if strings.HasPrefix(p, "/proc/") {
			f.Size = 0 // as /proc and /sys files stat
		}
		return f, nil
	}
	e.agent.readFile = func(p string) (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("hello")), nil }

	post := func(q, ct string, body io.Reader) (int, string) {
		resp, err := http.Post(e.url+"/files"+q, ct, body)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Octet stream to ?path=.
	if st, body := post("?path=/x/one.txt&username=user", "application/octet-stream", strings.NewReader("1")); st != 200 ||
		!strings.Contains(body, `"path":"/x/one.txt"`) || !strings.Contains(body, `"type":"file"`) {
		t.Errorf("octet upload: %d %s", st, body)
	}
	// Multipart, paths in the filenames (the SDKs' write_files).
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range []struct{ path, data string }{{"/m/a.txt", "A"}, {"rel/b.txt", "B"}} {
		w, _ := mw.CreateFormFile("file", f.path)
		w.Write([]byte(f.data))
	}
	mw.Close()
	st, body := post("", mw.FormDataContentType(), &buf)
	var infos []writeInfo
	json.Unmarshal([]byte(body), &infos)
	if st != 200 || len(infos) != 2 || infos[1].Path != "rel/b.txt" || infos[1].Name != "b.txt" {
		t.Errorf("multipart upload: %d %s", st, body)
	}
	// gzip (the SDKs' gzip=True): written as it decompresses.
	var zbuf bytes.Buffer
	zw := gzip.NewWriter(&zbuf)
	zw.Write([]byte("zipped"))
	zw.Close()
	zreq, _ := http.NewRequest("POST", e.url+"/files?path=/z.txt", &zbuf)
	zreq.Header.Set("Content-Type", "application/octet-stream")
	zreq.Header.Set("Content-Encoding", "gzip")
	if resp, err := http.DefaultClient.Do(zreq); err != nil || resp.StatusCode != 200 {
		t.Fatalf("gzip upload: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	want := map[string]string{"/x/one.txt": "1", "/m/a.txt": "A", "rel/b.txt": "B", "/z.txt": "zipped"}
	if !reflect.DeepEqual(written, want) {
		t.Errorf("written = %v, want %v", written, want)
	}
	// Errors as envd answers them: {code, message} with the status the
	// SDKs map.
	for _, tc := range []struct {
		q, ct string
		body  string
		code  int
	}{
		{"", "application/octet-stream", "x", 400},
		{"?path=/full/f", "application/octet-stream", "x", 507},
		{"?path=/big", "application/octet-stream", strings.Repeat("x", 1<<20+1), 413},
	} {
		st, body := post(tc.q, tc.ct, strings.NewReader(tc.body))
		if tc.code == 413 {
			// Again without a length: the bound counts what comes.
			var st2 int
			st2, body = post(tc.q, tc.ct, io.MultiReader(strings.NewReader(tc.body)))
			if st2 != st {
				t.Errorf("POST /files%s without a length: %d, want %d as with one", tc.q, st2, st)
			}
		}
		var eb envdError
		if st != tc.code || json.Unmarshal([]byte(body), &eb) != nil || eb.Code != tc.code || eb.Message == "" {
			t.Errorf("POST /files%s: %d %s, want %d with envd's error body", tc.q, st, body, tc.code)
		}
	}

	resp, err := http.Get(e.url + "/files?path=/x/one.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "hello" || resp.Header.Get("Content-Length") != "5" {
		t.Errorf("download: %d %q %v", resp.StatusCode, b, resp.Header)
	}
	// A file that stats as 0 bytes is sent to its real end.
	resp, err = http.Get(e.url + "/files?path=/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "hello" {
		t.Errorf("download of a file that stats as 0 bytes: %d %q %v, want its content", resp.StatusCode, b, resp.Header)
	}
	resp, err = http.Get(e.url + "/files?path=/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("download of a missing file: %d, want 404", resp.StatusCode)
	}
	// The sandbox gone: 502 with "was not found", the SDKs'
	// SandboxNotRunningException.
	e.openErr = &errdefs.Error{Kind: errdefs.ErrGone, Msg: "sandbox sb1 was killed"}
	resp, err = http.Get(e.url + "/files?path=/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(string(b), "sandbox sb1 was not found") {
		t.Errorf("download from a gone sandbox: %d %s, want 502 naming it not found", resp.StatusCode, b)
	}
	resp, err = http.Get(e.url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Errorf("health: %d, want 204", resp.StatusCode)
	}
}

func TestUser(t *testing.T) {
	for _, tc := range []struct{ header, want string }{
		{"", ""},
		{"Basic dXNlcjo=", ""},     // user:
		{"Basic cm9vdDo=", "root"}, // root:
		{"Bearer x", ""},
		{"Basic !!", ""},
	} {
		h := http.Header{}
		if tc.header != "" {
			h.Set("Authorization", tc.header)
		}
		if got := user(h); got != tc.want {
			t.Errorf("user(%q) = %q, want %q", tc.header, got, tc.want)
		}
	}
}

// TestWatcherHolds: what a polled watcher keeps for a client that does
// not poll is bounded in bytes, not only in events (code in the sandbox
// names the files: 10,000 paths of 4 KiB were 40 MB of the server's
// memory per watcher), and one project's sandboxes cannot take every
// watcher of the server.
func TestWatcherHolds(t *testing.T) {
	var w watcher
	name := strings.Repeat("d/", 2000)
	for i := range maxWatcherEvents {
		w.add(&filesystem.FilesystemEvent{Name: name + fmt.Sprint(i), Type: filesystem.EventType_EVENT_TYPE_CREATE})
	}
	held := 0
	for _, ev := range w.events {
		held += proto.Size(ev)
	}
	if held > maxWatcherBytes || w.bytes != held {
		t.Errorf("a watcher holds %d bytes (counted %d) of %d events of 4 KiB; want at most %d", held, w.bytes, len(w.events), maxWatcherBytes)
	}
	if last := w.events[len(w.events)-1].GetName(); last != name+fmt.Sprint(maxWatcherEvents-1) {
		t.Errorf("the newest event kept is %.20q...; want the last one added", last)
	}

	ws := newWatchers()
	for i := range maxProjectWatchers {
		if _, err := ws.add(&watcher{project: "p1", sandbox: fmt.Sprintf("sb%d", i/maxSandboxWatchers)}); err != nil {
			t.Fatalf("watcher %d of project p1: %v", i, err)
		}
	}
	_, err := ws.add(&watcher{project: "p1", sandbox: "sb-new"})
	if !errors.Is(err, errdefs.ErrRateLimited) || !strings.Contains(err.Error(), "project p1") {
		t.Errorf("watcher %d of project p1, in a sandbox of its own: %v; want rate_limited naming the project", maxProjectWatchers+1, err)
	}
	if _, err := ws.add(&watcher{project: "p2", sandbox: "sb-other"}); err != nil {
		t.Errorf("another project's watcher: %v", err)
	}
}

// TestFilesActAsUser: every file call passes on the user it names — an
// HTTP /files call's ?username= (what a signed URL signs) or its basic
// auth, an RPC's basic auth — so the agent acts as that user (issue 33: a
// signed upload without a user wrote /etc as root); E2B's default "user"
// is the sandbox user ("").
func TestFilesActAsUser(t *testing.T) {
	e := newEnv(t)
	e.agent.stat = func(p string) (api.EntryInfo, error) {
		return api.EntryInfo{Name: "f", Path: p, Type: "file", Size: 1}, nil
	}
	e.agent.readFile = func(string) (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("x")), nil }
	e.agent.writeFile = func(p string, _ []byte) (api.EntryInfo, error) { return api.EntryInfo{Name: "f", Path: p}, nil }
	e.agent.remove = func(string) error { return nil }
	e.agent.list = func(string) ([]api.EntryInfo, error) { return nil, nil }
	e.agent.makeDir = func(p string) (api.EntryInfo, error) { return api.EntryInfo{Path: p}, nil }
	e.agent.rename = func(_, to string) (api.EntryInfo, error) { return api.EntryInfo{Path: to}, nil }
	send := func(method, query, auth string) {
		t.Helper()
		req, _ := http.NewRequest(method, e.url+"/files?path=/etc/x"+query, strings.NewReader("x"))
		req.Header.Set("Content-Type", "application/octet-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s /files%s: %d", method, query, resp.StatusCode)
		}
	}
	send("POST", "", "")
	send("POST", "&username=user", "")
	send("POST", "&username=root", "")
	send("POST", "", "Basic cm9vdDo=")               // root:
	send("POST", "&username=user", "Basic cm9vdDo=") // the signed user wins
	send("GET", "&username=root", "")
	send("GET", "", "")
	rpc := func(call func(ctx context.Context, c filesystemconnect.FilesystemClient, auth string) error) {
		t.Helper()
		if err := call(context.Background(), e.fs(), "Basic cm9vdDo="); err != nil {
			t.Fatal(err)
		}
		if err := call(context.Background(), e.fs(), "Basic dXNlcjo="); err != nil {
			t.Fatal(err)
		}
	}
	rpc(func(ctx context.Context, c filesystemconnect.FilesystemClient, auth string) error {
		r := connect.NewRequest(&filesystem.RemoveRequest{Path: "/etc/x"})
		r.Header().Set("Authorization", auth)
		_, err := c.Remove(ctx, r)
		return err
	})
	rpc(func(ctx context.Context, c filesystemconnect.FilesystemClient, auth string) error {
		r := connect.NewRequest(&filesystem.MoveRequest{Source: "/etc/x", Destination: "/etc/y"})
		r.Header().Set("Authorization", auth)
		_, err := c.Move(ctx, r)
		return err
	})
	rpc(func(ctx context.Context, c filesystemconnect.FilesystemClient, auth string) error {
		r := connect.NewRequest(&filesystem.ListDirRequest{Path: "/etc"})
		r.Header().Set("Authorization", auth)
		_, err := c.ListDir(ctx, r)
		return err
	})
	want := []string{
		"", "", // upload: stat-free write as the default user; E2B's "user" is it
		"root",         // ?username=root
		"root",         // basic auth root
		"",             // ?username=user over basic auth root
		"root", "root", // download as root: stat, read
		"", "", // download as the sandbox user
		"root", "", // Remove
		"root", "", // Move
		"root", "", // ListDir
	}
	e.agent.mu.Lock()
	defer e.agent.mu.Unlock()
	if !slices.Equal(e.agent.users, want) {
		t.Errorf("the agent was called as %q, want %q", e.agent.users, want)
	}
}

// TestFileMetadata: an upload's X-Metadata-* headers (envd 0.6.2) reach
// the agent as the file's metadata, keys lowercased as envd keeps them,
// for every file of a multipart upload; the answer and a Stat carry what
// the agent kept; a header given twice is a 400 that writes nothing.
func TestFileMetadata(t *testing.T) {
	e := newEnv(t)
	got := map[string]map[string]string{}
	e.agent.writeFile = func(p string, _ []byte) (api.EntryInfo, error) { return fileEntry(p, "file"), nil }
	e.agent.metadata = got
	send := func(q, ct string, body io.Reader, hdr http.Header) (int, []writeInfo, string) {
		req, _ := http.NewRequest("POST", e.url+"/files"+q, body)
		req.Header = hdr
		req.Header.Set("Content-Type", ct)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var infos []writeInfo
		json.Unmarshal(b, &infos)
		return resp.StatusCode, infos, string(b)
	}
	want := map[string]string{"author": "mish", "purpose": "upload"}
	st, infos, body := send("?path=/m.txt", "application/octet-stream", strings.NewReader("x"), http.Header{"X-Metadata-Author": {"mish"}, "X-Metadata-PURPOSE": {"upload"}})
	if st != 200 || len(infos) != 1 || !reflect.DeepEqual(infos[0].Metadata, want) || !reflect.DeepEqual(got["/m.txt"], want) {
		t.Errorf("octet upload with metadata: %d %s, agent given %v; want %v", st, body, got, want)
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range []string{"/a", "/b"} {
		w, _ := mw.CreateFormFile("file", p)
		w.Write([]byte(p))
	}
	mw.Close()
	st, infos, body = send("", mw.FormDataContentType(), &buf, http.Header{"X-Metadata-Source": {"suite"}})
	if st != 200 || len(infos) != 2 || infos[1].Metadata["source"] != "suite" || got["/a"]["source"] != "suite" || got["/b"]["source"] != "suite" {
		t.Errorf("multipart upload with metadata: %d %s, agent given %v", st, body, got)
	}
	st, _, body = send("?path=/twice", "application/octet-stream", strings.NewReader("x"), http.Header{"X-Metadata-K": {"1", "2"}, "X-Metadata-Z": {"z"}})
	if _, wrote := got["/twice"]; st != 400 || !strings.Contains(body, "given 2 times") || wrote {
		t.Errorf("a metadata header twice: %d %s, want 400", st, body)
	}
	// Stat shows the agent's metadata.
	e.agent.stat = func(p string) (api.EntryInfo, error) {
		f := fileEntry(p, "file")
		f.Metadata = want
		return f, nil
	}
	res, err := e.fs().Stat(context.Background(), connect.NewRequest(&filesystem.StatRequest{Path: "/m.txt"}))
	if err != nil || !reflect.DeepEqual(res.Msg.GetEntry().GetMetadata(), want) {
		t.Errorf("Stat: %v %v, want metadata %v", res, err, want)
	}
}
