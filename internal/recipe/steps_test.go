package recipe

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
)

func TestValidateSteps(t *testing.T) {
	run := func(cmd string) api.TemplateStep { return api.TemplateStep{Run: &api.TemplateCommand{Cmd: cmd}} }
	many := func(n int, s api.TemplateStep) []api.TemplateStep {
		out := make([]api.TemplateStep, n)
		for i := range out {
			out[i] = s
			if s.Run != nil {
				out[i].Run = &api.TemplateCommand{Cmd: s.Run.Cmd}
			}
		}
		return out
	}
	tests := []struct {
		name  string
		steps []api.TemplateStep
		want  string // "" valid; else a part of the message
	}{
		{"every kind", []api.TemplateStep{{Apt: []string{"jq"}}, {Pip: []string{"six"}}, {User: "user"}, run("true"),
			{Copy: []api.TemplateFile{{Path: "/home/user/a", Content: b64("a")}}}, {Env: map[string]string{"A": "1"}},
			{Workdir: "/srv/app"}, {Symlink: &api.TemplateSymlink{Target: "/srv/app", Path: "/home/user/app"}}, {User: "root"},
			{Npm: &api.TemplateNpm{Packages: []string{"lodash", "@types/node@20", "typescript@^5", "left-pad@latest"}, Global: true}}}, ""},
		{"no kind", []api.TemplateStep{{}}, "recipe.steps[0] has 0 kinds"},
		{"two kinds", []api.TemplateStep{{Workdir: "/a", User: "root"}}, "recipe.steps[0] has 2 kinds"},
		{"other user", []api.TemplateStep{run("true"), {User: "nobody"}}, `recipe.steps[1].user "nobody"`},
		{"run user", []api.TemplateStep{{Run: &api.TemplateCommand{Cmd: "x", User: "admin"}}}, "recipe.steps[0].run.user"},
		{"empty run", []api.TemplateStep{run(" ")}, "recipe.steps[0].run.cmd"},
		{"copy into /proc", []api.TemplateStep{{Copy: []api.TemplateFile{{Path: "/proc/x", Content: b64("a")}}}}, "provided at run time"},
		{"copy twice in a step", []api.TemplateStep{{Copy: []api.TemplateFile{{Path: "/a", Content: b64("a")}, {Path: "/a", Content: b64("a")}}}}, "given twice"},
		{"env LIZARD_", []api.TemplateStep{{Env: map[string]string{"LIZARD_X": "1"}}}, `recipe.steps[0].env name "LIZARD_X"`},
		{"workdir relative", []api.TemplateStep{{Workdir: "app"}}, "recipe.steps[0].workdir"},
		{"apt option", []api.TemplateStep{{Apt: []string{"-oX"}}}, `recipe.steps[0].apt "-oX"`},
		{"pip url", []api.TemplateStep{{Pip: []string{"http://x/y.whl"}}}, "recipe.steps[0].pip"},
		{"npm url", []api.TemplateStep{{Npm: &api.TemplateNpm{Packages: []string{"https://x.test/y.tgz"}}}}, `recipe.steps[0].npm.packages "https://x.test/y.tgz"`},
		{"npm git", []api.TemplateStep{{Npm: &api.TemplateNpm{Packages: []string{"git+ssh://x/y"}}}}, "no URLs, paths, git or aliases"},
		{"npm github", []api.TemplateStep{{Npm: &api.TemplateNpm{Packages: []string{"user/repo"}}}}, "recipe.steps[0].npm.packages"},
		{"npm path", []api.TemplateStep{{Npm: &api.TemplateNpm{Packages: []string{"../x"}}}}, "recipe.steps[0].npm.packages"},
		{"npm alias", []api.TemplateStep{{Npm: &api.TemplateNpm{Packages: []string{"x@npm:evil"}}}}, "recipe.steps[0].npm.packages"},
		{"npm option", []api.TemplateStep{{Npm: &api.TemplateNpm{Packages: []string{"--registry=http://x"}}}}, "recipe.steps[0].npm.packages"},
		{"npm none", []api.TemplateStep{{Npm: &api.TemplateNpm{}}}, "name at least one package"},
		{"too many npm packages", []api.TemplateStep{{Npm: &api.TemplateNpm{Packages: make200("a")}}, {Npm: &api.TemplateNpm{Packages: []string{"b"}}}}, "at most 200 npm"},
		{"symlink over the agent", []api.TemplateStep{{Symlink: &api.TemplateSymlink{Target: "/bin/sh", Path: "/opt/lizard/bin/lizard-agent"}}}, "provided at run time"},
		{"symlink over /opt", []api.TemplateStep{{Symlink: &api.TemplateSymlink{Target: "/", Path: "/opt"}}}, "cannot replace /opt"},
		{"symlink no target", []api.TemplateStep{{Symlink: &api.TemplateSymlink{Path: "/a"}}}, "recipe.steps[0].symlink.target"},
		{"too many steps", many(MaxSteps+1, api.TemplateStep{User: "root"}), "at most 500"},
		{"too many commands", many(MaxCommands+1, run("true")), "more than 100 commands"},
		{"too many packages across steps", []api.TemplateStep{{Apt: make200("a")}, {Apt: []string{"jq"}}}, "at most 200 apt"},
		{"too many bytes across steps", []api.TemplateStep{{Copy: []api.TemplateFile{{Path: "/a", Content: b64(strings.Repeat("x", MaxFileBytes/2+1))}}},
			{Copy: []api.TemplateFile{{Path: "/b", Content: b64(strings.Repeat("x", MaxFileBytes/2+1))}}}}, "at most 16777216"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := api.TemplateRecipe{Steps: tt.steps}
			err := Validate(&r, bases)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v; want valid", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(errdefs.Message(err), tt.want) {
				t.Errorf("Validate = %v; want invalid, naming %q", err, tt.want)
			}
		})
	}
}

