// Package pid1 lets the agent be a proper init when it is process 1 of a
// sandbox. Process 1 inherits every orphan and must reap it, but a reaper
// that calls wait(-1) in the same process as the agent would steal the exit
// statuses that os/exec (in the agent and the pykernel package) waits for.
// So process 1 splits in two, like tini: a tiny supervisor that reaps
// everything and forwards signals, and the agent as its child, which waits
// only for its own children and never sees orphans.
package pid1

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// ChildEnv marks the supervised agent process, so it does not supervise
// again; the agent removes it from its environment.
const ChildEnv = "LIZARD_AGENT_SUPERVISED"

// ShouldSupervise reports whether this process is process 1 and not already
// the supervised child.
func ShouldSupervise() bool {
	return os.Getpid() == 1 && os.Getenv(ChildEnv) == ""
}

// forwarded are the signals the supervisor passes on to the agent.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// Supervise starts this same executable with args as the agent, reaps every
// child that ends (orphans included), forwards signals to the agent, and
// returns the agent's exit code (128+N if signal N killed it) once it ends.
func Supervise(args []string) (int, error) {
	sigs := make(chan os.Signal, 64)
	// Subscribe before the child exists so no SIGCHLD is missed.
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, forwarded...)...)
	defer signal.Stop(sigs)

	exe := "/proc/self/exe"
	if _, err := os.Stat(exe); err != nil {
		if exe, err = os.Executable(); err != nil {
			return 1, fmt.Errorf("finding own executable: %w", err)
		}
	}
	cmd := exec.Command(exe, args...)
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(os.Environ(), ChildEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return 1, fmt.Errorf("starting agent: %w", err)
	}
	// cmd.Wait is never called: the reap loop below collects the agent too.
	agent := cmd.Process.Pid
	for {
		if code, done := reap(agent); done {
			return code, nil
		}
		sig := <-sigs
		if sig == syscall.SIGCHLD {
			continue
		}
		if err := syscall.Kill(agent, sig.(syscall.Signal)); err != nil && !errors.Is(err, syscall.ESRCH) {
			return 1, fmt.Errorf("forwarding %v to agent: %w", sig, err)
		}
	}
}

// reap collects every child that has ended; done is set when one was the agent.
func reap(agent int) (code int, done bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return 0, done
		}
		if pid == agent {
			done = true
			switch {
			case ws.Exited():
				code = ws.ExitStatus()
			case ws.Signaled():
				code = 128 + int(ws.Signal())
			}
		}
	}
}
