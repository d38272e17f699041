package client

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/lizard-build/lizard/api"
)

// BuildError is a template build that failed after it began: the step
// that failed and its last output (Code invalid_argument: fix the
// recipe), or the server's failure.
type BuildError struct {
	Code, Message string
	Step, Log     string
}

func (e *BuildError) Error() string {
	if e.Log != "" {
		return e.Message + "\n--- output of the failing step ---\n" + e.Log
	}
	return e.Message
}

// Templates are the key's project's custom templates
// (docs/templates.md): c.Templates().Build, List, Get, Delete.
type Templates struct{ c *Client }

// Templates returns the key's project's custom templates.
func (c *Client) Templates() Templates { return Templates{c: c} }

// Build builds a custom template of the key's project, calling
// onEvent with each progress event, and returns it (cached: the same
// recipe was built before, nothing was done).
func (ts Templates) Build(ctx context.Context, req api.BuildTemplateRequest, onEvent func(api.TemplateBuildEvent)) (t *api.Template, cached bool, err error) {
	resp, cancel, err := ts.c.do(ctx, request{method: http.MethodPost, path: "/templates", json: req, stream: true})
	if err != nil {
		return nil, false, err
	}
	defer cancel()
	defer drainClose(resp.Body)
	var failed error
	err = readStream(ctx, resp.Body, ts.c.maxLine, "template build", func(ev api.TemplateBuildEvent) bool {
		if onEvent != nil {
			onEvent(ev)
		}
		switch ev.Type {
		case api.BuildEventDone:
			t, cached = ev.Template, ev.Cached
			return true
		case api.BuildEventError:
			failed = &BuildError{Code: ev.Code, Message: ev.Message, Step: ev.Name, Log: ev.Log}
			return true
		}
		return false
	})
	if err == nil {
		err = failed
	}
	if err != nil {
		return nil, false, err
	}
	if t == nil {
		return nil, false, fmt.Errorf("the template build ended without its template")
	}
	return t, cached, nil
}

// List lists the key's project's custom templates.
func (ts Templates) List(ctx context.Context) ([]api.Template, error) {
	var list api.TemplateList
	if err := ts.c.call(ctx, request{method: http.MethodGet, path: "/templates"}, &list); err != nil {
		return nil, err
	}
	if list.Templates == nil {
		list.Templates = []api.Template{}
	}
	return list.Templates, nil
}

// Get returns one custom template.
func (ts Templates) Get(ctx context.Context, name string) (*api.Template, error) {
	var t api.Template
	if err := ts.c.call(ctx, request{method: http.MethodGet, path: "/templates/" + url.PathEscape(name)}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Delete deletes a custom template; refused (409) while live
// sandboxes use it.
func (ts Templates) Delete(ctx context.Context, name string) error {
	return ts.c.call(ctx, request{method: http.MethodDelete, path: "/templates/" + url.PathEscape(name)}, nil)
}

// recipeFile is the YAML recipe format (docs/templates.md).
type recipeFile struct {
	Name    string            `yaml:"name"`
	Base    string            `yaml:"base"`
	From    string            `yaml:"from"`
	Apt     []string          `yaml:"apt"`
	Pip     []string          `yaml:"pip"`
	Files   []recipeCopy      `yaml:"files"`
	Env     map[string]string `yaml:"env"`
	Workdir string            `yaml:"workdir"`
	Run     []yaml.Node       `yaml:"run"`
	Start   string            `yaml:"start"`
	Ready   string            `yaml:"ready"`
	Steps   []yaml.Node       `yaml:"steps"`
}

// recipeCopy is a YAML copy step's file: src relative to the recipe.
type recipeCopy struct {
	Src   string `yaml:"src"`
	Dest  string `yaml:"dest"`
	Mode  string `yaml:"mode"`
	Owner string `yaml:"owner"`
}

// LoadRecipe reads a YAML recipe file; its files' src paths are relative
// to the file. It returns the name the file gives (may be empty) and the
// recipe with the files' contents.
func LoadRecipe(path string) (name string, r api.TemplateRecipe, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", r, fmt.Errorf("reading recipe: %w", err)
	}
	var f recipeFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return "", r, fmt.Errorf("parsing recipe %s: %w", path, err)
	}
	var probe map[string]yaml.Node
	if err := yaml.Unmarshal(data, &probe); err == nil {
		for k := range probe {
			switch k {
			case "name", "base", "from", "apt", "pip", "files", "env", "workdir", "run", "start", "ready", "steps":
			default:
				return "", r, fmt.Errorf("recipe %s: unknown key %q (known: name, base, from, apt, pip, files, env, workdir, run, start, ready, steps)", path, k)
			}
		}
	}
	r = api.TemplateRecipe{Base: f.Base, From: f.From, Apt: f.Apt, Pip: f.Pip, Env: f.Env, Workdir: f.Workdir, Start: f.Start, Ready: f.Ready}
	dir := filepath.Dir(path)
	for i, fl := range f.Files {
		tf, err := fl.load(dir)
		if err != nil {
			return "", r, fmt.Errorf("recipe %s: files[%d]: %w", path, i, err)
		}
		r.Files = append(r.Files, tf)
	}
	for i, n := range f.Run {
		c, err := recipeCommand(n)
		if err != nil {
			return "", r, fmt.Errorf("recipe %s: run[%d]: %w", path, i, err)
		}
		r.Run = append(r.Run, c)
	}
	for i, n := range f.Steps {
		s, err := recipeStep(n, dir)
		if err != nil {
			return "", r, fmt.Errorf("recipe %s: steps[%d]: %w", path, i, err)
		}
		r.Steps = append(r.Steps, s)
	}
	return f.Name, r, nil
}

