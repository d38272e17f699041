// Package pykernel runs Python kernels for the agent: each is a process
// running IPython's own InteractiveShell (kernel.py, embedded here) that
// talks to the agent over pipes with a small framed protocol
// (docs/kernel-protocol.md), turning its output into the API's execute
// events. It replaced ipykernel and ZeroMQ, whose round trips under gVisor
// cost tens of milliseconds.
//
// A Kernel owns one kernel process at a time. Executions are queued and
// never interleaved. Timeouts interrupt the kernel and keep its state; a
// kernel that dies (os._exit, a segfault, the OOM killer) is restarted so
// the next call works, and the call that was running is told so. A kernel
// found dead between calls is restarted before the next call, which then
// runs normally and gets a note on stderr saying earlier variables are gone.
package pykernel

import (
	"context"
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
	// Python is the interpreter with IPython installed; the kernel runs as
	// Python -c BOOTSTRAP.
	Python     string
	Cwd        string
	Env        []string            // the kernel's whole environment; nil: the agent's (MPLBACKEND is always dropped)
	Credential *syscall.Credential // nil: run as the agent's own user
	Logger     *slog.Logger        // nil: slog.Default()
}

// Request is one execution.
type Request struct {
	Code    string
	Timeout time.Duration     // 0: no limit
	Envs    map[string]string // set for this call only, restored after
	// Bundle keeps each result's whole MIME bundle (api.Result.Bundle).
	Bundle bool
}

// Error names of execution errors made here rather than raised by the code.
const (
	ErrNameTimeout    = api.ErrorNameTimeout
	ErrNameKernelDied = api.ErrorNameKernelDied
)

// ErrClosed is returned by calls on a closed Kernel.
var ErrClosed = errors.New("pykernel: kernel closed")

const (
	// interruptGrace is how long a kernel has to come back from SIGINT
	// before it is restarted.
	interruptGrace = 3 * time.Second
	// startTimeout bounds restarts made on the caller's behalf, which must
	// finish even when the caller has gone.
	startTimeout = 2 * time.Minute
	// exitDrain bounds waiting for the last frames of a kernel that died.
	exitDrain = 300 * time.Millisecond
	// sendFailureGrace is how long a failed send waits for the kernel's
	// exit to be noticed: a kernel killed just before a call breaks its
	// pipe before its process is reaped.
	sendFailureGrace = 2 * time.Second
)

// Kernel is one running kernel process and the pipes to it.
type Kernel struct {
	log *slog.Logger

	// sem is the execution queue: whoever holds it talks to the kernel.
	sem chan struct{}
	// busy mirrors holding sem, for the reader (see proc.deliver).
	busy atomic.Bool
	// ids numbers requests, so frames of an abandoned one are told apart.
	ids atomic.Uint32

	// mu guards the fields below; never held while waiting on the kernel.
	mu     sync.Mutex
	cfg    Config
	envGen int // bumped by every Renew that changes cfg.Env
	proc   *proc
	closed bool
}

