package sudo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// handshakeTimeout bounds how long a connection may take to send its
// request: one that sends nothing must not hold a session's slot.
var handshakeTimeout = 10 * time.Second

// Server is the agent's side: it runs what sudo asks, as the target user.
type Server struct {
	// UserUID is the sandbox user's uid: it and root may use sudo, as on
	// E2B, where the sandbox user alone is in sudoers.
	UserUID int
	Log     *slog.Logger
	// Max bounds the sessions at once; 0 is MaxSessions.
	Max int

	users accounts // the sandbox's /etc/passwd and /etc/group
	// peer reads who is at the other end; tests replace it.
	peer func(*net.UnixConn) (unix.Ucred, error)
}

// Listen makes the socket at path, in a directory only root may write
// (made so if missing), open to every user: who may use it is decided per
// connection from its peer credentials.
func Listen(path string) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	// A template may hold the directory already, as a link or another
	// user's: it is made root's again, so that only root can bind here.
	if fi, err := os.Lstat(dir); err == nil && !fi.IsDir() {
		if err := os.Remove(dir); err != nil {
			return nil, fmt.Errorf("replacing %s: %w", dir, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("making %s: %w", dir, err)
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(dir, 0, 0); err != nil {
			return nil, fmt.Errorf("making %s root's: %w", dir, err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("making %s: %w", dir, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing a stale %s: %w", path, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("opening %s to every user: %w", path, err)
	}
	return ln, nil
}

// Install makes sudo at path the agent's own executable, exe, under a
// link the client recognizes by its name. A template's own sudo is
// replaced: its set-user-ID bit was stripped when the template was built,
// so it could never work.
func Install(path, exe string) error {
	tmp := filepath.Join(filepath.Dir(path), ".lizard-sudo")
	os.Remove(tmp)
	if err := os.Symlink(exe, tmp); err != nil {
		return fmt.Errorf("installing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("installing %s: %w", path, err)
	}
	return nil
}

// Serve answers connections on ln until ctx ends; then every command
// sudo started is killed.
func (s *Server) Serve(ctx context.Context, ln *net.UnixListener) error {
	max := s.Max
	if max <= 0 {
		max = MaxSessions
	}
	if s.peer == nil {
		s.peer = peerCred
	}
	slots := make(chan struct{}, max)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		uc, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return fmt.Errorf("accepting sudo connections: %w", err)
		}
		select {
		case slots <- struct{}{}:
			go func() {
				defer func() { <-slots }()
				s.session(ctx, uc)
			}()
		default:
			// Refused at once: a flood costs one descriptor at a time.
			c := &conn{c: uc}
			uc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			c.send(Reply{Error: fmt.Sprintf("sudo: %d sudo commands run in this sandbox already, its bound: wait for one to end", max)})
			c.close()
		}
	}
}

// session runs one connection's command.
func (s *Server) session(ctx context.Context, uc *net.UnixConn) {
	c := &conn{c: uc}
	refuse := func(format string, args ...any) {
		uc.SetWriteDeadline(time.Now().Add(time.Second))
		c.send(Reply{Error: fmt.Sprintf(format, args...)})
		c.close()
	}
	cred, err := s.peer(uc)
	if err != nil {
		refuse("sudo: reading who asked: %v", err)
		return
	}
	caller := s.users.byUID(int(cred.Uid))
	if cred.Uid != 0 && int(cred.Uid) != s.UserUID {
		s.Log.Warn("sudo refused", "uid", cred.Uid, "pid", cred.Pid)
		refuse("sudo: %s is not in the sudoers file: in a Lizard sandbox only root and the sandbox user (uid %d) may use sudo", caller.name, s.UserUID)
		return
	}
	uc.SetReadDeadline(time.Now().Add(handshakeTimeout))
	var req Request
	err = c.recv(&req, maxRequestBytes, stdioFDs)
	fds := c.takeFDs()
	if err != nil {
		closeFDs(fds)
		refuse("sudo: the agent could not read the request: %v", err)
		return
	}
	if len(fds) != stdioFDs {
		closeFDs(fds)
		refuse("sudo: the request carried %d file descriptors, not stdin, stdout and stderr", len(fds))
		return
	}
	uc.SetReadDeadline(time.Time{})
	cmd, master, err := s.start(ctx, &req, caller, fds)
	if err != nil {
		refuse("%v", err)
		return
	}
	var sent error
	if master != nil {
		sent = c.send(Reply{Started: true}, int(master.Fd()))
		master.Close()
	} else {
		sent = c.send(Reply{Started: true})
	}
	ended := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		if sent != nil {
			killGroup(cmd, syscall.SIGKILL)
			return
		}
		for {
			var f Forward
			err := c.recv(&f, maxMessageBytes, 0)
			if err != nil {
				// The client is gone (killed, or it closed its end): so is
				// the command, as when sudo dies with its terminal.
				select {
				case <-ended:
				default:
					killGroup(cmd, syscall.SIGKILL)
				}
				return
			}
			if f.Signal > 0 && f.Signal < 65 {
				killGroup(cmd, syscall.Signal(f.Signal))
			}
		}
	}()
	cmd.Wait()
	close(ended)
	uc.SetWriteDeadline(time.Now().Add(time.Second))
	c.send(waitStatus(cmd.ProcessState))
	uc.Close()
	<-read
	closeFDs(c.takeFDs())
}

// start starts what req asks with fds as its stdio (closed here: the
// command has its copies), as the target user, leading a process group of
// its own, or a session whose controlling terminal is a new one when the
// caller is on a terminal (returned: its master is the caller's to relay).
func (s *Server) start(ctx context.Context, req *Request, caller account, fds []int) (*exec.Cmd, *os.File, error) {
	var stdio [stdioFDs]*os.File
	for i, fd := range fds {
		stdio[i] = os.NewFile(uintptr(fd), fmt.Sprintf("sudo-stdio-%d", i))
	}
	defer func() {
		for _, f := range stdio {
			f.Close()
		}
	}()
	if len(req.Command) == 0 && !req.Login && !req.Shell {
		return nil, nil, errors.New("sudo: no command to run")
	}
	spec := req.User
	if spec == "" {
		spec = "root"
	}
	target, err := s.users.lookup(spec)
	if err != nil {
		return nil, nil, err
	}
	p, err := planFor(req, caller, target)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.CommandContext(ctx, p.path)
	cmd.Args, cmd.Env, cmd.Dir = p.argv, p.env, p.dir
	cmd.Cancel = func() error { return killGroup(cmd, syscall.SIGKILL) }
	var cred *syscall.Credential
	if target.uid != os.Geteuid() || os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: uint32(target.uid), Gid: uint32(target.gid), Groups: target.groups}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdio[0], stdio[1], stdio[2]
	var master, tty *os.File
	if req.terminal() {
		if master, tty, err = pty.Open(); err != nil {
			return nil, nil, fmt.Errorf("sudo: making a terminal: %v", err)
		}
		defer tty.Close()
		rows, cols := req.Rows, req.Cols
		if rows == 0 || cols == 0 {
			rows, cols = 24, 80
		}
		pty.Setsize(master, &pty.Winsize{Rows: rows, Cols: cols})
		_ = tty.Chown(target.uid, -1)
		ctty := -1
		for i, isTTY := range req.TTY {
			if !isTTY {
				continue
			}
			if ctty < 0 {
				ctty = i
			}
			switch i {
			case 0:
				cmd.Stdin = tty
			case 1:
				cmd.Stdout = tty
			case 2:
				cmd.Stderr = tty
			}
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: ctty, Credential: cred}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	}
	if err := cmd.Start(); err != nil {
		if master != nil {
			master.Close()
		}
		// The child changes directory as the target user, after the
		// switch, and its error does not say which step failed: name both.
		return nil, nil, fmt.Errorf("sudo: unable to execute %s in %s: %v", p.path, p.dir, unwrapExec(err))
	}
	s.Log.Info("sudo", "caller", caller.name, "user", target.name, "command", p.path, "pid", cmd.Process.Pid)
	return cmd, master, nil
}

// unwrapExec is the system's reason a start failed, without os/exec's words.
func unwrapExec(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// killGroup signals the command's process group: it leads one.
func killGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	err := syscall.Kill(-cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// peerCred is who connected, as the kernel recorded it at connect.
func peerCred(uc *net.UnixConn) (unix.Ucred, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return unix.Ucred{}, err
	}
	var cred *unix.Ucred
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return unix.Ucred{}, err
	}
	if gerr != nil {
		return unix.Ucred{}, gerr
	}
	return *cred, nil
}
