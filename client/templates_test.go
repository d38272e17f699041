package client

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
)

func TestLoadRecipe(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "data"), 0o755)
	os.WriteFile(filepath.Join(dir, "data", "x.txt"), []byte("hello"), 0o644)
	write := func(yaml string) string {
		p := filepath.Join(dir, "recipe.yaml")
		os.WriteFile(p, []byte(yaml), 0o644)
		return p
	}
	name, r, err := LoadRecipe(write(`name: t1
pip: [six==1.16.0]
files:
  - src: data/x.txt
    dest: /home/user/x.txt
    mode: "0755"
env: {A: "1"}
run:
  - echo root
  - cmd: echo user
    user: user
start: sleep 1
`))
	if err != nil {
		t.Fatal(err)
	}
	if name != "t1" || len(r.Files) != 1 || r.Files[0].Mode != 0o755 || r.Files[0].Content != base64.StdEncoding.EncodeToString([]byte("hello")) ||
		len(r.Run) != 2 || r.Run[0].Cmd != "echo root" || r.Run[0].User != "" || r.Run[1].User != "user" || r.Start != "sleep 1" || r.Env["A"] != "1" {
		t.Errorf("LoadRecipe = %q, %+v", name, r)
	}
	for yaml, want := range map[string]string{
		"pipp: [x]\n": `unknown key "pipp"`,
		"files:\n  - src: nope.txt\n    dest: /a\n":                  "nope.txt",
		"files:\n  - dest: /a\n":                                     "needs src",
		"files:\n  - src: data/x.txt\n    dest: /a\n    mode: rwx\n": "want octal",
		"run:\n  - [a, b]\n":                                         "run[0]",
		"steps:\n  - {run: a, user: root}\n":                         "steps[0]: want one key",
		"steps:\n  - chown: x\n":                                     `steps[0]: unknown kind "chown"`,
		"steps:\n  - copy: {src: nope, dest: /a}\n":                  "steps[0]: copy: copy[0]",
	} {
		if _, _, err := LoadRecipe(write(yaml)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadRecipe(%q) = %v; want an error containing %q", yaml, err, want)
		}
	}
}

func TestLoadRecipeSteps(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x.txt"), []byte("hi"), 0o644)
	p := filepath.Join(dir, "recipe.yaml")
	os.WriteFile(p, []byte(`ready: test -f /tmp/up
steps:
  - user: user
  - run: make
  - run: {cmd: make install, user: root}
  - copy: {src: x.txt, dest: /home/user/x.txt, mode: "0600"}
  - copy: [{src: x.txt, dest: /a}, {src: x.txt, dest: /b, owner: root}]
  - env: {A: "1"}
  - workdir: /srv
  - apt: [jq]
  - pip: [six]
  - symlink: {target: /srv, path: /home/user/srv}
  - npm: [lodash]
  - npm: {packages: [typescript], global: true}
`), 0o644)
	_, r, err := LoadRecipe(p)
	if err != nil {
		t.Fatal(err)
	}
	s := r.Steps
	if len(s) != 12 || s[10].Npm.Packages[0] != "lodash" || s[10].Npm.Global || s[11].Npm.Packages[0] != "typescript" || !s[11].Npm.Global {
		t.Fatalf("LoadRecipe npm steps = %+v", s[10:])
	}
	if r.Ready != "test -f /tmp/up" || s[0].User != "user" || s[1].Run.Cmd != "make" || s[2].Run.User != "root" ||
		s[3].Copy[0].Mode != 0o600 || s[3].Copy[0].Content != base64.StdEncoding.EncodeToString([]byte("hi")) ||
		len(s[4].Copy) != 2 || s[4].Copy[1].Owner != "root" || s[5].Env["A"] != "1" || s[6].Workdir != "/srv" ||
		s[7].Apt[0] != "jq" || s[8].Pip[0] != "six" || *s[9].Symlink != (api.TemplateSymlink{Target: "/srv", Path: "/home/user/srv"}) {
		t.Errorf("LoadRecipe steps = %+v", r)
	}
}
