package deathsig

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// startOnDoomedThread starts a child from a goroutine that then exits
// locked to its thread, which Go ends: the way netns's goroutines end.
func startOnDoomedThread(t *testing.T, start func(*exec.Cmd) (func() error, error)) func() error {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	type res struct {
		wait   func() error
		err    error
		onMain bool
	}
	var r res
	for {
		c := make(chan res, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
			if unix.Gettid() == os.Getpid() {
				// Go never ends the main thread (it parks it instead).
				c <- res{onMain: true}
				return
			}
			w, err := start(cmd)
			c <- res{wait: w, err: err}
		}()
		if r = <-c; !r.onMain {
			break
		}
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		r.wait()
	})
	return r.wait
}

// ended waits up to d for wait to return, and returns its error.
func ended(wait func() error, d time.Duration) (error, bool) {
	c := make(chan error, 1)
	go func() { c <- wait() }()
	select {
	case err := <-c:
		return err, true
	case <-time.After(d):
		return nil, false
	}
}

func TestChildOutlivesForkingThread(t *testing.T) {
	// The control: a plain Start with Pdeathsig dies with its thread. If
	// it did not, this test could not tell the fix from its absence.
	plain := startOnDoomedThread(t, func(cmd *exec.Cmd) (func() error, error) {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		return cmd.Wait, cmd.Start()
	})
	err, done := ended(plain, 10*time.Second)
	if !done || err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("control: a plain child of an ended thread: done %v, err %v; want it killed", done, err)
	}

	wait := startOnDoomedThread(t, Start)
	if err, done := ended(wait, time.Second); done {
		t.Fatalf("a child started by Start ended with its caller's thread: %v", err)
	}
}

func TestRun(t *testing.T) {
	if err := Run(exec.Command("true")); err != nil {
		t.Fatal(err)
	}
	err := Run(exec.Command("false"))
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("Run(false) = %v; want exit status 1", err)
	}
	if err := Run(exec.Command("/nonexistent/program")); err == nil {
		t.Fatal("Run of a missing program succeeded")
	}
}
