package recipe

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentclient"
	"github.com/lizard-build/lizard/internal/oci"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
	"github.com/lizard-build/lizard/internal/trace"
)

// stageDir is where the host puts a build's packages and files inside the
// copy, before any recipe code runs; the last step removes it from inside.
const stageDir = "var/cache/lizard-build"

// Node is what a build needs of the node: a build sandbox, ended
// afterwards, and its agent. The daemon adapts *node.Local to it with the
// build sandbox's limits: recipe sits below the node (it is the template
// layer's), so it names none of the node's types.
type Node interface {
	Boot(ctx context.Context, b Boot) (id string, err error)
	End(ctx context.Context, id, state, reason string) error
	Agents() *agentclient.Client
}

// Boot is the build sandbox a build asks for: the base template's root
// filesystem replaced by the build's own copy, no network, its commands
// run as root.
type Boot struct {
	ProjectID, Role, Template string
	Envs                      []string
	Build                     sandbox.Artifact
}

// Config says how builds are made. CacheDir, Node, Store and Base are
// required.
type Config struct {
	CacheDir string
	// DataDir names this server among the holders of a build (Hold).
	DataDir string
	Node    Node
	Store   *store.Store
	// Base returns a built-in template's artifact, waiting while it builds.
	Base func(ctx context.Context, name string) (sandbox.Artifact, error)
	// Images pulls the images recipes are built on (from); nil: the
	// layer cache in CacheDir/oci, with no credentials of the server's.
	Images *oci.Puller
	// Python runs `pip download` on the host (default python3); Apt is
	// apt-get (default apt-get); Npm is npm (default npm).
	Python string
	Apt    string
	Npm    string
	// Timeout bounds one build (default 30 minutes). A build's writes go
	// straight to the cache's disk, unbounded by the sandbox's disk
	// limit: it is stopped when the disk has less than MinFreeBytes free
	// (default 2 GiB).
	Timeout      time.Duration
	MinFreeBytes int64
	Logger       *slog.Logger
}

// limitError is a build stopped by one of its bounds (Config.Timeout,
// MinFreeBytes): the recipe's doing, reported like a failed step.
type limitError struct{ msg string }

func (e *limitError) Error() string { return e.msg }

// stepFailure is what a step that ended because ctx did returns: the
// step's failure when a bound stopped the build, else ctx's error.
func stepFailure(ctx context.Context, step, log string) error {
	var le *limitError
	if errors.As(context.Cause(ctx), &le) {
		return &StepError{Step: step, Log: log, Err: le}
	}
	return ctx.Err()
}

// Builder builds custom templates, one at a time: a build keeps both
// cores busy, and a second would only slow the first.
type Builder struct {
	cfg Config
	sem chan struct{}
}

// New returns a Builder.
func New(cfg Config) *Builder {
	if cfg.Python == "" {
		cfg.Python = "python3"
	}
	if cfg.Apt == "" {
		cfg.Apt = "apt-get"
	}
	if cfg.Npm == "" {
		cfg.Npm = "npm"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Minute
	}
	if cfg.MinFreeBytes == 0 {
		cfg.MinFreeBytes = 2 << 30
	}
	if cfg.Images == nil {
		cfg.Images = &oci.Puller{}
	}
	if cfg.Images.Dir == "" {
		cfg.Images.Dir = filepath.Join(cfg.CacheDir, "oci")
	}
	return &Builder{cfg: cfg, sem: make(chan struct{}, 1)}
}

// Result is a finished build.
type Result struct {
	Key       string
	RootFS    string
	SizeBytes int64
	BuildMs   int64
	Cached    bool // found in the cache: nothing was built
}

// StepError is a build step that failed: its name and its last output.
type StepError struct {
	Step string
	Log  string
	Err  error
}

func (e *StepError) Error() string { return fmt.Sprintf("step %q failed: %v", e.Step, e.Err) }
func (e *StepError) Unwrap() error { return e.Err }

// Base returns built-in template base's artifact (waiting while it builds): its key is part of a recipe's.
func (b *Builder) Base(ctx context.Context, base string) (sandbox.Artifact, error) {
	return b.cfg.Base(ctx, base)
}

// BaseKey is the key of built-in template base's artifact (waiting while
// it builds): what the control plane needs of a base, which it names
// without the runtime's artifact.
func (b *Builder) BaseKey(ctx context.Context, base string) (string, error) {
	a, err := b.Base(ctx, base)
	return a.Key, err
}

