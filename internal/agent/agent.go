// Package agent is the program inside every sandbox: it serves the agent
// HTTP API (health, execute, contexts, process, files; see
// docs/architecture.md) and runs code as the sandbox user — Python in
// IPython kernels (internal/pykernel), JavaScript and bash in a fresh
// process per call or a stateful Node process, R and Java in stateful
// kernels (kernels.go). It is built into the static lizard-agent binary and must not depend on any
// server package (deps_test.go checks).
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agent/sudo"
	"github.com/lizard-build/lizard/internal/pykernel"
)

// Kernel is what the agent needs of a Python kernel; *pykernel.Kernel is one.
type Kernel interface {
	Execute(ctx context.Context, req pykernel.Request, emit func(api.ExecuteEvent)) error
	Restart(ctx context.Context) error
	Close() error
}

var _ Kernel = (*pykernel.Kernel)(nil)

// kernelStartTimeout bounds one kernel start, whoever waits for it.
const kernelStartTimeout = 2 * time.Minute

// Agent serves the agent API. Create it with New; it owns kernels and
// scratch files until Close.
type Agent struct {
	decoder
	cfg        Config
	log        *slog.Logger
	launch     *launcher // starts every process for code
	scratchDir string    // per-call files (bash scripts, JS error reports)
	jsHook     string    // node --require file that reports uncaught errors
	jsRepl     string    // the harness of stateful JavaScript contexts
	rKernel    string    // the harness of R contexts (kernels.go)
	handler    http.Handler
	guard      guard // who may call (guard.go)
	files      *fileAPI
	procs      *processAPI

	mu       sync.Mutex
	contexts map[string]*execContext
	order    []string // context ids, defaults first, then by creation
	closed   bool

	// ready is closed once the default Python kernel has started and
	// imported cfg.Preload (GET /ready waits for it); readyErr says how.
	ready    chan struct{}
	readyErr error
	// start is the template's ready check (nil: none): /health waits
	// for it a while on a cold boot, /ready until it ends.
	start *startGate
	heap  heapShare // POST /heap/dump's one share (heap.go)
}

// New prepares an agent from cfg and starts the default Python context's
// kernel in the background, so the first /execute is fast while /health
// answers at once.
func New(cfg Config) (*Agent, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &Agent{decoder: decoder{max: cfg.MaxRequestBytes}, cfg: cfg, log: cfg.Logger, contexts: make(map[string]*execContext), ready: make(chan struct{})}
	a.guard.set(cfg.Secret)
	tmpl, err := readTemplateSettings(cfg.TemplateConfig)
	if err != nil {
		return nil, err
	}
	cfg.User = tmpl.codeUser(cfg.User)
	a.launch = &launcher{user: lookupIdentity(cfg.User, cfg.Home, a.log)}
	a.files = &fileAPI{launch: a.launch, maxBytes: cfg.MaxFileBytes, log: a.log}
	a.procs = &processAPI{decoder: a.decoder, launch: a.launch, log: a.log, bash: cfg.Bash, maxOutput: cfg.MaxOutputBytes}
	if err := a.launch.user.mkdirAll(a.launch.user.home, 0o755); err != nil {
		return nil, fmt.Errorf("creating home %s: %w", a.launch.user.home, err)
	}
	base := cfg.Env
	if base == nil {
		base = os.Environ()
	}
	// The template's envs come first: the sandbox's own (its create's) win.
	a.launch.env = buildEnv(append(tmpl.envList(), tmpl.runtimeEnv(base)...), a.launch.user, cfg.Python)
	a.launch.workdir = a.launch.user.home
	if tmpl.Workdir != "" {
		a.launch.workdir = tmpl.Workdir
	}
	if err := a.prepareRuntimeDir(); err != nil {
		return nil, err
	}
	for _, lang := range []string{langPython, langJavaScript, langBash} {
		c := newExecContext(defaultContextID(lang), lang, a.launch.workdir)
		a.contexts[c.info.ID] = c
		a.order = append(a.order, c.info.ID)
	}
	a.handler = a.routes()
	c := a.contexts[defaultContextID(langPython)]
	go func() {
		defer close(a.ready)
		k, err := a.kernel(context.Background(), c)
		var noPython *errNoPython
		if errors.As(err, &noPython) {
			// Nothing to wait for: the sandbox is ready without a kernel.
			a.log.Info("no default python kernel", "why", err)
			return
		}
		if err != nil {
			a.log.Error("starting the default python kernel", "err", err)
			a.readyErr = err
			return
		}
		if im, ok := k.(importer); ok && len(cfg.Preload) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), kernelStartTimeout)
			defer cancel()
			start := time.Now()
			if err := im.Import(ctx, cfg.Preload); err != nil {
				a.log.Error("preloading modules", "modules", cfg.Preload, "err", err)
				a.readyErr = err
				return
			}
			a.log.Info("preloaded modules", "modules", cfg.Preload, "took", time.Since(start))
		}
	}()
	if tmpl.Start != "" {
		a.startCommand(tmpl.Start)
	}
	if tmpl.Ready != "" {
		a.start = a.readyCheck(tmpl.Ready)
	}
	a.log.Info("agent ready", "user", a.launch.user.name, "uid", a.launch.user.uid, "home", a.launch.user.home, "switch_user", a.launch.user.cred != nil)
	return a, nil
}

