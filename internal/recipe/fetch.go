package recipe

// Host-side steps: copying the base and fetching packages. Nothing here
// runs code from a package: pip downloads wheels only (no sdist is built),
// apt-get only downloads (no maintainer script runs). The packages are
// installed later, inside the build sandbox.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentclient"
	"github.com/lizard-build/lizard/internal/deathsig"
)

const debianMirror = "http://deb.debian.org/debian"

// hostCommand runs a host command (never recipe code) as step name,
// streaming its output as log events.
func hostCommand(ctx context.Context, bd *build, name string, prog string, args ...string) error {
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Dir = "/"
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "HOME=" + os.Getenv("HOME"),
		"PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1"}
	for _, k := range []string{"http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "PIP_INDEX_URL", "PIP_CERT", "npm_config_registry", "NPM_CONFIG_REGISTRY"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	tail := &tailBuffer{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), " \r")
			if line == "" {
				continue
			}
			tail.add(line)
			bd.emit(api.TemplateBuildEvent{Type: api.BuildEventLog, Text: "  " + line})
		}
		io.Copy(io.Discard, pr)
	}()
	err := deathsig.Run(cmd) // dies with the server
	pw.Close()
	<-done
	if err != nil {
		if ctx.Err() != nil {
			return stepFailure(ctx, name, tail.String())
		}
		return &StepError{Step: name, Log: tail.String(), Err: fmt.Errorf("%s: %w", prog, err)}
	}
	return nil
}

// fetch downloads step n's packages, if it has any, into stage/wheels-n
// or stage/debs-n.
func (bd *build) fetch(ctx context.Context, name, rootfs, stage string, n int, st api.TemplateStep) error {
	if len(st.Pip) > 0 {
		py, err := pythonVersion(rootfs)
		if err != nil {
			return &StepError{Step: name, Err: err}
		}
		args := []string{"-m", "pip", "download", "--dest", filepath.Join(stage, fmt.Sprintf("wheels-%d", n)), "--only-binary=:all:",
			"--python-version", py, "--implementation", "cp", "--progress-bar", "off", "--no-input"}
		for _, p := range platforms() {
			args = append(args, "--platform", p)
		}
		args = append(append(args, "--"), st.Pip...)
		bd.logf("pip download (wheels only, for CPython %s)", py)
		if err := hostCommand(ctx, bd, name, bd.b.cfg.Python, args...); err != nil {
			if se, ok := errIsStep(err); ok {
				se.Log += "\n(pip packages are installed from wheels only: a package with no wheel for CPython " + py + " on manylinux x86_64 cannot be used)"
			}
			return err
		}
	}
	if st.Npm != nil {
		if err := bd.fetchNpm(ctx, name, filepath.Join(stage, fmt.Sprintf("npm-%d", n)), st.Npm); err != nil {
			return err
		}
	}
	if len(st.Apt) > 0 {
		if err := bd.fetchDebs(ctx, name, rootfs, filepath.Join(stage, fmt.Sprintf("debs-%d", n)), st.Apt); err != nil {
			return err
		}
	}
	return nil
}

// fetchNpm installs an npm step's packages on the host into dir (global:
// dir/lib/node_modules and dir/bin, else dir/node_modules and a
// package.json), for the build sandbox to copy into place. No package
// code runs: --ignore-scripts skips every install script, and git is
// /bin/false, so a dependency from git (whose prepare script npm would
// run) fails instead of being cloned. npm's cache is the step's own,
// removed once it is done, as pip's downloads go with the build: the
// build's disk and time bounds hold it, and nothing outlives the build.
func (bd *build) fetchNpm(ctx context.Context, name, dir string, st *api.TemplateNpm) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cache := dir + ".cache"
	defer os.RemoveAll(cache)
	args := []string{"install", "--prefix", dir, "--cache", cache, "--ignore-scripts", "--git", "/bin/false",
		"--no-audit", "--no-fund", "--no-update-notifier", "--loglevel", "warn", "--no-progress"}
	switch {
	case st.Global:
		args = append(args, "--global")
	case st.Dev:
		args = append(args, "--save-dev")
	}
	args = append(append(args, "--"), st.Packages...)
	bd.logf("npm install on the host (install scripts not run)")
	if err := hostCommand(ctx, bd, name, bd.b.cfg.Npm, args...); err != nil {
		if se, ok := errIsStep(err); ok {
			se.Log += "\n(npm packages are fetched from the registry on the host, with their install scripts not run)"
		}
		return err
	}
	return nil
}

