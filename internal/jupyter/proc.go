package jupyter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"
)

// proc is one ipykernel process and the sockets to it. A Kernel replaces
// its proc on restart; a proc is never reused once stopped.
type proc struct {
	log      *slog.Logger
	cmd      *exec.Cmd
	pid      int
	connFile string
	signer   signer
	session  string
	output   *tail // the process's own stdout and stderr, for diagnostics

	// ctx lives as long as the sockets; cancel closes them.
	ctx    context.Context
	cancel context.CancelFunc

	shell, iopub, control zmq4.Socket
	sendMu                sync.Mutex // one writer per socket at a time

	shellCh, iopubCh, controlCh chan *message
	// busy is set while a caller consumes the channels (the Kernel's
	// queue is held). Readers block on a full channel only then; otherwise
	// they drop, so output nobody waits for (a thread printing between
	// calls) never stalls them.
	busy     *atomic.Bool
	closing  chan struct{} // closed by stop: readers drop instead of blocking
	iopubEOF chan struct{} // closed when the iopub connection ends
	eofs     []chan struct{}
	readers  sync.WaitGroup

	exited chan struct{} // closed once the process has been waited for
	state  *os.ProcessState

	// killed is set when we end the process on purpose (Restart, Close), so
	// a running Execute tells "restarted" rather than "died".
	killed   atomic.Bool
	stopOnce sync.Once
}

// errPortInUse means the kernel could not bind a port we picked for it:
// another process took it in between. Starting again with new ports helps.
var errPortInUse = errors.New("kernel port already in use")

// launch starts an ipykernel process and waits until it answers
// kernel_info on shell and publishes on iopub.
func launch(ctx context.Context, cfg Config, logger *slog.Logger, busy *atomic.Bool) (*proc, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		p, err := launchOnce(ctx, cfg, logger, busy)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, errPortInUse) {
			return nil, err
		}
		lastErr = err
	}
	return nil, lastErr
}

func launchOnce(ctx context.Context, cfg Config, logger *slog.Logger, busy *atomic.Bool) (_ *proc, err error) {
	ports, err := freePorts(5)
	if err != nil {
		return nil, fmt.Errorf("picking ports: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("making key: %w", err)
	}
	hexKey := hex.EncodeToString(key)

	p := &proc{
		log:       logger,
		signer:    signer{key: []byte(hexKey)},
		session:   newID(),
		output:    &tail{max: 8 << 10},
		shellCh:   make(chan *message, 16),
		iopubCh:   make(chan *message, 64),
		controlCh: make(chan *message, 4),
		busy:      busy,
		closing:   make(chan struct{}),
		exited:    make(chan struct{}),
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.eofs = []chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
	p.iopubEOF = p.eofs[0]
	defer func() {
		if err != nil {
			p.stop()
		}
	}()

	p.connFile, err = writeConnectionFile(cfg, ports, hexKey)
	if err != nil {
		return nil, err
	}

	cmd := exec.Command(cfg.Python, "-m", "ipykernel_launcher", "-f", p.connFile)
	cmd.Dir = cfg.Cwd
	cmd.Env = kernelEnv(cfg.Env)
	cmd.Stdout, cmd.Stderr = p.output, p.output
	// Its own process group, so SIGINT and SIGKILL reach the subprocesses
	// the user's code started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cfg.Credential}
	// A grandchild that keeps our output pipes open must not hold Wait up.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s in %q: %w", cfg.Python, cfg.Cwd, err)
	}
	p.cmd, p.pid = cmd, cmd.Process.Pid
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.exited)
	}()

	if err := p.connect(ctx, ports); err != nil {
		return nil, p.startErr(err)
	}
	if err := p.handshake(ctx); err != nil {
		return nil, p.startErr(err)
	}
	return p, nil
}

// startErr explains why a kernel did not come up, with the end of its
// output when it exited.
func (p *proc) startErr(err error) error {
	select {
	case <-p.exited:
		out := strings.TrimSpace(p.output.String())
		if strings.Contains(out, "Address already in use") {
			return fmt.Errorf("%w: %s", errPortInUse, lastLine(out))
		}
		return fmt.Errorf("kernel exited during start-up (%s): %s", p.state, out)
	default:
		return err
	}
}

// connect dials the shell, iopub and control sockets, retrying until the
// kernel has bound them.
func (p *proc) connect(ctx context.Context, ports []int) error {
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	once := zmq4.WithDialerMaxRetries(0) // we retry ourselves, watching ctx and the process
	p.shell = zmq4.NewDealer(p.ctx, quiet, once)
	p.control = zmq4.NewDealer(p.ctx, quiet, once)
	p.iopub = zmq4.NewSub(p.ctx, quiet, once)
	if err := p.iopub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		return fmt.Errorf("subscribing to iopub: %w", err)
	}
	socks := []struct {
		s    zmq4.Socket
		port int
		ch   chan *message
		name string
	}{
		{p.iopub, ports[1], p.iopubCh, "iopub"},
		{p.shell, ports[0], p.shellCh, "shell"},
		{p.control, ports[3], p.controlCh, "control"},
	}
	for i, s := range socks {
		ep := fmt.Sprintf("tcp://127.0.0.1:%d", s.port)
		for {
			err := s.s.Dial(ep)
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("connecting %s: %w", s.name, ctx.Err())
			case <-p.exited:
				return fmt.Errorf("connecting %s: kernel exited", s.name)
			case <-time.After(20 * time.Millisecond):
			}
		}
		p.readers.Add(1)
		go p.read(s.s, s.ch, p.eofs[i])
	}
	return nil
}