// ResolveImage pins image ref (a recipe's from) to the digest of its
// linux/amd64 image, with auth (nil: the server's registry config), for
// the recipe's key; Build then pulls the pinned reference.
func (b *Builder) ResolveImage(ctx context.Context, ref string, auth *api.RegistryAuth) (pinned, digest string, err error) {
	return b.cfg.Images.Resolve(ctx, ref, pullAuth(auth))
}

func pullAuth(a *api.RegistryAuth) *oci.Auth {
	if a == nil {
		return nil
	}
	return &oci.Auth{Username: a.Username, Password: a.Password}
}

// A build's registry credentials travel beside its recipe, in its
// context, never in it: the recipe is recorded and crosses the wire.
type authKey struct{}

// WithRegistryAuth returns ctx carrying the credentials that pull the
// recipe's image.
func WithRegistryAuth(ctx context.Context, a *api.RegistryAuth) context.Context {
	return context.WithValue(ctx, authKey{}, a)
}

// RegistryAuthOf is what WithRegistryAuth put in ctx (nil: none).
func RegistryAuthOf(ctx context.Context) *api.RegistryAuth { return registryAuth(ctx) }

func registryAuth(ctx context.Context) *api.RegistryAuth {
	a, _ := ctx.Value(authKey{}).(*api.RegistryAuth)
	return a
}

// A build's bound on its size travels beside its recipe as its
// credentials do: the room its project's template quota leaves it, which
// the control plane knows and the builder enforces.
type maxBytesKey struct{}

// WithMaxBytes returns ctx bounding the build's size (its directory in
// the template cache, what it fetched on the host included) to n bytes:
// a build past it is stopped like a failed step. n <= 0: no bound.
func WithMaxBytes(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, maxBytesKey{}, n)
}

// MaxBytesOf is what WithMaxBytes put in ctx (0: no bound).
func MaxBytesOf(ctx context.Context) int64 {
	n, _ := ctx.Value(maxBytesKey{}).(int64)
	return max(n, 0)
}

// Resume is an earlier build to start a build from: the build of key,
// whose recipe's steps (Steps) are the first Steps of the new one's, on
// the same built-in base. Its root filesystem is copied instead of the
// base's and those steps are not run again: what they set (env, workdir,
// user) holds for the later ones.
type Resume struct {
	Key   string `json:"key"`
	Steps int    `json:"steps"`
}

type resumeKey struct{}

// WithResume returns ctx carrying the build to resume from, which the
// control plane chose among the project's (nil: none).
func WithResume(ctx context.Context, r *Resume) context.Context {
	return context.WithValue(ctx, resumeKey{}, r)
}

// ResumeOf is what WithResume put in ctx (nil: none).
func ResumeOf(ctx context.Context) *Resume {
	r, _ := ctx.Value(resumeKey{}).(*Resume)
	return r
}

// Artifact returns the build of custom template reference ref, if it is
// in the cache.
func (b *Builder) Artifact(ref string) (sandbox.Artifact, error) {
	return Artifact(b.cfg.CacheDir, ref)
}

// The template cache is shared by every data directory on the machine,
// so a build may be recorded by several servers: each holds it with a
// file in <cache>/templates/custom-<key>.holders named after its data
// directory, and a build is removed only when no other existing data
// directory holds it.

func (b *Builder) holders(key string) string {
	return filepath.Join(b.cfg.CacheDir, "templates", LayerKey(key)+".holders")
}

// holder is this server's file among key's holders.
func (b *Builder) holder(key string) string {
	return filepath.Join(b.holders(key), b.holderName())
}

// holderName names this server's data directory among a build's holders.
func (b *Builder) holderName() string {
	sum := sha256.Sum256([]byte(b.cfg.DataDir))
	return hex.EncodeToString(sum[:8])
}

// Hold records that this server's store refers to key's build.
func (b *Builder) Hold(key string) error {
	if err := os.MkdirAll(b.holders(key), 0o700); err != nil {
		return fmt.Errorf("holding template build %s: %w", key, err)
	}
	if err := os.WriteFile(b.holder(key), []byte(b.cfg.DataDir+"\n"), 0o600); err != nil {
		return fmt.Errorf("holding template build %s: %w", key, err)
	}
	return nil
}