// The npm step in the build sandbox: the host's install copied into
// place — global as root into /usr/local, else into the working
// directory as the step's user (a package.json and lock only where there
// is none: one already there is left as it is).
const (
	npmGlobalScript = `set -e
s=/%s/npm-%d
mkdir -p /usr/local/lib/node_modules /usr/local/bin
cp -R "$s/lib/node_modules/." /usr/local/lib/node_modules/
if [ -d "$s/bin" ]; then cp -R "$s/bin/." /usr/local/bin/; fi
`
	npmLocalScript = `set -e
s=/%s/npm-%d
mkdir -p node_modules
cp -R "$s/node_modules/." node_modules/
for f in package.json package-lock.json; do
	if [ ! -e "$f" ] && [ -f "$s/$f" ]; then cp "$s/$f" "$f"; fi
done
`
)

// pythonVersion is the base's Python (from its venv), like "3.13".
func pythonVersion(rootfs string) (string, error) {
	m, _ := filepath.Glob(filepath.Join(rootfs, "opt/lizard/venv/lib/python3.*"))
	if len(m) != 1 {
		return "", fmt.Errorf("the base template has no single Python in /opt/lizard/venv (found %d)", len(m))
	}
	return strings.TrimPrefix(filepath.Base(m[0]), "python"), nil
}

// platforms are the wheel platforms a Debian trixie x86_64 system runs.
func platforms() []string {
	out := []string{"manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64"}
	for minor := 5; minor <= 41; minor++ {
		out = append(out, fmt.Sprintf("manylinux_2_%d_x86_64", minor))
	}
	return out
}

