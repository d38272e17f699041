package envd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/e2b/envd/proto/process"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// processService is process.Process over the agent's background processes
// and terminals (docs/processes.md).
type processService struct{ h *handler }

// call runs f in a session of the request's sandbox.
func call[T any](h *handler, ctx context.Context, f func(s *session) (*T, error)) (*connect.Response[T], error) {
	s, err := h.open(ctx)
	if err != nil {
		return nil, rpcError(err)
	}
	defer s.release()
	out, err := f(s)
	if err != nil {
		return nil, s.fail(err)
	}
	return connect.NewResponse(out), nil
}

func (p *processService) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	s, err := p.h.open(following(ctx))
	if err != nil {
		return rpcError(err)
	}
	defer s.release()
	m := req.Msg
	cfg := m.GetProcess()
	if cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd: must not be empty"))
	}
	start := api.ProcessStartRequest{
		Args: append([]string{cfg.GetCmd()}, cfg.GetArgs()...),
		Cwd:  cfg.GetCwd(),
		Envs: cfg.GetEnvs(),
		Tag:  m.GetTag(),
		User: user(req.Header()),
		// Absent means open, as for the SDKs before stdin was optional.
		Stdin: m.Stdin == nil || *m.Stdin,
	}
	if m.Pty != nil {
		size := m.GetPty().GetSize()
		start.Pty = &api.PtySize{Cols: int(size.GetCols()), Rows: int(size.GetRows())}
		start.Stdin = false // a terminal's input is always open
	}
	// As in E2B, the request's deadline is the process's: it is killed
	// when it passes, while a client that merely goes away leaves it.
	// envd kills the process alone, so what it started lives on: the
	// browser of E2B Desktop's open() (xdg-open under a 60 s deadline).
	if d, ok := connectTimeout(req.Header()); ok {
		ms := d.Milliseconds()
		start.TimeoutMs, start.TimeoutKills = &ms, "process"
	}
	info, err := s.agent.StartProcess(s.ctx, start)
	if err != nil {
		return s.fail(err)
	}
	return follow(s, info.Pid, req.Header(), func(ev *process.ProcessEvent) error {
		return stream.Send(&process.StartResponse{Event: ev})
	})
}

func (p *processService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	s, err := p.h.open(following(ctx))
	if err != nil {
		return rpcError(err)
	}
	defer s.release()
	pid, err := selectPid(s, req.Msg.GetProcess())
	if err != nil {
		return s.fail(err)
	}
	return follow(s, pid, req.Header(), func(ev *process.ProcessEvent) error {
		return stream.Send(&process.ConnectResponse{Event: ev})
	})
}

// defaultKeepalive is how often a stream without output sends a keepalive
// when the client does not say (Keepalive-Ping-Interval, seconds), as
// E2B's envd does.
const defaultKeepalive = 90 * time.Second

func keepaliveInterval(h http.Header) time.Duration {
	if n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return defaultKeepalive
}

