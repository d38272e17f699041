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
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// errShuttingDown: the agent is closing and starts nothing more.
var errShuttingDown = errors.New("agent is shutting down")

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
		return nil, fmt.Errorf("%d terminals run in this sandbox already, its bound: close one (exit its shell or signal it) first", maxTerminals)
	case !terminal && t.others >= maxBackground:
		return nil, fmt.Errorf("%d background processes run in this sandbox already, its bound: wait for one to end or signal it first", maxBackground)
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

// startProcess is POST /processes.
func (a *Agent) startProcess(w http.ResponseWriter, r *http.Request) {
	var req api.ProcessStartRequest
	if !a.decode(w, r, &req, false) {
		return
	}
	switch {
	case req.Cmd == "" && len(req.Args) == 0 && req.Pty == nil:
		invalid(w, "cmd", "one of cmd and args is required (only a terminal, pty, defaults to the login shell)")
		return
	case req.Cmd != "" && len(req.Args) > 0:
		invalid(w, "cmd", "set only one of cmd and args")
		return
	case len(req.Args) > 0 && req.Args[0] == "":
		invalid(w, "args", "the program name args[0] is empty")
		return
	case len(req.Tag) > maxTagBytes:
		invalid(w, "tag", "is %d bytes; at most %d", len(req.Tag), maxTagBytes)
		return
	}
	for _, s := range append([]string{req.Cmd, req.Tag}, req.Args...) {
		if strings.ContainsRune(s, 0) {
			invalid(w, "cmd", "contains a NUL byte")
			return
		}
	}
	if req.Pty != nil && !checkPtySize(w, "pty", *req.Pty) {
		return
	}
	timeoutMs, ok := timeoutOf(w, req.TimeoutMs, 0)
	if !ok || !checkEnvs(w, req.Envs) {
		return
	}
	cred, userName, home, ok := a.processUser(w, req.User)
	if !ok {
		return
	}
	cwd, ok := a.cwdOf(w, req.Cwd)
	if !ok {
		return
	}
	env := a.baseEnv()
	if req.User == "root" && a.user.cred != nil {
		env = withEnvs(env, map[string]string{"HOME": home, "USER": "root", "LOGNAME": "root"})
	}
	if req.Pty != nil {
		env = withEnvs(env, map[string]string{"TERM": "xterm-256color"})
	}
	env = withEnvs(env, req.Envs)

	name, args := a.cfg.Bash, []string{"-c", req.Cmd}
	switch {
	case len(req.Args) > 0:
		name, args = req.Args[0], req.Args[1:]
	case req.Cmd == "":
		name, args = loginShell(userName, a.cfg.Bash), []string{"-l"}
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
	cmd := exec.Command(path, args...)
	cmd.Args[0] = filepath.Base(path)
	cmd.Dir, cmd.Env = cwd, env
	info := api.ProcessInfo{
		Tag: req.Tag, Cmd: req.Cmd, Args: slices.Clone(cmd.Args), Cwd: cwd, User: userName,
		Running: true,
	}
	p := &bgProcess{out: newOutputLog(outputLogBytes), ended: make(chan struct{})}
	var copyOut func() // reads a terminal's output until it closes
	flush := func() {}
	if req.Pty != nil {
		size := *req.Pty
		info.Pty = &size
		tty, err := a.openPty(cmd, size, cred)
		if err != nil {
			writeError(w, http.StatusInternalServerError, api.CodeInternal, "opening a terminal: %v", err)
			return
		}
		p.tty = tty
		p.stdin = tty
		copyOut = func() {
			buf := make([]byte, readChunk)
			for {
				n, err := tty.Read(buf)
				p.out.write(api.OutputPty, buf[:n])
				if err != nil {
					return
				}
			}
		}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
		stdout := &textWriter{log: p.out, kind: api.EventStdout}
		stderr := &textWriter{log: p.out, kind: api.EventStderr}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		// A child that keeps the pipes open must not hold the end back.
		cmd.WaitDelay = waitDelay
		if req.Stdin {
			in, err := cmd.StdinPipe()
			if err != nil {
				writeError(w, http.StatusInternalServerError, api.CodeInternal, "opening stdin: %v", err)
				return
			}
			p.stdin = in
		}
		// exec copies the pipes and Wait waits for that: only what is
		// left of a UTF-8 sequence remains.
		copyOut = func() {}
		flush = func() { stdout.flush(); stderr.flush() }
	}

	release, err := a.procs.reserve(req.Pty != nil)
	if err != nil {
		p.closeIO()
		if errors.Is(err, errShuttingDown) {
			writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "%v", err)
			return
		}
		writeError(w, http.StatusTooManyRequests, api.CodeRateLimited, "%v", err)
		return
	}
	err = cmd.Start()
	if p.tty != nil {
		// The child has its own copy of the terminal's slave side.
		cmd.Stdin.(*os.File).Close()
	}
	if err != nil {
		release()
		p.closeIO()
		switch {
		case errors.Is(err, os.ErrPermission) || errors.Is(err, exec.ErrNotFound) || errors.Is(err, syscall.ENOEXEC):
			invalid(w, "cmd", "starting %s: %v", path, err)
		case errors.Is(err, syscall.EAGAIN):
			// The sandbox runs as many tasks as it may (--processes).
			writeError(w, http.StatusTooManyRequests, api.CodeRateLimited,
				"starting %s: %v: the sandbox runs as many processes as it may; end some first", path, err)
		default:
			writeError(w, http.StatusInternalServerError, api.CodeInternal, "starting %s: %v", path, err)
		}
		return
	}
	p.pid, p.group = cmd.Process.Pid, cmd.Process.Pid
	info.Pid, info.StartedAt = p.pid, time.Now().UTC()
	p.info = info
	a.procs.add(p)
	a.log.Info("process started", "pid", p.pid, "tag", req.Tag, "pty", req.Pty != nil, "user", userName)

	var timedOut bool
	var timer *time.Timer
	var timerMu sync.Mutex
	if timeoutMs > 0 {
		timeout := time.Duration(timeoutMs) * time.Millisecond
		timer = time.AfterFunc(timeout, func() {
			timerMu.Lock()
			timedOut = true
			timerMu.Unlock()
			_ = syscall.Kill(-p.group, syscall.SIGKILL)
		})
	}
	go func() {
		outDone := make(chan struct{})
		go func() {
			defer close(outDone)
			copyOut()
		}()
		err := cmd.Wait()
		if p.tty == nil {
			<-outDone
			flush()
		} else {
			// Output still in the terminal is read until its last holder
			// closes it; a child left behind holding it does not keep
			// the end back longer than waitDelay.
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
		timerMu.Lock()
		if timedOut {
			code, msg = ExitCodeTimeout, fmt.Sprintf("timed out after %v", time.Duration(timeoutMs)*time.Millisecond)
		}
		timerMu.Unlock()
		if code < 0 && err != nil {
			msg = err.Error()
		}
		p.finish(code, msg)
		release()
		a.procs.ended(p)
		a.log.Info("process ended", "pid", p.pid, "exit_code", code)
	}()
	writeJSON(w, http.StatusCreated, p.snapshot())
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

// openPty gives cmd a new terminal of size as its controlling terminal, in
// a session of its own, and returns the master side. cmd's stdio is the
// slave side, which the caller closes after the start.
func (a *Agent) openPty(cmd *exec.Cmd, size api.PtySize, cred *syscall.Credential) (*os.File, error) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, err
	}
	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: uint16(size.Cols), Rows: uint16(size.Rows)}); err != nil {
		ptmx.Close()
		tty.Close()
		return nil, err
	}
	if cred != nil {
		// The user's shell may chmod/chown its own terminal (mesg, script).
		_ = tty.Chown(int(cred.Uid), -1)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Credential: cred}
	return ptmx, nil
}

