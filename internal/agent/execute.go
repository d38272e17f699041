package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/pykernel"
)

// DefaultExecuteTimeoutMs is the per-call limit when a request sets none.
const DefaultExecuteTimeoutMs = 60_000

// Error names of execution errors the agent itself reports (Python's come
// from the kernel; JavaScript's are the thrown error's name).
const (
	ErrNameTimeout = api.ErrorNameTimeout // the call ran past timeoutMs
	ErrNameExit    = "ExitError"          // bash or node exited non-zero without a thrown error
	ErrNameStart   = "StartError"         // the interpreter could not be started
	ErrNameKernel  = "KernelError"        // the Python kernel could not run the code
	// ErrNameResultTooLarge stands in for a result past the run's
	// api.MaxResultBytes.
	ErrNameResultTooLarge = api.ErrorNameResultTooLarge
)

// maxBashArg is how much code goes to bash -c; longer code goes through a
// file because Linux limits one argument to 128 KiB.
const maxBashArg = 100 << 10

func executeText(kind, text string) any { return api.ExecuteEvent{Type: kind, Text: text} }

func (a *Agent) execute(w http.ResponseWriter, r *http.Request) {
	t := newTimings(w, r)
	defer t.report(w, "agent.execute")
	var req api.ExecuteRequest
	if !a.decode(w, r, &req, false) {
		return
	}
	lang, ok := normalizeLanguage(req.Language)
	if !ok {
		invalid(w, "language", "unsupported language %q (want %s)", req.Language, languages)
		return
	}
	timeoutMs, ok := timeoutOf(w, req.TimeoutMs, DefaultExecuteTimeoutMs)
	if !ok || !checkEnvs(w, req.Envs) {
		return
	}
	var c *execContext
	switch {
	case req.Stateful && req.ContextID != "":
		invalid(w, "stateful", "picks the default context's kind; a context is made stateful when it is created")
		return
	case req.Stateful && lang == langBash:
		invalid(w, "stateful", "bash runs per call; stateful is for javascript and typescript")
		return
	case kernelLanguage(lang) && req.ContextID == "":
		// R and Java keep their state anyway: stateful changes nothing.
		if c = a.statefulDefault(w, lang, defaultContextID(lang)); c == nil {
			return
		}
	case req.Stateful && replLanguage(lang):
		if c = a.statefulDefault(w, lang, statefulDefaultID(lang)); c == nil {
			return
		}
	case lang == langTypeScript && req.ContextID == "":
		invalid(w, "language", "typescript runs only in a stateful context (set stateful, or name a typescript context)")
		return
	default:
		id := req.ContextID
		if id == "" {
			id = defaultContextID(lang)
		}
		if c = a.lookup(w, id); c == nil {
			return
		}
	}
	if req.Language != "" && c.info.Language != lang {
		invalid(w, "language", "context %s runs %s, not %s", c.info.ID, c.info.Language, lang)
		return
	}
	timeout := time.Duration(timeoutMs) * time.Millisecond
	ctx := r.Context()
	switch c.info.Language {
	case langPython:
		// Waiting here (for the default kernel's start) happens before the
		// stream begins, so a kernel that cannot start is a 503, not an event.
		var k Kernel
		err := t.step("agent.kernel_wait", func() (err error) {
			k, err = a.kernel(ctx, c)
			return err
		})
		var noPython *errNoPython
		switch {
		case errors.As(err, &noPython):
			// Asking again will not help: a 400, not a 503 to retry.
			writeError(w, http.StatusBadRequest, api.CodeInvalidArgument, "%v", err)
			return
		case err != nil:
			if ctx.Err() == nil {
				writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "%v", err)
			}
			return
		}
		s := newSink(w, a.cfg.MaxOutputBytes, executeText)
		defer s.close()
		t.step("kernel.execute", func() error {
			a.executePython(ctx, k, pykernel.Request{Code: req.Code, Timeout: timeout, Envs: req.Envs, Bundle: req.Bundle}, s)
			return nil
		})
	default:
		if err := acquire(ctx, c.turn); err != nil {
			return
		}
		defer func() { <-c.turn }()
		s := newSink(w, a.cfg.MaxOutputBytes, executeText)
		defer s.close()
		if c.stateful {
			t.step("kernel.execute", func() error {
				a.executeRepl(ctx, c, req, timeout, s)
				return nil
			})
			return
		}
		t.step("process.execute", func() error {
			a.executeProcess(ctx, c, req, timeout, s)
			return nil
		})
	}
}

