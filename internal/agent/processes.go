package agent

// Background processes and terminals (docs/processes.md): a process table
// keyed by pid. Unlike POST /process, whose process lives as long as its
// request, a background process belongs to the agent: it runs in its own
// process group (its own session with a terminal), outlives the request
// that started it and any reader, and keeps its recent output in an
// outputLog that any number of readers replay and follow (GET
// /processes/{pid}/output as NDJSON, /processes/{pid}/ws as a WebSocket).
// The agent runs as a child of the pid-1 supervisor (internal/agent/pid1),
// so orphans of these processes are reaped there; the agent waits for its
// own children itself.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/api"
)

const (
	// maxTagBytes bounds a process's tag.
	maxTagBytes = 256
	// maxPtySide bounds a terminal's columns and rows.
	maxPtySide = 1000
	// keptEnded is how many ended processes stay listed (with their
	// output) for clients that reattach to read the end; the oldest-ended
	// go first. Each keeps up to outputLogBytes, so this bounds memory.
	keptEnded = 64
	// readChunk is how much of a process's output is read at once.
	readChunk = 32 << 10
	// streamBatch bounds the output one reader takes from the log at a time.
	streamBatch = 256 << 10
)

// Bounds on what runs in the background at once, per sandbox (429 past
// them). Memory is not what runs out first: a terminal (a login bash) takes
// about 0.8 MiB of a sandbox's memory (20 MiB per 25 terminals, measured in
// a 1 GiB sandbox). Tasks are: gVisor counts every task of the sandbox,
// the agent's threads included, against RLIMIT_NPROC (--processes, 512 by
// default), and each terminal costs three (its shell, and the agent's
// threads waiting on its exit and reading its terminal), each other
// background process two (it and the waiting thread). 300 terminals asked
// for one by one stopped at 165 with the sandbox's 514th task (fork
// EAGAIN, a 500); with more at once the agent itself could not make a
// thread, and a Go program that cannot is ended: the sandbox failed. So
// 64 terminals (192 tasks) and 64 other processes (128) leave the kernels,
// the agent and the processes' own children nearly 200 tasks under the
// default bound.
const (
	maxTerminals  = 64
	maxBackground = 64
)

// bgProcess is one background process.
type bgProcess struct {
	pid   int
	group int // its process group (pgid == pid: Setpgid or Setsid)
	out   *outputLog
	ended chan struct{} // closed once info has the exit code
	tty   *os.File      // the terminal's master side; nil without a pty

	// stdinMu keeps writes to stdin in order; it is not held by close, so
	// that closing stdin (or the process ending) unblocks a stuck write.
	stdinMu sync.Mutex

	mu       sync.Mutex
	info     api.ProcessInfo
	stdin    io.WriteCloser // nil once closed (or never open)
	endOrder int64          // when it ended, among ended processes
}

func (p *bgProcess) snapshot() api.ProcessInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	info := p.info
	info.Stdin = p.stdin != nil
	if info.Pty != nil {
		sz := *info.Pty
		info.Pty = &sz
	}
	return info
}

// processTable holds the agent's background processes.
type processTable struct {
	mu        sync.Mutex
	procs     map[int]*bgProcess
	ends      int64 // counts ends, for endOrder
	closed    bool
	terminals int // running terminals, started or starting
	others    int // other running background processes, started or starting
}

// reserve takes a place for a process about to start (a terminal or not),
// or says why there is none: the sandbox runs as many as it may, or the
// agent is shutting down. release gives the place back once it has ended
// or failed to start.
func (t *processTable) reserve(terminal bool) (release func(), err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return nil, errShuttingDown
	case terminal && t.terminals >= maxTerminals:
		return nil, boundError{fmt.Sprintf("%d terminals run in this sandbox already, its bound: close one (exit its shell or signal it) first", maxTerminals)}
	case !terminal && t.others >= maxBackground:
		return nil, boundError{fmt.Sprintf("%d background processes run in this sandbox already, its bound: wait for one to end or signal it first", maxBackground)}
	}
	n := &t.others
	if terminal {
		n = &t.terminals
	}
	*n++
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			*n--
		})
	}, nil
}

func (t *processTable) get(pid int) *bgProcess {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.procs[pid]
}

