package pykernel

import (
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// program is the kernel (kernel.py). It travels to the interpreter as the
// first frame on the request pipe and bootstrap runs it: no file that
// the code (which runs as the same user) could alter or trip over, no
// argv of many kilobytes in every `ps`, nothing to clean up.
//
//go:embed kernel.py
var program []byte

// bootstrap is the whole of `python -c`: read one frame from fd 3 and run it.
const bootstrap = "import os\nb=b''\n" +
	"while len(b)<4 or len(b)<4+int.from_bytes(b[:4],'big'):\n" +
	" c=os.read(3,1<<16)\n if not c: raise SystemExit(1)\n b+=c\n" +
	"exec(compile(b[4:],'<lizard-kernel>','exec'))\n"

// Frame kinds from the kernel (docs/kernel-protocol.md).
const (
	kindStdout  = 'o'
	kindStderr  = 'e'
	kindMessage = 'm'
)

// maxFrame bounds one frame from the kernel; a longer length means the
// stream is corrupt (the kernel writes at most 64 KiB of text per frame,
// but a display's MIME bundle can be large).
const maxFrame = 256 << 20

// writeTimeout bounds writing one request frame.
const writeTimeout = 10 * time.Second

// frame is one thing the kernel said, in the order it said it.
type frame struct {
	kind byte
	id   uint32 // the request it belongs to; 0 between requests
	// fd marks output read from the process's own fds 1 and 2 (its
	// subprocesses, C code): it belongs to whichever call is running.
	fd   bool
	text []byte   // stdout, stderr
	msg  *message // kindMessage
}

// message is a JSON frame from the kernel; t says which fields are set.
type message struct {
	T         string                     `json:"t"` // ready, result, display, clear, error, done
	Data      map[string]json.RawMessage `json:"data,omitempty"`
	DisplayID string                     `json:"displayId,omitempty"`
	Update    bool                       `json:"update,omitempty"`
	Wait      bool                       `json:"wait,omitempty"`
	Count     int                        `json:"count,omitempty"`
	Status    string                     `json:"status,omitempty"`
	Ename     string                     `json:"ename,omitempty"`
	Evalue    string                     `json:"evalue,omitempty"`
	Traceback []string                   `json:"traceback,omitempty"`
	Pid       int                        `json:"pid,omitempty"`
	// share's answer (api.HeapShare)
	Regions int   `json:"regions,omitempty"`
	Bytes   int64 `json:"bytes,omitempty"`
	Stored  int64 `json:"stored,omitempty"`
	Ms      int64 `json:"ms,omitempty"`
}

// request is a frame to the kernel.
type request struct {
	Op      string            `json:"op"` // execute, import, renew, share
	ID      uint32            `json:"id,omitempty"`
	Code    string            `json:"code,omitempty"`
	Envs    map[string]string `json:"envs,omitempty"`
	Bundle  bool              `json:"bundle,omitempty"` // execute: add E2B's chart data
	Modules []string          `json:"modules,omitempty"`
	Set     map[string]string `json:"set,omitempty"`
	Unset   []string          `json:"unset,omitempty"`
	Reseed  bool              `json:"reseed,omitempty"`
	// share (HeapShare)
	Dump    string  `json:"dump,omitempty"`
	Ready   string  `json:"ready,omitempty"`
	Map     string  `json:"map,omitempty"`
	Timeout float64 `json:"timeout,omitempty"` // seconds
}

// proc is one kernel process and the pipes to it. A Kernel replaces its
// proc on restart; a proc is never reused once stopped.
type proc struct {
	log *slog.Logger
	cmd *exec.Cmd
	pid int

	reqMu sync.Mutex // one request frame at a time
	req   *os.File   // the kernel's fd 3

	// Read ends, read only by the reader goroutine (raw fds: it polls
	// them together so that output keeps its order), and a self-pipe
	// that stops it.
	ev, out, errOut int
	wakeR, wakeW    int

	ch chan frame
	// busy is set while a caller consumes ch (the Kernel's queue is
	// held), starting while launch waits for the kernel's hello. Other
	// times the reader drops what comes (output of a thread printing
	// between calls), so the kernel never stalls on it.
	busy     *atomic.Bool
	starting atomic.Bool
	diag     *tail         // output nobody was waiting for, for start-up errors
	closing  chan struct{} // closed by stop: the reader stops delivering
	eof      chan struct{} // closed when the reader has ended

	exited chan struct{} // closed once the process has been waited for
	state  *os.ProcessState

	// killed is set when we end the process on purpose (Restart, Close), so
	// a running Execute tells "restarted" rather than "died"; corrupt when
	// we ended it for a frame stream that no longer parsed.
	killed   atomic.Bool
	corrupt  atomic.Bool
	stopOnce sync.Once
}

// launch starts a kernel process and returns once it has said it is ready.
func launch(ctx context.Context, cfg Config, env []string, logger *slog.Logger, busy *atomic.Bool) (_ *proc, err error) {
	p := &proc{
		log:     logger,
		ev:      -1,
		out:     -1,
		errOut:  -1,
		wakeR:   -1,
		wakeW:   -1,
		ch:      make(chan frame, 64),
		busy:    busy,
		diag:    &tail{max: 8 << 10},
		closing: make(chan struct{}),
		eof:     make(chan struct{}),
		exited:  make(chan struct{}),
	}
	var child []*os.File // the kernel's ends, closed here once it has them
	defer func() {
		for _, f := range child {
			f.Close()
		}
		if err != nil {
			p.stop()
		}
	}()
	pipe := func() (r, w int, err error) {
		var fds [2]int
		if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
			return -1, -1, fmt.Errorf("making pipe: %w", err)
		}
		return fds[0], fds[1], nil
	}
	reqR, reqW, err := pipe()
	if err != nil {
		return nil, err
	}
	child = append(child, os.NewFile(uintptr(reqR), "kernel-requests"))
	// Non-blocking, so the write end goes through Go's poller and a
	// write to a stuck kernel ends when stop closes it.
	if err := syscall.SetNonblock(reqW, true); err != nil {
		syscall.Close(reqW)
		return nil, fmt.Errorf("making pipe: %w", err)
	}
	p.req = os.NewFile(uintptr(reqW), "kernel-requests")
	var evW, outW, errW int
	if p.ev, evW, err = pipe(); err != nil {
		return nil, err
	}
	child = append(child, os.NewFile(uintptr(evW), "kernel-events"))
	if p.out, outW, err = pipe(); err != nil {
		return nil, err
	}
	child = append(child, os.NewFile(uintptr(outW), "kernel-stdout"))
	if p.errOut, errW, err = pipe(); err != nil {
		return nil, err
	}
	child = append(child, os.NewFile(uintptr(errW), "kernel-stderr"))
	if p.wakeR, p.wakeW, err = pipe(); err != nil {
		return nil, err
	}

	cmd := exec.Command(cfg.Python, "-c", bootstrap)
	cmd.Dir = cfg.Cwd
	cmd.Env = kernelEnv(env)
	cmd.Stdout, cmd.Stderr = child[2], child[3]
	cmd.ExtraFiles = []*os.File{child[0], child[1]} // fds 3 and 4
	// Its own process group, so SIGINT and SIGKILL reach the subprocesses
	// the user's code started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cfg.Credential}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s in %q: %w", cfg.Python, cfg.Cwd, err)
	}
	p.cmd, p.pid = cmd, cmd.Process.Pid
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	for _, f := range child {
		f.Close()
	}
	child = nil
	p.starting.Store(true)
	defer p.starting.Store(false)
	go p.read()

	if err := p.writeFrame(program); err != nil {
		return nil, p.startErr(fmt.Errorf("sending the kernel program: %w", err))
	}
	for {
		select {
		case f := <-p.ch:
			if f.msg != nil && f.msg.T == "ready" {
				return p, nil
			}
			if f.text != nil {
				_, _ = p.diag.Write(f.text)
			}
		case <-p.eof:
			return nil, p.startErr(errors.New("kernel closed its pipe"))
		case <-p.exited:
			return nil, p.startErr(errors.New("kernel exited"))
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the kernel to start: %w", ctx.Err())
		}
	}
}

