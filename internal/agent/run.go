package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// waitDelay bounds how long output pipes are read after the process exits:
// a background child that kept them open must not hold the call forever.
const waitDelay = time.Second

// stderrTailBytes is how much of the end of stderr an error's traceback keeps.
const stderrTailBytes = 32 << 10

type runSpec struct {
	path    string
	args    []string // without argv[0]
	dir     string
	env     []string
	stdin   io.Reader // nil: /dev/null
	timeout time.Duration
	as      runAs
}

type runResult struct {
	startErr  error
	state     *os.ProcessState
	timedOut  bool
	cancelled bool // the request went away
	stderr    string
}

// exitCode is the process's exit status, 128+N when signal N killed it.
func (r runResult) exitCode() int {
	if r.state == nil {
		return -1
	}
	if ws, ok := r.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return r.state.ExitCode()
}

// exitMessage says how the process ended, like "exit status 3".
func (r runResult) exitMessage() string {
	if ws, ok := r.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exit status %d", r.state.ExitCode())
}

// run starts a process in its own process group as its user, streams its
// output into s, and waits for it. On timeout or when ctx ends (the
// client went away) the whole group is killed.
func (l *launcher) run(ctx context.Context, spec runSpec, s *sink) runResult {
	runCtx := ctx
	if spec.timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, spec.timeout)
		defer cancel()
	}
	cmd, _, err := l.command(runCtx, launch{as: spec.as, path: spec.path, args: spec.args, dir: spec.dir, env: spec.env})
	if err != nil {
		return runResult{startErr: err}
	}
	cmd.Stdin = spec.stdin
	tail := &tailBuffer{max: stderrTailBytes}
	stdout := &outWriter{s: s, kind: "stdout"}
	stderr := &outWriter{s: s, kind: "stderr", tail: tail}
	cmd.Stdout, cmd.Stderr = stdout, stderr

	err = cmd.Run()
	stdout.flush()
	stderr.flush()
	res := runResult{state: cmd.ProcessState, stderr: tail.String()}
	if cmd.Process == nil || cmd.ProcessState == nil {
		res.startErr = err
	}
	res.cancelled = ctx.Err() != nil
	res.timedOut = !res.cancelled && errors.Is(runCtx.Err(), context.DeadlineExceeded)
	return res
}

// scratchFile creates an empty file in the agent's scratch directory that
// the code's user may write.
func (a *Agent) scratchFile(pattern string) (string, error) {
	f, err := os.CreateTemp(a.scratchDir, pattern)
	if err != nil {
		return "", fmt.Errorf("creating scratch file: %w", err)
	}
	name := f.Name()
	f.Close()
	if err := a.launch.user.chown(name); err != nil {
		os.Remove(name)
		return "", err
	}
	return name, nil
}
