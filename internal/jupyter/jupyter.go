// Package jupyter runs IPython kernels and talks to them over the Jupyter
// messaging protocol (v5.3, HMAC-signed, over ZeroMQ), turning their output
// into the API's execute events.
//
// A Kernel owns one ipykernel process at a time. Executions are queued and
// never interleaved. Timeouts interrupt the kernel and keep its state; a
// kernel that dies (os._exit, a segfault, the OOM killer) is restarted so
// the next call works, and the call that was running is told so. A kernel
// found dead between calls is restarted before the next call, which then
// runs normally and gets a note on stderr saying earlier variables are gone.
package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/api"
)

// Config says how to start a kernel.
type Config struct {
	// Python is the interpreter with ipykernel installed; the kernel runs as
	// Python -m ipykernel_launcher -f CONNECTION_FILE.
	Python     string
	Cwd        string
	Env        []string            // the kernel's whole environment; nil: the agent's (MPLBACKEND is always dropped)
	Credential *syscall.Credential // nil: run as the agent's own user
	RuntimeDir string              // where connection files are written; "": os.TempDir()
	Logger     *slog.Logger        // nil: slog.Default()
}

// Request is one execution.
type Request struct {
	Code    string
	Timeout time.Duration     // 0: no limit
	Envs    map[string]string // set for this call only, restored after
}

// Error names of execution errors made here rather than raised by the code.
const (
	ErrNameTimeout    = "TimeoutError"
	ErrNameKernelDied = "KernelDiedError"
)

// ErrClosed is returned by calls on a closed Kernel.
var ErrClosed = errors.New("jupyter: kernel closed")

const (
	// interruptGrace is how long a kernel has to come back from SIGINT
	// before it is restarted.
	interruptGrace = 3 * time.Second
	// startTimeout bounds restarts made on the caller's behalf, which must
	// finish even when the caller has gone.
	startTimeout = 2 * time.Minute
	// settleQuiet is how long iopub may stay quiet after an execute_reply
	// before we stop waiting for an idle status that was dropped.
	settleQuiet = time.Second
)

// Kernel is one running ipykernel process and the sockets to it.
type Kernel struct {
	cfg Config
	log *slog.Logger

	// sem is the execution queue: whoever holds it talks to the kernel.
	sem chan struct{}
	// busy mirrors holding sem, for the readers (see proc.busy).
	busy atomic.Bool

	// mu guards the fields below; never held while waiting on the kernel.
	mu     sync.Mutex
	proc   *proc
	closed bool
}

// Start launches a kernel and returns once it answers kernel_info.
func Start(ctx context.Context, cfg Config) (*Kernel, error) {
	if cfg.Python == "" {
		return nil, errors.New("starting kernel: no Python interpreter configured")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	k := &Kernel{cfg: cfg, log: logger, sem: make(chan struct{}, 1)}
	p, err := launch(ctx, cfg, logger, &k.busy)
	if err != nil {
		return nil, fmt.Errorf("starting kernel: %w", err)
	}
	k.proc = p
	return k, nil
}

// Pid returns the process id of the current kernel process (also its
// process group id), or 0 when there is none.
func (k *Kernel) Pid() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc == nil {
		return 0
	}
	return k.proc.pid
}