// startErr explains why a kernel did not come up, with the end of its
// output once it has exited.
func (p *proc) startErr(err error) error {
	if !p.awaitExit(2 * time.Second) {
		return err
	}
	// What it wrote on its way out may still be in the pipes.
	select {
	case <-p.eof:
	case <-time.After(time.Second):
	}
	for {
		select {
		case f := <-p.ch:
			if f.text != nil {
				_, _ = p.diag.Write(f.text)
			}
			continue
		default:
		}
		break
	}
	out := strings.TrimSpace(p.diag.String())
	if errno, ok := startErrno(out); ok {
		return fmt.Errorf("kernel exited during start-up (%s): %w: %s", p.exitReason(), errno, out)
	}
	return fmt.Errorf("kernel exited during start-up (%s): %s", p.exitReason(), out)
}

// startErrno is the full disk a kernel's start-up output says it ended
// for (Python's OSError of ENOSPC or EDQUOT: IPython writes its profile
// directory in the home at start), for the caller to tell as such.
func startErrno(out string) (syscall.Errno, bool) {
	for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT} {
		if strings.Contains(out, fmt.Sprintf("[Errno %d] ", int(errno))) {
			return errno, true
		}
	}
	return 0, false
}

// send writes one request frame.
func (p *proc) send(r request) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding %s request: %w", r.Op, err)
	}
	if err := p.writeFrame(b); err != nil {
		return fmt.Errorf("sending %s request: %w", r.Op, err)
	}
	return nil
}