func connectTimeout(h http.Header) (time.Duration, bool) {
	n, err := strconv.ParseInt(h.Get("Connect-Timeout-Ms"), 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

// follow sends pid's start event, its output (the kept output first, then
// live), keepalives while it is quiet, and its end.
func follow(s *session, pid int, h http.Header, send func(*process.ProcessEvent) error) error {
	out, err := s.agent.ProcessOutput(s.ctx, pid)
	if err != nil {
		return s.fail(err)
	}
	defer out.Close()
	if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: uint32(pid)}}}); err != nil {
		return err
	}
	type next struct {
		ev  api.ProcessOutputEvent
		err error
	}
	events := make(chan next)
	go func() {
		defer close(events)
		for {
			ev, err := out.Next()
			select {
			case events <- next{ev, err}:
			case <-s.ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	tick := time.NewTicker(keepaliveInterval(h))
	defer tick.Stop()
	for {
		var n next
		select {
		case <-tick.C:
			if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
			continue
		case <-s.ctx.Done():
			return s.endFollow(s.ctx.Err())
		case got, ok := <-events:
			if !ok {
				return s.endFollow(s.ctx.Err())
			}
			n = got
		}
		if n.err != nil {
			if n.err == io.EOF {
				n.err = &errdefs.Error{Kind: errdefs.ErrBadGateway, Msg: fmt.Sprintf("the output of process %d ended before its end", pid)}
			}
			return s.endFollow(n.err)
		}
		ev, end := outputEvent(n.ev)
		if ev == nil {
			continue
		}
		if err := send(ev); err != nil {
			return err
		}
		if end {
			return nil
		}
	}
}

// endWait bounds how long a followed process whose output failed waits
// to learn whether its sandbox ended: the sandbox's end usually cuts the
// agent's stream before the node has said so, and in a cluster a kill
// through another lizard api is known here only by its record (ended).
const endWait = 2 * time.Second

// endFollow ends a stream that follows a process, once it has begun, with
// err. A sandbox that ended under it (killed, expired, failed) drops the
// connection instead, as E2B's proxy does when the sandbox behind it goes:
// E2B's SDKs (Python and JavaScript, 2.45 to 2.63) read a dropped
// connection by asking the sandbox's /health, which then answers 502, and
// raise "the sandbox was killed or reached its end of life"; an error
// status would be read by its code alone, and the SDKs before 2.63 read
// UNAVAILABLE as the sandbox's timeout whatever ended it.
func (s *session) endFollow(err error) error {
	deadline := time.Now().Add(endWait)
	for s.ctx.Err() == nil {
		if s.ended != nil && s.ended() {
			dropConnection(s.ctx)
		}
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		t := time.NewTimer(min(left, endPoll))
		select {
		case <-s.ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	if stop := s.stopped(); stop != nil && errors.Is(stop, errGoneSandbox) {
		dropConnection(s.ctx)
	}
	return s.fail(err)
}

// endPoll is how often endFollow asks whether the sandbox has ended.
const endPoll = 100 * time.Millisecond

// outputEvent is the envd event of one of the agent's output events (nil
// for those envd has none for), and whether it is the last.
func outputEvent(ev api.ProcessOutputEvent) (*process.ProcessEvent, bool) {
	data := func(d *process.ProcessEvent_DataEvent) *process.ProcessEvent {
		return &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: d}}
	}
	switch ev.Type {
	case api.EventStdout:
		return data(&process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: []byte(ev.Text)}}), false
	case api.EventStderr:
		return data(&process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stderr{Stderr: []byte(ev.Text)}}), false
	case api.OutputPty:
		return data(&process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Pty{Pty: ev.Data}}), false
	case api.EventEnd:
		code := 0
		if ev.ExitCode != nil {
			code = *ev.ExitCode
		}
		end := &process.ProcessEvent_EndEvent{ExitCode: int32(code), Exited: true, Status: "exit status " + strconv.Itoa(code)}
		if ev.Error != "" {
			end.Error = &ev.Error
		}
		return &process.ProcessEvent{Event: &process.ProcessEvent_End{End: end}}, true
	}
	// "dropped": envd has no event for output a slow reader lost.
	return nil, false
}

// selectPid resolves a selector: a pid as is, a tag to its running
// process.
func selectPid(s *session, sel *process.ProcessSelector) (int, error) {
	switch v := sel.GetSelector().(type) {
	case *process.ProcessSelector_Pid:
		return int(v.Pid), nil
	case *process.ProcessSelector_Tag:
		list, err := s.agent.ListProcesses(s.ctx)
		if err != nil {
			return 0, err
		}
		for _, p := range list {
			if p.Running && p.Tag == v.Tag {
				return p.Pid, nil
			}
		}
		return 0, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("no running process has tag %q", v.Tag)}
	}
	return 0, errdefs.Invalidf("process: a pid or a tag is required")
}

