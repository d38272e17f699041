package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/template"
)

// imageRegistry is go-containerregistry's registry, served by the test
// on loopback; repositories under private/ need user:password.
func imageRegistry(t *testing.T, password string) string {
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v2/private/") {
			if u, p, ok := r.BasicAuth(); !ok || !(u == "user" && p == password || u == "_json_key" && gcpKeyOf(p) == password) {
				w.Header().Set("WWW-Authenticate", `Basic realm="e2e"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"log in"}]}`, http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// gcpKeyOf is the private key of a GCP service account's JSON key, as
// Google's registries take it: the password of the user _json_key.
func gcpKeyOf(p string) string {
	var key struct {
		Type       string `json:"type"`
		PrivateKey string `json:"private_key"`
	}
	if json.Unmarshal([]byte(p), &key) != nil || key.Type != "service_account" {
		return ""
	}
	return key.PrivateKey
}

// layerEntry is a file of a test layer: its content from the host's
// interpreter template (src) or given (body), or a link.
type layerEntry struct {
	name, src, body, link string
	typ                   byte
	mode                  int64
	uid                   int
}

func imageLayer(t *testing.T, rootfs string, es []layerEntry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		body := []byte(e.body)
		if e.src != "" {
			b, err := os.ReadFile(filepath.Join(rootfs, e.src)) // follows the library's links: the file itself
			if err != nil {
				t.Fatal(err)
			}
			body = b
		}
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Linkname: e.link, Mode: e.mode, Uid: e.uid, Gid: e.uid, Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(body[:h.Size])
	}
	tw.Close()
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// noPythonImage is the smallest image that boots under gVisor with
// Lizard's agent and runs shell commands, made of the interpreter
// template's own files: bash, dash and a few coreutils with the
// libraries they need, /etc/passwd with root and user, and no Python.
// Its second layer has a whiteout, an opaque directory and a hard link;
// its config an ENV, a WORKDIR, a USER and a CMD.
func noPythonImage(t *testing.T, nonce string) v1.Image {
	rootfs, err := template.Ensure(context.Background(), cacheDir(), template.Default, io.Discard)
	if err != nil {
		t.Fatalf("the interpreter template: %v", err)
	}
	dir := func(n string) layerEntry { return layerEntry{name: n, typ: tar.TypeDir, mode: 0o755} }
	base := []layerEntry{
		{name: "bin", typ: tar.TypeSymlink, link: "usr/bin"}, {name: "lib", typ: tar.TypeSymlink, link: "usr/lib"},
		{name: "lib64", typ: tar.TypeSymlink, link: "usr/lib64"}, {name: "sbin", typ: tar.TypeSymlink, link: "usr/bin"},
		dir("usr"), dir("usr/bin"), dir("usr/lib"), dir("usr/lib/x86_64-linux-gnu"), dir("usr/lib64"),
		{name: "usr/lib64/ld-linux-x86-64.so.2", typ: tar.TypeSymlink, link: "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
		{name: "usr/bin/sh", typ: tar.TypeSymlink, link: "dash"},
		dir("etc"), dir("home"), {name: "home/user", typ: tar.TypeDir, mode: 0o755, uid: 1000}, dir("data"), dir("data/old"),
		{name: "etc/passwd", body: "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n"},
		{name: "etc/group", body: "root:x:0:\nuser:x:1000:\n"},
		{name: "etc/motd", body: "whited out\n"}, {name: "etc/nonce", body: nonce},
		{name: "data/old/a", body: "a"}, {name: "data/old/b", body: "b"}, {name: "data/file", body: "linked\n"},
		// A setuid copy of a shell: the template's has no set-id bit.
		{name: "usr/bin/suid-sh", src: "usr/bin/dash", mode: 0o4755},
	}
	for _, b := range []string{"bash", "dash", "cat", "ls", "id", "env", "sleep", "mkdir", "rm", "install", "realpath", "dirname", "chown", "stat", "readlink", "tr"} {
		base = append(base, layerEntry{name: "usr/bin/" + b, src: "usr/bin/" + b, mode: 0o755})
	}
	for _, l := range []string{"libtinfo.so.6", "libc.so.6", "libselinux.so.1", "libcap.so.2", "libpcre2-8.so.0", "libacl.so.1", "libattr.so.1", "ld-linux-x86-64.so.2"} {
		base = append(base, layerEntry{name: "usr/lib/x86_64-linux-gnu/" + l, src: "usr/lib/x86_64-linux-gnu/" + l, mode: 0o755})
	}
	top := []layerEntry{
		{name: "etc/.wh.motd"},
		{name: "data/old/c", body: "c"}, {name: "data/old/.wh..wh..opq"},
		{name: "data/link", typ: tar.TypeLink, link: "data/file"},
	}
	img, err := mutate.AppendLayers(empty.Image, imageLayer(t, rootfs, base), imageLayer(t, rootfs, top))
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{Env: []string{"PATH=/usr/bin:/bin", "IMAGE_VAR=from-the-image"}, WorkingDir: "/srv/app", User: "user",
		Cmd: []string{"/bin/sh", "-c", "echo started-by-cmd > /tmp/cmd.txt"}}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// treeEntries are the entries of rootfs's directory rel and everything
// below it (files, directories, links; __pycache__ left out), at the same
// paths in the layer.
func treeEntries(t *testing.T, rootfs, rel string) []layerEntry {
	t.Helper()
	var out []layerEntry
	err := filepath.WalkDir(filepath.Join(rootfs, rel), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == "__pycache__" {
			return filepath.SkipDir
		}
		r, _ := filepath.Rel(rootfs, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			out = append(out, layerEntry{name: r, typ: tar.TypeDir, mode: 0o755})
		case d.Type() == os.ModeSymlink:
			l, _ := os.Readlink(p)
			out = append(out, layerEntry{name: r, typ: tar.TypeSymlink, link: l})
		case d.Type().IsRegular():
			out = append(out, layerEntry{name: r, src: r, mode: int64(fi.Mode().Perm())})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pythonLayer adds to an image Debian's python3 (from the interpreter
// template) with IPython and what it imports in /usr/lib/python3/dist-packages,
// where Debian's python3-ipython puts it.
func pythonLayer(t *testing.T, rootfs string) []layerEntry {
	es := []layerEntry{
		{name: "usr/bin/python3.13", src: "usr/bin/python3.13", mode: 0o755},
		{name: "usr/bin/python3", typ: tar.TypeSymlink, link: "python3.13"},
		{name: "usr/lib/python3", typ: tar.TypeDir, mode: 0o755},
		{name: "usr/lib/python3/dist-packages", typ: tar.TypeDir, mode: 0o755},
	}
	for _, l := range []string{"libm.so.6", "libz.so.1", "libexpat.so.1", "libffi.so.8", "libsqlite3.so.0", "libbz2.so.1.0", "liblzma.so.5"} {
		if _, err := os.Stat(filepath.Join(rootfs, "usr/lib/x86_64-linux-gnu", l)); err == nil {
			es = append(es, layerEntry{name: "usr/lib/x86_64-linux-gnu/" + l, src: "usr/lib/x86_64-linux-gnu/" + l, mode: 0o755})
		}
	}
	es = append(es, treeEntries(t, rootfs, "usr/lib/python3.13")...)
	site := "opt/lizard/venv/lib/python3.13/site-packages"
	entries, _ := os.ReadDir(filepath.Join(rootfs, site))
	for _, e := range entries {
		for _, pkg := range []string{"IPython", "traitlets", "pygments", "prompt_toolkit", "wcwidth", "jedi", "parso", "decorator", "matplotlib_inline",
			"pexpect", "ptyprocess", "stack_data", "executing", "asttokens", "pure_eval", "ipython_pygments_lexers", "typing_extensions"} {
			if e.Name() == pkg || e.Name() == pkg+".py" {
				for _, te := range treeEntries(t, rootfs, filepath.Join(site, e.Name())) {
					te.name = "usr/lib/python3/dist-packages/" + strings.TrimPrefix(te.name, site+"/")
					es = append(es, te)
				}
			}
		}
	}
	return es
}

func pushImage(t *testing.T, ref, password string, img v1.Image) string {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, remote.WithAuth(&authn.Basic{Username: "user", Password: password})); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return d.String()
}

// TestImageTemplate builds templates on images from a registry the test
// serves: an image without Python (commands, files and its config work;
// Python code is a 400 naming what is missing), with a whiteout, an
// opaque directory and a hard link; its digest pinned; a second template
// of the same image finding its layers in the cache; a private image
// refused without credentials and built with them.
func TestImageTemplate(t *testing.T) {
	nonceB := make([]byte, 6)
	rand.Read(nonceB)
	nonce := hex.EncodeToString(nonceB) // a fresh image, so fresh layers: the first pull is a real one
	password := "pw-" + nonce
	reg := imageRegistry(t, password)
	s := startServer(t, "--template-builds-per-hour", "100", "--registry-allow", reg) // five builds, past the default burst
	c := s.createProject("proj_img")
	ctx := context.Background()
	img := noPythonImage(t, nonce)
	digest := pushImage(t, reg+"/e2e/nopy:1", password, img)

	tpl, cached, events, err := buildTemplate(t, c, api.BuildTemplateRequest{Name: "e2e-img", Recipe: api.TemplateRecipe{From: reg + "/e2e/nopy:1"}})
	if err != nil {
		t.Fatalf("building a template on the image: %v\n%s", err, s.logs())
	}
	if cached || tpl.Digest != digest || tpl.Recipe.From != reg+"/e2e/nopy:1" {
		t.Errorf("template = %+v, cached %v; want a fresh build with digest %s pinned and from as given", tpl, cached, digest)
	}
	var logs []string
	for _, ev := range events {
		logs = append(logs, ev.Name+ev.Text)
	}
	all := strings.Join(logs, "\n")
	if !strings.Contains(all, "pulling image "+reg+"/e2e/nopy@"+digest) || !strings.Contains(all, "pulling") || strings.Contains(all, ": cached") {
		t.Errorf("build events: want the pinned image pulled, no layer cached:\n%s", all)
	}
	t.Logf("image template built in %d ms, %d KiB", tpl.BuildMs, tpl.SizeBytes>>10)

	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "e2e-img"})
	if err != nil {
		t.Fatalf("creating a sandbox of the image template: %v\n%s", err, s.logs())
	}
	defer c.KillSandbox(context.WithoutCancel(ctx), sb.SandboxID)
	res, err := c.Exec(ctx, sb.SandboxID, api.ProcessRequest{Cmd: `id -un; pwd; echo $IMAGE_VAR; cat /etc/nonce; echo; cat /tmp/cmd.txt; ls /data/old | tr '\n' ' '; echo;
[ -e /etc/motd ] && echo motd-present || echo motd-gone; cat /data/link; stat -c '%h %a' /data/file /usr/bin/suid-sh | tr '\n' ' '; echo; stat -c %U /srv/app`}, nil)
	want := "user\n/srv/app\nfrom-the-image\n" + nonce + "\nstarted-by-cmd\nc \nmotd-gone\nlinked\n2 644 1 755 \nuser\n"
	if err != nil || res.ExitCode != 0 || res.Stdout != want {
		t.Errorf("commands in the image template's sandbox = %+v, %v;\nwant stdout %q (USER, WORKDIR, ENV, CMD, whiteout, opaque dir, hard link, set-id bit cleared)", res, err, want)
	}
	if _, err := c.WriteFile(ctx, sb.SandboxID, "/srv/app/w.txt", strings.NewReader("written")); err != nil {
		t.Errorf("writing a file: %v", err)
	} else if rc, err := c.ReadFile(ctx, sb.SandboxID, "/srv/app/w.txt"); err != nil {
		t.Errorf("reading it back: %v", err)
	} else {
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != "written" {
			t.Errorf("read back %q, want written", b)
		}
	}
	_, err = c.Execute(ctx, sb.SandboxID, api.ExecuteRequest{Code: "print(1)"}, nil)
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || !strings.Contains(apiErr.Message, "no Python kernel: there is no /opt/lizard/venv/bin/python") ||
		!strings.Contains(apiErr.Message, "commands, files, terminals and processes work") {
		t.Errorf("Python in a template without it = %v; want a 400 naming the missing interpreter", err)
	}
	if res, err := c.Execute(ctx, sb.SandboxID, api.ExecuteRequest{Code: "echo bash-ok", Language: "bash"}, nil); err != nil || strings.TrimSpace(res.Stdout) != "bash-ok" {
		t.Errorf("bash code in it = %+v, %v", res, err)
	}

	// The same recipe again: the cache; the same image with files and a
	// build command: a new build whose layers come from the cache.
	if again, cached, _, err := buildTemplate(t, c, api.BuildTemplateRequest{Name: "e2e-img", Recipe: api.TemplateRecipe{From: reg + "/e2e/nopy:1"}}); err != nil || !cached || again.Key != tpl.Key {
		t.Errorf("the same recipe again = %+v, cached %v, %v; want the cache", again, cached, err)
	}
	tpl2, _, events, err := buildTemplate(t, c, api.BuildTemplateRequest{Name: "e2e-img2", Recipe: api.TemplateRecipe{From: reg + "/e2e/nopy:1",
		Files: []api.TemplateFile{{Path: "/srv/app/given.txt", Content: base64.StdEncoding.EncodeToString([]byte("given"))}},
		Run:   []api.TemplateCommand{{Cmd: "echo built-as-$(id -un) > /built.txt"}}, Env: map[string]string{"IMAGE_VAR": "from-the-recipe"}}})
	if err != nil {
		t.Fatalf("building a second template on the image: %v\n%s", err, s.logs())
	}
	all = ""
	for _, ev := range events {
		all += ev.Name + ev.Text + "\n"
	}
	if strings.Count(all, ": cached") != 2 || tpl2.Digest != digest {
		t.Errorf("second template of the image: want both layers from the cache, digest %s; got %s\n%s", digest, tpl2.Digest, all)
	}
	sb2, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "e2e-img2"})
	if err != nil {
		t.Fatalf("creating a sandbox of the second template: %v\n%s", err, s.logs())
	}
	defer c.KillSandbox(context.WithoutCancel(ctx), sb2.SandboxID)
	res, err = c.Exec(ctx, sb2.SandboxID, api.ProcessRequest{Cmd: `cat /srv/app/given.txt; echo; cat /built.txt; echo $IMAGE_VAR`}, nil)
	if want := "given\nbuilt-as-root\nfrom-the-recipe\n"; err != nil || res.Stdout != want {
		t.Errorf("the second template's sandbox = %+v, %v; want %q", res, err, want)
	}

	// A private image: refused without credentials, built with them;
	// they are not in the template's record.
	pdigest := pushImage(t, reg+"/private/app:1", password, img)
	_, _, _, err = buildTemplate(t, c, api.BuildTemplateRequest{Name: "e2e-private", Recipe: api.TemplateRecipe{From: reg + "/private/app:1"}})
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || !strings.Contains(apiErr.Message, "HTTP 401") {
		t.Errorf("a private image without credentials = %v; want a 400 saying the registry refused it", err)
	}
	ptpl, _, _, err := buildTemplate(t, c, api.BuildTemplateRequest{Name: "e2e-private", Recipe: api.TemplateRecipe{From: reg + "/private/app:1"},
		Registry: &api.RegistryAuth{Username: "user", Password: password}})
	if err != nil || ptpl.Digest != pdigest {
		t.Fatalf("a private image with credentials = %+v, %v; want it built, digest %s", ptpl, err, pdigest)
	}
	if got, err := c.Templates().Get(ctx, "e2e-private"); err != nil || strings.Contains(s.logs(), password) {
		t.Errorf("the private template's record %+v, %v; the password must be in no record or log line", got, err)
	}

	// A hostile image: a link to a host directory, then a file written
	// through it. The build fails naming the entry; the host's file is
	// not made, nothing of the build is left.
	hostDir := t.TempDir()
	rootfs, _ := template.Ensure(ctx, cacheDir(), template.Default, io.Discard)
	hostile, _ := mutate.AppendLayers(empty.Image,
		imageLayer(t, rootfs, []layerEntry{{name: "etc", typ: tar.TypeSymlink, link: hostDir}, {name: "dev/sda", typ: tar.TypeBlock, mode: 0o666}}),
		imageLayer(t, rootfs, []layerEntry{{name: "etc/pwned", body: nonce}}))
	pushImage(t, reg+"/e2e/hostile:1", password, hostile)
	_, _, _, err = buildTemplate(t, c, api.BuildTemplateRequest{Name: "e2e-hostile", Recipe: api.TemplateRecipe{From: reg + "/e2e/hostile:1"}})
	var be *client.BuildError
	if !errors.As(err, &be) || !strings.Contains(be.Message, `"etc/pwned" is below "etc", a symbolic link`) {
		t.Errorf("a hostile image's build = %v; want it failed naming the entry below the link", err)
	}
	if _, err := os.Stat(filepath.Join(hostDir, "pwned")); !os.IsNotExist(err) {
		t.Errorf("the hostile image wrote through its link to the host: %v", err)
	}
	if _, err := c.Templates().Get(ctx, "e2e-hostile"); !errors.As(err, &apiErr) || apiErr.Status != 404 {
		t.Errorf("the hostile image's template was recorded: %v", err)
	}

	// The same image with Debian's python3 and IPython: the build links
	// it as the kernel's interpreter, and Python code runs.
	withPy, err := mutate.AppendLayers(img, imageLayer(t, rootfs, pythonLayer(t, rootfs)))
	if err != nil {
		t.Fatal(err)
	}
	pushImage(t, reg+"/e2e/py:1", password, withPy)
	ptpl2, _, events, err := buildTemplate(t, c, api.BuildTemplateRequest{Name: "e2e-py", Recipe: api.TemplateRecipe{From: reg + "/e2e/py:1"}})
	if err != nil {
		t.Fatalf("building on an image with python3 and IPython: %v\n%s", err, s.logs())
	}
	all = ""
	for _, ev := range events {
		all += ev.Name + ev.Text + "\n"
	}
	if !strings.Contains(all, "the image's /usr/bin/python3 has IPython") {
		t.Errorf("the build did not say it linked the image's python3:\n%s", all)
	}
	sb3, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "e2e-py"})
	if err != nil {
		t.Fatalf("creating a sandbox of the image with Python: %v\n%s", err, s.logs())
	}
	defer c.KillSandbox(context.WithoutCancel(ctx), sb3.SandboxID)
	if got := py(t, c, sb3.SandboxID, "import sys, os; x = 6 * 7; print(sys.version_info[:2], os.environ['IMAGE_VAR'], x)"); got != "(3, 13) from-the-image 42" {
		t.Errorf("Python in the image's interpreter printed %q", got)
	}
	if got := py(t, c, sb3.SandboxID, "print(x + 1)"); got != "43" {
		t.Errorf("the kernel kept no state: printed %q", got)
	}
	t.Logf("image with python3 and IPython: template %d MiB", ptpl2.SizeBytes>>20)

	for _, id := range []string{sb.SandboxID, sb2.SandboxID, sb3.SandboxID} {
		if err := c.KillSandbox(ctx, id); err != nil {
			t.Errorf("killing %s: %v", id, err)
		}
	}
	for _, n := range []string{"e2e-img", "e2e-img2", "e2e-private", "e2e-py"} {
		if err := c.Templates().Delete(ctx, n); err != nil {
			t.Errorf("deleting %s: %v", n, err)
		}
	}
	for _, k := range []string{tpl.Key, tpl2.Key, ptpl.Key, ptpl2.Key} {
		if left := cacheEntries(k); len(left) > 0 {
			t.Errorf("a deleted template's build is still in the cache: %v", left)
		}
	}
}