// fetchDebs downloads the Debian packages and what they need beyond what
// the base has installed, with a private apt state (its own lists in the
// cache, the base's dpkg status and keyring), into the stage.
func (bd *build) fetchDebs(ctx context.Context, name, rootfs, debs string, pkgs []string) error {
	aptDir := filepath.Join(bd.b.cfg.CacheDir, "apt")
	for _, d := range []string{"lists/partial", "cache", "empty"} {
		if err := os.MkdirAll(filepath.Join(aptDir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(debs, "partial"), 0o755); err != nil {
		return err
	}
	suite, err := debianSuite(rootfs)
	if err != nil {
		return &StepError{Step: name, Err: err}
	}
	// The base's keyring (a regular file: the .gpg name is a symlink),
	// copied so that apt reads nothing of the base's but its dpkg status.
	var keyData []byte
	for _, k := range []string{"debian-archive-keyring.pgp", "debian-archive-keyring.gpg"} {
		p := filepath.Join(rootfs, "usr/share/keyrings", k)
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			if keyData, err = os.ReadFile(p); err == nil {
				break
			}
		}
	}
	if len(keyData) == 0 {
		return &StepError{Step: name, Err: fmt.Errorf("the base template has no Debian archive keyring")}
	}
	keyring := filepath.Join(aptDir, suite+"-archive-keyring.pgp")
	if err := os.WriteFile(keyring, keyData, 0o644); err != nil {
		return err
	}
	sources := filepath.Join(aptDir, suite+".list")
	line := fmt.Sprintf("deb [signed-by=%s] %s %s main\n", keyring, debianMirror, suite)
	if err := os.WriteFile(sources, []byte(line), 0o644); err != nil {
		return err
	}
	opts := []string{
		"-o", "Dir::Etc::SourceList=" + sources, "-o", "Dir::Etc::SourceParts=" + filepath.Join(aptDir, "empty"),
		"-o", "Dir::State::Lists=" + filepath.Join(aptDir, "lists", suite), "-o", "Dir::State::status=" + filepath.Join(rootfs, "var/lib/dpkg/status"),
		"-o", "Dir::Cache=" + filepath.Join(aptDir, "cache"), "-o", "Dir::Cache::Archives=" + debs,
		"-o", "Dir::Etc::Preferences=/dev/null", "-o", "Dir::Etc::PreferencesParts=" + filepath.Join(aptDir, "empty"),
		"-o", "APT::Architecture=amd64", "-o", "APT::Architectures=amd64", "-o", "Debug::NoLocking=1",
		"-o", "APT::Install-Recommends=false", "-o", "APT::Sandbox::User=root", "-q",
	}
	if err := os.MkdirAll(filepath.Join(aptDir, "lists", suite, "partial"), 0o755); err != nil {
		return err
	}
	if !bd.aptUpdated {
		bd.logf("apt-get update (Debian %s, private lists in %s)", suite, aptDir)
		if err := hostCommand(ctx, bd, name, bd.b.cfg.Apt, append(opts, "update")...); err != nil {
			return err
		}
		bd.aptUpdated = true
	}
	args := append(append(opts, "install", "-y", "--download-only", "--"), pkgs...)
	if err := hostCommand(ctx, bd, name, bd.b.cfg.Apt, args...); err != nil {
		return err
	}
	got, _ := filepath.Glob(filepath.Join(debs, "*.deb"))
	sort.Strings(got)
	bd.logf("%d Debian package(s) fetched", len(got))
	if len(got) == 0 {
		return &StepError{Step: name, Err: fmt.Errorf("apt fetched no package: are %s already in the base template?", strings.Join(pkgs, ", "))}
	}
	os.RemoveAll(filepath.Join(debs, "partial"))
	os.Remove(filepath.Join(debs, "lock"))
	return nil
}

// debianSuite reads the base's Debian codename from its os-release.
func debianSuite(rootfs string) (string, error) {
	p := filepath.Join(rootfs, "etc/os-release")
	if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		p = filepath.Join(rootfs, "usr/lib/os-release")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("reading the base's os-release: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VERSION_CODENAME="); ok && v != "" {
			return strings.Trim(v, `"`), nil
		}
	}
	return "", fmt.Errorf("the base's os-release names no VERSION_CODENAME")
}

// runProcess runs req through sandbox id's agent, calling out with each
// chunk of output, and returns the exit code.
func runProcess(ctx context.Context, agents *agentclient.Client, id string, req api.ProcessRequest, out func(stream, text string)) (int, error) {
	body, _ := json.Marshal(req)
	u := agentclient.URL(id)
	u.Path = "/process"
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return -1, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: agents.Transport()}).Do(hreq)
	if err != nil {
		return -1, fmt.Errorf("calling the build sandbox's agent: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return -1, fmt.Errorf("the build sandbox's agent answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev api.ProcessEvent
		if err := dec.Decode(&ev); err != nil {
			return -1, fmt.Errorf("reading the build step's output: %w", err)
		}
		switch ev.Type {
		case "stdout", "stderr":
			out(ev.Type, ev.Text)
		case "end":
			if ev.Error != "" && ev.ExitCode == nil {
				return -1, fmt.Errorf("the step did not run: %s", ev.Error)
			}
			if ev.ExitCode == nil {
				return -1, fmt.Errorf("the step ended without an exit code")
			}
			return *ev.ExitCode, nil
		case "abort":
			return -1, fmt.Errorf("the step was aborted: %+v", ev.Abort)
		}
	}
}