func (p *proc) writeFrame(body []byte) error {
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	p.reqMu.Lock()
	defer p.reqMu.Unlock()
	// A kernel reads requests between calls; a full pipe (a long call and
	// many renewals queued behind it) must not hold the caller for good.
	_ = p.req.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := p.req.Write(buf)
	return err
}

// read is the only reader of the kernel's pipes. It polls them together
// and, whenever frames and fd output are both waiting, hands on the fd
// output first: output a subprocess wrote before the kernel wrote a frame
// is then never delivered after that frame. It ends when the kernel's
// frame pipe closes (the process is gone) or stop wakes it.
func (p *proc) read() {
	defer close(p.eof)
	var (
		buf     []byte
		rd      = make([]byte, 64<<10)
		pending [2][]byte // an incomplete UTF-8 sequence at the end of fd output
		fds     = []unix.PollFd{
			{Fd: int32(p.ev), Events: unix.POLLIN},
			{Fd: int32(p.out), Events: unix.POLLIN},
			{Fd: int32(p.errOut), Events: unix.POLLIN},
			{Fd: int32(p.wakeR), Events: unix.POLLIN},
		}
	)
	readFD := func(i int) {
		n, err := syscall.Read(int(fds[i].Fd), rd)
		if n <= 0 {
			if err != syscall.EINTR && err != syscall.EAGAIN {
				fds[i].Fd = -1 // closed: poll ignores negative fds
			}
			return
		}
		data := append(pending[i-1], rd[:n]...)
		cut := completeUTF8(data)
		pending[i-1] = append([]byte(nil), data[cut:]...)
		if cut == 0 {
			return
		}
		kind := byte(kindStdout)
		if i == 2 {
			kind = kindStderr
		}
		p.deliver(frame{kind: kind, fd: true, text: append([]byte(nil), data[:cut]...)})
	}
	for {
		_, err := unix.Poll(fds, -1)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			p.log.Warn("polling kernel pipes", "err", err)
			return
		}
		if fds[3].Revents != 0 {
			return
		}
		for i := 1; i <= 2; i++ {
			if fds[i].Fd >= 0 && fds[i].Revents != 0 {
				readFD(i)
			}
		}
		if fds[0].Revents == 0 {
			continue
		}
		n, err := syscall.Read(p.ev, rd)
		if n <= 0 {
			if err == syscall.EINTR || err == syscall.EAGAIN {
				continue
			}
			break // the kernel is gone
		}
		buf = append(buf, rd[:n]...)
		for len(buf) >= 4 {
			size := int(binary.BigEndian.Uint32(buf))
			if size < 5 || size > maxFrame {
				p.corrupted(fmt.Sprintf("a frame of %d bytes", size))
				return
			}
			if len(buf) < 4+size {
				break
			}
			f, err := p.parse(buf[4 : 4+size])
			if err != nil {
				p.corrupted(err.Error())
				return
			}
			buf = buf[4+size:]
			p.deliver(f)
		}
		if len(buf) == 0 {
			buf = nil // do not pin a large frame's array
		}
	}
	// The kernel is gone. Pass on what it (or its children) left in fds 1
	// and 2, without waiting for children that still hold them open.
	for range 64 {
		fds[0].Fd = -1
		if n, err := unix.Poll(fds, 0); err != nil || n == 0 {
			return
		}
		if fds[3].Revents != 0 {
			return
		}
		got := false
		for i := 1; i <= 2; i++ {
			if fds[i].Fd >= 0 && fds[i].Revents&unix.POLLIN != 0 {
				readFD(i)
				got = true
			}
		}
		if !got {
			return
		}
	}
}

// corrupted ends a kernel whose frame stream no longer parses (code that
// wrote to fd 4 itself): nothing it says can be trusted or told apart any
// more. The call running ends with KernelDiedError and the kernel is
// restarted, as for any death.
func (p *proc) corrupted(what string) {
	p.log.Error("corrupt frame stream from kernel; killing it", "pid", p.pid, "got", what)
	p.corrupt.Store(true)
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	p.discard()
}

