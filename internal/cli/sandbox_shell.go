package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

func init() {
	sandboxCommands["shell"] = subcommand{"shell ID [--cwd DIR] [--user root] [-- CMD ARGS...]   (an interactive terminal; exits with its code)", sandboxShell}
	sandboxOrder = append(sandboxOrder, "shell")
}

// detachKey (Ctrl-]) leaves a terminal without ending it, as telnet's
// escape does; `lizard attach` finds it again.
const detachKey = 0x1d

// sandboxShell is `lizard sandbox shell ID`: a terminal in the sandbox (the
// user's login shell, or CMD) in this terminal, like `docker exec -it`.
func sandboxShell(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "sandbox shell")
	cf := addClientFlags(fs)
	req := api.ProcessStartRequest{}
	fs.StringVar(&req.Cwd, "cwd", "", "working directory (default the template's, else /home/user)")
	fs.StringVar(&req.User, "user", "", "run as root instead of the sandbox user")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return Usagef("usage: lizard sandbox shell ID [--cwd DIR] [-- CMD ARGS...]")
	}
	id, cmd := pos[0], pos[1:]
	if len(cmd) > 0 && cmd[0] == "--" {
		cmd = cmd[1:]
	}
	req.Args = cmd
	c, err := cf.client()
	if err != nil {
		return err
	}
	cols, rows := terminalSize()
	req.Pty = &api.PtySize{Cols: cols, Rows: rows}
	p, err := c.StartProcess(ctx, id, req)
	if err != nil {
		return fmt.Errorf("starting a terminal in sandbox %s: %w", id, err)
	}
	code, err := runTerminal(ctx, e, c, id, p.Pid)
	if err != nil {
		return err
	}
	return exitFor(code, "")
}

// terminalSize is the size of the terminal on stdout, or 80x24.
func terminalSize() (int, int) {
	if w, h, err := term.GetSize(int(os.Stdout.Fd())); err == nil && w > 0 && h > 0 {
		return min(w, 1000), min(h, 1000)
	}
	return 80, 24
}

// errDetached: the user left the terminal with detachKey.
var errDetached = errors.New("detached")

// runTerminal connects this terminal to process pid's terminal: raw mode,
// keystrokes in, output out, window size followed, until the process ends
// (its exit code), the user detaches (Ctrl-]) or ctx ends. Leaving before
// the end hangs the process up (SIGHUP), as closing a terminal window
// does, unless the user detached.
func runTerminal(ctx context.Context, e Env, c *client.Client, id string, pid int) (int, error) {
	t, err := c.ConnectTerminal(ctx, id, pid)
	if err != nil {
		return -1, fmt.Errorf("connecting to process %d in sandbox %s: %w", pid, id, err)
	}
	defer t.Close()
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		old, err := term.MakeRaw(int(f.Fd()))
		if err != nil {
			return -1, fmt.Errorf("putting the terminal in raw mode: %w", err)
		}
		defer term.Restore(int(f.Fd()), old)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-winch:
				cols, rows := terminalSize()
				_ = t.Resize(ctx, cols, rows)
			}
		}
	}()
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := stdin.Read(buf)
			for i := 0; i < n; i++ {
				if buf[i] == detachKey {
					_, _ = t.Write(buf[:i])
					cancel(errDetached)
					return
				}
			}
			if n > 0 {
				if _, werr := t.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				// Input ended (a pipe): the terminal's program sees
				// Ctrl-D, which ends a shell at its prompt.
				if errors.Is(err, io.EOF) {
					_, _ = t.Write([]byte{4})
				}
				return
			}
		}
	}()
	code, err := t.Wait(ctx, e.Stdout, nil)
	if err == nil {
		return code, nil
	}
	if errors.Is(context.Cause(ctx), errDetached) {
		fmt.Fprintf(e.Stderr, "\r\ndetached from process %d; `lizard attach %s %d` reattaches\r\n", pid, id, pid)
		return 0, nil
	}
	if ctx.Err() != nil {
		hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), 5e9)
		defer hcancel()
		_ = c.Signal(hctx, id, pid, "HUP")
		return -1, ctx.Err()
	}
	return -1, fmt.Errorf("terminal of process %d in sandbox %s: %w", pid, id, err)
}