func (a *Agent) executePython(ctx context.Context, k Kernel, req pykernel.Request, s *sink) {
	ended := false
	err := k.Execute(ctx, req, func(ev api.ExecuteEvent) {
		switch ev.Type {
		case api.EventStdout, api.EventStderr:
			s.output(ev.Type, []byte(ev.Text))
		default:
			ended = ended || ev.Type == api.EventEnd
			s.event(ev)
		}
	})
	if ctx.Err() != nil || ended {
		return
	}
	msg := "the kernel ended the call without a result"
	if err != nil {
		msg = err.Error()
	}
	s.event(api.ExecuteEvent{Type: api.EventError, Error: &api.ExecutionError{Name: ErrNameKernel, Message: msg}})
	s.event(api.ExecuteEvent{Type: api.EventEnd})
}

// executeProcess runs JavaScript or bash code in a fresh process in the
// context's working directory.
func (a *Agent) executeProcess(ctx context.Context, c *execContext, req api.ExecuteRequest, timeout time.Duration, s *sink) {
	env := a.launch.envFor(c.as(), req.Envs)
	spec := runSpec{dir: c.info.Cwd, timeout: timeout, as: c.as()}
	var errFile string
	switch c.info.Language {
	case langJavaScript:
		path, err := lookPath(a.cfg.Node, env)
		if err != nil {
			a.endWithError(s, ErrNameStart, fmt.Sprintf("finding node: %v", err), "")
			return
		}
		// The code goes on stdin: relative require() and import resolve
		// from the working directory and nothing is left behind in it.
		// Node detects ES module syntax (import, top-level await) there.
		if errFile, err = a.scratchFile("js-error-*.json"); err != nil {
			a.endWithError(s, ErrNameStart, err.Error(), "")
			return
		}
		defer os.Remove(errFile)
		spec.path, spec.args = path, []string{"--require", a.jsHook, "-"}
		spec.stdin = strings.NewReader(req.Code)
		spec.env = append(env, jsErrorFileEnv+"="+errFile)
	case langBash:
		path, err := lookPath(a.cfg.Bash, env)
		if err != nil {
			a.endWithError(s, ErrNameStart, fmt.Sprintf("finding bash: %v", err), "")
			return
		}
		spec.path, spec.env = path, env
		if len(req.Code) <= maxBashArg {
			spec.args = []string{"-c", req.Code}
		} else {
			script, err := a.scratchFile("script-*.sh")
			if err == nil {
				err = os.WriteFile(script, []byte(req.Code), 0o600)
			}
			if err != nil {
				a.endWithError(s, ErrNameStart, fmt.Sprintf("writing script: %v", err), "")
				return
			}
			defer os.Remove(script)
			spec.args = []string{script}
		}
	}
	res := a.launch.run(ctx, spec, s)
	switch {
	case res.cancelled:
		return
	case res.startErr != nil:
		a.endWithError(s, ErrNameStart, res.startErr.Error(), "")
	case res.timedOut:
		a.endWithError(s, ErrNameTimeout, fmt.Sprintf("execution timed out after %v", timeout), res.stderr)
	case res.exitCode() != 0:
		if thrown, ok := readThrown(errFile); ok {
			a.endWithError(s, thrown.Name, thrown.Message, res.stderr)
			return
		}
		a.endWithError(s, ErrNameExit, res.exitMessage(), res.stderr)
	default:
		s.event(api.ExecuteEvent{Type: api.EventEnd})
	}
}

func (a *Agent) endWithError(s *sink, name, message, traceback string) {
	s.event(api.ExecuteEvent{Type: api.EventError, Error: &api.ExecutionError{Name: name, Message: message, Traceback: traceback}})
	s.event(api.ExecuteEvent{Type: api.EventEnd})
}

// jsErrorFileEnv tells the node hook where to report an uncaught error; the
// hook removes it from process.env before user code runs.
const jsErrorFileEnv = "LIZARD_JS_ERROR_FILE"

// jsHookSource is preloaded into every node run. It reports the name and
// message of the error that kills the process, leaving node's own printing
// and exit status as they are (uncaughtExceptionMonitor only observes).
const jsHookSource = `'use strict';
{
  const file = process.env.` + jsErrorFileEnv + `;
  delete process.env.` + jsErrorFileEnv + `;
  if (file) {
    const fs = require('fs');
    process.on('uncaughtExceptionMonitor', (err) => {
      let name = 'Error', message = '';
      try {
        if (err !== null && typeof err === 'object') {
          name = String(err.name || 'Error');
          const ctor = err.constructor && err.constructor.name;
          // class MyError extends Error {} keeps name "Error"; its class says more.
          if (name === 'Error' && ctor && ctor !== 'Object') name = ctor;
          message = String(err.message ?? '');
        } else {
          message = String(err);
        }
      } catch (e) {}
      try { fs.writeFileSync(file, JSON.stringify({ name, message })); } catch (e) {}
    });
  }
}
`

// readThrown reads what the node hook reported, if anything.
func readThrown(path string) (api.ExecutionError, bool) {
	var e api.ExecutionError
	if path == "" {
		return e, false
	}
	f, err := os.Open(path)
	if err != nil {
		return e, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil || len(b) == 0 {
		return e, false
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Name == "" {
		return e, false
	}
	return e, true
}
