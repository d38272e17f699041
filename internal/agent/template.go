package agent

// A custom template's settings: envs, working directory and a start
// command, written by its build (docs/templates.md) into the template's
// root filesystem, and read once at start.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
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
