package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/testenv"
)

// e2bImageScript is E2B's Template SDK (PyPI e2b) building on images of
// a registry: a public one with envs and a command, then a sandbox of
// it; a private one refused without its credentials and built with them,
// and with a GCP service account's key (from_gcp_registry).
const e2bImageScript = `
import json, os
from e2b import Sandbox, Template
name = os.environ["NAME"]
t = Template().from_image(os.environ["IMAGE"]).set_envs({"FROM_E2B": "yes"}).run_cmd("echo built-as-$(id -un) > /home/user/built.txt", user="root")
Template.build(t, name + ":v1")
sb = Sandbox.create(name + ":v1", timeout=120)
try:
    out = sb.commands.run("cat /home/user/built.txt; echo $FROM_E2B $IMAGE_VAR; cat /etc/nonce").stdout
finally:
    sb.kill()
try:
    Template.build(Template().from_image(os.environ["PRIVATE"]), name + "-p")
    refused = ""
except Exception as e:
    refused = str(e)
Template.build(Template().from_image(os.environ["PRIVATE"], username="user", password=os.environ["PASSWORD"]), name + "-p")
key = {"type": "service_account", "client_email": "e2e@e2e.iam.gserviceaccount.com", "private_key": os.environ["PASSWORD"]}
Template.build(Template().from_gcp_registry(os.environ["PRIVATE"], key), name + "-g")
print(json.dumps({"out": out, "refused": refused, "exists": Template.exists(name + "-p"), "gcp": Template.exists(name + "-g")}))
`

// TestE2BTemplateFromImage: E2B's Template SDK's from_image through the
// E2B surface builds on an image of the test's own registry (internal/oci
// pulls it), as Lizard's recipe.from does; from_image's username and
// password pull a private image, which without them is refused, and so
// does from_gcp_registry's service account key (basic auth as _json_key).
func TestE2BTemplateFromImage(t *testing.T) {
	nb := make([]byte, 6)
	rand.Read(nb)
	nonce := hex.EncodeToString(nb)
	password := "pw-" + nonce
	reg := imageRegistry(t, password)
	img := noPythonImage(t, nonce)
	pushImage(t, reg+"/e2e/nopy:1", password, img)
	pushImage(t, reg+"/private/app:1", password, img)
	s := startServer(t, "--registry-allow", reg)
	c := s.createProject("proj_e2bimg")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	name := "e2b-img-" + nonce
	t.Cleanup(func() {
		for _, n := range []string{name, name + "-p", name + "-g"} {
			c.Templates().Delete(context.Background(), n)
		}
	})
	var got struct {
		Out, Refused string
		Exists, GCP  bool
	}
	runE2BScript(ctx, t, s, s.keys[c], e2bImageScript, &got,
		"NAME="+name, "IMAGE="+reg+"/e2e/nopy:1", "PRIVATE="+reg+"/private/app:1", "PASSWORD="+password)
	// The run step is root's: a build runs a step as user with the image's
	// setpriv, which this image (a shell and a few coreutils) has not.
	if want := "built-as-root\nyes from-the-image\n" + nonce; got.Out != want {
		t.Errorf("the sandbox of the image template printed %q; want %q (the run step, the template's env and the image's)", got.Out, want)
	}
	if !strings.Contains(got.Refused, "401") || !got.Exists {
		t.Errorf("the private image: refused without credentials with %q (want the registry's 401), built with them: %v", got.Refused, got.Exists)
	}
	if !got.GCP {
		t.Error("from_gcp_registry of the private image (its service account key as _json_key's password) did not build")
	}
	if strings.Contains(s.logs(), password) {
		t.Error("the registry password is in the server's log")
	}
}

// e2bNpmScript is E2B's Template SDK's npm_install (global, then local
// as dev) and bun_install, against the test's own npm registry.
const e2bNpmScript = `
import json, os
from e2b import Sandbox, Template
name, hello, lib = os.environ["NAME"], os.environ["HELLO"], os.environ["LIB"]
t = (Template().from_template("base").npm_install(hello, g=True).set_workdir("/home/user/app")
     .npm_install([lib], dev=True).bun_install(lib + "@1"))
Template.build(t, name)
sb = Sandbox.create(name, timeout=120)
try:
    out = sb.commands.run(hello + " && node -e 'console.log(require(\"" + lib + "\").word)' && stat -c %U node_modules/" + lib + "/index.js && cat package.json").stdout
finally:
    sb.kill()
print(json.dumps({"out": out}))
`

