package agent

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/api"
)

// jsReplSource is the harness of a stateful JavaScript context: one Node
// process per context keeps the context's variables between calls, the
// last expression's value is a result and top-level await works, as in
// E2B's JavaScript kernel (the E2B surface creates these contexts; a
// JavaScript context is otherwise a fresh process per call).
//
//go:embed jsrepl.cjs
var jsReplSource string

// replStartTimeout bounds a Node process's start up to its ready line.
const replStartTimeout = 30 * time.Second

// replExitGrace is how long a failed write of a call waits for the
// process's exit to be seen: a process killed just before the call breaks
// its pipe before it is reaped.
const replExitGrace = 2 * time.Second

// replLine is one event line of the harness.
type replLine struct {
	T         string `json:"t"` // ready, stdout, stderr, result, error, done
	Text      string `json:"text"`
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
	// Data is a result's or display's MIME bundle (R's); without it a
	// result is Text.
	Data map[string]json.RawMessage `json:"data"`
}

// jsRepl is the Node process of a stateful JavaScript context.
type jsRepl struct {
	cmd    *exec.Cmd
	calls  *os.File      // the harness's fd 3
	lines  chan replLine // its fd 4, closed at its end
	stderr *lockedTail   // what Node itself printed (a crash)
	exited chan struct{}
	dead   chan struct{} // closed by stop: nobody reads lines any more
	once   sync.Once
	// linger is how long stop lets the process end by itself once its
	// calls end (a kernel's harness removes its temporary files) before
	// it kills the process group; 0 kills at once.
	linger time.Duration
}

type lockedTail struct {
	mu sync.Mutex
	t  tailBuffer
}

func (l *lockedTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.write(p)
	return len(p), nil
}

func (l *lockedTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.t.String()
}

// startRepl starts the process of context c (Node, or an R or Java
// kernel's harness: kernels.go), as the code's user in its own process
// group, and waits for the harness to be ready.
func (a *Agent) startRepl(ctx context.Context, c *execContext) (*jsRepl, error) {
	env := a.launch.envFor(c.as())
	path, args, err := a.replCommand(c, env)
	if err != nil {
		return nil, err
	}
	name := kernelName(c.info.Language)
	callsR, callsW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("starting the %s: %w", name, err)
	}
	eventsR, eventsW, err := os.Pipe()
	if err != nil {
		callsR.Close()
		callsW.Close()
		return nil, fmt.Errorf("starting the %s: %w", name, err)
	}
	r := &jsRepl{
		calls:  callsW,
		lines:  make(chan replLine, 64),
		stderr: &lockedTail{t: tailBuffer{max: stderrTailBytes}},
		exited: make(chan struct{}),
		dead:   make(chan struct{}),
	}
	if kernelLanguage(c.info.Language) {
		r.linger = kernelLinger
	}
	r.cmd, _, err = a.launch.command(nil, launch{as: c.as(), path: path, args: args, dir: c.info.Cwd, env: env})
	if err == nil {
		r.cmd.ExtraFiles = []*os.File{callsR, eventsW}
		r.cmd.Stderr = r.stderr
		err = r.cmd.Start()
	}
	callsR.Close()
	eventsW.Close()
	if err != nil {
		callsW.Close()
		eventsR.Close()
		return nil, fmt.Errorf("starting the %s: %w", name, err)
	}
	go func() {
		r.cmd.Wait()
		close(r.exited)
	}()
	go func() {
		defer close(r.lines)
		defer eventsR.Close()
		in := bufio.NewReaderSize(eventsR, 64<<10)
		for {
			b, err := in.ReadBytes('\n')
			if err != nil {
				return
			}
			var l replLine
			if json.Unmarshal(b, &l) != nil {
				continue
			}
			select {
			case r.lines <- l:
			case <-r.dead:
				return
			}
		}
	}()
	timeout := replStartTimeout
	if kernelLanguage(c.info.Language) {
		timeout = kernelStartTimeout // a JVM and JShell's javac, IRkernel: seconds under gVisor
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case l, ok := <-r.lines:
		if ok && l.T == "ready" {
			a.log.Info("context process started", "context", c.info.ID, "language", c.info.Language, "pid", r.cmd.Process.Pid)
			return r, nil
		}
		r.stop()
		return nil, fmt.Errorf("the %s ended before it was ready: %s", name, r.stderr.String())
	case <-ctx.Done():
		r.stop()
		return nil, fmt.Errorf("starting the %s: %w", name, ctx.Err())
	}
}

// stop kills the process group and waits for the process to be reaped.
func (r *jsRepl) stop() { r.stopAfter(r.linger) }

// stopAfter is stop, with linger as the time the process has to end by
// itself once its calls end.
func (r *jsRepl) stopAfter(linger time.Duration) {
	r.once.Do(func() { close(r.dead) })
	if linger > 0 {
		r.calls.Close()
		t := time.NewTimer(linger)
		select {
		case <-r.exited:
		case <-t.C:
		}
		t.Stop()
	}
	if err := syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.cmd.Process.Kill()
	}
	r.calls.Close()
	<-r.exited
}