// load reads the file c names, relative to dir.
func (c recipeCopy) load(dir string) (api.TemplateFile, error) {
	if c.Src == "" || c.Dest == "" {
		return api.TemplateFile{}, fmt.Errorf("needs src (relative to the recipe) and dest (absolute, in the template)")
	}
	src := c.Src
	if !filepath.IsAbs(src) {
		src = filepath.Join(dir, src)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return api.TemplateFile{}, err
	}
	tf := api.TemplateFile{Path: c.Dest, Content: base64.StdEncoding.EncodeToString(b), Owner: c.Owner}
	if c.Mode != "" {
		m, err := strconv.ParseInt(c.Mode, 8, 32)
		if err != nil {
			return tf, fmt.Errorf("mode %q: want octal, such as \"0755\"", c.Mode)
		}
		tf.Mode = m
	}
	return tf, nil
}

// recipeCommand is a YAML command: a string, or {cmd, user}.
func recipeCommand(n yaml.Node) (api.TemplateCommand, error) {
	var c api.TemplateCommand
	switch n.Kind {
	case yaml.ScalarNode:
		c.Cmd = n.Value
	case yaml.MappingNode:
		var m struct {
			Cmd  string `yaml:"cmd"`
			User string `yaml:"user"`
		}
		if err := n.Decode(&m); err != nil {
			return c, err
		}
		c.Cmd, c.User = m.Cmd, m.User
	default:
		return c, fmt.Errorf("want a command, or {cmd: ..., user: root|user}")
	}
	return c, nil
}

// recipeStep is a YAML step: a mapping of one key, its kind.
func recipeStep(n yaml.Node, dir string) (api.TemplateStep, error) {
	var s api.TemplateStep
	if n.Kind != yaml.MappingNode || len(n.Content) != 2 {
		return s, fmt.Errorf("want one key: run, copy, env, workdir, user, apt, pip, npm or symlink")
	}
	key, v := n.Content[0].Value, n.Content[1]
	var err error
	switch key {
	case "run":
		var c api.TemplateCommand
		c, err = recipeCommand(*v)
		s.Run = &c
	case "copy":
		var files []recipeCopy
		if v.Kind == yaml.SequenceNode {
			err = v.Decode(&files)
		} else {
			var one recipeCopy
			err = v.Decode(&one)
			files = []recipeCopy{one}
		}
		for j := 0; err == nil && j < len(files); j++ {
			var tf api.TemplateFile
			if tf, err = files[j].load(dir); err != nil {
				err = fmt.Errorf("copy[%d]: %w", j, err)
			}
			s.Copy = append(s.Copy, tf)
		}
	case "env":
		err = v.Decode(&s.Env)
	case "workdir":
		err = v.Decode(&s.Workdir)
	case "user":
		err = v.Decode(&s.User)
	case "apt":
		err = v.Decode(&s.Apt)
	case "pip":
		err = v.Decode(&s.Pip)
	case "symlink":
		s.Symlink = &api.TemplateSymlink{}
		err = v.Decode(s.Symlink)
	case "npm":
		// [packages], or {packages: [...], global: true, dev: true}.
		s.Npm = &api.TemplateNpm{}
		if v.Kind == yaml.SequenceNode {
			err = v.Decode(&s.Npm.Packages)
		} else {
			err = v.Decode(s.Npm)
		}
	default:
		return s, fmt.Errorf("unknown kind %q: want run, copy, env, workdir, user, apt, pip, npm or symlink", key)
	}
	if err != nil {
		return s, fmt.Errorf("%s: %w", key, err)
	}
	return s, nil
}