// Release drops this server's hold on key's build and removes the build
// unless another server, whose data directory still exists, holds it.
func (b *Builder) Release(key string) (removed bool, err error) {
	os.Remove(b.holder(key))
	for _, dir := range holderDirs(b.holders(key)) {
		if dir != "" && !gone(dir) {
			return false, nil
		}
	}
	if err := template.RemoveLayer(b.cfg.CacheDir, LayerKey(key)); err != nil {
		return false, err
	}
	return true, os.RemoveAll(b.holders(key))
}

// Build makes projectID's r (validated, with key Key(projectID, r, base's key)) unless the cache
// has it, sending progress to emit. On error nothing of the build is left.
func (b *Builder) Build(ctx context.Context, projectID string, r api.TemplateRecipe, key string, emit func(api.TemplateBuildEvent)) (_ Result, err error) {
	ctx, sp := trace.Start(ctx, "template.build", trace.String("lizard.template.key", key), trace.String("lizard.project", projectID))
	defer func() { trace.End(sp, err) }()
	begin := time.Now()
	if rootfs, ok := template.LayerRootFS(b.cfg.CacheDir, LayerKey(key)); ok {
		return Result{Key: key, RootFS: rootfs, SizeBytes: template.DiskUsage(rootfs), Cached: true}, nil
	}
	select {
	case b.sem <- struct{}{}:
	default:
		emit(api.TemplateBuildEvent{Type: api.BuildEventLog, Text: "waiting for another template build to finish"})
		select {
		case b.sem <- struct{}{}:
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	}
	defer func() { <-b.sem }()
	ctx, stop := b.bound(ctx, key)
	defer stop()
	var base sandbox.Artifact
	if r.From == "" {
		if base, err = b.cfg.Base(ctx, r.Base); err != nil {
			return Result{}, fmt.Errorf("waiting for base template %s: %w", r.Base, err)
		}
	}
	bd := &build{b: b, r: r, key: key, base: base, auth: registryAuth(ctx), emit: emit, log: b.cfg.Logger.With("template_key", key),
		project: projectID, cache: StepCacheOf(ctx), recorded: map[string]string{}}
	if rs := ResumeOf(ctx); rs != nil && r.From == "" && ValidKey(rs.Key) {
		// The earlier build may be gone (deleted meanwhile), or on
		// another node of a cluster: then every step runs.
		if rootfs, ok := template.LayerRootFS(b.cfg.CacheDir, LayerKey(rs.Key)); ok && rs.Steps > 0 && rs.Steps <= len(Steps(r)) {
			bd.resume, bd.resumeRoot = *rs, rootfs
		} else {
			emit(api.TemplateBuildEvent{Type: api.BuildEventLog, Text: "the cached build " + rs.Key + " is not on this node: every step runs"})
		}
	}
	cached := true
	rootfs, err := template.EnsureLayer(ctx, b.cfg.CacheDir, LayerKey(key), logWriter{emit}, func(ctx context.Context, rootfs string) error {
		cached = false
		defer bd.unlockSteps()
		return bd.run(ctx, rootfs)
	})
	// The steps that ran are cached even when a later one failed: the
	// build fixed at that step resumes there.
	bd.commitSteps()
	if err != nil {
		// Nothing of a failed build stays, its lock file included.
		os.Remove(filepath.Join(b.cfg.CacheDir, "templates", LayerKey(key)+".lock"))
		return Result{}, err
	}
	res := Result{Key: key, RootFS: rootfs, SizeBytes: template.DiskUsage(rootfs), Cached: cached}
	if !cached {
		res.BuildMs = time.Since(begin).Milliseconds()
	}
	return res, nil
}

// bound returns ctx ended by the build's bounds: its time, the cache's
// free disk, checked every second, and its size (MaxBytesOf), measured by
// walking key's temporary build directory as often as a tenth of the
// time goes to the walks.
func (b *Builder) bound(ctx context.Context, key string) (context.Context, func()) {
	maxBytes := MaxBytesOf(ctx)
	ctx, cancel := context.WithCancelCause(ctx)
	timer := time.AfterFunc(b.cfg.Timeout, func() {
		cancel(&limitError{fmt.Sprintf("the build took longer than %s, the longest a build may take", b.cfg.Timeout)})
	})
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var nextWalk time.Time
		for {
			select {
			case <-done:
				return
			case <-t.C:
				var st syscall.Statfs_t
				if syscall.Statfs(b.cfg.CacheDir, &st) == nil && int64(st.Bavail)*st.Bsize < b.cfg.MinFreeBytes {
					cancel(&limitError{fmt.Sprintf("the build left less than %d MiB free on the template cache's disk; it writes too much", b.cfg.MinFreeBytes>>20)})
					return
				}
				if maxBytes <= 0 || time.Now().Before(nextWalk) {
					continue
				}
				begin := time.Now()
				if n := b.buildSize(key); n > maxBytes {
					cancel(&limitError{fmt.Sprintf("the build grew to %d MiB, past the %d MiB its project's template quota leaves it (--max-template-disk-per-project-mb): delete templates the project no longer needs, or have the operator raise it",
						n>>20, maxBytes>>20)})
					return
				}
				nextWalk = time.Now().Add(10 * time.Since(begin))
			}
		}
	}()
	return ctx, func() { timer.Stop(); close(done); cancel(nil) }
}