// add registers a started process. Its pid may be a reused one of an ended
// process still listed: that entry is gone for good.
func (t *processTable) add(p *bgProcess) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.procs == nil {
		t.procs = make(map[int]*bgProcess)
	}
	t.procs[p.pid] = p
}

// ended records that p ended and forgets the oldest-ended processes past
// keptEnded.
func (t *processTable) ended(p *bgProcess) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ends++
	p.mu.Lock()
	p.endOrder = t.ends
	p.mu.Unlock()
	var gone []*bgProcess
	for _, q := range t.procs {
		q.mu.Lock()
		if q.endOrder > 0 {
			gone = append(gone, q)
		}
		q.mu.Unlock()
	}
	if len(gone) <= keptEnded {
		return
	}
	slices.SortFunc(gone, func(a, b *bgProcess) int { return int(a.endOrder - b.endOrder) })
	for _, q := range gone[:len(gone)-keptEnded] {
		if t.procs[q.pid] == q {
			delete(t.procs, q.pid)
		}
	}
}

func (t *processTable) list() []*bgProcess {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps := make([]*bgProcess, 0, len(t.procs))
	for _, p := range t.procs {
		ps = append(ps, p)
	}
	return ps
}

// killAll kills every running process group: the agent is shutting down.
func (t *processTable) killAll() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	for _, p := range t.list() {
		select {
		case <-p.ended:
		default:
			_ = syscall.Kill(-p.group, syscall.SIGKILL)
		}
	}
}

// processAPI serves /processes — background processes and terminals,
// which outlive the request that started them — and POST /process, whose
// process lives as long as its request. The launcher starts them all.
type processAPI struct {
	decoder
	launch    *launcher
	log       *slog.Logger
	bash      string // the shell that runs a cmd
	maxOutput int64  // bounds the output POST /process streams
}

// startProcess is POST /processes.
func (pa *processAPI) startProcess(w http.ResponseWriter, r *http.Request) {
	var req api.ProcessStartRequest
	if !pa.decode(w, r, &req, false) || !checkStart(w, req) {
		return
	}
	timeoutMs, ok := timeoutOf(w, req.TimeoutMs, 0)
	if !ok || !checkEnvs(w, req.Envs) {
		return
	}
	as, ok := pa.launch.runAs(w, req.User)
	if !ok {
		return
	}
	cwd, ok := pa.launch.cwdOf(w, req.Cwd)
	if !ok {
		return
	}
	var term map[string]string
	if req.Pty != nil {
		term = map[string]string{"TERM": "xterm-256color"}
	}
	env := pa.launch.envFor(as, term, req.Envs)
	name, args := pa.bash, []string{"-c", req.Cmd}
	switch {
	case len(req.Args) > 0:
		name, args = req.Args[0], req.Args[1:]
	case req.Cmd == "":
		name, args = loginShell(pa.launch.name(as), pa.bash), []string{"-l"}
	}
	path, err := lookPath(name, env)
	if err != nil {
		field := "cmd"
		if len(req.Args) > 0 {
			field = "args"
		}
		invalid(w, field, "%v", err)
		return
	}
	info := api.ProcessInfo{Tag: req.Tag, Cmd: req.Cmd, User: pa.launch.name(as)}
	p, err := pa.launch.background(launch{as: as, path: path, args: args, dir: cwd, env: env, pty: req.Pty,
		timeoutKillsProcess: req.TimeoutKills == "process"}, info,
		req.Stdin, time.Duration(timeoutMs)*time.Millisecond, pa.log)
	if err != nil {
		answerStart(w, path, err)
		return
	}
	pa.log.Info("process started", "pid", p.pid, "tag", req.Tag, "pty", req.Pty != nil, "user", info.User)
	api.WriteJSON(w, http.StatusCreated, p.snapshot())
}

