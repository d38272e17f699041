package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
)

// TestDockerfileTemplate builds a template with `lizard template build -f
// Dockerfile` from a Dockerfile with every supported instruction and a
// build context (a .dockerignore, a symbolic link), checks its work from a
// sandbox (files, env, working directory, users, the CMD serving HTTP
// through the port proxy right after create), builds it again (found in
// the cache), and has a line Lizard cannot honour refused, naming it.
func TestDockerfileTemplate(t *testing.T) {
	name := "e2e-dockerfile"
	s := startServer(t)
	c := s.createProject("proj_df")
	key := s.keys[c]
	ctx := context.Background()
	nonce := make([]byte, 6)
	rand.Read(nonce)

	dir := t.TempDir()
	write := func(p, content string, mode os.FileMode) {
		full := filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("app/index.html", "hello from the Dockerfile", 0o644)
	write("app/lib/data.txt", "data", 0o600)
	write("app/secret.key", "never sent", 0o600)
	write("run.sh", "#!/bin/sh\necho ran\n", 0o644)
	write("notes.txt", "notes", 0o644)
	write(".dockerignore", "# keys stay home\n**/*.key\n", 0o644)
	if err := os.Symlink("/etc/hostname", filepath.Join(dir, "app", "hostname")); err != nil {
		t.Fatal(err)
	}
	write("Dockerfile", `# syntax=docker/dockerfile:1
ARG BASE=interpreter
FROM ${BASE} AS app
ARG GREETING=hello
LABEL org.opencontainers.image.title="e2e"
EXPOSE 8080
ENV APP_HOME=/srv/app \
    MODE="e2e test" \
    NONCE=`+hex.EncodeToString(nonce)+`
ENV PATH=/srv/app/bin:$PATH
WORKDIR $APP_HOME
COPY app/ ./
COPY --chown=user --chmod=0755 run.sh bin/e2e-run
ADD notes.txt docs/
RUN echo "$GREETING from $(id -un) in $(pwd)" > built.txt && \
    # a comment inside a continuation
    e2e-run >> built.txt
USER user
RUN ["sh", "-c", "id -un > /home/user/whoami.txt"]
CMD ["python3", "-m", "http.server", "8080", "--bind", "0.0.0.0"]
`, 0o644)

	build := func(args ...string) (string, error) {
		cmd := exec.Command(s.bin, append([]string{"template", "build", "--api-url", s.url, "--api-key", key, "--name", name}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	args := []string{"-f", filepath.Join(dir, "Dockerfile"), "--build-arg", "GREETING=hi", "--ready", "curl -sf -o /dev/null http://127.0.0.1:8080/"}
	begin := time.Now()
	out, err := build(args...)
	if err != nil {
		t.Fatalf("lizard template build -f Dockerfile: %v\n%s\n%s", err, out, s.logs())
	}
	t.Logf("built in %s", time.Since(begin).Round(time.Millisecond))
	for _, want := range []string{"ignored: line 5: LABEL", "ignored: line 6: EXPOSE 8080", "template " + name + " ready"} {
		if !strings.Contains(out, want) {
			t.Errorf("build output lacks %q:\n%s", want, out)
		}
	}
	tpl, err := c.Templates().Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Templates().Delete(context.Background(), name) })

	sb := newSandbox(t, c, api.CreateSandboxRequest{Template: name})
	code, body, _ := get(t, c.PortURL(sb.SandboxID, 8080)+"index.html", "Authorization", "Bearer "+key)
	if code != http.StatusOK || body != "hello from the Dockerfile" {
		t.Errorf("GET port 8080 (the CMD's server) right after create = %d %q", code, body)
	}
	got := execOK(t, c, sb.SandboxID, "sh", "-c", `pwd; id -un; echo "$MODE|$APP_HOME|$NONCE"; cat built.txt docs/notes.txt /home/user/whoami.txt; echo;
readlink hostname; stat -c '%a %U' bin/e2e-run lib/data.txt; ls secret.key 2>&1 || true; command -v e2e-run`)
	// lib/data.txt is root's and 0600 (COPY's owner, the file's mode);
	// ENV PATH holds for the sandbox's code.
	want := "/srv/app\nuser\ne2e test|/srv/app|" + hex.EncodeToString(nonce) + "\nhi from root in /srv/app\nran\nnotesuser\n\n" +
		"/etc/hostname\n755 user\n600 root\nls: cannot access 'secret.key': No such file or directory\n/srv/app/bin/e2e-run\n"
	if got != want {
		t.Errorf("the Dockerfile's work in the sandbox:\n%s\nwant:\n%s", got, want)
	}

	// Again: the same recipe, found in the cache.
	out, err = build(args...)
	if err != nil || !strings.Contains(out, "cached") || !strings.Contains(out, tpl.Key) {
		t.Errorf("the second build = %v:\n%s\nwant it found in the cache under %s", err, out, tpl.Key)
	}

	// A line Lizard cannot honour: refused before anything is sent.
	write("Dockerfile.bad", "FROM interpreter\nRUN true\nHEALTHCHECK CMD curl -f localhost\n", 0o644)
	out, err = build("-f", filepath.Join(dir, "Dockerfile.bad"))
	if err == nil || !regexp.MustCompile(`Dockerfile line 3: HEALTHCHECK is not supported`).MatchString(out) {
		t.Errorf("a Dockerfile with HEALTHCHECK = %v:\n%s\nwant refused, naming line 3", err, out)
	}

	if err := c.KillSandbox(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if err := c.Templates().Delete(ctx, name); err != nil {
		t.Fatalf("deleting the template: %v", err)
	}
	if left := cacheEntries(tpl.Key); len(left) > 0 {
		t.Errorf("the deleted template's build is still in the cache: %v", left)
	}
	s.stopAndExpectNothingLeft(t)
}

// TestDockerfileFromImage builds a Dockerfile FROM an image of the test's
// registry (no Python, a few coreutils): its steps run in the build
// sandbox booted on the image, and its ENV, WORKDIR, USER and CMD win
// over the image's config.
func TestDockerfileFromImage(t *testing.T) {
	nonceB := make([]byte, 6)
	rand.Read(nonceB)
	nonce := hex.EncodeToString(nonceB)
	password := "pw-" + nonce
	reg := imageRegistry(t, password)
	pushImage(t, reg+"/e2e/dfbase:1", password, noPythonImage(t, nonce))
	name := "e2e-df-image"
	s := startServer(t, "--registry-allow", reg)
	c := s.createProject("proj_dfimg")
	key := s.keys[c]
	ctx := context.Background()

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "given.txt"), []byte("from the context"), 0o644)
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(`ARG REG
FROM ${REG}/e2e/dfbase:1
ENV STAGE=built
WORKDIR /srv/df
COPY given.txt ./
RUN echo "$STAGE by $(id -un)" > built.txt
USER user
CMD ["sh", "-c", "echo started-by-dockerfile > /tmp/df.txt; exec sleep 100000"]
`), 0o644)
	out, err := exec.Command(s.bin, "template", "build", "--api-url", s.url, "--api-key", key, "--name", name,
		"-f", filepath.Join(dir, "Dockerfile"), "--build-arg", "REG="+reg).CombinedOutput()
	if err != nil {
		t.Fatalf("lizard template build -f Dockerfile (FROM an image): %v\n%s\n%s", err, out, s.logs())
	}
	tpl, err := c.Templates().Get(ctx, name)
	if err != nil || tpl.Recipe.From != reg+"/e2e/dfbase:1" || tpl.Digest == "" {
		t.Fatalf("the template = %+v, %v; want from the image, its digest pinned", tpl, err)
	}
	sb := newSandbox(t, c, api.CreateSandboxRequest{Template: name})
	deadline := time.Now().Add(10 * time.Second)
	var got string
	for {
		res, err := c.Exec(ctx, sb.SandboxID, api.ProcessRequest{Cmd: `pwd; id -un; echo $STAGE; cat given.txt; echo; cat built.txt /tmp/df.txt; cat /etc/nonce`}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got = res.Stdout; res.ExitCode == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // the start command is not waited for (no ready check)
	}
	if want := "/srv/df\nuser\nbuilt\nfrom the context\nbuilt by root\nstarted-by-dockerfile\n" + nonce; got != want {
		t.Errorf("the Dockerfile's work on the image:\n%q\nwant\n%q", got, want)
	}
	if err := c.KillSandbox(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if err := c.Templates().Delete(ctx, name); err != nil {
		t.Fatalf("deleting the template: %v", err)
	}
	s.stopAndExpectNothingLeft(t)
}