// executeRepl runs a call in c's process, starting it on the first call
// or after the last one ended. In a JavaScript context a timeout or a call
// whose client went away kills the process: a new one, without the
// variables, serves the next call. An R or Java context's call is
// interrupted instead and the context keeps its state (kernels.go). The
// caller holds c.turn.
func (a *Agent) executeRepl(ctx context.Context, c *execContext, req api.ExecuteRequest, timeout time.Duration, s *sink) {
	kernel := kernelLanguage(c.info.Language)
	r, err := c.currentRepl()
	if err != nil {
		a.endWithError(s, ErrNameStart, err.Error(), "")
		return
	}
	call, _ := json.Marshal(map[string]any{"code": req.Code, "envs": req.Envs, "typescript": c.info.Language == langTypeScript})
	call = append(call, '\n')
	// A process killed since the last call (as root, or out of memory) is
	// replaced and the call runs in the new one, told so, as a Python
	// context's does: E2B's kernels come back after such a kill. A write
	// that fails means the process had gone before it read the call, so
	// the call runs in a new one too; once it has read it, a death is the
	// call's (KernelDiedError, ExitError).
	for attempt := 0; ; attempt++ {
		if r != nil && (r.hasExited() || attempt > 0) {
			c.dropRepl(r)
			a.log.Warn("context process died between calls", "context", c.info.ID, "language", c.info.Language)
			s.output(api.EventStderr, []byte(fmt.Sprintf("[lizard] the %s died after the previous call and was restarted; variables from earlier calls are gone\n", kernelName(c.info.Language))))
			r = nil
		}
		if r == nil {
			if r, err = a.startRepl(ctx, c); err != nil {
				if ctx.Err() == nil {
					a.endWithError(s, ErrNameStart, err.Error(), "")
				}
				return
			}
			if err := c.setRepl(r); err != nil {
				r.stop()
				a.endWithError(s, ErrNameStart, err.Error(), "")
				return
			}
		}
		_, err := r.calls.Write(call)
		if err == nil {
			break
		}
		if attempt == 0 && r.awaitExit(replExitGrace) {
			continue
		}
		c.dropRepl(r)
		if kernel {
			a.endWithError(s, api.ErrorNameKernelDied, r.diedMessage(c.info.Language), r.stderr.String())
			return
		}
		a.endWithError(s, ErrNameExit, "the context's node process has ended; the next call starts a new one", r.stderr.String())
		return
	}
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	for {
		select {
		case l, ok := <-r.lines:
			if !ok {
				c.dropRepl(r)
				if kernel {
					a.endWithError(s, api.ErrorNameKernelDied, r.diedMessage(c.info.Language), r.stderr.String())
					return
				}
				a.endWithError(s, ErrNameExit, "the context's node process ended during the call (process.exit?); the next call starts a new one, without its variables", r.stderr.String())
				return
			}
			switch l.T {
			case api.EventStdout, api.EventStderr:
				s.output(l.T, []byte(l.Text))
			case "result", "display":
				if ev, ok := replResult(l, req.Bundle); ok {
					s.event(ev)
				}
			case "error":
				s.event(api.ExecuteEvent{Type: api.EventError, Error: &api.ExecutionError{Name: l.Name, Message: l.Value, Traceback: l.Traceback}})
			case "done":
				s.event(api.ExecuteEvent{Type: api.EventEnd})
				return
			}
		case <-ctx.Done():
			if kernel {
				c.interrupt(r)
				return
			}
			c.dropRepl(r)
			return
		case <-deadline:
			if kernel {
				msg := fmt.Sprintf("execution timed out after %v; the call was interrupted and the context keeps its variables", timeout)
				if !c.interrupt(r) {
					msg = fmt.Sprintf("execution timed out after %v; the %s did not stop within %v of its interrupt and was killed: the next call starts a new one, without its variables", timeout, kernelName(c.info.Language), kernelInterruptGrace)
				}
				a.endWithError(s, ErrNameTimeout, msg, "")
				return
			}
			c.dropRepl(r)
			a.endWithError(s, ErrNameTimeout, fmt.Sprintf("execution timed out after %v; the context's variables are gone with its node process", timeout), "")
			return
		}
	}
}

func (c *execContext) currentRepl() (*jsRepl, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errContextClosed
	}
	return c.repl, nil
}

func (c *execContext) setRepl(r *jsRepl) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errContextClosed
	}
	c.repl = r
	return nil
}

// dropRepl stops r and forgets it if it is still c's.
func (c *execContext) dropRepl(r *jsRepl) {
	c.mu.Lock()
	if c.repl == r {
		c.repl = nil
	}
	c.mu.Unlock()
	r.stop()
}