// checkStart answers 400 itself for a start that asks for nothing to run,
// or for two things, or with a NUL byte, a tag too long or a terminal too
// large.
func checkStart(w http.ResponseWriter, req api.ProcessStartRequest) bool {
	switch {
	case req.Cmd == "" && len(req.Args) == 0 && req.Pty == nil:
		invalid(w, "cmd", "one of cmd and args is required (only a terminal, pty, defaults to the login shell)")
		return false
	case req.Cmd != "" && len(req.Args) > 0:
		invalid(w, "cmd", "set only one of cmd and args")
		return false
	case len(req.Args) > 0 && req.Args[0] == "":
		invalid(w, "args", "the program name args[0] is empty")
		return false
	case len(req.Tag) > maxTagBytes:
		invalid(w, "tag", "is %d bytes; at most %d", len(req.Tag), maxTagBytes)
		return false
	case req.TimeoutKills != "" && req.TimeoutKills != "group" && req.TimeoutKills != "process":
		invalid(w, "timeoutKills", "is %q; group (the default) or process", req.TimeoutKills)
		return false
	}
	for _, s := range append([]string{req.Cmd, req.Tag}, req.Args...) {
		if strings.ContainsRune(s, 0) {
			invalid(w, "cmd", "contains a NUL byte")
			return false
		}
	}
	return req.Pty == nil || checkPtySize(w, "pty", *req.Pty)
}

// Why a background process did not start, before its own start failed.
var (
	// errShuttingDown: the agent is closing and starts nothing more.
	errShuttingDown = errors.New("agent is shutting down")
)

// boundError: the sandbox runs as many background processes of a kind
// as it may (maxTerminals, maxBackground).
type boundError struct{ msg string }

func (e boundError) Error() string { return e.msg }

// setupError: what the process needs (its terminal, its stdin) could not
// be made.
type setupError struct{ err error }

func (e setupError) Error() string { return e.err.Error() }

// answerStart answers for a background process at path that did not start.
func answerStart(w http.ResponseWriter, path string, err error) {
	var bound boundError
	var setup setupError
	switch {
	case errors.Is(err, errShuttingDown):
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "%v", err)
	case errors.As(err, &bound):
		writeError(w, http.StatusTooManyRequests, api.CodeRateLimited, "%v", err)
	case errors.As(err, &setup):
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "%v", err)
	case errors.Is(err, os.ErrPermission) || errors.Is(err, exec.ErrNotFound) || errors.Is(err, syscall.ENOEXEC):
		invalid(w, "cmd", "starting %s: %v", path, err)
	case errors.Is(err, syscall.EAGAIN):
		// The sandbox runs as many tasks as it may (--processes).
		writeError(w, http.StatusTooManyRequests, api.CodeRateLimited,
			"starting %s: %v: the sandbox runs as many processes as it may; end some first", path, err)
	default:
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "starting %s: %v", path, err)
	}
}

// background starts l as a background process described by info (its tag,
// cmd and user) within the sandbox's bounds (a terminal when l.pty is
// set), with a stdin pipe when stdin,
// killed with its group after timeout (0: never), and registers it in
// the table; it is waited for by a goroutine of its own. The error is
// errShuttingDown, a boundError, a setupError or the start's own.
func (lc *launcher) background(l launch, info api.ProcessInfo, stdin bool, timeout time.Duration, log *slog.Logger) (*bgProcess, error) {
	cmd, tty, err := lc.command(nil, l)
	if err != nil {
		return nil, setupError{fmt.Errorf("opening a terminal: %w", err)}
	}
	p := &bgProcess{out: newOutputLog(outputLogBytes), ended: make(chan struct{}), tty: tty}
	flush := func() {}
	if tty != nil {
		p.stdin = tty
	} else {
		stdout := &textWriter{log: p.out, kind: api.EventStdout}
		stderr := &textWriter{log: p.out, kind: api.EventStderr}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		// exec copies the pipes and Wait waits for that: only what is
		// left of a UTF-8 sequence remains.
		flush = func() { stdout.flush(); stderr.flush() }
		if stdin {
			in, err := cmd.StdinPipe()
			if err != nil {
				return nil, setupError{fmt.Errorf("opening stdin: %w", err)}
			}
			p.stdin = in
		}
	}
	release, err := lc.procs.reserve(tty != nil)
	if err == nil {
		if err = cmd.Start(); err != nil {
			release()
		}
	}
	if tty != nil {
		// The child has its own copy of the terminal's slave side.
		cmd.Stdin.(*os.File).Close()
	}
	if err != nil {
		p.closeIO()
		return nil, err
	}
	p.pid, p.group = cmd.Process.Pid, cmd.Process.Pid
	info.Args, info.Cwd, info.Running, info.Pid, info.StartedAt = slices.Clone(cmd.Args), l.dir, true, p.pid, time.Now().UTC()
	if l.pty != nil {
		size := *l.pty
		info.Pty = &size
	}
	p.info = info
	lc.procs.add(p)
	go func() {
		code := p.wait(cmd, timeout, l.timeoutKillsProcess, flush)
		release()
		lc.procs.ended(p)
		log.Info("process ended", "pid", p.pid, "exit_code", code)
	}()
	return p, nil
}

