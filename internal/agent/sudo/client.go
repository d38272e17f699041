package sudo

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// forwarded are the signals the client passes on to the command, as sudo
// relays them; SIGWINCH resizes the command's terminal instead. Not
// SIGPIPE: sudo gets it only for its own write to the caller's terminal,
// which is no reason to end the command.
var forwarded = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM}

// drainWait bounds how long the client keeps relaying the command's
// terminal once the command has ended: a background child holding the
// terminal open must not keep sudo from returning.
const drainWait = time.Second

// Main is sudo in the sandbox: it returns the exit status.
func Main(args []string) int {
	return run(args, SocketPath, os.Stdin, os.Stdout, os.Stderr)
}

// run is Main with the socket and stdio given, for tests.
func run(args []string, socket string, stdin, stdout, stderr *os.File) int {
	req, act, err := parse(args)
	var ue usageError
	if errors.As(err, &ue) {
		if ue.msg != "" {
			fmt.Fprintln(stderr, ue.msg)
		}
		fmt.Fprint(stderr, usage)
		return 1
	}
	if act != actRun {
		return answer(act, req, stdout)
	}
	req.Env = os.Environ()
	req.Cwd, _ = os.Getwd()
	files := [stdioFDs]*os.File{stdin, stdout, stderr}
	var size *unix.Winsize
	for i, f := range files {
		if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
			req.TTY[i] = true
			if size == nil {
				size, _ = unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
			}
		}
	}
	if size != nil {
		req.Rows, req.Cols = size.Row, size.Col
	}
	// Subscribed before the command starts, so that no signal is lost.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGWINCH}, forwarded...)...)

	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		fmt.Fprintf(stderr, "sudo: the sandbox's agent does not answer at %s: %v\n", socket, err)
		return 1
	}
	c := &conn{c: uc}
	defer c.close()
	sendErr := c.send(req, int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd()))
	var rep Reply
	if err := c.recv(&rep, maxMessageBytes, 1); err != nil {
		// A refusal comes before the agent reads the request, which
		// then fails to send: the refusal is what says why.
		if sendErr != nil {
			err = sendErr
		}
		fmt.Fprintf(stderr, "sudo: the sandbox's agent did not answer: %v\n", err)
		return 1
	}
	if rep.Error != "" {
		fmt.Fprintln(stderr, rep.Error)
		return 1
	}
	var relayed chan struct{}
	var master *os.File
	if fds := c.takeFDs(); len(fds) == 1 && req.terminal() {
		master = os.NewFile(uintptr(fds[0]), "sudo-pty")
		defer master.Close()
		relayed = relay(master, files, req.TTY)
	} else {
		closeFDs(fds)
	}
	return wait(c, master, relayed, sigs, files, req.TTY, size != nil, stderr)
}

// wait passes the signals sudo gets on until the command ends, then ends
// as it did.
func wait(c *conn, master *os.File, relayed chan struct{}, sigs chan os.Signal, files [stdioFDs]*os.File, tty [stdioFDs]bool, sized bool, stderr *os.File) int {
	ends := make(chan Reply, 1)
	go func() {
		var end Reply
		if err := c.recv(&end, maxMessageBytes, 0); err != nil {
			end = Reply{Error: fmt.Sprintf("sudo: lost the sandbox's agent: %v", err)}
		}
		ends <- end
	}()
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGWINCH {
				if master != nil && sized {
					resize(master, files, tty)
				}
				continue
			}
			c.send(Forward{Signal: int(sig.(syscall.Signal))})
		case end := <-ends:
			if relayed != nil {
				select {
				case <-relayed:
				case <-time.After(drainWait):
				}
			}
			restoreTerminal()
			switch {
			case end.Error != "":
				fmt.Fprintln(stderr, end.Error)
				return 1
			case end.Signal > 0:
				// Die of the same signal, as sudo does, so that a shell
				// sees the command's own end.
				signal.Reset()
				syscall.Kill(os.Getpid(), syscall.Signal(end.Signal))
				time.Sleep(100 * time.Millisecond)
				return 128 + end.Signal
			case end.Exit != nil:
				return *end.Exit
			}
			return 1
		}
	}
}

// resize gives the command's terminal the caller's terminal's size.
func resize(master *os.File, files [stdioFDs]*os.File, tty [stdioFDs]bool) {
	for i, f := range files {
		if tty[i] {
			if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil {
				unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, ws)
			}
			return
		}
	}
}

// answer is what sudo answers itself, asking the agent nothing.
func answer(act action, req Request, stdout *os.File) int {
	switch act {
	case actHelp:
		fmt.Fprintf(stdout, "sudo - execute a command as another user\n\n%s", usage)
		return 0
	case actVersion:
		fmt.Fprintln(stdout, "Sudo version 1.9.16 (Lizard: the sandbox's agent runs the command; passwordless, no set-user-ID bit)")
		return 0
	case actValidate:
		return 0
	default: // actList
		if len(req.Command) > 0 {
			p, err := lookPath(req.Command[0])
			if err != nil {
				return 1
			}
			fmt.Fprintln(stdout, p)
			return 0
		}
		fmt.Fprintf(stdout, "User %s may run the following commands on this sandbox:\n    (ALL : ALL) NOPASSWD: ALL\n", whoami())
		return 0
	}
}

// saved is the caller's terminal's state before relay made it raw.
var saved struct {
	fd      int
	termios *unix.Termios
}

// relay copies between the caller's terminal and the command's: input
// from stdin when it is a terminal (made raw, so that its keys — ^C
// among them — reach the command's terminal to act on there), output to
// the first of stdout, stderr and stdin that is one. The channel closes
// when the command's terminal has no writer left.
func relay(master *os.File, files [stdioFDs]*os.File, tty [stdioFDs]bool) chan struct{} {
	if tty[0] && foreground(int(files[0].Fd())) {
		// In the background (sudo cmd &) the terminal is the shell's: a
		// change or a read would stop sudo (SIGTTOU, SIGTTIN), so the
		// command gets no input from it, as sudo's own does.
		fd := int(files[0].Fd())
		if t, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil {
			saved.fd, saved.termios = fd, t
			raw := *t
			raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
			raw.Oflag &^= unix.OPOST
			raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
			raw.Cflag &^= unix.CSIZE | unix.PARENB
			raw.Cflag |= unix.CS8
			raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
			unix.IoctlSetTermios(fd, unix.TCSETSW, &raw)
		}
		go io.Copy(master, files[0])
	}
	out := files[0]
	if tty[2] {
		out = files[2]
	}
	if tty[1] {
		out = files[1]
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(out, master) // ends with EIO once the last writer is gone
	}()
	return done
}

// foreground reports whether sudo is in its terminal's foreground.
func foreground(fd int) bool {
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}

// restoreTerminal puts the caller's terminal back as it was.
func restoreTerminal() {
	if saved.termios != nil {
		unix.IoctlSetTermios(saved.fd, unix.TCSETSW, saved.termios)
	}
}

// whoami names the caller for -l.
func whoami() string {
	return accounts{}.byUID(os.Getuid()).name
}