func (k *Kernel) lock(ctx context.Context) error {
	select {
	case k.sem <- struct{}{}:
		k.busy.Store(true)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *Kernel) unlock() {
	k.busy.Store(false)
	<-k.sem
}

func (k *Kernel) current() (*proc, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.proc, k.closed
}

// replace stops old (if any) and starts a fresh kernel process. The caller
// holds sem.
func (k *Kernel) replace(ctx context.Context, old *proc) (*proc, error) {
	if old != nil {
		old.killed.Store(true)
		old.stop()
	}
	p, err := launch(ctx, k.cfg, k.log, &k.busy)
	if err != nil {
		return nil, fmt.Errorf("restarting kernel: %w", err)
	}
	k.mu.Lock()
	closed := k.closed
	if !closed {
		k.proc = p
	}
	k.mu.Unlock()
	if closed {
		p.stop()
		return nil, ErrClosed
	}
	return p, nil
}

// ready returns a live kernel process, restarting one that died since the
// last call. The caller holds sem.
func (k *Kernel) ready(ctx context.Context, emit func(api.ExecuteEvent)) (*proc, error) {
	p, closed := k.current()
	if closed {
		return nil, ErrClosed
	}
	if p != nil && !p.isExited() {
		return p, nil
	}
	var note string
	if p != nil && !p.killed.Load() {
		note = fmt.Sprintf("[lizard] the kernel died (%s) after the previous call and was restarted; variables from earlier calls are gone\n", p.exitReason())
		k.log.Warn("kernel died between calls", "pid", p.pid, "reason", p.exitReason())
	}
	p, err := k.replace(ctx, p)
	if err != nil {
		return nil, err
	}
	if note != "" {
		emit(api.ExecuteEvent{Type: api.EventStderr, Text: note})
	}
	return p, nil
}

// Execute runs req.Code, calling emit for every event in order and last for
// an "end" event with the execution count. Calls are queued, never
// interleaved. Errors in the code (including TimeoutError and a kernel that
// died) are events, not returned errors; ctx cancellation interrupts the
// kernel and returns ctx.Err().
func (k *Kernel) Execute(ctx context.Context, req Request, emit func(api.ExecuteEvent)) error {
	if err := k.lock(ctx); err != nil {
		return err
	}
	defer k.unlock()
	p, err := k.ready(ctx, emit)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	p.drain()

	if len(req.Envs) > 0 {
		code, err := setEnvCode(req.Envs)
		if err != nil {
			return err
		}
		if err := p.silent(ctx, code); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if p.awaitExit(sendFailureGrace) {
				return k.died(ctx, p, 0, emit)
			}
			var ce *codeError
			if !errors.As(err, &ce) {
				return fmt.Errorf("setting envs: %w", err)
			}
			emit(ce.content.event())
			emit(api.ExecuteEvent{Type: api.EventEnd})
			return nil
		}
		defer func() {
			// Restore even when the caller has gone, so the envs never
			// reach the next call; a replaced kernel has nothing to undo.
			if cur, _ := k.current(); cur != p || p.isExited() {
				return
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interruptGrace)
			defer cancel()
			if err := p.silent(rctx, restoreEnvCode); err != nil {
				k.log.Warn("restoring envs after execution", "err", err)
			}
		}()
	}
	return k.run(ctx, p, req, emit)
}

// executeRequest is the content of an execute_request.
type executeRequest struct {
	Code            string         `json:"code"`
	Silent          bool           `json:"silent"`
	StoreHistory    bool           `json:"store_history"`
	UserExpressions map[string]any `json:"user_expressions"`
	AllowStdin      bool           `json:"allow_stdin"`
	StopOnError     bool           `json:"stop_on_error"`
}

type executeReply struct {
	Status         string `json:"status"`
	ExecutionCount int    `json:"execution_count"`
	errorContent
}

// sendFailureGrace is how long a failed send waits for the kernel's exit
// to be noticed: a kernel killed just before a call breaks its sockets
// before its process is reaped.
const sendFailureGrace = 2 * time.Second

// maxAbortRetries bounds resending a request the kernel aborted: after an
// error with stop_on_error it aborts what arrives until it has caught up,
// and our next request can land in that window.
const maxAbortRetries = 50