// wait waits for p's cmd to end, killing its group (or, onlyProcess,
// the process alone) after timeout (0: never), reads the rest of its
// output and records its end. What outlives a killed process and holds
// its output open is not waited for past waitDelay (cmd.WaitDelay).
func (p *bgProcess) wait(cmd *exec.Cmd, timeout time.Duration, onlyProcess bool, flush func()) int {
	var timedOut atomic.Bool
	var timer *time.Timer
	if timeout > 0 {
		target := -p.group
		if onlyProcess {
			target = p.pid
		}
		timer = time.AfterFunc(timeout, func() {
			timedOut.Store(true)
			_ = syscall.Kill(target, syscall.SIGKILL)
		})
	}
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		if p.tty != nil {
			p.copyTerminal()
		}
	}()
	err := cmd.Wait()
	if p.tty == nil {
		<-outDone
		flush()
	} else {
		// Output still in the terminal is read until its last holder
		// closes it; a child left behind holding it does not keep the
		// end back longer than waitDelay.
		select {
		case <-outDone:
		case <-time.After(waitDelay):
			p.tty.Close()
			<-outDone
		}
	}
	if timer != nil {
		timer.Stop()
	}
	res := runResult{state: cmd.ProcessState}
	code, msg := res.exitCode(), ""
	if timedOut.Load() {
		code, msg = ExitCodeTimeout, fmt.Sprintf("timed out after %v", timeout)
	}
	if code < 0 && err != nil {
		msg = err.Error()
	}
	p.finish(code, msg)
	return code
}

// copyTerminal reads p's terminal output into its log until it closes.
func (p *bgProcess) copyTerminal() {
	buf := make([]byte, readChunk)
	for {
		n, err := p.tty.Read(buf)
		p.out.write(api.OutputPty, buf[:n])
		if err != nil {
			return
		}
	}
}

// finish records the exit and closes what the process held.
func (p *bgProcess) finish(code int, msg string) {
	p.closeIO()
	now := time.Now().UTC()
	p.mu.Lock()
	p.info.Running = false
	p.info.ExitCode = &code
	p.info.EndedAt = &now
	p.info.Error = msg
	p.mu.Unlock()
	p.out.finish()
	close(p.ended)
}

// closeIO closes stdin and the terminal.
func (p *bgProcess) closeIO() {
	p.mu.Lock()
	in := p.stdin
	p.stdin = nil
	p.mu.Unlock()
	if in != nil {
		in.Close()
	}
	if p.tty != nil {
		p.tty.Close()
	}
}

// loginShell is user's shell in /etc/passwd, or def.
func loginShell(user, def string) string {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return def
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) == 7 && fields[0] == user && fields[6] != "" && !strings.HasSuffix(fields[6], "nologin") && !strings.HasSuffix(fields[6], "false") {
			if _, err := os.Stat(fields[6]); err == nil {
				return fields[6]
			}
		}
	}
	return def
}

func checkPtySize(w http.ResponseWriter, field string, s api.PtySize) bool {
	if s.Cols < 1 || s.Cols > maxPtySide {
		invalid(w, field+".cols", "is %d; want 1 to %d", s.Cols, maxPtySide)
		return false
	}
	if s.Rows < 1 || s.Rows > maxPtySide {
		invalid(w, field+".rows", "is %d; want 1 to %d", s.Rows, maxPtySide)
		return false
	}
	return true
}

// listProcesses is GET /processes: running ones first, each by start.
func (pa *processAPI) listProcesses(w http.ResponseWriter, r *http.Request) {
	ps := pa.launch.procs.list()
	list := api.ProcessList{Processes: make([]api.ProcessInfo, 0, len(ps))}
	for _, p := range ps {
		list.Processes = append(list.Processes, p.snapshot())
	}
	slices.SortFunc(list.Processes, func(x, y api.ProcessInfo) int {
		if x.Running != y.Running {
			if x.Running {
				return -1
			}
			return 1
		}
		if c := x.StartedAt.Compare(y.StartedAt); c != 0 {
			return c
		}
		return x.Pid - y.Pid
	})
	api.WriteJSON(w, http.StatusOK, list)
}