// buildSize is the size of key's build under way: its temporary
// directories in the template cache.
func (b *Builder) buildSize(key string) int64 {
	dirs, _ := filepath.Glob(filepath.Join(b.cfg.CacheDir, "templates", ".build-"+LayerKey(key)+"-*"))
	var n int64
	for _, d := range dirs {
		n += template.DiskUsage(d)
	}
	return n
}

// logWriter turns the cache's progress lines into log events.
type logWriter struct{ emit func(api.TemplateBuildEvent) }

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line != "" {
			w.emit(api.TemplateBuildEvent{Type: api.BuildEventLog, Text: line})
		}
	}
	return len(p), nil
}

// build is one build under way.
type build struct {
	b    *Builder
	r    api.TemplateRecipe
	key  string
	base sandbox.Artifact
	auth *api.RegistryAuth // for an image base (r.From, pinned)
	emit func(api.TemplateBuildEvent)
	log  *slog.Logger

	steps []api.TemplateStep // Steps(r)
	// resume: the first resume.Steps steps are resumeRoot's, copied
	// instead of the base (Resume); zero: none.
	resume     Resume
	resumeRoot string
	// The step cache (stepcache.go): cache says how this build uses it
	// (nil: not at all); stepKeys are its steps' keys; restored, how many
	// of the first steps come from it (read under the lock unlockRead
	// releases); recorded, the entries of the steps run, by key.
	project     string
	cache       *StepCache
	stepKeys    []string
	restored    int
	unlockRead  func()
	recorded    map[string]string
	recordOff   bool
	aptUpdated  bool
	step, total int
}

// names lists the build's steps, for numbering: the host's, then the
// recipe's.
func (bd *build) names() []string {
	var s []string
	if bd.fetches() {
		s = append(s, "fetching packages on the host (no package code runs there)")
	}
	if bd.r.From != "" {
		s = append(s, "pulling image "+bd.r.From)
		if len(bd.steps) == 0 {
			return append(s, "finishing")
		}
	} else if bd.resume.Steps > 0 {
		s = append(s, fmt.Sprintf("copying the cached build %s of the first %d step(s) (cached by their inputs)", bd.resume.Key, bd.resume.Steps))
	} else {
		s = append(s, "copying base template "+bd.r.Base)
	}
	if bd.restored > 0 {
		s = append(s, fmt.Sprintf("restoring the first %d step(s) from the step cache (cached by their inputs)", bd.restored))
	}
	s = append(s, "booting the build sandbox (no network)")
	for _, st := range bd.steps[bd.done():] {
		s = append(s, stepName(st))
	}
	return append(s, "finishing")
}

