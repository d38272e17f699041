package recipe

// Ordered steps (docs/templates.md): a recipe's fixed parts mean the
// steps apt, pip, copy, run..., env, workdir in that order, and its
// steps follow them. The build runs one list (Steps), so a Dockerfile or
// E2B's Template SDK, which interleave commands, files and settings, are
// built the way a recipe is.

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// Step kinds: each step is exactly one.
const (
	kindRun     = "run"
	kindCopy    = "copy"
	kindEnv     = "env"
	kindWorkdir = "workdir"
	kindUser    = "user"
	kindApt     = "apt"
	kindPip     = "pip"
	kindSymlink = "symlink"
	kindNpm     = "npm"
)

// kind is the one kind step s is, or "" with how many it has.
func kind(s api.TemplateStep) (string, int) {
	var kinds []string
	add := func(set bool, k string) {
		if set {
			kinds = append(kinds, k)
		}
	}
	add(s.Run != nil, kindRun)
	add(len(s.Copy) > 0, kindCopy)
	add(len(s.Env) > 0, kindEnv)
	add(s.Workdir != "", kindWorkdir)
	add(s.User != "", kindUser)
	add(len(s.Apt) > 0, kindApt)
	add(len(s.Pip) > 0, kindPip)
	add(s.Symlink != nil, kindSymlink)
	add(s.Npm != nil, kindNpm)
	if len(kinds) != 1 {
		return "", len(kinds)
	}
	return kinds[0], 1
}

const stepKinds = "run, copy, env, workdir, user, apt, pip, npm or symlink"

// validateSteps checks r.Steps, counting them into t, and fills in their
// defaults: a run step's user is the last user step's (root before any).
func validateSteps(r *api.TemplateRecipe, t *tally) error {
	if len(r.Steps) > MaxSteps {
		return errdefs.Invalidf("recipe.steps has %d steps; at most %d are allowed", len(r.Steps), MaxSteps)
	}
	user := "root"
	for i := range r.Steps {
		s := &r.Steps[i]
		field := fmt.Sprintf("recipe.steps[%d]", i)
		k, n := kind(*s)
		if n != 1 {
			return errdefs.Invalidf("%s has %d kinds: want exactly one of %s", field, n, stepKinds)
		}
		var err error
		switch k {
		case kindRun:
			err = t.command(field+".run", s.Run, user)
		case kindCopy:
			err = t.files(field+".copy", s.Copy, "user")
		case kindEnv:
			err = t.env(field+".env", s.Env)
		case kindWorkdir:
			if err = checkPath(field+".workdir", s.Workdir, false); err == nil {
				s.Workdir = path.Clean(s.Workdir)
			}
		case kindUser:
			if s.User != "root" && s.User != "user" {
				err = errdefs.Invalidf("%s.user %q: Lizard runs code as root (the sandbox's) or user (uid 1000); run a command as another user with su or setpriv in a run step", field, s.User)
			}
			user = s.User
		case kindApt:
			err = t.packages(field, s.Apt, nil)
		case kindPip:
			err = t.packages(field, nil, s.Pip)
		case kindNpm:
			err = t.npmPackages(field+".npm", s.Npm.Packages)
		case kindSymlink:
			l := s.Symlink
			if err = checkPath(field+".symlink.path", l.Path, true); err == nil {
				l.Path = path.Clean(l.Path)
				if l.Target == "" || len(l.Target) > 4096 || strings.ContainsRune(l.Target, 0) {
					err = errdefs.Invalidf("%s.symlink.target: want what the link points to, 1 to 4096 bytes", field)
				}
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Steps is r (validated) as the one list of steps its build runs: its
// fixed parts in their order (apt, pip, files, run..., env, workdir), then
// its steps.
func Steps(r api.TemplateRecipe) []api.TemplateStep {
	var out []api.TemplateStep
	if len(r.Apt) > 0 {
		out = append(out, api.TemplateStep{Apt: r.Apt})
	}
	if len(r.Pip) > 0 {
		out = append(out, api.TemplateStep{Pip: r.Pip})
	}
	if len(r.Files) > 0 {
		out = append(out, api.TemplateStep{Copy: r.Files})
	}
	for i := range r.Run {
		out = append(out, api.TemplateStep{Run: &r.Run[i]})
	}
	if len(r.Env) > 0 {
		out = append(out, api.TemplateStep{Env: r.Env})
	}
	if r.Workdir != "" {
		out = append(out, api.TemplateStep{Workdir: r.Workdir})
	}
	return append(out, r.Steps...)
}

// Settings is what the sandbox's agent reads at boot
// (/etc/lizard/template.json): the steps' envs, last workdir and last
// user, and the start and ready commands.
type Settings struct {
	Env     map[string]string `json:"env,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	User    string            `json:"user,omitempty"`
	Start   string            `json:"start,omitempty"`
	Ready   string            `json:"ready,omitempty"`
}

// settings sums up steps and r's start and ready commands.
func settings(r api.TemplateRecipe, steps []api.TemplateStep) Settings {
	st := Settings{Start: r.Start, Ready: r.Ready}
	for _, s := range steps {
		if len(s.Env) > 0 {
			if st.Env == nil {
				st.Env = map[string]string{}
			}
			maps.Copy(st.Env, s.Env)
		}
		if s.Workdir != "" {
			st.Workdir = s.Workdir
		}
		if s.User != "" {
			st.User = s.User
		}
	}
	if st.User == "user" {
		st.User = "" // the agent's default
	}
	return st
}

// stepName is how the build's progress names step s.
func stepName(s api.TemplateStep) string {
	k, _ := kind(s)
	switch k {
	case kindRun:
		return "run: " + firstLine(s.Run.Cmd)
	case kindCopy:
		if len(s.Copy) == 1 {
			return "copying " + s.Copy[0].Path
		}
		return fmt.Sprintf("copying %d files", len(s.Copy))
	case kindEnv:
		return "env: " + strings.Join(sortedKeys(s.Env), " ")
	case kindWorkdir:
		return "workdir " + s.Workdir
	case kindUser:
		return "user " + s.User
	case kindApt:
		return "installing Debian packages: " + strings.Join(s.Apt, " ")
	case kindPip:
		return "installing pip packages: " + strings.Join(s.Pip, " ")
	case kindSymlink:
		return "symlink " + s.Symlink.Path + " -> " + s.Symlink.Target
	case kindNpm:
		if s.Npm.Global {
			return "installing npm packages globally: " + strings.Join(s.Npm.Packages, " ")
		}
		return "installing npm packages: " + strings.Join(s.Npm.Packages, " ")
	}
	return k
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