// processOf looks up the {pid} of the path, answering 404 itself.
func (pa *processAPI) processOf(w http.ResponseWriter, r *http.Request) *bgProcess {
	s := r.PathValue("pid")
	pid, err := strconv.Atoi(s)
	if err != nil || pid <= 0 {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no process %q: a pid is a positive number (GET /processes lists them)", s)
		return nil
	}
	p := pa.launch.procs.get(pid)
	if p == nil {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no process %d: not started with POST /processes, or ended long ago (GET /processes lists them)", pid)
		return nil
	}
	return p
}

// running answers 404 when p has ended: only its output and listing stay.
func running(w http.ResponseWriter, p *bgProcess) bool {
	select {
	case <-p.ended:
		info := p.snapshot()
		writeError(w, http.StatusNotFound, api.CodeNotFound, "process %d has ended (exit code %d)", p.pid, *info.ExitCode)
		return false
	default:
		return true
	}
}

// getProcess is GET /processes/{pid}: its info; with ?wait=1 once it ended.
func (pa *processAPI) getProcess(w http.ResponseWriter, r *http.Request) {
	p := pa.processOf(w, r)
	if p == nil {
		return
	}
	if r.URL.Query().Get("wait") == "1" {
		select {
		case <-p.ended:
		case <-r.Context().Done():
			return
		}
	}
	api.WriteJSON(w, http.StatusOK, p.snapshot())
}

// maxStdinBytes bounds one stdin request: a process reads its input at its
// own pace, and the request waits for it.
const maxStdinBytes = 8 << 20