// fetches reports whether the build has packages to fetch on the host.
func (bd *build) fetches() bool {
	for _, st := range bd.steps[bd.done():] {
		if len(st.Apt)+len(st.Pip) > 0 || st.Npm != nil {
			return true
		}
	}
	return false
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

func (bd *build) next(name string) {
	bd.step++
	bd.emit(api.TemplateBuildEvent{Type: api.BuildEventStep, Step: bd.step, Total: bd.total, Name: name})
}

func (bd *build) logf(format string, args ...any) {
	bd.emit(api.TemplateBuildEvent{Type: api.BuildEventLog, Text: fmt.Sprintf(format, args...)})
}

// run fills rootfs, an empty directory, with the template.
func (bd *build) run(ctx context.Context, rootfs string) error {
	bd.steps = Steps(bd.r)
	if err := bd.lookupSteps(); err != nil {
		return err
	}
	names := bd.names()
	bd.total = len(names)
	i := 0
	nextName := func() string { i++; return names[i-1] }

	// Packages first, beside the build's rootfs (its temporary directory
	// goes with a failure): a package that cannot be had fails the build
	// before the base is copied. What apt and pip read of the base (its
	// Python version, dpkg status, keyring) is the trusted base's. Each
	// step's packages are fetched apart (debs-N, wheels-N for step N),
	// to be installed at their step.
	fetched := filepath.Join(filepath.Dir(rootfs), "fetched")
	if bd.fetches() {
		name := nextName()
		bd.next(name)
		for n, st := range bd.steps {
			if n < bd.done() {
				continue // installed in the build resumed from
			}
			if err := bd.fetch(ctx, name, bd.base.RootFS, fetched, n, st); err != nil {
				return err
			}
		}
	}
	name := nextName()
	bd.next(name)
	if bd.r.From != "" {
		return bd.fromImage(ctx, name, rootfs, nextName)
	}
	from := bd.base.RootFS
	if bd.resume.Steps > 0 {
		from = bd.resumeRoot
	}
	if err := hostCommand(ctx, bd, name, "cp", "-a", from+"/.", rootfs+"/"); err != nil {
		return err
	}
	if bd.resume.Steps > 0 {
		// The resumed build's settings would start its start command in
		// the build sandbox; the finishing step writes this build's.
		if err := removeSettings(rootfs); err != nil {
			return fmt.Errorf("copying the cached build: %w", err)
		}
	}
	stage := filepath.Join(rootfs, stageDir)
	if err := os.MkdirAll(filepath.Join(stage, "files"), 0o755); err != nil {
		return fmt.Errorf("staging files: %w", err)
	}
	got, _ := os.ReadDir(fetched)
	for _, d := range got {
		if err := os.Rename(filepath.Join(fetched, d.Name()), filepath.Join(stage, d.Name())); err != nil {
			return fmt.Errorf("staging packages: %w", err)
		}
	}
	if err := os.RemoveAll(fetched); err != nil {
		return fmt.Errorf("staging packages: %w", err)
	}
	if err := bd.stageFiles(stage); err != nil {
		return fmt.Errorf("staging files: %w", err)
	}
	return bd.inBuildSandbox(ctx, rootfs, nextName)
}

// inBuildSandbox runs the recipe's steps in a build sandbox booted from
// rootfs, whose stage holds what they install.
func (bd *build) inBuildSandbox(ctx context.Context, rootfs string, nextName func() string) error {
	if bd.restored > 0 {
		bd.next(nextName())
		err := bd.b.restoreSteps(ctx, rootfs, bd.stepKeys[:bd.restored])
		bd.unlockSteps()
		if err != nil {
			return err
		}
	}
	// What the steps change is read from here on, to cache each one's.
	var before manifest
	if bd.recording() {
		var err error
		time.Sleep(racyWindow) // the copy's last entries not racy: not in step 1's delta
		if before, err = scanRootFS(rootfs); err != nil {
			bd.log.Error("reading the build's root filesystem for the step cache; its steps are not cached", "err", err)
			bd.cache = nil
		}
	}
	bd.next(nextName())
	// The build sandbox is the server's own, whose project the warm pool
	// makes when there is one (not on a node without template snapshots).
	if err := bd.b.cfg.Store.CreateProject(ctx, store.InternalProject, time.Now().UTC()); err != nil && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("booting the build sandbox: %w", err)
	}
	tmpl := bd.r.Base
	if tmpl == "" {
		tmpl = template.Default // a label: the build boots its own root
	}
	id, err := bd.b.cfg.Node.Boot(ctx, Boot{ProjectID: store.InternalProject, Role: store.RoleBuild, Template: tmpl,
		Envs:  []string{"LIZARD_AGENT_USER_NAME=root"},
		Build: sandbox.Artifact{Name: "build-" + bd.key, Key: "build-" + bd.key, RootFS: rootfs}})
	if err != nil {
		return fmt.Errorf("booting the build sandbox: %w", err)
	}
	defer func() {
		// Ended before the copy is moved or removed: its gofer holds it.
		if err := bd.b.cfg.Node.End(context.WithoutCancel(ctx), id, api.StateKilled, "its template build ended"); err != nil {
			bd.log.Error("ending the build sandbox", "sandbox_id", id, "err", err)
		}
	}()
	bd.logf("build sandbox %s running", id)

	// What env, workdir and user steps set holds for the later steps (a
	// run step's user was filled in by Validate). A directory a workdir
	// step makes is the code's user's: user, or root after a user step
	// said so.
	env := map[string]string{}
	workdir := "/"
	user := "user"
	if bd.r.From != "" {
		user = "root" // an image's, as Docker's default: it may have no user
	}
	sh := func(name, user, script string) error { return bd.inSandbox(ctx, id, name, user, "/", nil, script) }
	for n, st := range bd.steps {
		if n < bd.done() {
			// Done in the build resumed from: only what it set holds.
			switch {
			case len(st.Env) > 0:
				maps.Copy(env, st.Env)
			case st.Workdir != "":
				workdir = st.Workdir
			case st.User != "":
				user = st.User
			}
			continue
		}
		name := nextName()
		var err error
		switch k, _ := kind(st); k {
		case kindApt:
			err = sh(name, "root", fmt.Sprintf("export DEBIAN_FRONTEND=noninteractive\ndpkg -i /%s/debs-%d/*.deb", stageDir, n))
		case kindPip:
			err = sh(name, "user", fmt.Sprintf("cd /home/user && /opt/lizard/venv/bin/pip install --no-index --find-links /%s/wheels-%d --no-cache-dir --no-input --progress-bar off --disable-pip-version-check -- %s", stageDir, n, shellQuote(st.Pip...)))
		case kindNpm:
			if st.Npm.Global {
				err = sh(name, "root", fmt.Sprintf(npmGlobalScript, stageDir, n))
			} else {
				err = bd.inSandbox(ctx, id, name, user, workdir, env, fmt.Sprintf(npmLocalScript, stageDir, n))
			}
		case kindCopy:
			err = sh(name, "root", copyScript(n, st.Copy))
		case kindRun:
			err = bd.inSandbox(ctx, id, name, st.Run.User, workdir, env, st.Run.Cmd)
		case kindEnv:
			bd.next(name)
			maps.Copy(env, st.Env)
		case kindWorkdir:
			workdir = st.Workdir
			err = sh(name, "root", fmt.Sprintf("[ -d %[1]s ] || install -d -o %[2]s -g %[2]s %[1]s", shellQuote(workdir), user))
		case kindUser:
			bd.next(name)
			user = st.User
		case kindSymlink:
			err = sh(name, "root", symlinkScript(st.Symlink))
		}
		if err != nil {
			return err
		}
		if bd.recording() {
			before = bd.recordStep(ctx, id, rootfs, before, n)
		}
	}
	finish := "set -e\n"
	// (An image's settings are written on the host once this sandbox
	// has ended: fromImage.)
	if set := settings(bd.r, bd.steps); bd.r.From == "" && !reflect.DeepEqual(set, Settings{}) {
		finish += "install -d -m 0755 /etc/lizard\ninstall -m 0644 /" + stageDir + "/template.json /etc/lizard/template.json\n"
	}
	finish += "rm -rf /" + stageDir + " /root/.cache /home/user/.cache/pip\n"
	return sh(nextName(), "root", finish)
}