// discard drains the frame pipe after a corrupt frame until it closes or
// stop is called.
func (p *proc) discard() {
	rd := make([]byte, 64<<10)
	fds := []unix.PollFd{{Fd: int32(p.ev), Events: unix.POLLIN}, {Fd: int32(p.wakeR), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if n, err := syscall.Read(p.ev, rd); n <= 0 && err != syscall.EINTR {
			return
		}
	}
}

func (p *proc) parse(b []byte) (frame, error) {
	f := frame{kind: b[0], id: binary.BigEndian.Uint32(b[1:5])}
	body := b[5:]
	switch f.kind {
	case kindStdout, kindStderr:
		f.text = append([]byte(nil), body...)
	case kindMessage:
		f.msg = new(message)
		if err := json.Unmarshal(body, f.msg); err != nil {
			return f, fmt.Errorf("a message that is not JSON: %w", err)
		}
	default:
		return f, fmt.Errorf("a frame of unknown kind %q", f.kind)
	}
	return f, nil
}

// deliver hands f to the caller consuming frames, waiting for it (which
// bounds what the agent holds: the kernel blocks on a full pipe), or
// drops it when nobody is waiting.
func (p *proc) deliver(f frame) {
	if !p.busy.Load() && !p.starting.Load() {
		if f.text != nil {
			_, _ = p.diag.Write(f.text)
		}
		return
	}
	select {
	case p.ch <- f:
	case <-p.closing:
	}
}

// signal sends sig to the kernel's process group.
func (p *proc) signal(sig syscall.Signal) error {
	if p.isExited() {
		return nil
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling kernel %d: %w", p.pid, err)
	}
	return nil
}

// awaitExit reports whether the process exits within d.
func (p *proc) awaitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
		return false
	}
}

func (p *proc) isExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// exitReason says how the process ended, for messages to the user.
func (p *proc) exitReason() string {
	if p.corrupt.Load() {
		return "killed: what it sent the agent was no longer its protocol; did the code write to fd 4?"
	}
	if p.state == nil {
		return "unknown exit"
	}
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		s := "killed by signal " + signalName(ws.Signal())
		if ws.Signal() == syscall.SIGKILL {
			s += ", perhaps for running out of memory"
		}
		return s
	}
	return fmt.Sprintf("exit status %d", p.state.ExitCode())
}

// drain drops frames left over from earlier calls.
func (p *proc) drain() {
	for {
		select {
		case <-p.ch:
		default:
			return
		}
	}
}

// stop kills the process group, waits for it and the reader, and closes
// the pipes. Safe to call more than once and from any goroutine.
func (p *proc) stop() {
	p.stopOnce.Do(func() {
		if p.cmd != nil {
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
			select {
			case <-p.exited:
			case <-time.After(10 * time.Second):
				p.log.Warn("kernel did not exit after SIGKILL", "pid", p.pid)
			}
			// Members of the group that outlived the leader: the group
			// id stays reserved while they live, so this cannot hit a
			// stranger. They are not our children to wait for, so the
			// group is polled until it is gone: a stop leaves nothing.
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
			for deadline := time.Now().Add(2 * time.Second); syscall.Kill(-p.pid, 0) == nil && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
		}
		close(p.closing)
		if p.cmd != nil {
			_, _ = syscall.Write(p.wakeW, []byte{0})
			<-p.eof
		}
		if p.req != nil {
			p.req.Close()
		}
		for _, fd := range []int{p.ev, p.out, p.errOut, p.wakeR, p.wakeW} {
			if fd >= 0 {
				syscall.Close(fd)
			}
		}
	})
}

// kernelEnv is the kernel's environment: env (or ours when nil) without
// MPLBACKEND, so the kernel selects matplotlib's inline backend and
// plt.show() yields a PNG rather than nothing.
func kernelEnv(env []string) []string {
	if env == nil {
		env = os.Environ()
	}
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if strings.HasPrefix(kv, "MPLBACKEND=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// completeUTF8 returns the length of p without a trailing incomplete UTF-8
// sequence: pipe reads split text anywhere.
func completeUTF8(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax; i-- {
		if utf8.RuneStart(p[i]) {
			if utf8.FullRune(p[i:]) {
				return len(p)
			}
			return i
		}
	}
	return len(p)
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

func signalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGKILL: "SIGKILL", syscall.SIGSEGV: "SIGSEGV", syscall.SIGABRT: "SIGABRT",
		syscall.SIGTERM: "SIGTERM", syscall.SIGBUS: "SIGBUS", syscall.SIGILL: "SIGILL",
		syscall.SIGFPE: "SIGFPE", syscall.SIGINT: "SIGINT", syscall.SIGHUP: "SIGHUP",
	}
	if n, ok := names[s]; ok {
		return n
	}
	return s.String()
}