func (a *Agent) prepareRuntimeDir() error {
	dir := a.cfg.RuntimeDir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "lizard-agent")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating runtime dir: %w", err)
	}
	// The code's user must reach the hook and its own subdirectories.
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("creating runtime dir: %w", err)
	}
	a.scratchDir = filepath.Join(dir, "scratch")
	for _, d := range []string{a.scratchDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("creating runtime dir: %w", err)
		}
		if err := a.launch.user.chown(d); err != nil {
			return err
		}
	}
	a.jsHook = filepath.Join(dir, "uncaught.cjs")
	if err := os.WriteFile(a.jsHook, []byte(jsHookSource), 0o644); err != nil {
		return fmt.Errorf("writing node hook: %w", err)
	}
	a.jsRepl = filepath.Join(dir, "jsrepl.cjs")
	if err := os.WriteFile(a.jsRepl, []byte(jsReplSource), 0o644); err != nil {
		return fmt.Errorf("writing the javascript context harness: %w", err)
	}
	return a.writeKernelHarnesses(dir)
}

// Handler returns the HTTP handler of the agent API.
func (a *Agent) Handler() http.Handler { return a.handler }

// Run serves the API on cfg.Listen until ctx ends, then shuts down: streams
// in flight get a few seconds, then are cut (which kills their processes),
// and every kernel is closed.
func (a *Agent) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", a.cfg.Listen, err)
	}
	healthCtx, stopHealth := context.WithCancel(ctx)
	defer stopHealth()
	go a.serveHealth(healthCtx)
	if a.cfg.Sudo != "" {
		a.serveSudo(healthCtx)
	}
	return a.Serve(ctx, ln)
}

// serveSudo installs the sandbox's sudo and answers it until ctx ends
// (internal/agent/sudo). A sandbox without it still serves the API: the
// failure is logged.
func (a *Agent) serveSudo(ctx context.Context) {
	exe, err := os.Executable()
	if err == nil {
		err = sudo.Install(a.cfg.Sudo, exe)
	}
	if err != nil {
		a.log.Error("no sudo in this sandbox", "err", err)
		return
	}
	ln, err := sudo.Listen(sudo.SocketPath)
	if err != nil {
		a.log.Error("no sudo in this sandbox", "err", err)
		return
	}
	s := &sudo.Server{UserUID: a.launch.user.uid, Log: a.log}
	go func() {
		if err := s.Serve(ctx, ln); err != nil {
			a.log.Error("serving sudo", "err", err)
		}
	}()
}

// Serve is Run on a listener the caller made.
func (a *Agent) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           a.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	a.log.Info("serving agent API", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		a.Close()
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	a.log.Info("shutting down")
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		srv.Close()
	}
	return a.Close()
}