// removeSettings removes a copied build's /etc/lizard/template.json
// within rootfs (os.Root: no link in it is followed out of the copy).
func removeSettings(rootfs string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	return root.RemoveAll("etc/lizard/template.json")
}

// copyScript installs copy step n's files, staged by stageFiles.
func copyScript(n int, files []api.TemplateFile) string {
	var script strings.Builder
	script.WriteString("set -e\n")
	for j, f := range files {
		own := "root"
		if f.Owner == "user" {
			own = "user"
		}
		// The parent directories a file needs belong to its owner when
		// made here (install -D makes them root's). The path, checked
		// by Validate, is checked again as the sandbox resolves it:
		// a parent may be a symbolic link (from a package) to a
		// directory Lizard provides at run time. -T: a file, never
		// into a directory of that name.
		fmt.Fprintf(&script, "p=%s; d=$(dirname \"$p\"); [ -d \"$d\" ] || { mkdir -p \"$d\" && chown %s:%s \"$d\"; }\n", shellQuote(f.Path), own, own)
		fmt.Fprintf(&script, "r=$(realpath -m -- \"$p\"); case \"$r\" in %s) echo \"$p resolves to $r, which is provided at run time\" >&2; exit 1;; esac\n", reservedPattern())
		fmt.Fprintf(&script, "install -T -m %o -o %s -g %s /%s/files/%d-%d \"$r\"\n", f.Mode, own, own, stageDir, n, j)
	}
	return script.String()
}

