package agent

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/creack/pty"

	"github.com/lizard-build/lizard/api"
)

// launcher is the one way the agent starts a process for code: background
// processes and terminals (processes.go), POST /process and per-call
// JavaScript and bash (run), stateful JavaScript contexts (jsrepl.go) and
// the template's start command (template.go); a Python kernel, which
// pykernel starts, takes its user, environment and directory from here
// too. One place decides who a process runs as (the sandbox user, or root
// when a call asks), the environment and directory it starts in, that it
// leads its own process group — or a session with a terminal — so that a
// kill reaches its children, and how many run in the background at once
// (maxTerminals, maxBackground: the table's bounds). command makes every
// one of them; run (run.go) waits for one that lives as long as its call,
// background (processes.go) keeps one in the table.
type launcher struct {
	user    identity
	workdir string // where code runs by default: the template's, else home

	envMu sync.RWMutex
	env   []string // base environment of all code; /reseed changes it

	procs processTable // background processes and the bounds on them
}

// runAs is who a process runs as: the sandbox user, or root (the agent's
// own user) when a call asks for it.
type runAs struct{ root bool }

// runAs resolves a call's user field, answering 400 itself: the sandbox
// user by default, or root.
func (l *launcher) runAs(w http.ResponseWriter, name string) (runAs, bool) {
	switch name {
	case "", l.user.name:
		return runAs{}, true
	case "root":
		if os.Getuid() != 0 {
			invalid(w, "user", "the agent is not root, so it cannot run code as root")
			return runAs{}, false
		}
		return runAs{root: true}, true
	}
	invalid(w, "user", "unknown user %q: want root or the sandbox user %s", name, l.user.displayName())
	return runAs{}, false
}

// cred is who as is to the kernel: nil for root, the agent's own user.
func (l *launcher) cred(as runAs) *syscall.Credential {
	if as.root {
		return nil
	}
	return l.user.cred
}

// name is as's user name, as a process's info shows it.
func (l *launcher) name(as runAs) string {
	if as.root {
		return "root"
	}
	return l.user.displayName()
}

// home is as's home directory.
func (l *launcher) home(as runAs) string {
	if as.root {
		return "/root"
	}
	return l.user.home
}

// baseEnv is the environment every new kernel and process starts from.
func (l *launcher) baseEnv() []string {
	l.envMu.RLock()
	defer l.envMu.RUnlock()
	return l.env
}

// renewEnv sets set and removes unset in the base environment.
func (l *launcher) renewEnv(set map[string]string, unset []string) {
	l.envMu.Lock()
	defer l.envMu.Unlock()
	env := withEnvs(l.env, set)
	l.env = slices.DeleteFunc(env, func(kv string) bool {
		for _, u := range unset {
			if len(kv) > len(u) && kv[:len(u)] == u && kv[len(u)] == '=' {
				return true
			}
		}
		return false
	})
}

// envFor is the environment as's code starts with, the extras set over
// it in order: root's HOME is root's, so what its code writes there (an
// IPython profile, a shell's history) is not root's files in the sandbox
// user's home.
func (l *launcher) envFor(as runAs, extras ...map[string]string) []string {
	env := l.baseEnv()
	if as.root && l.user.cred != nil {
		env = withEnvs(env, map[string]string{"HOME": "/root", "USER": "root", "LOGNAME": "root"})
	}
	for _, e := range extras {
		env = withEnvs(env, e)
	}
	return env
}

// resolve is resolve relative to the sandbox user's home.
func (l *launcher) resolve(p string) (string, error) { return resolve(p, l.user.home) }

// cwdOf resolves a requested working directory (default the workdir,
// relative to home), answering 400 itself when it is not an existing
// directory the sandbox user can enter.
func (l *launcher) cwdOf(w http.ResponseWriter, cwd string) (string, bool) {
	p, ok := l.dirOf(w, cwd)
	if !ok || cwd == "" {
		return p, ok
	}
	// Checked here, not left to the kernel's start (a 500 that names
	// fork/exec) or to every later bash call.
	if err := l.user.canEnter(p); err != nil {
		invalid(w, "cwd", "the sandbox user %s cannot enter %s (%v); use a directory the user can enter, such as %s", l.user.displayName(), p, err, l.user.home)
		return "", false
	}
	return p, true
}

// dirOf resolves a requested working directory as cwdOf does, for root,
// who enters every directory.
func (l *launcher) dirOf(w http.ResponseWriter, cwd string) (string, bool) {
	if cwd == "" {
		return l.workdir, true
	}
	p, err := l.resolve(cwd)
	if err != nil {
		invalid(w, "cwd", "%v", err)
		return "", false
	}
	fi, err := os.Stat(p)
	if err != nil {
		invalid(w, "cwd", "%s does not exist", p)
		return "", false
	}
	if !fi.IsDir() {
		invalid(w, "cwd", "%s is not a directory", p)
		return "", false
	}
	return p, true
}

// launch is one process to start.
type launch struct {
	as    runAs
	path  string   // the program, found (lookPath)
	args  []string // without argv[0]
	argv0 string   // "": the program's base name
	dir   string
	env   []string
	// pty, when set, gives the process a new terminal of that size as
	// its controlling terminal, in a session of its own.
	pty *api.PtySize
	// timeoutKillsProcess: a background process's timeout kills it
	// alone, not its group (api.ProcessStartRequest.TimeoutKills).
	timeoutKillsProcess bool
}

// command makes the process l describes, not started: as its user, in
// its own process group (a session with a terminal), and, given a ctx,
// killed with its whole group when ctx ends. The caller sets what it
// needs more (stdio, ExtraFiles) and starts it. With a terminal it
// returns the master side too; cmd's stdio is then the slave side, which
// the caller closes once it has started cmd (the child has its copy).
func (l *launcher) command(ctx context.Context, p launch) (*exec.Cmd, *os.File, error) {
	var cmd *exec.Cmd
	if ctx != nil {
		cmd = exec.CommandContext(ctx, p.path, p.args...)
		cmd.Cancel = func() error {
			err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			if errors.Is(err, syscall.ESRCH) {
				return os.ErrProcessDone
			}
			return err
		}
	} else {
		cmd = exec.Command(p.path, p.args...)
	}
	cmd.Args[0] = p.argv0
	if p.argv0 == "" {
		cmd.Args[0] = filepath.Base(p.path)
	}
	cmd.Dir, cmd.Env = p.dir, p.env
	// A child that keeps the output pipes open must not hold the end back.
	cmd.WaitDelay = waitDelay
	cred := l.cred(p.as)
	if p.pty == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
		return cmd, nil, nil
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: uint16(p.pty.Cols), Rows: uint16(p.pty.Rows)}); err != nil {
		ptmx.Close()
		tty.Close()
		return nil, nil, err
	}
	if cred != nil {
		// The user's shell may chmod/chown its own terminal (mesg, script).
		_ = tty.Chown(int(cred.Uid), -1)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Credential: cred}
	return cmd, ptmx, nil
}