func make200(prefix string) []string {
	out := make([]string, 200)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// TestStepDefaults: a run step runs as the last user step's user (root
// before any); a copy's owner defaults to user, as a file's.
func TestStepDefaults(t *testing.T) {
	r := api.TemplateRecipe{Run: []api.TemplateCommand{{Cmd: "fixed"}}, Steps: []api.TemplateStep{
		{Run: &api.TemplateCommand{Cmd: "a"}}, {User: "user"}, {Run: &api.TemplateCommand{Cmd: "b"}},
		{Run: &api.TemplateCommand{Cmd: "c", User: "root"}}, {Copy: []api.TemplateFile{{Path: "/x", Content: b64("x")}}}}}
	if err := Validate(&r, bases); err != nil {
		t.Fatal(err)
	}
	got := []string{r.Run[0].User, r.Steps[0].Run.User, r.Steps[2].Run.User, r.Steps[3].Run.User, r.Steps[4].Copy[0].Owner}
	if want := []string{"root", "root", "user", "root", "user"}; !reflect.DeepEqual(got, want) {
		t.Errorf("users and owner %v, want %v", got, want)
	}
}

// TestSteps: the fixed parts are the steps in today's order, and the
// steps follow them; the settings sum the steps up.
func TestSteps(t *testing.T) {
	r := api.TemplateRecipe{Apt: []string{"jq"}, Pip: []string{"six"}, Files: []api.TemplateFile{{Path: "/a"}},
		Run: []api.TemplateCommand{{Cmd: "one"}, {Cmd: "two"}}, Env: map[string]string{"A": "1"}, Workdir: "/w",
		Start: "serve", Ready: "check",
		Steps: []api.TemplateStep{{Env: map[string]string{"A": "2", "B": "3"}}, {User: "root"}, {Workdir: "/v"}}}
	var kinds []string
	for _, s := range Steps(r) {
		k, _ := kind(s)
		kinds = append(kinds, k)
	}
	if want := []string{"apt", "pip", "copy", "run", "run", "env", "workdir", "env", "user", "workdir"}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("Steps kinds = %v, want %v", kinds, want)
	}
	got := settings(r, Steps(r))
	want := Settings{Env: map[string]string{"A": "2", "B": "3"}, Workdir: "/v", User: "root", Start: "serve", Ready: "check"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("settings = %+v, want %+v", got, want)
	}
	if s := settings(api.TemplateRecipe{}, []api.TemplateStep{{User: "user"}}); !reflect.DeepEqual(s, Settings{}) {
		t.Errorf("settings of nothing = %+v, want none", s)
	}
}

// TestKeySteps: a recipe without steps keeps its key (builds made before
// steps stay cached); a step's change is a new key.
func TestKeySteps(t *testing.T) {
	r := api.TemplateRecipe{Base: "interpreter", Pip: []string{"six"}}
	k := Key("p", r, "b")
	r2 := r
	r2.Steps = []api.TemplateStep{{Workdir: "/w"}}
	r3 := r
	r3.Steps = []api.TemplateStep{{Workdir: "/v"}}
	if Key("p", r2, "b") == k || Key("p", r2, "b") == Key("p", r3, "b") {
		t.Error("a step's change did not change the key")
	}
	r4 := r
	r4.Ready = "true"
	if Key("p", r4, "b") == k {
		t.Error("a ready check's change did not change the key")
	}
}
