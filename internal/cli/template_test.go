package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
)

func TestDockerfileName(t *testing.T) {
	for name, want := range map[string]bool{
		"Dockerfile": true, "dir/Dockerfile": true, "Dockerfile.dev": true, "app.Dockerfile": true, "Containerfile": true,
		"recipe.yaml": false, "Dockerfiles.yaml": false, "mydockerfile.yml": false,
	} {
		if got := dockerfileName(name); got != want {
			t.Errorf("dockerfileName(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestTemplateBuildDockerfile: `lizard template build -f Dockerfile`
// sends the Dockerfile as a recipe of steps with its context's files, and
// a line Lizard cannot honour fails before anything is sent, naming it.
func TestTemplateBuildDockerfile(t *testing.T) {
	var got api.BuildTemplateRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/templates" {
			http.NotFound(w, r)
			return
		}
		json.NewDecoder(r.Body).Decode(&got)
		json.NewEncoder(w).Encode(api.TemplateBuildEvent{Type: api.BuildEventDone, Template: &api.Template{Name: got.Name, Key: "0123456789abcdef"}})
	}))
	defer srv.Close()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "ctx"), 0o755)
	os.WriteFile(filepath.Join(dir, "ctx", "app.py"), []byte("print(1)"), 0o644)
	df := filepath.Join(dir, "Dockerfile")
	os.WriteFile(df, []byte("FROM interpreter\nARG V=1\nCOPY app.py /srv/\nRUN echo $V\nCMD python3 /srv/app.py\n"), 0o644)
	var stderr bytes.Buffer
	e := Env{Stdout: &bytes.Buffer{}, Stderr: &stderr}
	err := RunTemplate(context.Background(), e, []string{"build", "-f", df, "--context", filepath.Join(dir, "ctx"), "--build-arg", "V=2",
		"--ready", "true", "--name", "df", "--api-url", srv.URL, "--api-key", "k"})
	if err != nil {
		t.Fatalf("template build: %v\n%s", err, stderr.String())
	}
	r := got.Recipe
	if got.Name != "df" || r.Base != "interpreter" || r.Start != "python3 /srv/app.py" || r.Ready != "true" || len(r.Steps) != 2 ||
		len(r.Steps[0].Copy) != 1 || r.Steps[0].Copy[0].Path != "/srv/app.py" || !strings.Contains(r.Steps[1].Run.Cmd, "V='2'") {
		t.Errorf("sent %+v", got)
	}

	os.WriteFile(df, []byte("FROM interpreter\nVOLUME /data\n"), 0o644)
	got = api.BuildTemplateRequest{}
	err = RunTemplate(context.Background(), e, []string{"build", "-f", df, "--name", "df", "--api-url", srv.URL, "--api-key", "k"})
	if err == nil || !strings.Contains(err.Error(), "Dockerfile line 2: VOLUME is not supported") || got.Name != "" {
		t.Errorf("a Dockerfile with VOLUME = %v (sent %q); want refused before sending, naming line 2", err, got.Name)
	}
}

// TestTemplateBuildFromImage: --from-image alone, a Dockerfile FROM an
// image and a recipe's from all send from; registry credentials go in
// the request's registry field, the password from the environment.
func TestTemplateBuildFromImage(t *testing.T) {
	var got api.BuildTemplateRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = api.BuildTemplateRequest{}
		json.NewDecoder(r.Body).Decode(&got)
		json.NewEncoder(w).Encode(api.TemplateBuildEvent{Type: api.BuildEventDone, Template: &api.Template{Name: got.Name, Key: "0123456789abcdef", Digest: "sha256:abc"}})
	}))
	defer srv.Close()
	t.Setenv(EnvRegistryPassword, "pw")
	var stdout, stderr bytes.Buffer
	e := Env{Stdout: &stdout, Stderr: &stderr}
	run := func(args ...string) {
		t.Helper()
		if err := RunTemplate(context.Background(), e, append(append([]string{"build"}, args...), "--api-url", srv.URL, "--api-key", "k")); err != nil {
			t.Fatalf("template build %v: %v\n%s", args, err, stderr.String())
		}
	}
	run("--from-image", "registry.example.com/app:1", "--name", "img", "--registry-username", "me", "--start", "sleep 9")
	if got.Recipe.From != "registry.example.com/app:1" || got.Recipe.Start != "sleep 9" || got.Registry == nil || *got.Registry != (api.RegistryAuth{Username: "me", Password: "pw"}) {
		t.Errorf("--from-image sent %+v", got)
	}
	if !strings.Contains(stdout.String(), "image sha256:abc") {
		t.Errorf("printed %q, want the image's digest", stdout.String())
	}
	dir := t.TempDir()
	df := filepath.Join(dir, "Dockerfile")
	os.WriteFile(df, []byte("FROM python:3.12\nRUN echo hi\n"), 0o644)
	run("-f", df, "--name", "df")
	if got.Recipe.From != "python:3.12" || got.Recipe.Base != "" || got.Registry != nil || len(got.Recipe.Steps) != 1 {
		t.Errorf("a Dockerfile FROM an image sent %+v", got)
	}
	rf := filepath.Join(dir, "recipe.yaml")
	os.WriteFile(rf, []byte("name: r\nfrom: ghcr.io/team/app@sha256:"+strings.Repeat("a", 64)+"\nenv: {A: b}\n"), 0o644)
	run("-f", rf)
	if got.Name != "r" || got.Recipe.From != "ghcr.io/team/app@sha256:"+strings.Repeat("a", 64) || got.Recipe.Env["A"] != "b" {
		t.Errorf("a recipe with from sent %+v", got)
	}
}

// TestRegistryAuthFlags: --registry-password-secret names the project's
// secret instead of giving a password (sent as passwordSecret, no
// password), and needs a username and no password on stdin.
func TestRegistryAuthFlags(t *testing.T) {
	t.Setenv(EnvRegistryPassword, "from-env")
	for _, c := range []struct {
		user, secret string
		stdin        bool
		want         *api.RegistryAuth
		usage        bool
	}{
		{user: "u", want: &api.RegistryAuth{Username: "u", Password: "from-env"}},
		{user: "u", secret: "REG", want: &api.RegistryAuth{Username: "u", PasswordSecret: "REG"}},
		{secret: "REG", usage: true},
		{user: "u", secret: "REG", stdin: true, usage: true},
		{},
	} {
		got, err := registryAuth(Env{}, c.user, c.stdin, c.secret)
		if c.usage {
			if err == nil || !strings.Contains(err.Error(), "--registry-password-secret needs --registry-username") {
				t.Errorf("%+v: err = %v; want the usage", c, err)
			}
			continue
		}
		if err != nil || (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
			t.Errorf("%+v = %+v, %v; want %+v", c, got, err, c.want)
		}
	}
}