// processUser resolves a start's user: the sandbox user by default, or
// root (the agent's own user).
func (a *Agent) processUser(w http.ResponseWriter, name string) (*syscall.Credential, string, string, bool) {
	switch name {
	case "", a.user.name:
		return a.user.cred, a.user.displayName(), a.user.home, true
	case "root":
		if os.Getuid() != 0 {
			invalid(w, "user", "the agent is not root, so it cannot run code as root")
			return nil, "", "", false
		}
		return nil, "root", "/root", true
	}
	invalid(w, "user", "unknown user %q: want root or the sandbox user %s", name, a.user.displayName())
	return nil, "", "", false
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
func (a *Agent) listProcesses(w http.ResponseWriter, r *http.Request) {
	ps := a.procs.list()
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
	writeJSON(w, http.StatusOK, list)
}

// processOf looks up the {pid} of the path, answering 404 itself.
func (a *Agent) processOf(w http.ResponseWriter, r *http.Request) *bgProcess {
	s := r.PathValue("pid")
	pid, err := strconv.Atoi(s)
	if err != nil || pid <= 0 {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no process %q: a pid is a positive number (GET /processes lists them)", s)
		return nil
	}
	p := a.procs.get(pid)
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
func (a *Agent) getProcess(w http.ResponseWriter, r *http.Request) {
	p := a.processOf(w, r)
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
	writeJSON(w, http.StatusOK, p.snapshot())
}

// maxStdinBytes bounds one stdin request: a process reads its input at its
// own pace, and the request waits for it.
const maxStdinBytes = 8 << 20

// processStdin is POST /processes/{pid}/stdin: the body's bytes (a JSON
// body is a ProcessStdinRequest) go to the process's stdin. The answer
// waits until the process has taken them (a full pipe waits for it to
// read), which is the back-pressure a fast writer gets.
func (a *Agent) processStdin(w http.ResponseWriter, r *http.Request) {
	p := a.processOf(w, r)
	if p == nil {
		return
	}
	var data []byte
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var req api.ProcessStdinRequest
		if !a.decode(w, r, &req, false) {
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
func (a *Agent) closeStdin(w http.ResponseWriter, r *http.Request) {
	p := a.processOf(w, r)
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
func (a *Agent) signalProcess(w http.ResponseWriter, r *http.Request) {
	var req api.ProcessSignalRequest
	p := a.processOf(w, r)
	if p == nil || !a.decode(w, r, &req, false) {
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
func (a *Agent) resizeProcess(w http.ResponseWriter, r *http.Request) {
	var req api.PtySize
	p := a.processOf(w, r)
	if p == nil || !a.decode(w, r, &req, false) || !checkPtySize(w, "", req) {
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
func (a *Agent) processOutput(w http.ResponseWriter, r *http.Request) {
	p := a.processOf(w, r)
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
