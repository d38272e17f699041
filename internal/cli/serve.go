package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/console"
	"github.com/lizard-build/lizard/internal/manager"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/sandbox/gvisor"
	"github.com/lizard-build/lizard/internal/server"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
)

func init() {
	register("serve", "run the Lizard API server", runServe)
}

// serveConfig is everything `lizard serve` is told, from flags and the
// environment, checked once by validate.
type serveConfig struct {
	Listen         string
	DataDir        string
	CacheDir       string
	Runsc          string // "": next to the lizard binary, then PATH
	Agent          string // "": next to the lizard binary
	Lizard         string // this binary, mounted into sandboxes
	AddressPool    string
	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	SandboxAPIURL  string
	LogLevel       string
	// PausedRetention is how long a paused sandbox is kept.
	PausedRetention time.Duration
	// TemplateSnapshot makes creates restore a checkpoint of each
	// template's booted sandbox instead of booting; WarmPool keeps that
	// many restored sandboxes per template ready.
	TemplateSnapshot bool
	WarmPool         int
	MetricsListen    string // Prometheus /metrics listener; "": none
	// policy is untrusted code's limits and network (serve_policy.go).
	policy policyFlags

	pool  manager.Pool
	level slog.Level
}

func parseServe(e env, args []string) (*serveConfig, error) {
	fs := newFlags(e, "serve")
	c := &serveConfig{}
	cacheDefault := template.DefaultCacheDir
	if d := os.Getenv("LIZARD_CACHE_DIR"); d != "" {
		cacheDefault = d
	}
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:8080", "address to serve the API on")
	fs.StringVar(&c.DataDir, "data-dir", "data", "directory for the database and sandbox state")
	fs.StringVar(&c.CacheDir, "cache-dir", cacheDefault, "template cache, shared by every data directory (env LIZARD_CACHE_DIR)")
	fs.StringVar(&c.Runsc, "runsc", "", "runsc binary (default: runsc next to lizard, then on PATH)")
	fs.StringVar(&c.Agent, "agent", "", "lizard-agent binary mounted into sandboxes (default: lizard-agent next to lizard)")
	fs.StringVar(&c.Lizard, "lizard", "", "lizard binary mounted into sandboxes as /usr/local/bin/lizard (default: this binary)")
	fs.StringVar(&c.AddressPool, "address-pool", manager.DefaultPool.String(), "IPv4 prefix sandbox links are taken from, a /30 each")
	fs.DurationVar(&c.DefaultTimeout, "default-timeout", 5*time.Minute, "life of a sandbox whose create names no timeout")
	fs.DurationVar(&c.MaxTimeout, "max-timeout", 24*time.Hour, "longest timeout a create or setTimeout may ask for (0, never expire, is always allowed)")
	fs.StringVar(&c.SandboxAPIURL, "sandbox-api-url", "", "API URL given to sandboxes created with lizardToken as LIZARD_API_URL (the server must be reachable there from inside sandboxes)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&c.PausedRetention, "paused-retention", manager.DefaultPausedRetention, "how long a paused sandbox is kept before it is ended")
	fs.BoolVar(&c.TemplateSnapshot, "template-snapshot", true, "create sandboxes by restoring a checkpoint of each template's booted sandbox (kernel started, numpy/pandas/matplotlib imported) instead of booting; false boots every sandbox")
	fs.IntVar(&c.WarmPool, "warm-pool", 0, "restored sandboxes per template kept ready for creates with the default limits (needs --template-snapshot; each costs an idle sandbox's memory)")
	fs.StringVar(&c.MetricsListen, "metrics-listen", "127.0.0.1:9464", "address to serve Prometheus metrics on at /metrics (docs/metrics.md); \"\" turns them off")
	c.policy.register(fs)
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usagef("lizard serve takes no arguments, got %q", fs.Args())
	}
	return c, nil
}