// run sends one execute_request and turns what comes back into events.
func (k *Kernel) run(ctx context.Context, p *proc, req Request, emit func(api.ExecuteEvent)) error {
	content := executeRequest{
		Code:            req.Code,
		StoreHistory:    true,
		UserExpressions: map[string]any{},
		StopOnError:     true,
	}
	msgID, err := p.send(p.shell, "execute_request", content)
	if err != nil {
		if p.awaitExit(sendFailureGrace) {
			return k.died(ctx, p, 0, emit)
		}
		return err
	}

	var (
		count        int
		replied      bool
		idle         bool
		aborts       int
		timedOut     bool
		errorEmitted bool
		interruptTB  string // the KeyboardInterrupt traceback a timeout replaces
		timeout      <-chan time.Time
		grace        <-chan time.Time
	)
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	handle := func(m *message) {
		if m.ParentID != msgID {
			return // an earlier request's late output, or a silent request's
		}
		switch m.Header.MsgType {
		case "status":
			var c struct {
				State string `json:"execution_state"`
			}
			if json.Unmarshal(m.Content, &c) == nil && c.State == "idle" {
				idle = true
			}
		case "execute_input":
			var c struct {
				Count int `json:"execution_count"`
			}
			if json.Unmarshal(m.Content, &c) == nil && c.Count > 0 {
				count = c.Count
			}
		case "error":
			var c errorContent
			if json.Unmarshal(m.Content, &c) != nil {
				return
			}
			if timedOut && c.Ename == "KeyboardInterrupt" {
				interruptTB = stripANSI(strings.Join(c.Traceback, "\n"))
				return
			}
			errorEmitted = true
			emit(c.event())
		default:
			if ev, ok := outputEvent(m); ok {
				emit(ev)
			}
		}
	}

	// The kernel publishes idle right after the reply. Under a slow
	// consumer its iopub queue may overflow and drop it, so once replied a
	// quiet iopub also ends the call rather than hanging it.
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	for !replied || !idle {
		select {
		case m := <-p.iopubCh:
			handle(m)
			if replied {
				settle.Reset(settleQuiet)
			}
		case <-settle.C:
			select {
			case m := <-p.iopubCh:
				handle(m)
				settle.Reset(settleQuiet)
			default:
				k.log.Warn("no idle status after execute_reply; ending the call", "msg_id", msgID)
				idle = true
			}
		case m := <-p.shellCh:
			if m.ParentID != msgID || m.Header.MsgType != "execute_reply" {
				continue
			}
			var r executeReply
			if err := json.Unmarshal(m.Content, &r); err != nil {
				return fmt.Errorf("decoding execute_reply: %w", err)
			}
			if r.Status == "aborted" && aborts < maxAbortRetries {
				aborts++
				time.Sleep(10 * time.Millisecond)
				if msgID, err = p.send(p.shell, "execute_request", content); err != nil {
					if p.isExited() {
						return k.died(ctx, p, count, emit)
					}
					return err
				}
				idle = false
				continue
			}
			replied = true
			settle.Reset(settleQuiet)
			if r.ExecutionCount > 0 {
				count = r.ExecutionCount
			}
		case <-p.controlCh:
		case <-timeout:
			if replied {
				continue // finished in time; only the idle status is still on its way
			}
			timedOut = true
			if err := p.signal(syscall.SIGINT); err != nil {
				k.log.Warn("interrupting kernel on timeout", "err", err)
			}
			grace = time.After(interruptGrace)
		case <-grace:
			k.log.Warn("kernel ignored the interrupt; restarting it", "pid", p.pid)
			msg := fmt.Sprintf("execution timed out after %s; the kernel did not respond to the interrupt and was restarted; its variables are gone", req.Timeout)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
			_, err := k.replace(rctx, p)
			cancel()
			if err != nil {
				msg = fmt.Sprintf("execution timed out after %s; the kernel did not respond to the interrupt and could not be restarted: %v", req.Timeout, err)
			}
			emit(api.ExecuteEvent{Type: api.EventError, Error: &api.ExecutionError{Name: ErrNameTimeout, Message: msg, Traceback: interruptTB}})
			emit(api.ExecuteEvent{Type: api.EventEnd, ExecutionCount: count})
			return nil
		case <-p.exited:
			// Deliver what the kernel managed to publish before it went.
			p.drainExited(handle)
			return k.died(ctx, p, count, emit)
		case <-ctx.Done():
			k.abandon(ctx, p, msgID, replied, idle)
			return ctx.Err()
		}
	}
	if timedOut && !errorEmitted {
		emit(api.ExecuteEvent{Type: api.EventError, Error: &api.ExecutionError{
			Name:      ErrNameTimeout,
			Message:   fmt.Sprintf("execution timed out after %s; the kernel was interrupted and its state kept", req.Timeout),
			Traceback: interruptTB,
		}})
	}
	emit(api.ExecuteEvent{Type: api.EventEnd, ExecutionCount: count})
	return nil
}

// died reports a kernel process that ended while running a call and, unless
// we ended it on purpose, restarts it so the next call works.
func (k *Kernel) died(ctx context.Context, p *proc, count int, emit func(api.ExecuteEvent)) error {
	var msg string
	_, closed := k.current()
	switch {
	case closed:
		msg = "the kernel was closed while this code ran"
	case p.killed.Load():
		msg = "the kernel was restarted while this code ran; its variables are gone"
	default:
		reason := p.exitReason()
		k.log.Warn("kernel died during execution", "pid", p.pid, "reason", reason)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
		_, err := k.replace(rctx, p)
		cancel()
		if err != nil {
			msg = fmt.Sprintf("the kernel died (%s) and could not be restarted: %v", reason, err)
		} else {
			msg = fmt.Sprintf("the kernel died (%s) and was restarted; its variables are gone", reason)
		}
	}
	emit(api.ExecuteEvent{Type: api.EventError, Error: &api.ExecutionError{Name: ErrNameKernelDied, Message: msg}})
	emit(api.ExecuteEvent{Type: api.EventEnd, ExecutionCount: count})
	return nil
}

// abandon cleans up after a caller that went away mid-call: it interrupts
// the kernel and waits (bounded) for it to finish the request, so the next
// call starts on an idle kernel; one that does not come back is restarted.
func (k *Kernel) abandon(ctx context.Context, p *proc, msgID string, replied, idle bool) {
	if err := p.signal(syscall.SIGINT); err != nil {
		k.log.Warn("interrupting kernel for a cancelled call", "err", err)
	}
	deadline := time.NewTimer(interruptGrace)
	defer deadline.Stop()
	for !replied || !idle {
		select {
		case m := <-p.iopubCh:
			if m.ParentID == msgID && m.Header.MsgType == "status" && isIdle(m) {
				idle = true
			}
		case m := <-p.shellCh:
			if m.ParentID == msgID && m.Header.MsgType == "execute_reply" {
				replied = true
				deadline.Reset(settleQuiet) // idle may have been dropped
			}
		case <-p.exited:
			return // the next call restarts it
		case <-deadline.C:
			if replied {
				return
			}
			k.log.Warn("kernel ignored the interrupt of a cancelled call; restarting it", "pid", p.pid)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
			defer cancel()
			if _, err := k.replace(rctx, p); err != nil {
				k.log.Warn("restarting kernel", "err", err)
			}
			return
		}
	}
}