// symlinkScript makes l's link, its parent resolved by the sandbox and
// checked as a copy's is; -T: the link itself, never one inside a
// directory of that name.
func symlinkScript(l *api.TemplateSymlink) string {
	return fmt.Sprintf("set -e\np=%s; d=$(dirname \"$p\"); mkdir -p \"$d\"\n"+
		"r=$(realpath -m -- \"$d\")/$(basename \"$p\"); case \"$r\" in %s) echo \"$p resolves to $r, which is provided at run time\" >&2; exit 1;; esac\n"+
		"ln -sfnT -- %s \"$r\"\n", shellQuote(l.Path), reservedPattern(), shellQuote(l.Target))
}

// stageFiles writes the copy steps' files (step N's file J as files/N-J)
// and the settings into the stage.
func (bd *build) stageFiles(stage string) error {
	for n, st := range bd.steps {
		for j, f := range st.Copy {
			data, err := base64.StdEncoding.DecodeString(f.Content)
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(stage, "files", fmt.Sprintf("%d-%d", n, j)), data, 0o600); err != nil {
				return err
			}
		}
	}
	settings, _ := json.MarshalIndent(settings(bd.r, bd.steps), "", "  ")
	return os.WriteFile(filepath.Join(stage, "template.json"), append(settings, '\n'), 0o644)
}

