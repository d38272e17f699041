package agent

// A custom template's settings: envs, working directory, the code's user,
// a start command and its ready check, written by its build
// (docs/templates.md) into the template's root filesystem, and read once
// at start.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
)

// Bounds of the ready check: run every readyEvery, each run at most
// readyAttempt, for up to readyTimeout; /health holds a cold boot back
// for at most readyHealthWait, under the node's 30 s wait for a new
// sandbox's agent, so that a check that never passes still leaves a
// usable sandbox (its template snapshot is not taken: /ready fails).
// Variables for tests.
var (
	readyEvery      = 100 * time.Millisecond
	readyAttempt    = 10 * time.Second
	readyTimeout    = 2 * time.Minute
	readyHealthWait = 20 * time.Second
)

// DefaultTemplateConfig is where a custom template's build puts its
// settings.
const DefaultTemplateConfig = "/etc/lizard/template.json"

// startLog is where the start command's output goes.
const startLog = "/tmp/lizard-start.log"

// TemplateSettings is the content of the template settings file.
type TemplateSettings struct {
	Env     map[string]string `json:"env,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	Start   string            `json:"start,omitempty"`
	// User is the code's user when the template names one (root); ""
	// is the agent's configured user.
	User string `json:"user,omitempty"`
	// Ready exits 0 once Start is ready: the agent polls it at boot.
	Ready string `json:"ready,omitempty"`
}

func readTemplateSettings(path string) (TemplateSettings, error) {
	var t TemplateSettings
	if path == "" {
		return t, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return t, fmt.Errorf("reading template settings: %w", err)
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return t, fmt.Errorf("decoding template settings %s: %w", path, err)
	}
	return t, nil
}

// codeUser is who runs code given the configured user: the template's
// user step names it, unless the sandbox was started with another user
// than the default (a build sandbox's root).
func (t TemplateSettings) codeUser(configured string) string {
	if t.User != "" && configured == DefaultUser {
		return t.User
	}
	return configured
}

// runtimePath is the PATH the runtime gives a sandbox whose create named
// none (gvisor and qemu's defaultPath).
const runtimePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// runtimeEnv is the sandbox's environment base without the runtime's
// default PATH when the template sets one: a Dockerfile's
// ENV PATH=/opt/tool/bin:$PATH holds in the sandbox, while a create's own
// PATH still wins.
func (t TemplateSettings) runtimeEnv(base []string) []string {
	if _, ok := t.Env["PATH"]; !ok {
		return base
	}
	return slices.DeleteFunc(slices.Clone(base), func(kv string) bool { return kv == runtimePath })
}

// envList is Env as sorted KEY=VALUE pairs.
func (t TemplateSettings) envList() []string {
	out := make([]string, 0, len(t.Env))
	for k, v := range t.Env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// startCommand runs the template's start command in the background as the
// code's user, in its own process group, its output in startLog. It is
// not waited for: a server it starts keeps running, and a template
// snapshot taken after the boot holds it running.
func (a *Agent) startCommand(command string) {
	out, err := os.OpenFile(startLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		a.log.Error("opening the start command's log", "err", err)
		return
	}
	defer out.Close()
	a.launch.user.chown(startLog)
	cmd, _, err := a.launch.command(nil, launch{path: "/bin/sh", argv0: "/bin/sh", args: []string{"-c", command}, dir: a.launch.workdir, env: a.launch.baseEnv()})
	if err != nil {
		a.log.Error("starting the template's start command", "err", err)
		return
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		a.log.Error("starting the template's start command", "err", err)
		return
	}
	a.log.Info("started the template's start command", "pid", cmd.Process.Pid)
	go cmd.Wait()
}

// startGate is the template's ready check: done is closed once it passed
// or gave up (err says why).
type startGate struct {
	begin time.Time
	done  chan struct{}
	err   error
}

// open reports whether the gate no longer holds /health back: the check
// ended, or readyHealthWait passed. A nil gate (no ready check) is open.
func (g *startGate) open() bool {
	if g == nil {
		return true
	}
	select {
	case <-g.done:
		return true
	default:
		return time.Since(g.begin) > readyHealthWait
	}
}

// wait waits for the check to end, or ctx; nil when it passed.
func (g *startGate) wait(ctx context.Context) error {
	if g == nil {
		return nil
	}
	select {
	case <-g.done:
		return g.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// readyCheck polls command (the template's ready check) as the code's
// user, in its working directory, with its environment, until it exits 0
// or readyTimeout passes.
func (a *Agent) readyCheck(command string) *startGate {
	g := &startGate{begin: time.Now(), done: make(chan struct{})}
	go func() {
		defer close(g.done)
		var last string
		for time.Since(g.begin) < readyTimeout {
			ctx, cancel := context.WithTimeout(context.Background(), min(readyAttempt, readyTimeout-time.Since(g.begin)))
			cmd, _, err := a.launch.command(ctx, launch{path: "/bin/sh", argv0: "/bin/sh", args: []string{"-c", command}, dir: a.launch.workdir, env: a.launch.baseEnv()})
			if err == nil {
				var out []byte
				out, err = cmd.CombinedOutput()
				if err == nil {
					cancel()
					a.log.Info("the template's ready check passed", "took", time.Since(g.begin).Round(time.Millisecond))
					return
				}
				last = strings.TrimSpace(string(out[:min(len(out), 1024)]))
			}
			cancel()
			last = fmt.Sprintf("%v %s", err, last)
			time.Sleep(readyEvery)
		}
		start, _ := os.ReadFile(startLog)
		if len(start) > 2048 {
			start = start[len(start)-2048:]
		}
		g.err = fmt.Errorf("the template's ready check %q did not pass within %s (last: %s); the start command's output (%s): %s",
			command, readyTimeout, strings.TrimSpace(last), startLog, strings.TrimSpace(string(start)))
		a.log.Error("the template's ready check did not pass", "err", g.err)
	}()
	return g
}

// errNoPython is a template without the Python Lizard's kernel needs (one
// built on an image that lacks it): everything but Python code works.
type errNoPython struct{ what string }

func (e *errNoPython) Error() string {
	return "this sandbox's template has no Python kernel: " + e.what + ". Python code (runCode) cannot run here; " +
		"commands, files, terminals and processes work. Build the template on an image with python3 and IPython " +
		"(docs/templates.md: Templates from an image)"
}

// pythonMissing says what of Lizard's kernel's needs the template lacks,
// when err (a kernel's failed start) is for want of them; else nil.
func (a *Agent) pythonMissing(err error) *errNoPython {
	msg := err.Error()
	// The kernel's start failed for want of the interpreter itself (not
	// some other cause), and it is not there.
	notFound := errors.Is(err, fs.ErrNotExist) || strings.Contains(msg, "no such file or directory")
	if _, serr := os.Stat(a.cfg.Python); serr != nil && notFound {
		return &errNoPython{what: "there is no " + a.cfg.Python}
	}
	for _, mod := range []string{"IPython", "traitlets"} {
		if strings.Contains(msg, "No module named '"+mod+"'") {
			return &errNoPython{what: a.cfg.Python + " has no " + mod + " module"}
		}
	}
	return nil
}