func isIdle(m *message) bool {
	var c struct {
		State string `json:"execution_state"`
	}
	return json.Unmarshal(m.Content, &c) == nil && c.State == "idle"
}

// Interrupt sends SIGINT to the kernel.
func (k *Kernel) Interrupt() error {
	p, closed := k.current()
	if closed {
		return ErrClosed
	}
	if p == nil {
		return nil
	}
	return p.signal(syscall.SIGINT)
}

// Restart replaces the kernel process with a fresh one: variables are gone.
// A call running at the time ends with a KernelDiedError event saying the
// kernel was restarted.
func (k *Kernel) Restart(ctx context.Context) error {
	old, closed := k.current()
	if closed {
		return ErrClosed
	}
	// Kill first, so a call that never ends cannot hold the restart up.
	if old != nil {
		old.killed.Store(true)
		old.stop()
	}
	if err := k.lock(ctx); err != nil {
		return err
	}
	defer k.unlock()
	cur, closed := k.current()
	if closed {
		return ErrClosed
	}
	if cur != old && cur != nil && !cur.isExited() {
		return nil // a queued call already started a fresh one after our kill
	}
	_, err := k.replace(ctx, cur)
	return err
}

// Renewal is what a restored sandbox changes in its running kernels.
type Renewal struct {
	Set    map[string]string // environment variables to set
	Unset  []string          // environment variables to remove
	Reseed bool              // fresh seeds for random and numpy's global generator
}

// Renew applies r to the kernel in one silent execution (a round trip to a
// kernel under gVisor costs tens of milliseconds, and restores are on the
// path of every create). The environment changes reach os.environ, so code
// and the processes it starts see them, and every kernel process started
// after a restart. Reseeding matters because forks of one snapshot share
// the generators' state.
func (k *Kernel) Renew(ctx context.Context, r Renewal) error {
	if err := k.lock(ctx); err != nil {
		return err
	}
	defer k.unlock()
	var code []string
	if len(r.Set) > 0 || len(r.Unset) > 0 {
		// cfg is only read by whoever holds sem, as we do.
		k.cfg.Env = applyEnv(k.cfg.Env, r.Set, r.Unset)
		c, err := updateEnvCode(r.Set, r.Unset)
		if err != nil {
			return err
		}
		code = append(code, c)
	}
	if r.Reseed {
		code = append(code, reseedCode)
	}
	if len(code) == 0 {
		return nil
	}
	p, err := k.ready(ctx, func(api.ExecuteEvent) {})
	if err != nil {
		return err
	}
	if err := p.silent(ctx, strings.Join(code, "\n")); err != nil {
		return fmt.Errorf("renewing kernel: %w", err)
	}
	return nil
}

// Import imports modules in the kernel without binding any name in the
// user's namespace and without counting an execution, so that a later
// `import numpy as np` is instant and the user's first call is still [1].
func (k *Kernel) Import(ctx context.Context, modules []string) error {
	if len(modules) == 0 {
		return nil
	}
	if err := k.lock(ctx); err != nil {
		return err
	}
	defer k.unlock()
	p, err := k.ready(ctx, func(api.ExecuteEvent) {})
	if err != nil {
		return err
	}
	code, err := importCode(modules)
	if err != nil {
		return err
	}
	if err := p.silent(ctx, code); err != nil {
		return fmt.Errorf("importing %s: %w", strings.Join(modules, ", "), err)
	}
	return nil
}

// applyEnv returns env (KEY=VALUE pairs) with set set and unset removed.
func applyEnv(env []string, set map[string]string, unset []string) []string {
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		key, _, _ := strings.Cut(kv, "=")
		if _, ok := set[key]; ok || slices.Contains(unset, key) {
			continue
		}
		out = append(out, kv)
	}
	for key, v := range set {
		out = append(out, key+"="+v)
	}
	return out
}

// Close ends the kernel process and closes its sockets. A call running at
// the time ends with a KernelDiedError event.
func (k *Kernel) Close() error {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil
	}
	k.closed = true
	p := k.proc
	k.mu.Unlock()
	if p != nil {
		p.killed.Store(true)
		p.stop()
	}
	return nil
}