// inSandbox runs script by /bin/sh -e in the build sandbox as user (root
// is the sandbox's root), streaming its output as log events.
func (bd *build) inSandbox(ctx context.Context, id, name, user, cwd string, env map[string]string, script string) error {
	bd.next(name)
	// The steps' envs win over the build's defaults.
	envs := map[string]string{"HOME": "/root", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONUNBUFFERED": "1"}
	maps.Copy(envs, env)
	args := []string{"/bin/sh", "-ec", script}
	if user == "user" {
		args = append([]string{"setpriv", "--reuid=1000", "--regid=1000", "--init-groups", "env", "HOME=/home/user", "USER=user", "LOGNAME=user"}, args...)
	}
	tail := &tailBuffer{}
	// Output comes in chunks that may end mid-line: lines are put
	// together per stream before they are sent.
	partial := map[string]string{}
	line := func(l string) {
		l = strings.TrimRight(l, " \r")
		tail.add(l)
		bd.emit(api.TemplateBuildEvent{Type: api.BuildEventLog, Text: "  " + l})
	}
	code, err := runProcess(ctx, bd.b.cfg.Node.Agents(), id, api.ProcessRequest{Args: args, Cwd: cwd, Envs: envs},
		func(stream, text string) {
			lines := strings.Split(partial[stream]+text, "\n")
			partial[stream] = lines[len(lines)-1]
			for _, l := range lines[:len(lines)-1] {
				line(l)
			}
		})
	for _, stream := range []string{"stdout", "stderr"} {
		if partial[stream] != "" {
			line(partial[stream])
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return stepFailure(ctx, name, tail.String())
		}
		return &StepError{Step: name, Log: tail.String(), Err: err}
	}
	if code != 0 {
		return &StepError{Step: name, Log: tail.String(), Err: fmt.Errorf("exit status %d", code)}
	}
	return nil
}

// tailBuffer keeps the last lines of a step's output.
type tailBuffer struct {
	mu    sync.Mutex
	lines []string
}

const tailLines = 40

func (t *tailBuffer) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > tailLines {
		t.lines = t.lines[len(t.lines)-tailLines:]
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

// shellQuote quotes words for /bin/sh.
func shellQuote(words ...string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// errIsStep reports whether err is a failed step.
func errIsStep(err error) (*StepError, bool) {
	var se *StepError
	ok := errors.As(err, &se)
	return se, ok
}

var _ io.Writer = logWriter{}

// Sweep removes what builds that died with their process (a crash, a
// kill -9) left in the cache: temporary build directories of custom
// templates whose lock no one holds. A build under way holds its lock.
func (b *Builder) Sweep() {
	dir := filepath.Join(b.cfg.CacheDir, "templates")
	left, _ := filepath.Glob(filepath.Join(dir, ".build-custom-*"))
	for _, d := range left {
		key, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(d), ".build-"), "-"+lastDash(d))
		if !ok {
			continue
		}
		lock := filepath.Join(dir, key+".lock")
		f, ok := tryLock(lock, 0)
		if f == nil {
			continue
		}
		if ok {
			if err := template.RemoveLayer(b.cfg.CacheDir, filepath.Base(d)); err != nil {
				b.cfg.Logger.Error("removing a dead build's directory", "dir", d, "err", err)
			} else {
				b.cfg.Logger.Info("removed a dead build's directory", "dir", d)
				if _, built := template.LayerRootFS(b.cfg.CacheDir, key); !built {
					os.Remove(lock)
				}
			}
		}
		f.Close()
	}
	b.sweepOrphans(dir)
}

// sweepOrphans removes the builds whose every holder is a data directory
// that no longer exists: a server removed, or a test's killed before it
// deleted its template, holds a build no server will ever Release. A build
// with no holder file is left (one just made, not yet held), as is one
// whose lock is held (being rebuilt).
func (b *Builder) sweepOrphans(dir string) {
	all, _ := filepath.Glob(filepath.Join(dir, LayerKey("*")+".holders"))
	for _, h := range all {
		if !orphaned(h) {
			continue
		}
		layer := strings.TrimSuffix(filepath.Base(h), ".holders")
		f, ok := tryLock(filepath.Join(dir, layer+".lock"), os.O_CREATE)
		if f == nil {
			continue
		}
		if ok && orphaned(h) {
			if err := template.RemoveLayer(b.cfg.CacheDir, layer); err != nil {
				b.cfg.Logger.Error("removing a template build no data directory holds", "build", layer, "err", err)
			} else {
				os.RemoveAll(h)
				b.cfg.Logger.Info("removed a template build no data directory holds", "build", layer)
			}
		}
		f.Close()
	}
}

// orphaned reports whether the holders directory h names at least one
// data directory and every one it names is gone.
func orphaned(h string) bool {
	dirs := holderDirs(h)
	for _, dir := range dirs {
		if dir == "" || !gone(dir) {
			return false
		}
	}
	return len(dirs) > 0
}

// gone reports whether dir surely no longer exists (not merely unreadable).
func gone(dir string) bool {
	_, err := os.Stat(dir)
	return errors.Is(err, fs.ErrNotExist)
}

// holderDirs are the data directories the holders directory h names, ""
// for a holder file that cannot be read or names none.
func holderDirs(h string) []string {
	entries, _ := os.ReadDir(h)
	dirs := make([]string, 0, len(entries))
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join(h, e.Name()))
		dirs = append(dirs, strings.TrimSpace(string(data)))
	}
	return dirs
}

// tryLock opens the lock file path (flag: os.O_CREATE to make it) and
// takes it without waiting: ok when taken. The caller closes f, which
// releases it; f is nil when the file could not be opened.
func tryLock(path string, flag int) (f *os.File, ok bool) {
	f, err := os.OpenFile(path, os.O_RDWR|flag, 0o644)
	if err != nil {
		return nil, false
	}
	return f, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}

// lastDash is what follows the last dash of path's base name (the random
// suffix of a temporary build directory).
func lastDash(path string) string {
	base := filepath.Base(path)
	return base[strings.LastIndexByte(base, '-')+1:]
}

// Holds are the keys of the builds this server's data directory holds
// (Hold) in the template cache.
func (b *Builder) Holds() []string {
	mine, _ := filepath.Glob(filepath.Join(b.cfg.CacheDir, "templates", LayerKey("*")+".holders", b.holderName()))
	var keys []string
	for _, h := range mine {
		key := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(filepath.Dir(h)), LayerKey("")), ".holders")
		if ValidKey(key) {
			keys = append(keys, key)
		}
	}
	return keys
}