// npmRegistry serves packages as the npm registry does (a packument per
// name, a tarball per version): hello, whose command prints its
// dependency lib's word, and lib. Both have an install script that
// writes marker: it must never run on the host.
func npmRegistry(t *testing.T, hello, lib, word, marker string) string {
	t.Helper()
	tgz := func(files map[string]string) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		for name, body := range files {
			tw.WriteHeader(&tar.Header{Name: "package/" + name, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg})
			tw.Write([]byte(body))
		}
		tw.Close()
		zw.Close()
		return buf.Bytes()
	}
	scripts := map[string]string{"postinstall": "echo ran >" + marker, "install": "echo ran >" + marker, "preinstall": "echo ran >" + marker}
	manifests := map[string]map[string]any{
		hello: {"name": hello, "version": "1.0.0", "bin": map[string]string{hello: "bin.js"}, "dependencies": map[string]string{lib: "^1.0.0"}, "scripts": scripts},
		lib:   {"name": lib, "version": "1.0.0", "main": "index.js", "scripts": scripts},
	}
	tarballs := map[string][]byte{}
	for name, m := range manifests {
		pj, _ := json.Marshal(m)
		files := map[string]string{"package.json": string(pj), "index.js": fmt.Sprintf("module.exports = {word: %q}\n", word)}
		if name == hello {
			files["bin.js"] = fmt.Sprintf("#!/usr/bin/env node\nconsole.log('hello from ' + require(%q).word)\n", lib)
		}
		tarballs[name] = tgz(files)
	}
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := strings.TrimPrefix(r.URL.Path, "/")
		if name, ok := strings.CutSuffix(p, "/-/pkg-1.0.0.tgz"); ok && tarballs[name] != nil {
			w.Write(tarballs[name])
			return
		}
		m, ok := manifests[p]
		if !ok {
			http.Error(w, `{"error":"Not found"}`, http.StatusNotFound)
			return
		}
		sum := sha512.Sum512(tarballs[p])
		v := maps.Clone(m)
		v["dist"] = map[string]string{"tarball": srv.URL + "/" + p + "/-/pkg-1.0.0.tgz", "integrity": "sha512-" + base64.StdEncoding.EncodeToString(sum[:])}
		json.NewEncoder(w).Encode(map[string]any{"name": p, "dist-tags": map[string]string{"latest": "1.0.0"}, "versions": map[string]any{"1.0.0": v}})
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}

// TestE2BTemplateNpmInstall: E2B's npm_install and bun_install become
// npm steps — the packages fetched on the host from the registry (the
// test's own, through npm_config_registry), their install scripts not
// run, and put in place in the build sandbox: a global package's command
// on the PATH, a local one in the working directory's node_modules, the
// user's, with a package.json listing it.
func TestE2BTemplateNpmInstall(t *testing.T) {
	nb := make([]byte, 6)
	rand.Read(nb)
	nonce := hex.EncodeToString(nb)
	hello, lib := "lizard-hello-"+nonce, "lizard-lib-"+nonce
	marker := filepath.Join(t.TempDir(), "install-script-ran")
	t.Setenv("npm_config_registry", npmRegistry(t, hello, lib, "w-"+nonce, marker))
	s := startServer(t)
	c := s.createProject("proj_e2bnpm")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	name := "e2b-npm-" + nonce
	t.Cleanup(func() { c.Templates().Delete(context.Background(), name) })
	var got struct{ Out string }
	runE2BScript(ctx, t, s, s.keys[c], e2bNpmScript, &got, "NAME="+name, "HELLO="+hello, "LIB="+lib)
	want := fmt.Sprintf("hello from w-%[1]s\nw-%[1]s\nuser\n", nonce)
	if !strings.HasPrefix(got.Out, want) || !strings.Contains(got.Out, `"devDependencies"`) || !strings.Contains(got.Out, lib) {
		t.Errorf("the sandbox printed %q; want %q, then a package.json with %s in devDependencies", got.Out, want, lib)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a package's install script ran on the host")
	}
}

// runE2BScript runs a Python script using E2B's SDK against s with key and
// env, and reads the JSON object its last line prints into got.
func runE2BScript(ctx context.Context, t *testing.T, s *server, key, script string, got any, env ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, testenv.Python(t), "-c", script)
	cmd.Env = append(os.Environ(), append([]string{"E2B_API_URL=" + s.url + "/e2b", "E2B_SANDBOX_URL=" + s.url + "/e2b/sandbox", "E2B_API_KEY=" + key}, env...)...)
	out, err := cmd.Output()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || json.Unmarshal([]byte(lines[len(lines)-1]), got) != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("the E2B script: %v\n%s\n%s\n%s", err, out, stderr, s.logs())
	}
}
