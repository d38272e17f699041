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
	Name  string   `yaml:"name"`
	Base  string   `yaml:"base"`
	Apt   []string `yaml:"apt"`
	Pip   []string `yaml:"pip"`
	Files []struct {
		Src   string `yaml:"src"`
		Dest  string `yaml:"dest"`
		Mode  string `yaml:"mode"`
		Owner string `yaml:"owner"`
	} `yaml:"files"`
	Env     map[string]string `yaml:"env"`
	Workdir string            `yaml:"workdir"`
	Run     []yaml.Node       `yaml:"run"`
	Start   string            `yaml:"start"`
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
			case "name", "base", "apt", "pip", "files", "env", "workdir", "run", "start":
			default:
				return "", r, fmt.Errorf("recipe %s: unknown key %q (known: name, base, apt, pip, files, env, workdir, run, start)", path, k)
			}
		}
	}
	r = api.TemplateRecipe{Base: f.Base, Apt: f.Apt, Pip: f.Pip, Env: f.Env, Workdir: f.Workdir, Start: f.Start}
	dir := filepath.Dir(path)
	for i, fl := range f.Files {
		if fl.Src == "" || fl.Dest == "" {
			return "", r, fmt.Errorf("recipe %s: files[%d] needs src (relative to the recipe) and dest (absolute, in the template)", path, i)
		}
		src := fl.Src
		if !filepath.IsAbs(src) {
			src = filepath.Join(dir, src)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return "", r, fmt.Errorf("recipe %s: files[%d]: %w", path, i, err)
		}
		tf := api.TemplateFile{Path: fl.Dest, Content: base64.StdEncoding.EncodeToString(b), Owner: fl.Owner}
		if fl.Mode != "" {
			m, err := strconv.ParseInt(fl.Mode, 8, 32)
			if err != nil {
				return "", r, fmt.Errorf("recipe %s: files[%d].mode %q: want octal, such as \"0755\"", path, i, fl.Mode)
			}
			tf.Mode = m
		}
		r.Files = append(r.Files, tf)
	}
	for i, n := range f.Run {
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
				return "", r, fmt.Errorf("recipe %s: run[%d]: %w", path, i, err)
			}
			c.Cmd, c.User = m.Cmd, m.User
		default:
			return "", r, fmt.Errorf("recipe %s: run[%d]: want a command, or {cmd: ..., user: root|user}", path, i)
		}
		r.Run = append(r.Run, c)
	}
	return f.Name, r, nil
}