// validate checks c and fills in the defaults that depend on the machine.
func (c *serveConfig) validate() error {
	var err error
	if c.pool, err = manager.ParsePool(c.AddressPool); err != nil {
		return usagef("--address-pool: %v", err)
	}
	if c.DefaultTimeout <= 0 || c.MaxTimeout <= 0 || c.DefaultTimeout > c.MaxTimeout {
		return usagef("--default-timeout %s and --max-timeout %s: want 0 < default <= max", c.DefaultTimeout, c.MaxTimeout)
	}
	if err := c.policy.validate(); err != nil {
		return err
	}
	if err := c.level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return usagef("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return usagef("--listen %q: want HOST:PORT, such as 127.0.0.1:8080", c.Listen)
	}
	if c.DataDir == "" {
		return usagef("--data-dir must not be empty")
	}
	if c.WarmPool < 0 || c.WarmPool > 64 {
		return usagef("--warm-pool %d: want 0 to 64", c.WarmPool)
	}
	if c.WarmPool > 0 && !c.TemplateSnapshot {
		return usagef("--warm-pool needs --template-snapshot=true: the pool is restored from template snapshots")
	}
	if os.Geteuid() != 0 {
		return errors.New("lizard serve must run as root: it creates network namespaces and runs runsc (try sudo)")
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the lizard binary: %w", err)
	}
	binDir := filepath.Dir(self)
	if c.Lizard == "" {
		c.Lizard = self
	}
	if c.Runsc == "" {
		c.Runsc = filepath.Join(binDir, "runsc")
		if !isFile(c.Runsc) {
			p, err := exec.LookPath("runsc")
			if err != nil {
				return fmt.Errorf("runsc not found next to lizard (%s) nor on PATH: run `make build` or pass --runsc", c.Runsc)
			}
			c.Runsc = p
		}
	}
	if c.Agent == "" {
		c.Agent = filepath.Join(binDir, "lizard-agent")
	}
	for flag, p := range map[string]*string{"--runsc": &c.Runsc, "--agent": &c.Agent, "--lizard": &c.Lizard} {
		if !isFile(*p) {
			return fmt.Errorf("%s %s: no such file (run `make build`, or pass %s)", flag, *p, flag)
		}
		// Mount specs need absolute paths.
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	if c.DataDir, err = filepath.Abs(c.DataDir); err != nil {
		return err
	}
	if c.CacheDir, err = filepath.Abs(c.CacheDir); err != nil {
		return err
	}
	return nil
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func runServe(ctx context.Context, e env, args []string) error {
	c, err := parseServe(e, args)
	if err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: c.level}))

	// Listen first: a taken port is the likeliest mistake, and the cheapest
	// to report before anything else starts.
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", c.Listen, err)
	}
	defer ln.Close()

	st, err := store.Open(ctx, c.DataDir)
	if err != nil {
		return fmt.Errorf("opening the store: %w", err)
	}
	defer st.Close()

	audit, auditFile, err := openAudit(c.DataDir)
	if err != nil {
		return err
	}
	defer auditFile.Close()
	policy, sandboxAPI := c.policy.policy(ln.Addr(), audit, logger)
	defer sandboxAPI.CloseAll()
	forwardingNote(logger, c.policy.Egress)
	limits, _ := c.policy.limits()

	rt, err := gvisor.New(gvisor.Config{Runsc: c.Runsc, Dir: filepath.Join(c.DataDir, "gvisor"), Logger: logger, AllowTo: c.policy.allowTo})
	if err != nil {
		return fmt.Errorf("starting the gVisor runtime: %w", err)
	}

	// Templates build in the background so that the API (and its health
	// check) is up at once; creates wait for their template.
	templates := manager.NewTemplates(ctx, template.Ensure, c.CacheDir, e.stderr, logger)
	for _, name := range template.Names() {
		templates.Start(name)
	}

	m, err := manager.New(manager.Config{
		Runtime:        rt,
		Store:          st,
		Logger:         logger,
		Pool:           c.pool,
		RootFS:         templates.RootFS,
		AgentBinary:    c.Agent,
		LizardBinary:   c.Lizard,
		DefaultTimeout: c.DefaultTimeout,
		MaxTimeout:     c.MaxTimeout,
		APIURL:         c.SandboxAPIURL,
		Limits:         limits,
		Policy:         policy,
		// Checkpoint images of paused sandboxes and snapshots.
		DataDir:         c.DataDir,
		PausedRetention: c.PausedRetention,
		// Template snapshots (DataDir/templates) and the warm pool.
		NoTemplateSnapshots: !c.TemplateSnapshot,
		RuntimeBinary:       c.Runsc,
		WarmPool:            c.WarmPool,
	})
	if err != nil {
		return err
	}
	if err := m.Reconcile(ctx); err != nil {
		return fmt.Errorf("reconciling sandboxes with the runtime: %w", err)
	}
	go m.RunReaper(ctx)
	m.StartBackground(ctx)

	h := server.New(server.Config{
		Manager:   m,
		Keys:      &auth.Verifier{Store: st, Logger: logger},
		Logger:    logger,
		Version:   version(),
		KeyLimits: server.KeyLimits{Rate: c.policy.KeyRate, Burst: c.policy.KeyBurst},
		Audit:     audit,
		Console:   console.Handler(), Metrics: metrics.Serve(ctx, c.MetricsListen, logger),
	})
	sandboxAPI.SetHandler(h)
	logger.Info("lizard serving", "url", "http://"+ln.Addr().String(), "data_dir", c.DataDir,
		"cache_dir", c.CacheDir, "runsc", c.Runsc, "address_pool", c.pool.Prefix().String())
	if n, err := st.CountProjects(ctx); err == nil && n == 0 {
		logger.Info("no projects yet: make one and its API key with `lizard admin create-project --data-dir " +
			c.DataDir + " --id proj_123 --json`")
	}
	err = server.Run(ctx, ln, h, logger)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	m.DrainWarmPool(dctx)
	return err
}

// version names the build: its VCS revision, or its module version.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, st := range bi.Settings {
		if st.Key == "vcs.revision" {
			return st.Value[:min(12, len(st.Value))]
		}
	}
	if bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return ""
}