// Start launches a kernel and returns once it is ready for code.
func Start(ctx context.Context, cfg Config) (*Kernel, error) {
	if cfg.Python == "" {
		return nil, errors.New("starting kernel: no Python interpreter configured")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	k := &Kernel{cfg: cfg, log: logger, sem: make(chan struct{}, 1)}
	p, err := launch(ctx, cfg, cfg.Env, logger, &k.busy)
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
	k.mu.Lock()
	cfg, env, gen := k.cfg, k.cfg.Env, k.envGen
	k.mu.Unlock()
	p, err := launch(ctx, cfg, env, k.log, &k.busy)
	if err != nil {
		return nil, fmt.Errorf("restarting kernel: %w", err)
	}
	k.mu.Lock()
	closed := k.closed
	if !closed {
		k.proc = p
		if k.envGen != gen {
			// A Renew came while this process started from the older
			// environment; it went to the old process.
			set, unset := envDiff(env, k.cfg.Env)
			if err := p.send(request{Op: "renew", Set: set, Unset: unset}); err != nil {
				k.log.Warn("renewing a restarted kernel", "err", err)
			}
		}
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
	id := k.ids.Add(1)
	// The per-call envs travel with the code: the kernel sets them before
	// and restores them after, in the same round trip. Bundle asks for the
	// representations only the E2B surface gives (e2b/chart).
	execute := request{Op: "execute", ID: id, Code: req.Code, Envs: req.Envs, Bundle: req.Bundle}
	if err := p.send(execute); err != nil {
		if !p.awaitExit(sendFailureGrace) {
			return err
		}
		// A broken pipe: the kernel went before it read the code, so the
		// code runs in a new kernel, as after a death between calls.
		if p, err = k.ready(ctx, emit); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if err := p.send(execute); err != nil {
			if p.awaitExit(sendFailureGrace) {
				return k.died(ctx, p, emit)
			}
			return err
		}
	}
	return k.run(ctx, p, id, req, emit)
}

// run turns what the kernel says about request id into events.
func (k *Kernel) run(ctx context.Context, p *proc, id uint32, req Request, emit func(api.ExecuteEvent)) error {
	var (
		timedOut     bool
		errorEmitted bool
		interruptTB  string // the KeyboardInterrupt traceback a timeout replaces
		timeout      <-chan time.Time
		grace        <-chan time.Time
		count        int
		done         bool
	)
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	handle := func(f frame) {
		if !f.fd && f.id != id {
			return // an abandoned call's late output
		}
		if f.msg == nil {
			typ := api.EventStdout
			if f.kind == kindStderr {
				typ = api.EventStderr
			}
			emit(api.ExecuteEvent{Type: typ, Text: string(f.text)})
			return
		}
		m := f.msg
		switch m.T {
		case "error":
			if timedOut && m.Ename == "KeyboardInterrupt" {
				interruptTB = stripANSI(strings.Join(m.Traceback, "\n"))
				return
			}
			errorEmitted = true
			emit(m.errorEvent())
		case "done":
			done, count = true, m.Count
		default:
			if ev, ok := m.resultEvent(req.Bundle); ok {
				emit(ev)
			}
		}
	}
	for !done {
		select {
		case f := <-p.ch:
			handle(f)
		case <-timeout:
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
			emit(api.ExecuteEvent{Type: api.EventEnd})
			return nil
		case <-p.eof:
			// The kernel closed its frame pipe: it is exiting. Deliver
			// what it managed to say before it went.
			p.awaitExit(sendFailureGrace)
			p.drainExited(handle)
			if done {
				break
			}
			return k.died(ctx, p, emit)
		case <-p.exited:
			p.drainExited(handle)
			if done {
				break
			}
			return k.died(ctx, p, emit)
		case <-ctx.Done():
			k.abandon(ctx, p, id)
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

// drainExited hands handle what a kernel that is exiting said before it
// went: until the reader ends, bounded in case children of the kernel
// keep its pipe open.
func (p *proc) drainExited(handle func(frame)) {
	limit := time.NewTimer(exitDrain)
	defer limit.Stop()
	for {
		select {
		case f := <-p.ch:
			handle(f)
		case <-p.eof:
			for {
				select {
				case f := <-p.ch:
					handle(f)
				default:
					return
				}
			}
		case <-limit.C:
			return
		}
	}
}

// died reports a kernel process that ended while running a call and, unless
// we ended it on purpose, restarts it so the next call works.
func (k *Kernel) died(ctx context.Context, p *proc, emit func(api.ExecuteEvent)) error {
	var msg string
	_, closed := k.current()
	switch {
	case closed:
		msg = "the kernel was closed while this code ran"
	case p.killed.Load():
		msg = "the kernel was restarted while this code ran; its variables are gone"
	default:
		p.awaitExit(sendFailureGrace) // for the exit status in the message
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
	emit(api.ExecuteEvent{Type: api.EventEnd})
	return nil
}

// abandon cleans up after a caller that went away mid-call: it interrupts
// the kernel and waits (bounded) for it to finish the request, so the next
// call starts on an idle kernel; one that does not come back is restarted.
func (k *Kernel) abandon(ctx context.Context, p *proc, id uint32) {
	if err := p.signal(syscall.SIGINT); err != nil {
		k.log.Warn("interrupting kernel for a cancelled call", "err", err)
	}
	deadline := time.NewTimer(interruptGrace)
	defer deadline.Stop()
	for {
		select {
		case f := <-p.ch:
			if f.id == id && f.msg != nil && f.msg.T == "done" {
				return
			}
		case <-p.eof:
			return // the next call restarts it
		case <-deadline.C:
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

// Renew applies r to the kernel without waiting for it: the request is
// written to the kernel's pipe, which it reads before the next call's code
// (after the running one, if any), so restores, on the path of every
// create, pay no round trip. The environment changes reach os.environ,
// so code and the processes it starts see them, and every kernel process
// started after a restart. Reseeding matters because forks of one
// snapshot share the generators' state.
func (k *Kernel) Renew(ctx context.Context, r Renewal) error {
	if len(r.Set) == 0 && len(r.Unset) == 0 && !r.Reseed {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return ErrClosed
	}
	if len(r.Set) > 0 || len(r.Unset) > 0 {
		k.cfg.Env = applyEnv(k.cfg.Env, r.Set, r.Unset)
		k.envGen++
	}
	p := k.proc
	if p == nil || p.isExited() {
		return nil // the next start has the new environment and fresh seeds
	}
	// Held under mu, so replace cannot swap the process in between; the
	// frame is small and the pipe's buffer takes it without waiting.
	if err := p.send(request{Op: "renew", Set: r.Set, Unset: r.Unset, Reseed: r.Reseed}); err != nil && !p.awaitExit(sendFailureGrace) {
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
	p.drain()
	id := k.ids.Add(1)
	if err := p.send(request{Op: "import", ID: id, Modules: modules}); err != nil {
		return fmt.Errorf("importing %s: %w", strings.Join(modules, ", "), err)
	}
	for {
		select {
		case f := <-p.ch:
			if f.id != id || f.msg == nil || f.msg.T != "done" {
				continue
			}
			if f.msg.Status != "ok" {
				return fmt.Errorf("importing %s: %s: %s", strings.Join(modules, ", "), f.msg.Ename, f.msg.Evalue)
			}
			return nil
		case <-p.eof:
			p.awaitExit(sendFailureGrace)
			return fmt.Errorf("importing %s: kernel died (%s)", strings.Join(modules, ", "), p.exitReason())
		case <-ctx.Done():
			k.abandon(ctx, p, id)
			return ctx.Err()
		}
	}
}

// HeapShare is a share request: where the kernel writes its heap's dump,
// the marker it makes once the dump is whole, and the file it then waits
// for and maps every region back from (docs/kernel-protocol.md).
type HeapShare struct {
	Dump, Ready, Map string
	// Timeout bounds the wait for Map; the kernel then maps nothing and
	// answers an error.
	Timeout time.Duration
}

// ShareHeap has the kernel write its private writable memory to
// s.Dump and map it back from s.Map once that file appears, so that
// sandboxes restored from a checkpoint of it share those pages from the
// host's page cache. It returns the kernel's answer: what it shared, or
// why it shared nothing (another thread running, a platform that is not
// x86-64, no file within s.Timeout). The kernel runs nothing else
// meanwhile: it holds its GIL from the dump until the mapping.
func (k *Kernel) ShareHeap(ctx context.Context, s HeapShare) (api.HeapShare, error) {
	var out api.HeapShare
	if err := k.lock(ctx); err != nil {
		return out, err
	}
	defer k.unlock()
	p, err := k.ready(ctx, func(api.ExecuteEvent) {})
	if err != nil {
		return out, err
	}
	p.drain()
	id := k.ids.Add(1)
	if err := p.send(request{Op: "share", ID: id, Dump: s.Dump, Ready: s.Ready, Map: s.Map, Timeout: s.Timeout.Seconds()}); err != nil {
		return out, fmt.Errorf("sharing the heap: %w", err)
	}
	for {
		select {
		case f := <-p.ch:
			if f.id != id || f.msg == nil || f.msg.T != "done" {
				continue
			}
			m := f.msg
			if m.Status != "ok" {
				return out, fmt.Errorf("sharing the heap: %s: %s", m.Ename, m.Evalue)
			}
			return api.HeapShare{Regions: m.Regions, Bytes: m.Bytes, Stored: m.Stored, Millis: m.Ms}, nil
		case <-p.eof:
			p.awaitExit(sendFailureGrace)
			return out, fmt.Errorf("sharing the heap: kernel died (%s)", p.exitReason())
		case <-ctx.Done():
			k.abandon(ctx, p, id)
			return out, ctx.Err()
		}
	}
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

// envDiff returns what turns environment from into to.
func envDiff(from, to []string) (set map[string]string, unset []string) {
	old := make(map[string]string, len(from))
	for _, kv := range from {
		key, v, _ := strings.Cut(kv, "=")
		old[key] = v
	}
	set = map[string]string{}
	for _, kv := range to {
		key, v, _ := strings.Cut(kv, "=")
		if ov, ok := old[key]; !ok || ov != v {
			set[key] = v
		}
		delete(old, key)
	}
	for key := range old {
		unset = append(unset, key)
	}
	return set, unset
}

// Close ends the kernel process and closes its pipes. A call running at
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