// processStdin is POST /processes/{pid}/stdin: the body's bytes (a JSON
// body is a ProcessStdinRequest) go to the process's stdin. The answer
// waits until the process has taken them (a full pipe waits for it to
// read), which is the back-pressure a fast writer gets.
func (pa *processAPI) processStdin(w http.ResponseWriter, r *http.Request) {
	p := pa.processOf(w, r)
	if p == nil {
		return
	}
	var data []byte
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var req api.ProcessStdinRequest
		if !pa.decode(w, r, &req, false) {
			return
		}
		data = req.Data
	} else {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxStdinBytes))
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, api.CodeTooLarge, "stdin body is larger than %d bytes; send it in parts", tooBig.Limit)
			return
		}
		if err != nil {
			return
		}
		data = b
	}
	if err := p.writeStdin(data); err != nil {
		writeError(w, http.StatusConflict, api.CodeConflict, "process %d: %v", p.pid, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Why stdin cannot be written. Both answer 409, not 410: 410 means the
// sandbox itself is gone to every client.
var (
	errStdinClosed = errors.New("its stdin is closed (or it was started without stdin: true)")
	errEnded       = errors.New("it has ended")
)

func (p *bgProcess) writeStdin(data []byte) error {
	select {
	case <-p.ended:
		return errEnded
	default:
	}
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	p.mu.Lock()
	in := p.stdin
	p.mu.Unlock()
	if in == nil {
		select {
		case <-p.ended:
			return errEnded
		default:
			return errStdinClosed
		}
	}
	if _, err := in.Write(data); err != nil {
		select {
		case <-p.ended:
			return errEnded
		default:
		}
		if errors.Is(err, os.ErrClosed) || errors.Is(err, syscall.EPIPE) {
			return errStdinClosed
		}
		return fmt.Errorf("writing stdin: %w", err)
	}
	return nil
}

// closeStdin is POST /processes/{pid}/stdin/close: the process reads end
// of file. A terminal's input stays open (type Ctrl-D, "\x04", instead).
func (pa *processAPI) closeStdin(w http.ResponseWriter, r *http.Request) {
	p := pa.processOf(w, r)
	if p == nil || !running(w, p) {
		return
	}
	if err := p.closeStdin(); err != nil {
		writeError(w, http.StatusConflict, api.CodeConflict, "process %d: %v", p.pid, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (p *bgProcess) closeStdin() error {
	if p.tty != nil {
		return errors.New(`a terminal's input cannot be closed; send Ctrl-D ("\x04") to end a line-reading program's input`)
	}
	p.mu.Lock()
	in := p.stdin
	p.stdin = nil
	p.mu.Unlock()
	if in == nil {
		return errStdinClosed
	}
	return in.Close()
}

// signalProcess is POST /processes/{pid}/signal: the signal goes to the
// process's group, so it reaches the children it started too (a shell's
// pipeline, npm's node) the way Ctrl-C in a terminal does.
func (pa *processAPI) signalProcess(w http.ResponseWriter, r *http.Request) {
	var req api.ProcessSignalRequest
	p := pa.processOf(w, r)
	if p == nil || !pa.decode(w, r, &req, false) {
		return
	}
	sig, err := parseSignal(req.Signal)
	if err != nil {
		invalid(w, "signal", "%v", err)
		return
	}
	if !running(w, p) {
		return
	}
	if err := syscall.Kill(-p.group, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			writeError(w, http.StatusNotFound, api.CodeNotFound, "process %d has ended", p.pid)
			return
		}
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "signalling process %d: %v", p.pid, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// parseSignal reads "TERM", "SIGTERM", "term" or "15".
func parseSignal(s string) (syscall.Signal, error) {
	if s == "" {
		return 0, errors.New("is required: a name such as TERM, INT, KILL, HUP, USR1, or a number")
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 64 || (n > 31 && n < 34) {
			return 0, fmt.Errorf("%d is not a signal number (1 to 31, 34 to 64)", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q: want a name such as TERM, INT, KILL, HUP, USR1, or a number", s)
}

// resizeProcess is POST /processes/{pid}/resize: a terminal's new size.
func (pa *processAPI) resizeProcess(w http.ResponseWriter, r *http.Request) {
	var req api.PtySize
	p := pa.processOf(w, r)
	if p == nil || !pa.decode(w, r, &req, false) || !checkPtySize(w, "", req) {
		return
	}
	if !running(w, p) {
		return
	}
	if err := p.resize(req); err != nil {
		writeError(w, http.StatusConflict, api.CodeConflict, "process %d: %v", p.pid, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (p *bgProcess) resize(size api.PtySize) error {
	if p.tty == nil {
		return errors.New("it has no terminal (start it with pty to resize it)")
	}
	if err := pty.Setsize(p.tty, &pty.Winsize{Cols: uint16(size.Cols), Rows: uint16(size.Rows)}); err != nil {
		return fmt.Errorf("resizing its terminal: %w", err)
	}
	p.mu.Lock()
	p.info.Pty = &size
	p.mu.Unlock()
	return nil
}

// processOutput is GET /processes/{pid}/output: the kept output, then live
// output, then an end event with the exit code, as NDJSON
// (api.ProcessOutputEvent). Leaving does not touch the process.
func (pa *processAPI) processOutput(w http.ResponseWriter, r *http.Request) {
	p := pa.processOf(w, r)
	if p == nil {
		return
	}
	s := newSink(w, 0, func(kind, text string) any { return api.ProcessOutputEvent{Type: kind, Text: text} })
	defer s.close()
	follow(r.Context(), p, func(c outChunk) error {
		if c.kind == api.OutputPty {
			s.event(api.ProcessOutputEvent{Type: api.OutputPty, Data: c.data})
		} else {
			s.event(api.ProcessOutputEvent{Type: c.kind, Text: string(c.data)})
		}
		return nil
	}, func(n int64) error {
		s.event(api.ProcessOutputEvent{Type: api.OutputDropped, Dropped: n})
		return nil
	}, func(info api.ProcessInfo) {
		s.event(api.ProcessOutputEvent{Type: api.EventEnd, ExitCode: info.ExitCode, Error: info.Error})
	})
}

// follow feeds p's kept and live output to chunk, losses to dropped, and
// the end to end, until the output ends, ctx ends or a callback fails.
// Each reader goes at its own pace: one that cannot keep up loses output
// (reported) rather than holding any of it (outputLog).
func follow(ctx context.Context, p *bgProcess, chunk func(outChunk) error, dropped func(int64) error, end func(api.ProcessInfo)) {
	var off int64
	for ctx.Err() == nil {
		chunks, lost, next, done, wait := p.out.read(off, streamBatch)
		if lost > 0 {
			if dropped(lost) != nil {
				return
			}
		}
		for _, c := range chunks {
			if chunk(c) != nil {
				return
			}
		}
		off = next
		if done {
			<-p.ended
			end(p.snapshot())
			return
		}
		if len(chunks) == 0 {
			select {
			case <-wait:
			case <-ctx.Done():
				return
			}
		}
	}
}
