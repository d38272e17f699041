package recipe

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/oci"
)

var bases = []string{"interpreter"}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		r    api.TemplateRecipe
		want string // "" valid; else a part of the message
	}{
		{"empty", api.TemplateRecipe{}, ""},
		{"everything", api.TemplateRecipe{Apt: []string{"jq", "libonig5=6.9.9-1"}, Pip: []string{"six==1.16.0", "requests[socks]>=2,<3", "numpy"},
			Files: []api.TemplateFile{{Path: "/home/user/a.txt", Content: b64("a"), Mode: 0o755, Owner: "root"}},
			Env:   map[string]string{"A_B": "c"}, Workdir: "/home/user/w", Run: []api.TemplateCommand{{Cmd: "true", User: "user"}}, Start: "sleep 1"}, ""},
		{"other base", api.TemplateRecipe{Base: "ubuntu"}, `recipe.base "ubuntu"`},
		{"apt option", api.TemplateRecipe{Apt: []string{"-o=APT::x"}}, `recipe.apt "-o=APT::x"`},
		{"pip url", api.TemplateRecipe{Pip: []string{"https://evil.example/x.whl"}}, `recipe.pip "https://evil.example/x.whl"`},
		{"pip option", api.TemplateRecipe{Pip: []string{"--index-url=http://x"}}, "recipe.pip"},
		{"pip path", api.TemplateRecipe{Pip: []string{"./pkg"}}, "recipe.pip"},
		{"relative file", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "a.txt", Content: b64("a")}}}, "recipe.files[0].path"},
		{"root file", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/", Content: b64("a")}}}, "recipe.files[0].path"},
		{"file in /proc", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/proc/../proc/x", Content: b64("a")}}}, "provided at run time"},
		{"file over the agent", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/opt/lizard/bin/lizard-agent", Content: b64("a")}}}, "provided at run time"},
		{"file twice", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/a", Content: b64("a")}, {Path: "/a/", Content: b64("b")}}}, "given twice"},
		{"not base64", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/a", Content: "!!"}}}, "not base64"},
		{"mode", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/a", Content: b64("a"), Mode: 0o4755}}}, "recipe.files[0].mode"},
		{"owner", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/a", Content: b64("a"), Owner: "nobody"}}}, "recipe.files[0].owner"},
		{"too big", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/a", Content: b64(strings.Repeat("x", MaxFileBytes+1))}}}, "at most"},
		{"env LIZARD_", api.TemplateRecipe{Env: map[string]string{"LIZARD_SANDBOX_ID": "x"}}, `recipe.env name "LIZARD_SANDBOX_ID"`},
		{"env name", api.TemplateRecipe{Env: map[string]string{"A=B": "x"}}, "recipe.env name"},
		{"workdir", api.TemplateRecipe{Workdir: "work"}, "recipe.workdir"},
		{"empty command", api.TemplateRecipe{Run: []api.TemplateCommand{{Cmd: "  "}}}, "recipe.run[0].cmd"},
		{"command user", api.TemplateRecipe{Run: []api.TemplateCommand{{Cmd: "x", User: "admin"}}}, "recipe.run[0].user"},
		{"from an image", api.TemplateRecipe{From: "registry.example.com/team/app:1.4", Env: map[string]string{"A": "b"}, Run: []api.TemplateCommand{{Cmd: "true"}}}, ""},
		{"from by digest", api.TemplateRecipe{From: "python@sha256:" + strings.Repeat("a", 64)}, ""},
		{"from a bad reference", api.TemplateRecipe{From: "Not A Ref!"}, "recipe.from"},
		{"from and base", api.TemplateRecipe{From: "python:3.12", Base: "interpreter"}, "not both"},
		{"from and apt", api.TemplateRecipe{From: "python:3.12", Apt: []string{"jq"}}, "gets its packages from the image"},
		{"from and pip", api.TemplateRecipe{From: "python:3.12", Pip: []string{"six"}}, "gets its packages from the image"},

		// Adversarial paths: each names a place Lizard provides at run
		// time, or one holding it, however it is spelt.
		{"file up from the agent's directory", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/opt/lizard/..", Content: b64("a")}}}, "cannot replace /opt"},
		{"file over /opt/lizard", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/opt/lizard", Content: b64("a")}}}, "cannot replace /opt/lizard"},
		{"file over /usr/local/bin", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/usr/local/bin/", Content: b64("a")}}}, "cannot replace /usr/local/bin"},
		{"file over /usr", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/usr", Content: b64("a")}}}, "cannot replace /usr"},
		{"file up and back into the agent's", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/home/user/../../opt/lizard/bin/lizard-agent", Content: b64("a")}}}, "provided at run time"},
		{"file dot-dot past the root", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/../../../opt/lizard/bin/x", Content: b64("a")}}}, "provided at run time"},
		{"file over the CLI, doubled slashes", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "//usr//local/bin/./lizard", Content: b64("a")}}}, "provided at run time"},
		{"file in /dev", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/dev/sda", Content: b64("a")}}}, "provided at run time"},
		{"file at .. of /", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/..", Content: b64("a")}}}, "recipe.files[0].path"},
		{"file with NUL", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/home/user/a\x00/../../opt/lizard/bin/x", Content: b64("a")}}}, "recipe.files[0].path"},
		{"file twice, spelt apart", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/home/user/a", Content: b64("a")}, {Path: "/home/./user//a", Content: b64("b")}}}, "given twice"},
		{"workdir in /proc", api.TemplateRecipe{Workdir: "/home/../proc/1"}, "provided at run time"},
		{"workdir in the agent's", api.TemplateRecipe{Workdir: "/opt/lizard/bin/"}, "provided at run time"},
		// A name that merely starts like a reserved one is not reserved.
		{"file beside the CLI", api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/usr/local/bin/lizard-tools", Content: b64("a")}}}, ""},
		{"workdir /opt", api.TemplateRecipe{Workdir: "/opt"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.r
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

func TestValidateDefaults(t *testing.T) {
	r := api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/a", Content: b64("abc")}}, Run: []api.TemplateCommand{{Cmd: "true"}}}
	if err := Validate(&r, bases); err != nil {
		t.Fatal(err)
	}
	f := r.Files[0]
	if r.Base != "interpreter" || f.Mode != 0o644 || f.Owner != "user" || f.Size != 3 || r.Run[0].User != "root" {
		t.Errorf("defaults: base %q, file %+v, command %+v; want interpreter, 0644 user of 3 bytes, root", r.Base, f, r.Run[0])
	}
}

// TestValidateCleansPaths: the build writes the path Validate checked,
// clean, never the spelling the kernel would resolve differently (a
// symbolic link before a ..).
func TestValidateCleansPaths(t *testing.T) {
	r := api.TemplateRecipe{Files: []api.TemplateFile{{Path: "/home/user/link/../data//x.csv/", Content: b64("a")}}, Workdir: "/home/user/./w/"}
	if err := Validate(&r, bases); err != nil {
		t.Fatal(err)
	}
	if r.Files[0].Path != "/home/user/data/x.csv" || r.Workdir != "/home/user/w" {
		t.Errorf("Validate left file path %q and workdir %q; want /home/user/data/x.csv and /home/user/w", r.Files[0].Path, r.Workdir)
	}
}

// TestReservedPattern: the shell pattern the build checks a file's
// resolved path with in the sandbox (a parent may be a link) matches
// exactly what Validate refuses.
func TestReservedPattern(t *testing.T) {
	for _, p := range []string{"/opt/lizard/bin/lizard-agent", "/usr/local/bin/lizard", "/proc/1/environ", "/tmp/x", "/dev/null", "/sys/kernel", "/opt/lizard/bin"} {
		out, err := exec.Command("sh", "-c", "case \"$1\" in "+reservedPattern()+") echo reserved;; *) echo free;; esac", "sh", p).Output()
		if err != nil || strings.TrimSpace(string(out)) != "reserved" {
			t.Errorf("%s against the build's pattern: %q, %v; want reserved", p, out, err)
		}
	}
	for _, p := range []string{"/opt/lizard/venv/x", "/usr/local/bin/lizard-tools", "/home/user/tmp", "/opt/lizard"} {
		out, err := exec.Command("sh", "-c", "case \"$1\" in "+reservedPattern()+") echo reserved;; *) echo free;; esac", "sh", p).Output()
		if err != nil || strings.TrimSpace(string(out)) != "free" {
			t.Errorf("%s against the build's pattern: %q, %v; want free", p, out, err)
		}
	}
}

func TestKey(t *testing.T) {
	valid := func(r api.TemplateRecipe) api.TemplateRecipe {
		if err := Validate(&r, bases); err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := valid(api.TemplateRecipe{Pip: []string{"six==1.16.0"}, Files: []api.TemplateFile{{Path: "/a", Content: b64("x")}}, Env: map[string]string{"A": "1", "B": "2"}})
	same := valid(api.TemplateRecipe{Base: "interpreter", Pip: []string{"six==1.16.0"}, Files: []api.TemplateFile{{Path: "/a", Content: b64("x"), Mode: 0o644, Owner: "user"}}, Env: map[string]string{"B": "2", "A": "1"}})
	content := valid(api.TemplateRecipe{Pip: []string{"six==1.16.0"}, Files: []api.TemplateFile{{Path: "/a", Content: b64("y")}}, Env: map[string]string{"A": "1", "B": "2"}})
	k := Key("proj_a", a, "interpreter-abc")
	if got := Key("proj_a", same, "interpreter-abc"); got != k {
		t.Errorf("the same recipe spelt with its defaults has key %s, want %s", got, k)
	}
	if Key("proj_a", content, "interpreter-abc") == k {
		t.Error("a file's content changed and the key did not")
	}
	if Key("proj_a", a, "interpreter-def") == k {
		t.Error("the base's build changed and the key did not")
	}
	// Projects never share a build: one answered from the cache would
	// tell a project that another built the same recipe (file contents
	// included).
	if Key("proj_b", a, "interpreter-abc") == k {
		t.Error("another project's same recipe has the same key")
	}
	if len(k) != 16 {
		t.Errorf("key %q: want 16 hex digits", k)
	}
}

func TestValidNames(t *testing.T) {
	for _, bad := range []string{"", "-a", "a-", "A", "a_b", "a@b", strings.Repeat("a", 64)} {
		if ValidName(bad) == nil {
			t.Errorf("ValidName(%q) = nil; want an error", bad)
		}
	}
}

func TestSweep(t *testing.T) {
	cache := t.TempDir()
	dir := cache + "/templates"
	for _, d := range []string{dir + "/.build-custom-aaaa-123/rootfs/etc", dir + "/.build-custom-bbbb-456/rootfs", dir + "/custom-cccc/rootfs"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{"custom-aaaa.lock", "custom-bbbb.lock", "custom-cccc.lock"} {
		os.WriteFile(dir+"/"+l, nil, 0o644)
	}
	// bbbb is being built: its lock is held.
	held, _ := os.OpenFile(dir+"/custom-bbbb.lock", os.O_RDWR, 0)
	defer held.Close()
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	// Builds held by data directories: dddd only by gone ones, eeee by a
	// gone one and one that exists, ffff by none yet.
	gone, live := cache+"/gone-data", t.TempDir()
	for _, d := range []string{"dddd", "eeee", "ffff"} {
		os.MkdirAll(dir+"/custom-"+d+"/rootfs", 0o755)
		os.MkdirAll(dir+"/custom-"+d+".holders", 0o700)
	}
	os.WriteFile(dir+"/custom-dddd.holders/1", []byte(gone+"\n"), 0o600)
	os.WriteFile(dir+"/custom-dddd.holders/2", []byte(gone+"2\n"), 0o600)
	os.WriteFile(dir+"/custom-eeee.holders/1", []byte(gone+"\n"), 0o600)
	os.WriteFile(dir+"/custom-eeee.holders/2", []byte(live+"\n"), 0o600)
	New(Config{CacheDir: cache}).Sweep()
	for path, want := range map[string]bool{
		dir + "/.build-custom-aaaa-123": false, dir + "/custom-aaaa.lock": false,
		dir + "/.build-custom-bbbb-456": true, dir + "/custom-bbbb.lock": true,
		dir + "/custom-cccc": true, dir + "/custom-cccc.lock": true,
		dir + "/custom-dddd": false, dir + "/custom-dddd.holders": false, dir + "/custom-dddd.lock": false,
		dir + "/custom-eeee": true, dir + "/custom-eeee.holders": true,
		dir + "/custom-ffff": true, dir + "/custom-ffff.holders": true,
	} {
		if _, err := os.Stat(path); (err == nil) != want {
			t.Errorf("after Sweep, %s exists = %v; want %v", path, err == nil, want)
		}
	}
}

// TestBounds checks that a build's time and the cache's free disk end it
// as a failed step of the recipe, and that a client going away does not.
func TestBounds(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"time", Config{CacheDir: t.TempDir(), Timeout: 20 * time.Millisecond}, "took longer than 20ms"},
		{"disk", Config{CacheDir: t.TempDir(), MinFreeBytes: 1 << 62}, "less than"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, stop := New(tt.cfg).bound(context.Background(), "0123456789abcdef")
			defer stop()
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the bound did not end the build")
			}
			var se *StepError
			if err := stepFailure(ctx, "run: x", "out"); !errors.As(err, &se) || se.Step != "run: x" || se.Log != "out" || !strings.Contains(se.Error(), tt.want) {
				t.Errorf("stepFailure = %v; want the step's failure saying %q", err, tt.want)
			}
		})
	}
	parent, cancel := context.WithCancel(context.Background())
	ctx, stop := New(Config{CacheDir: t.TempDir()}).bound(parent, "0123456789abcdef")
	defer stop()
	cancel()
	<-ctx.Done()
	if err := stepFailure(ctx, "s", ""); !errors.Is(err, context.Canceled) {
		t.Errorf("stepFailure after the client left = %v; want context.Canceled", err)
	}
}

// TestHoldRelease checks that a build in the shared cache is removed only
// when no other existing data directory holds it.
func TestHoldRelease(t *testing.T) {
	cache := t.TempDir()
	build := cache + "/templates/custom-k1/rootfs"
	if err := os.MkdirAll(build, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(cache+"/templates/custom-k1/complete", nil, 0o644)
	a := New(Config{CacheDir: cache, DataDir: t.TempDir()})
	b := New(Config{CacheDir: cache, DataDir: t.TempDir()})
	gone := New(Config{CacheDir: cache, DataDir: "/nonexistent/lizard-data"})
	for _, h := range []*Builder{a, b, gone} {
		if err := h.Hold("k1"); err != nil {
			t.Fatal(err)
		}
	}
	if removed, err := a.Release("k1"); err != nil || removed || !exists(build) {
		t.Fatalf("a.Release while b holds = %v, %v (build there: %v); want it kept", removed, err, exists(build))
	}
	// gone's data directory no longer exists: its hold does not count.
	if removed, err := b.Release("k1"); err != nil || !removed || exists(build) || exists(cache+"/templates/custom-k1.holders") {
		t.Fatalf("b.Release, the last live holder = %v, %v; want the build and its holders removed", removed, err)
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func TestImageSettings(t *testing.T) {
	img := oci.Image{Env: []string{"PATH=/usr/local/bin:/usr/bin", "LANG=C.UTF-8", "LIZARD_AGENT_SECRET=x", "BAD NAME=1"},
		Workdir: "/srv/../app", User: "1000:1000", Entrypoint: []string{"/bin/server"}, Cmd: []string{"--port", "8000", "it's"}}
	got := imageSettings(api.TemplateRecipe{From: "x"}, nil, img)
	want := Settings{Env: map[string]string{"PATH": "/usr/local/bin:/usr/bin", "LANG": "C.UTF-8"}, Workdir: "/app", User: "1000",
		Start: `exec '/bin/server' '--port' '8000' 'it'\''s'`}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the image's config alone:\n got %+v\nwant %+v", got, want)
	}
	r := api.TemplateRecipe{From: "x", Env: map[string]string{"LANG": "en_US.UTF-8"}, Workdir: "/w", Start: "sleep 1", Ready: "true",
		Steps: []api.TemplateStep{{User: "root"}}}
	got = imageSettings(r, Steps(r), img)
	if got.Env["LANG"] != "en_US.UTF-8" || got.Env["PATH"] == "" || got.Workdir != "/w" || got.Start != "sleep 1" || got.Ready != "true" || got.User != "root" {
		t.Errorf("the recipe over the image: got %+v, want its env, workdir, user, start and ready to win", got)
	}
}

func TestLinkPython(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
		want  string
	}{
		{"python image", []string{"usr/local/bin/python3", "usr/local/lib/python3.12/site-packages/IPython/__init__.py"}, "/usr/local/bin/python3"},
		{"debian python3-ipython", []string{"usr/bin/python3", "usr/lib/python3/dist-packages/IPython/__init__.py"}, "/usr/bin/python3"},
		{"python without IPython", []string{"usr/bin/python3", "usr/lib/python3/dist-packages/six.py"}, ""},
		{"IPython without python", []string{"usr/local/lib/python3.12/site-packages/IPython/__init__.py"}, ""},
		{"the image's own venv", []string{"opt/lizard/venv/bin/python", "usr/bin/python3", "usr/lib/python3/dist-packages/IPython/x.py"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.files {
				os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755)
				os.WriteFile(filepath.Join(dir, f), nil, 0o755)
			}
			root, _ := os.OpenRoot(dir)
			defer root.Close()
			got, ok := linkPython(root)
			link, _ := os.Readlink(filepath.Join(dir, "opt/lizard/venv/bin/python"))
			if got != tc.want || ok != (tc.want != "") || (ok && link != tc.want) {
				t.Errorf("got %q %v (link %q), want %q", got, ok, link, tc.want)
			}
		})
	}
}

// TestBuildStoppedPastMaxBytes: a build whose directory grows past the
// room its project's template quota leaves it (WithMaxBytes) is stopped
// like a failed step, saying what to delete or raise; under it, not.
func TestBuildStoppedPastMaxBytes(t *testing.T) {
	cache := t.TempDir()
	b := New(Config{CacheDir: cache, MinFreeBytes: 1})
	dir := filepath.Join(cache, "templates", ".build-"+LayerKey("0123456789abcdef")+"-x", "rootfs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, stop := b.bound(WithMaxBytes(context.Background(), 4<<20), "0123456789abcdef")
	select {
	case <-ctx.Done():
		t.Fatalf("a build under its room was stopped: %v", context.Cause(ctx))
	case <-time.After(2500 * time.Millisecond):
	}
	stop()
	ctx, stop = b.bound(WithMaxBytes(context.Background(), 1<<20), "0123456789abcdef")
	defer stop()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a build past its room was not stopped")
	}
	err := stepFailure(ctx, "run: x", "")
	var se *StepError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "the build grew to 2 MiB, past the 1 MiB its project's template quota leaves it") {
		t.Fatalf("stopped with %v; want a failed step naming the quota", err)
	}
}
