package agent

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
)

// ExitCodeTimeout is the exit code a /process end event reports when the
// process ran past timeoutMs (as timeout(1) does); ExitCodeNoStart when it
// could not be started. A process killed by signal N reports 128+N.
const (
	ExitCodeTimeout = 124
	ExitCodeNoStart = -1
)

func processText(kind, text string) any { return api.ProcessEvent{Type: kind, Text: text} }

func (pa *processAPI) process(w http.ResponseWriter, r *http.Request) {
	var req api.ProcessRequest
	if !pa.decode(w, r, &req, false) {
		return
	}
	switch {
	case req.Cmd == "" && len(req.Args) == 0:
		invalid(w, "cmd", "one of cmd and args is required")
		return
	case req.Cmd != "" && len(req.Args) > 0:
		invalid(w, "cmd", "set only one of cmd and args")
		return
	case len(req.Args) > 0 && req.Args[0] == "":
		invalid(w, "args", "the program name args[0] is empty")
		return
	}
	for _, s := range append([]string{req.Cmd}, req.Args...) {
		if strings.ContainsRune(s, 0) {
			invalid(w, "cmd", "contains a NUL byte")
			return
		}
	}
	timeoutMs, ok := timeoutOf(w, req.TimeoutMs, 0)
	if !ok || !checkEnvs(w, req.Envs) {
		return
	}
	cwd, ok := pa.launch.cwdOf(w, req.Cwd)
	if !ok {
		return
	}
	env := pa.launch.envFor(runAs{}, req.Envs)
	timeout := time.Duration(timeoutMs) * time.Millisecond
	spec := runSpec{dir: cwd, env: env, timeout: timeout}
	if req.Stdin != "" {
		spec.stdin = strings.NewReader(req.Stdin)
	}
	s := newSink(w, pa.maxOutput, processText)
	defer s.close()
	end := func(code int, msg string) {
		s.event(api.ProcessEvent{Type: "end", ExitCode: &code, Error: msg})
	}
	name, args := pa.bash, []string{"-c", req.Cmd}
	if req.Cmd == "" {
		name, args = req.Args[0], req.Args[1:]
	}
	path, err := lookPath(name, env)
	if err != nil {
		end(ExitCodeNoStart, fmt.Sprintf("starting process: %v", err))
		return
	}
	spec.path, spec.args = path, args
	res := pa.launch.run(r.Context(), spec, s)
	switch {
	case res.cancelled:
	case res.startErr != nil:
		end(ExitCodeNoStart, fmt.Sprintf("starting process: %v", res.startErr))
	case res.timedOut:
		end(ExitCodeTimeout, fmt.Sprintf("timed out after %v", timeout))
	default:
		end(res.exitCode(), "")
	}
}
