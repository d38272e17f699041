package agent

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/pykernel"
)

// R and Java contexts run as E2B's kernels do: stateful, one process per
// context, each through a harness that speaks the line protocol of the
// stateful JavaScript contexts (jsrepl.go: calls on fd 3, events on fd 4),
// so one runner serves the three. They differ from Node's in what a call's
// end is: a timeout (or a client gone away) interrupts the call with
// SIGINT and the context keeps its state, as a Python kernel's does, and a
// process that dies is a KernelDiedError; the next call starts a new one.
//
//   - R: rkernel.py, run by the venv's Python, starts IRkernel (Debian's
//     r-cran-irkernel, E2B's R kernel) and drives it with jupyter_client,
//     so results (MIME bundles), output and errors are IRkernel's own.
//   - Java: LizardJShell, compiled into the interpreter template by its
//     build (recipes/interpreter/kernels), evaluates calls with the JDK's
//     JShell API in its own JVM.
const (
	langR    = "r"
	langJava = "java"
)

// kernelLanguage reports whether lang runs in a kernel harness (R, Java).
func kernelLanguage(lang string) bool { return lang == langR || lang == langJava }

// languages names the languages a request may ask for, for messages.
const languages = "python, javascript, typescript, bash, r or java"

// javaHarnessDir is where the interpreter template's build puts the
// compiled Java harness.
const javaHarnessDir = "/opt/lizard/kernels"

// kernelInterruptGrace is how long an interrupted call has to end before
// its process is killed (and its state lost), as pykernel's.
const kernelInterruptGrace = 3 * time.Second

// kernelLinger is how long a kernel's harness has to end by itself when
// its context is deleted or restarted: rkernel.py then stops R and removes
// its directory (the connection file, R's temporary files), which a kill
// of the group would leave in /tmp.
const kernelLinger = 2 * time.Second

//go:embed rkernel.py
var rKernelSource string

// replCommand is the program and arguments of context c's process.
func (a *Agent) replCommand(c *execContext, env []string) (path string, args []string, err error) {
	switch c.info.Language {
	case langR:
		if _, err := lookPath("R", env); err != nil {
			return "", nil, fmt.Errorf("finding R: %w (R contexts need the interpreter template's R and IRkernel)", err)
		}
		return a.cfg.Python, []string{a.rKernel}, nil
	case langJava:
		path, err := lookPath("java", env)
		if err != nil {
			return "", nil, fmt.Errorf("finding java: %w (Java contexts need the interpreter template's JDK)", err)
		}
		if _, err := os.Stat(filepath.Join(javaHarnessDir, "LizardJShell.class")); err != nil {
			return "", nil, fmt.Errorf("finding the Java harness: %w (Java contexts need the interpreter template's build of it)", err)
		}
		// The serial collector and C1 alone start faster and use fewer
		// threads, which count against the sandbox user's processes. The
		// harness names its pipes' descriptors through java.io's internals.
		return path, []string{"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "--add-opens=java.base/java.io=ALL-UNNAMED",
			"-cp", javaHarnessDir, "LizardJShell"}, nil
	default:
		path, err := lookPath(a.cfg.Node, env)
		if err != nil {
			return "", nil, fmt.Errorf("finding node: %w", err)
		}
		return path, []string{a.jsRepl}, nil
	}
}

// writeKernelHarnesses puts the harnesses the agent carries into its
// runtime directory.
func (a *Agent) writeKernelHarnesses(dir string) error {
	a.rKernel = filepath.Join(dir, "rkernel.py")
	if err := os.WriteFile(a.rKernel, []byte(rKernelSource), 0o644); err != nil {
		return fmt.Errorf("writing the R context harness: %w", err)
	}
	return nil
}

// kernelName is how messages name c's process.
func kernelName(lang string) string {
	switch lang {
	case langR:
		return "R kernel"
	case langJava:
		return "Java kernel"
	}
	return "node process"
}

// replResult turns a result or display line into its event: a MIME bundle
// (R's) as a Python kernel's result, plain text (Node's, Java's) as text.
func replResult(l replLine, bundle bool) (api.ExecuteEvent, bool) {
	typ := api.ResultTypeResult
	if l.T == "display" {
		typ = api.ResultTypeDisplay
	}
	if l.Data != nil {
		return pykernel.ResultEvent(typ, l.Data, bundle)
	}
	return api.ExecuteEvent{Type: api.EventResult, Result: &api.Result{Type: typ, Mime: "text/plain", Data: l.Text}}, true
}

// interrupt stops r's running call with SIGINT to its process group and
// waits up to kernelInterruptGrace for the call's end, dropping its other
// events. It reports whether the call ended; when it did not, or the
// process died, r is dropped (killed) and the next call starts a new one.
func (c *execContext) interrupt(r *jsRepl) bool {
	if err := syscall.Kill(-r.cmd.Process.Pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		c.killRepl(r)
		return false
	}
	grace := time.NewTimer(kernelInterruptGrace)
	defer grace.Stop()
	for {
		select {
		case l, ok := <-r.lines:
			if !ok {
				c.dropRepl(r)
				return false
			}
			if l.T == "done" {
				return true
			}
		case <-grace.C:
			c.killRepl(r)
			return false
		}
	}
}

// killRepl is dropRepl for a process that did not stop when asked: it is
// killed at once, without the linger.
func (c *execContext) killRepl(r *jsRepl) {
	c.mu.Lock()
	if c.repl == r {
		c.repl = nil
	}
	c.mu.Unlock()
	r.stopAfter(0)
}

// hasExited reports whether r's process has ended (between calls: a
// kernel killed, or that ran out of memory).
func (r *jsRepl) hasExited() bool {
	select {
	case <-r.exited:
		return true
	default:
		return false
	}
}

// awaitExit reports whether r's process ends within d.
func (r *jsRepl) awaitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.exited:
		return true
	case <-t.C:
		return false
	}
}

// diedMessage says how r's process ended, with what it printed last.
func (r *jsRepl) diedMessage(lang string) string {
	<-r.exited
	how := "it ended"
	if st := r.cmd.ProcessState; st != nil {
		how = runResult{state: st}.exitMessage()
	}
	return fmt.Sprintf("the context's %s died during the call (%s); the next call starts a new one, without its variables", kernelName(lang), how)
}