func (p *processService) List(ctx context.Context, req *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	return call(p.h, ctx, func(s *session) (*process.ListResponse, error) {
		list, err := s.agent.ListProcesses(s.ctx)
		if err != nil {
			return nil, err
		}
		out := &process.ListResponse{}
		// envd lists the processes that run; Lizard keeps ended ones too.
		for _, info := range list {
			if !info.Running {
				continue
			}
			cfg := &process.ProcessConfig{Envs: map[string]string{}}
			if len(info.Args) > 0 {
				cfg.Cmd, cfg.Args = info.Args[0], info.Args[1:]
			}
			if info.Cwd != "" {
				cfg.Cwd = &info.Cwd
			}
			pi := &process.ProcessInfo{Config: cfg, Pid: uint32(info.Pid)}
			if info.Tag != "" {
				pi.Tag = &info.Tag
			}
			out.Processes = append(out.Processes, pi)
		}
		return out, nil
	})
}

func (p *processService) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	return call(p.h, ctx, func(s *session) (*process.UpdateResponse, error) {
		pid, err := selectPid(s, req.Msg.GetProcess())
		if err != nil {
			return nil, err
		}
		if req.Msg.Pty != nil {
			size := req.Msg.GetPty().GetSize()
			if err := s.agent.Resize(s.ctx, pid, api.PtySize{Cols: int(size.GetCols()), Rows: int(size.GetRows())}); err != nil {
				return nil, err
			}
		}
		return &process.UpdateResponse{}, nil
	})
}

func (p *processService) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	return call(p.h, ctx, func(s *session) (*process.SendInputResponse, error) {
		pid, err := selectPid(s, req.Msg.GetProcess())
		if err != nil {
			return nil, err
		}
		if err := s.agent.SendStdin(s.ctx, pid, inputBytes(req.Msg.GetInput())); err != nil {
			return nil, err
		}
		return &process.SendInputResponse{}, nil
	})
}

// inputBytes is the bytes of an input: stdin or a terminal's, which the
// agent takes alike.
func inputBytes(in *process.ProcessInput) []byte {
	if pty, ok := in.GetInput().(*process.ProcessInput_Pty); ok {
		return pty.Pty
	}
	return in.GetStdin()
}

func (p *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[process.StreamInputRequest]) (*connect.Response[process.StreamInputResponse], error) {
	return call(p.h, ctx, func(s *session) (*process.StreamInputResponse, error) {
		pid := -1
		for stream.Receive() {
			switch ev := stream.Msg().GetEvent().(type) {
			case *process.StreamInputRequest_Start:
				var err error
				if pid, err = selectPid(s, ev.Start.GetProcess()); err != nil {
					return nil, err
				}
			case *process.StreamInputRequest_Data:
				if pid < 0 {
					return nil, errdefs.Invalidf("the first event of an input stream must be start, naming the process")
				}
				if err := s.agent.SendStdin(s.ctx, pid, inputBytes(ev.Data.GetInput())); err != nil {
					return nil, err
				}
			}
		}
		if err := stream.Err(); err != nil {
			return nil, err
		}
		return &process.StreamInputResponse{}, nil
	})
}

func (p *processService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	return call(p.h, ctx, func(s *session) (*process.SendSignalResponse, error) {
		var sig string
		switch req.Msg.GetSignal() {
		case process.Signal_SIGNAL_SIGTERM:
			sig = "TERM"
		case process.Signal_SIGNAL_SIGKILL:
			sig = "KILL"
		default:
			return nil, errdefs.Invalidf("signal: %v is not one envd sends (SIGTERM, SIGKILL)", req.Msg.GetSignal())
		}
		pid, err := selectPid(s, req.Msg.GetProcess())
		if err != nil {
			return nil, err
		}
		if err := s.agent.Signal(s.ctx, pid, sig); err != nil {
			return nil, err
		}
		return &process.SendSignalResponse{}, nil
	})
}

func (p *processService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	return call(p.h, ctx, func(s *session) (*process.CloseStdinResponse, error) {
		pid, err := selectPid(s, req.Msg.GetProcess())
		if err != nil {
			return nil, err
		}
		if err := s.agent.CloseStdin(s.ctx, pid); err != nil {
			return nil, err
		}
		return &process.CloseStdinResponse{}, nil
	})
}
