package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/template"
)

func TestParseTemplateBuild(t *testing.T) {
	tests := []struct {
		args    []string
		want    templateBuildArgs
		wantErr bool
	}{
		{args: nil, want: templateBuildArgs{cacheDir: template.DefaultCacheDir, name: template.Default}},
		{args: []string{"--cache-dir", "/tmp/c", "interpreter"}, want: templateBuildArgs{cacheDir: "/tmp/c", name: "interpreter"}},
		{args: []string{"interpreter", "--cache-dir", "/tmp/c"}, want: templateBuildArgs{cacheDir: "/tmp/c", name: "interpreter"}},
		{args: []string{"nosuch"}, wantErr: true},
		{args: []string{"a", "b"}, wantErr: true},
	}
	for _, tt := range tests {
		a, err := parseTemplateBuild(cli.Env{Stdout: io.Discard, Stderr: io.Discard}, tt.args)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseTemplateBuild(%q) error = %v, want error %v", tt.args, err, tt.wantErr)
			continue
		}
		if err == nil && *a != tt.want {
			t.Errorf("parseTemplateBuild(%q) = %+v, want %+v", tt.args, *a, tt.want)
		}
	}
}

func TestTemplateBuild(t *testing.T) {
	var gotDir, gotName string
	ensureTemplate = func(ctx context.Context, cacheDir, name string, progress io.Writer) (string, error) {
		gotDir, gotName = cacheDir, name
		fmt.Fprintln(progress, "step 1/5: debootstrap")
		if cacheDir == "/broken" {
			return "", errors.New("debootstrap failed")
		}
		return cacheDir + "/interpreter-abc/rootfs", nil
	}
	t.Cleanup(func() { ensureTemplate = template.Ensure })

	out, errOut, err := runCLI(t, "admin", "build-template", "--cache-dir", "/tmp/c")
	if err != nil {
		t.Fatalf("admin build-template: %v", err)
	}
	if gotDir != "/tmp/c" || gotName != template.Default {
		t.Errorf("Ensure(%q, %q), want (/tmp/c, %s)", gotDir, gotName, template.Default)
	}
	if out != "/tmp/c/interpreter-abc/rootfs\n" || !strings.Contains(errOut, "step 1/5") {
		t.Errorf("stdout %q stderr %q: want only the path on stdout and progress on stderr", out, errOut)
	}
	_, _, err = runCLI(t, "admin", "build-template", "--cache-dir", "/broken")
	if err == nil || !strings.Contains(err.Error(), "debootstrap failed") {
		t.Errorf("failed build: got %v, want its cause", err)
	}
	if _, _, err := runCLI(t, "admin", "build-template", "a", "b"); cli.ExitCode(err) != 2 {
		t.Errorf("two templates: got %v, want a usage error", err)
	}
}

// TestTemplateIsTheClients checks that `lizard template` on the server's
// binary is the client's one command: every form of it (a recipe, list, get,
// delete, and a built-in's name) reaches the client, never a local build.
func TestTemplateIsTheClients(t *testing.T) {
	ensureTemplate = func(ctx context.Context, cacheDir, name string, progress io.Writer) (string, error) {
		t.Errorf("lizard template built %s locally", name)
		return "", errors.New("not here")
	}
	t.Cleanup(func() { ensureTemplate = template.Ensure })
	t.Setenv("LIZARD_API_KEY", "")
	for _, args := range [][]string{
		{"template", "build", "-f", "/nonexistent/recipe.yaml"},
		{"template", "build", "--name", "x"},
		{"template", "build", "interpreter"},
		{"template", "list"},
		{"template", "get", "x"},
		{"template", "delete", "x"},
	} {
		_, _, err := runCLI(t, args...)
		// The client's commands fail before any request: no recipe file,
		// no name, or no API key here.
		if err == nil {
			t.Errorf("lizard %s = %v; want the client's command to run (and fail without a key or recipe)", strings.Join(args, " "), err)
		}
	}
	if _, _, err := runCLI(t, "admin", "build-template", "nosuch"); err == nil || !strings.Contains(err.Error(), "lizard template build -f RECIPE.yaml") {
		t.Errorf("admin build-template nosuch = %v; want the unknown built-in named, and the recipe command", err)
	}
}
