// Package deathsig starts host commands that are killed when this process
// dies.
//
// Linux sends a child its parent-death signal (prctl PR_SET_PDEATHSIG) when
// the thread that forked it exits, not the process. Go ends a thread
// whenever a goroutine exits while locked to it — as netns does after
// unshare(CLONE_NEWNET), so that no other goroutine runs in the new
// namespace — and any thread may have forked a child before such a
// goroutine lands on it. A plain exec.Cmd with Pdeathsig is therefore
// killed at random, long before the server ends (golang/go#27505). Here
// the fork happens on a thread locked for the child's whole life: no other
// goroutine can run there, so none can end it.
package deathsig

import (
	"os/exec"
	"runtime"
	"syscall"
)

// Start starts cmd with SIGKILL as its parent-death signal. The returned
// wait replaces cmd.Wait, which must not be called.
func Start(cmd *exec.Cmd) (wait func() error, err error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started := make(chan error, 1)
	done := make(chan struct{})
	var waitErr error
	go func() {
		runtime.LockOSThread()
		// Unlocked only once the child is reaped: from then on the thread
		// may end without harm.
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		waitErr = cmd.Wait()
		close(done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return func() error { <-done; return waitErr }, nil
}

// Run runs cmd to its end with SIGKILL as its parent-death signal.
func Run(cmd *exec.Cmd) error {
	wait, err := Start(cmd)
	if err != nil {
		return err
	}
	return wait()
}