// Close ends every kernel. The agent answers 503 afterwards.
func (a *Agent) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	var cs []*execContext
	for _, id := range a.order {
		cs = append(cs, a.contexts[id])
	}
	a.mu.Unlock()
	a.launch.procs.killAll()
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.close())
	}
	return errors.Join(errs...)
}

func (a *Agent) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(path string, methods map[string]http.HandlerFunc) {
		var allow []string
		for m, h := range methods {
			mux.HandleFunc(m+" "+path, h)
			allow = append(allow, m)
		}
		// Any other method gets a JSON 405, not the mux's plain text one.
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "method %s not allowed on %s", r.Method, r.URL.Path)
		})
	}
	handle("/health", map[string]http.HandlerFunc{"GET": a.health})
	handle("/reseed", map[string]http.HandlerFunc{"POST": a.reseed})
	handle("/ready", map[string]http.HandlerFunc{"GET": a.readyz})
	handle(api.AgentTrustPath, map[string]http.HandlerFunc{"POST": a.trust})
	handle(api.AgentDiskPath, map[string]http.HandlerFunc{"GET": a.files.disk})
	handle(api.AgentEnvPath, map[string]http.HandlerFunc{"GET": a.getEnv})
	handle(api.AgentHeapDumpPath, map[string]http.HandlerFunc{"POST": a.heapDump})
	handle(api.AgentHeapWaitPath, map[string]http.HandlerFunc{"POST": a.heapWait})
	handle("/execute", map[string]http.HandlerFunc{"POST": a.execute})
	handle("/contexts", map[string]http.HandlerFunc{"GET": a.listContexts, "POST": a.createContext})
	handle("/contexts/{id}", map[string]http.HandlerFunc{"DELETE": a.deleteContext})
	handle("/contexts/{id}/restart", map[string]http.HandlerFunc{"POST": a.restartContext})
	handle("/process", map[string]http.HandlerFunc{"POST": a.procs.process})
	handle("/processes", map[string]http.HandlerFunc{"GET": a.procs.listProcesses, "POST": a.procs.startProcess})
	handle("/processes/{pid}", map[string]http.HandlerFunc{"GET": a.procs.getProcess})
	handle("/processes/{pid}/output", map[string]http.HandlerFunc{"GET": a.procs.processOutput})
	handle("/processes/{pid}/ws", map[string]http.HandlerFunc{"GET": a.procs.processSocket})
	handle("/processes/{pid}/stdin", map[string]http.HandlerFunc{"POST": a.procs.processStdin})
	handle("/processes/{pid}/stdin/close", map[string]http.HandlerFunc{"POST": a.procs.closeStdin})
	handle("/processes/{pid}/signal", map[string]http.HandlerFunc{"POST": a.procs.signalProcess})
	handle("/processes/{pid}/resize", map[string]http.HandlerFunc{"POST": a.procs.resizeProcess})
	handle("/files", map[string]http.HandlerFunc{"GET": a.files.readFile, "PUT": a.files.writeFile, "DELETE": a.files.removeFile})
	handle("/files/list", map[string]http.HandlerFunc{"GET": a.files.listDir})
	handle("/files/stat", map[string]http.HandlerFunc{"GET": a.files.statFile})
	handle("/files/mkdir", map[string]http.HandlerFunc{"POST": a.files.mkdir})
	handle("/files/rename", map[string]http.HandlerFunc{"POST": a.files.rename})
	handle("/files/watch", map[string]http.HandlerFunc{"GET": a.files.watch})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no such endpoint %s", r.URL.Path)
	})
	return a.logRequests(a.guarded(mux))
}

func (a *Agent) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		next.ServeHTTP(w, r)
		if r.URL.Path != "/health" {
			a.log.Debug("request", "method", r.Method, "path", r.URL.Path, "duration", time.Since(start))
		}
	})
}

func (a *Agent) health(w http.ResponseWriter, r *http.Request) {
	// A sandbox booted cold is created once its template's start command
	// is ready: the node waits for this answer.
	if !a.start.open() {
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "the template's start command is not ready yet")
		return
	}
	api.WriteJSON(w, http.StatusOK, api.Health{Status: "ok", Version: a.cfg.Version})
}
