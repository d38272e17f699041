// Package sudo gives code in a sandbox a passwordless sudo, as E2B's
// sandboxes have, with no set-user-ID program: gVisor does not honour
// set-id bits (google/gvisor#5299) and template builds strip them. The
// sandbox's /usr/bin/sudo is the agent's own binary under another name
// (cmd/lizard-agent picks Main by argv[0]): a client that sends its
// command line, environment and working directory to the agent, which runs
// as root, over a Unix socket, with its stdin, stdout and stderr as file
// descriptors (SCM_RIGHTS). The agent (Server) takes the caller's uid from
// the socket itself (SO_PEERCRED, filled in by the kernel — gVisor's
// Sentry here — at connect, never by the caller), starts the command as the
// target user with those descriptors as its own, and sends back how it
// ended. On a terminal the command gets a terminal of its own, whose
// master the client relays, as sudo does with use_pty.
//
// It grants nothing the sandbox's caller lacks: the API runs any command
// as root already (user "root"); docs/security.md says why in full.
package sudo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	// SocketPath is where the agent listens, in a directory only root
	// may write, so no process but the agent can bind it.
	SocketPath = "/run/lizard/sudo.sock"
	// MaxSessions bounds the sudo commands running (and connections being
	// read) at once per sandbox; past it a sudo fails at once saying so.
	MaxSessions = 64
	// maxRequestBytes bounds a request: a command line and environment
	// (Linux's own ARG_MAX for both is 2 MiB; 1 MiB is far past any
	// sudo apt-get install).
	maxRequestBytes = 1 << 20
	// maxMessageBytes bounds every other message (a signal, an end).
	maxMessageBytes = 4 << 10
	// stdioFDs is how many descriptors a request carries: 0, 1 and 2.
	stdioFDs = 3
)

// Request is what the client sends, once, with its three stdio
// descriptors. Who sends it is not in it: the server reads that from the
// socket.
type Request struct {
	// Command is the program and its arguments; empty with Login or Shell
	// for an interactive shell.
	Command []string `json:"command,omitempty"`
	// User is the target user (-u): a name or #uid; "" is root.
	User string `json:"user,omitempty"`
	// Login (-i) runs the target's shell as a login shell in its home;
	// Shell (-s) runs $SHELL.
	Login bool `json:"login,omitempty"`
	Shell bool `json:"shell,omitempty"`
	// PreserveEnv (-E) keeps the caller's environment; Keep
	// (--preserve-env=A,B) keeps the variables it names.
	PreserveEnv bool     `json:"preserveEnv,omitempty"`
	Keep        []string `json:"keep,omitempty"`
	// SetHome (-H) sets HOME to the target's home even with -E.
	SetHome bool `json:"setHome,omitempty"`
	// Assign are the command line's VAR=value words before the command.
	Assign []string `json:"assign,omitempty"`
	// Chdir (-D) is where the command runs; "" is Cwd.
	Chdir string `json:"chdir,omitempty"`
	// Env and Cwd are the caller's.
	Env []string `json:"env,omitempty"`
	Cwd string   `json:"cwd,omitempty"`
	// TTY says which of stdin, stdout and stderr are a terminal: those
	// get the command's own terminal, of size Rows×Cols.
	TTY  [3]bool `json:"tty"`
	Rows uint16  `json:"rows,omitempty"`
	Cols uint16  `json:"cols,omitempty"`
}

// terminal reports whether the command gets a terminal of its own.
func (r *Request) terminal() bool { return r.TTY[0] || r.TTY[1] || r.TTY[2] }

// Reply is what the server sends: Started (with the terminal's master
// when there is one) or Error, then, once the command ends, Exit or
// Signal.
type Reply struct {
	Error   string `json:"error,omitempty"`
	Started bool   `json:"started,omitempty"`
	Exit    *int   `json:"exit,omitempty"`
	Signal  int    `json:"signal,omitempty"`
}

// Forward is what the client sends once started: a signal it got, for
// the command.
type Forward struct {
	Signal int `json:"signal"`
}

// conn frames messages on a Unix stream socket as JSON lines. Every read
// is a recvmsg, so descriptors are taken wherever they arrive (the kernel
// may join or split writes) and none is left unclosed.
type conn struct {
	c   *net.UnixConn
	buf []byte
	fds []int // received and not yet taken
}

// errTooManyFDs is a peer that sent more descriptors than a message carries.
var errTooManyFDs = errors.New("too many file descriptors")

// recv reads the next message into v, up to max bytes, collecting at most
// maxFDs descriptors on the way (the caller takes them with takeFDs).
func (c *conn) recv(v any, max, maxFDs int) error {
	oob := make([]byte, unix.CmsgSpace((stdioFDs+1)*4))
	chunk := make([]byte, 32<<10)
	for {
		if i := bytes.IndexByte(c.buf, '\n'); i >= 0 {
			line := c.buf[:i]
			c.buf = c.buf[i+1:]
			if err := json.Unmarshal(line, v); err != nil {
				return fmt.Errorf("decoding a message: %w", err)
			}
			return nil
		}
		if len(c.buf) > max {
			return fmt.Errorf("a message longer than %d bytes", max)
		}
		n, oobn, flags, _, err := c.c.ReadMsgUnix(chunk, oob)
		if oobn > 0 {
			fds, perr := parseRights(oob[:oobn])
			c.fds = append(c.fds, fds...)
			if perr != nil {
				return perr
			}
		}
		if flags&unix.MSG_CTRUNC != 0 || len(c.fds) > maxFDs {
			return errTooManyFDs
		}
		if n > 0 {
			c.buf = append(c.buf, chunk[:n]...)
		}
		if err != nil {
			return err
		}
		if n == 0 && oobn == 0 {
			return errors.New("connection closed")
		}
	}
}

// takeFDs hands over the descriptors received so far.
func (c *conn) takeFDs() []int {
	fds := c.fds
	c.fds = nil
	return fds
}

// close closes the connection and any descriptor left untaken.
func (c *conn) close() {
	closeFDs(c.takeFDs())
	c.c.Close()
}

// send writes v as one line, with fds.
func (c *conn) send(v any, fds ...int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	for len(b) > 0 {
		n, _, err := c.c.WriteMsgUnix(b, oob, nil)
		if err != nil {
			return err
		}
		b, oob = b[n:], nil
	}
	return nil
}

// parseRights returns every descriptor in a control message.
func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parsing control messages: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return fds, fmt.Errorf("parsing descriptors: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// waitStatus turns how a process ended into a Reply.
func waitStatus(st *os.ProcessState) Reply {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Reply{Signal: int(ws.Signal())}
	}
	code := st.ExitCode()
	return Reply{Exit: &code}
}