// read delivers a socket's verified messages to ch until the socket
// closes, and closes eof when the connection ends.
func (p *proc) read(s zmq4.Socket, ch chan<- *message, eof chan struct{}) {
	defer p.readers.Done()
	var eofOnce sync.Once
	for {
		raw, err := s.Recv()
		if err != nil {
			eofOnce.Do(func() { close(eof) })
			if p.ctx.Err() != nil {
				return
			}
			// The connection broke (the kernel died); the socket stays
			// open until stop, so wait for that rather than spin.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		m, err := p.signer.decode(raw.Frames)
		if err != nil {
			p.log.Warn("dropping kernel message", "err", err)
			continue
		}
		if !p.busy.Load() {
			select {
			case ch <- m:
			default: // nobody is waiting for it
			}
			continue
		}
		select {
		case ch <- m:
		case <-p.closing:
		case <-p.ctx.Done():
			return
		}
	}
}

// send signs and sends a request on a DEALER socket.
func (p *proc) send(s zmq4.Socket, msgType string, content any) (string, error) {
	id, frames, err := p.signer.encode(p.session, msgType, content)
	if err != nil {
		return "", err
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	if err := s.Send(zmq4.NewMsgFrom(frames...)); err != nil {
		return "", fmt.Errorf("sending %s: %w", msgType, err)
	}
	return id, nil
}

// handshake sends kernel_info_request until the kernel replies on shell
// and we have seen it publish on iopub: only then is our subscription in
// place and no output of the first execution can be lost.
func (p *proc) handshake(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var gotReply, gotIOPub bool
	wait := 100 * time.Millisecond
	for !gotReply || !gotIOPub {
		if _, err := p.send(p.shell, "kernel_info_request", struct{}{}); err != nil {
			return err
		}
		retry := time.NewTimer(wait)
	loop:
		for !gotReply || !gotIOPub {
			select {
			case m := <-p.shellCh:
				if m.Header.MsgType == "kernel_info_reply" {
					gotReply = true
				}
			case <-p.iopubCh:
				gotIOPub = true
			case <-retry.C:
				break loop
			case <-p.exited:
				retry.Stop()
				return errors.New("kernel exited")
			case <-ctx.Done():
				retry.Stop()
				return fmt.Errorf("waiting for kernel_info_reply: %w", ctx.Err())
			}
		}
		retry.Stop()
		wait = min(2*wait, time.Second)
	}
	return nil
}

// signal sends sig to the kernel's process group.
func (p *proc) signal(sig syscall.Signal) error {
	select {
	case <-p.exited:
		return nil
	default:
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

// stop kills the process group, waits for it, closes the sockets and
// removes the connection file. Safe to call more than once and from any
// goroutine.
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
			// stranger.
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		}
		// Let the readers see their connections end before closing the
		// sockets: zmq4's per-connection goroutine only exits after
		// handing over that final error, and would leak if nobody read it.
		close(p.closing)
		// One deadline for all readers; a timer's channel fires once, so
		// once it has, the remaining readers are not waited for at all
		// (they may never have started, as when the process failed to).
		limit := time.NewTimer(time.Second)
		defer limit.Stop()
	wait:
		for _, eof := range p.eofs {
			select {
			case <-eof:
			case <-limit.C:
				break wait
			}
		}
		p.cancel()
		for _, s := range []zmq4.Socket{p.shell, p.iopub, p.control} {
			if s != nil {
				_ = s.Close()
			}
		}
		p.readers.Wait()
		if p.connFile != "" {
			if err := os.Remove(p.connFile); err != nil && !errors.Is(err, os.ErrNotExist) {
				p.log.Warn("removing connection file", "err", err)
			}
		}
	})
}

// freePorts picks n distinct free loopback ports. The listeners stay open
// until all are picked so the same port is not handed out twice.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// writeConnectionFile writes the kernel's connection file, readable only
// by the user the kernel runs as.
func writeConnectionFile(cfg Config, ports []int, key string) (string, error) {
	dir := cfg.RuntimeDir
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("making runtime dir: %w", err)
	}
	body, err := json.Marshal(map[string]any{
		"shell_port":       ports[0],
		"iopub_port":       ports[1],
		"stdin_port":       ports[2],
		"control_port":     ports[3],
		"hb_port":          ports[4],
		"ip":               "127.0.0.1",
		"key":              key,
		"transport":        "tcp",
		"signature_scheme": "hmac-sha256",
		"kernel_name":      "python3",
	})
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "kernel-*.json")
	if err != nil {
		return "", fmt.Errorf("writing connection file: %w", err)
	}
	name := f.Name()
	err = f.Chmod(0o600)
	if err == nil && cfg.Credential != nil {
		err = f.Chown(int(cfg.Credential.Uid), int(cfg.Credential.Gid))
	}
	if err == nil {
		_, err = f.Write(body)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return "", fmt.Errorf("writing connection file: %w", err)
	}
	return name, nil
}

// kernelEnv is the kernel's environment: cfg.Env (or ours when nil)
// without MPLBACKEND, so ipykernel can select its inline backend and
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

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
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
