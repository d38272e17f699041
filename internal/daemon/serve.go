// Package daemon holds the server's commands — `lizard serve` (one machine),
// `lizard api` and `lizard node` (a cluster's two roles), `lizard admin` and
// the server side of `lizard template` — and wires the store, the node, the
// control plane and the HTTP server together from one set of flags. The
// commands that only talk to the API live in internal/cli.
package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/console"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/e2b"
	"github.com/lizard-build/lizard/internal/egress"
	"github.com/lizard-build/lizard/internal/events"
	"github.com/lizard-build/lizard/internal/fdbudget"
	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/mcp"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/oci"
	"github.com/lizard-build/lizard/internal/recipe"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/secrets"
	"github.com/lizard-build/lizard/internal/secrets/inject"
	"github.com/lizard-build/lizard/internal/server"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
	"github.com/lizard-build/lizard/internal/version"
	"github.com/lizard-build/lizard/internal/volume"
	"github.com/lizard-build/lizard/internal/warm"
	"github.com/lizard-build/lizard/internal/webhook"
)

// Commands are the server's commands, added to the client's by cmd/lizard.
func Commands() []cli.Command {
	return []cli.Command{
		{Name: "serve", Summary: "run the Lizard API server", Run: runServe},
		{Name: "api", Summary: "serve the public API of a cluster, with PostgreSQL and `lizard node`s (docs/cluster.md)", Run: runAPI},
		{Name: "node", Summary: "run sandboxes on this machine for a cluster's `lizard api`; node drain|undrain NAME moves them off, node list shows the nodes' versions (docs/cluster.md)", Run: runNode},
		{Name: "admin", Summary: "administer a data directory or a cluster's database: create-project, create-key, build-template, backup, restore, check", Run: runAdmin},
	}
}

// serveConfig is everything `lizard serve` is told, from flags and the
// environment, checked once by validate.
type serveConfig struct {
	sharedFlags
	DataDir       string
	CacheDir      string
	Runsc         string // "": next to the lizard binary, then PATH
	Agent         string // "": next to the lizard binary
	Lizard        string // this binary, mounted into sandboxes
	AddressPool   string
	SandboxAPIURL string
	Runtime       string // the backend: gvisor or qemu
	// StartTimeout bounds the wait for a new sandbox's agent; 0 is the
	// backend's default.
	StartTimeout time.Duration
	qemu         qemuFlags // --runtime qemu's (flags.go)
	// PausedRetention is how long a paused sandbox is kept.
	PausedRetention time.Duration
	// MinFreeDiskMb is the free space kept on the data directory's disk
	// (node.Config.MinFreeDisk).
	MinFreeDiskMb int64
	// MaxRestores bounds the restores run at once (node.Config.MaxRestores).
	MaxRestores int
	// TemplateSnapshot makes creates restore a checkpoint of each
	// template's booted sandbox instead of booting; WarmPool keeps that
	// many restored sandboxes per template ready.
	TemplateSnapshot bool
	WarmPool         int
	// Preload is what the template snapshot's Python kernel imports
	// before the checkpoint, comma-separated (warm.Config.Preload; "":
	// none, which halves an idle sandbox's memory and makes the first
	// call that needs them pay the imports).
	Preload string
	// ShareHeap has the template snapshot's kernel share its preloaded
	// heap from a file (warm.Config.ShareHeap).
	ShareHeap bool
	// Warm sizes the warm pool of named templates ([PROJECT/]NAME=N,
	// --warm, repeated).
	Warm warmFlag
	// events: serve's only (events.go); `lizard node` records, not serves.
	events eventFlags
	// images is where checkpoint images outlive the node (imagestore.go).
	images imageStoreFlags
	// IdleReclaim pushes a sandbox idle that long out to swap
	// (node.Config.IdleReclaim); 0: never.
	IdleReclaim time.Duration

	pool netns.Pool
}

func parseServe(e cli.Env, args []string) (*serveConfig, error) {
	fs := cli.NewFlags(e, "serve")
	c := &serveConfig{}
	c.register(fs, roleServe)
	c.events.register(fs)
	if err := cli.Parse(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, cli.Usagef("lizard serve takes no arguments, got %q", fs.Args())
	}
	return c, nil
}

// register adds serve's flags to fs, the shared ones (sharedFlags) and
// the machine's; `lizard node` takes them too.
func (c *serveConfig) register(fs *flag.FlagSet, role string) {
	c.sharedFlags.register(fs, role)
	cacheDefault := template.DefaultCacheDir
	if d := os.Getenv("LIZARD_CACHE_DIR"); d != "" {
		cacheDefault = d
	}
	fs.StringVar(&c.DataDir, "data-dir", "data", "directory for the database and sandbox state")
	fs.StringVar(&c.CacheDir, "cache-dir", cacheDefault, "template cache, shared by every data directory (env LIZARD_CACHE_DIR)")
	fs.StringVar(&c.Runsc, "runsc", "", "runsc binary (default: runsc next to lizard, then on PATH)")
	fs.StringVar(&c.Agent, "agent", "", "lizard-agent binary mounted into sandboxes (default: lizard-agent next to lizard)")
	fs.StringVar(&c.Lizard, "lizard", "", "client-only lizard CLI given to sandboxes as /usr/local/bin/lizard (default: lizard-client next to lizard)")
	fs.StringVar(&c.AddressPool, "address-pool", netns.DefaultPool.String(), "IPv4 prefix sandbox links are taken from, a /30 each")
	fs.StringVar(&c.SandboxAPIURL, "sandbox-api-url", "", "API URL given to sandboxes created with lizardToken as LIZARD_API_URL (the server must be reachable there from inside sandboxes)")
	fs.StringVar(&c.Runtime, "runtime", "gvisor", "sandbox backend: gvisor (runsc; works without KVM) or qemu (a VM with its own kernel per sandbox; KVM where it works, else slow software emulation: docs/qemu.md)")
	fs.DurationVar(&c.StartTimeout, "start-timeout", 0, "how long a new sandbox's agent may take to answer (default: 30s with gvisor, 5m with qemu)")
	c.qemu.register(fs)
	c.images.register(fs)
	fs.DurationVar(&c.PausedRetention, "paused-retention", node.DefaultPausedRetention, "how long a paused sandbox is kept before it is ended")
	fs.Int64Var(&c.MinFreeDiskMb, "min-free-disk-mb", 512, "free space kept on the data directory's disk, MiB: below it creates, forks, snapshots, pauses and volumes are refused (507) so that state changes can still be recorded; 0: no bound")
	fs.IntVar(&c.MaxRestores, "max-restores", max(4, 4*runtime.NumCPU()), "restores run at once (creates from the template snapshot or a snapshot, forks' copies, resumes), each until its agent answers; more wait their turn in order, so that the first creates of a burst answer first (default: four times the CPUs, at least 4; 0: no bound)")
	fs.BoolVar(&c.TemplateSnapshot, "template-snapshot", true, "create sandboxes by restoring a checkpoint of each template's booted sandbox (kernel started, numpy/pandas/matplotlib imported) instead of booting; false boots every sandbox")
	fs.StringVar(&c.Preload, "preload", strings.Join(warm.DefaultPreload, ","), "Python modules the template snapshot's kernel imports before it is checkpointed, comma-separated: restored sandboxes start with them imported, and each holds their memory (\"\": none, about 58 MiB less per idle sandbox, and the first call importing them pays it: docs/performance.md)")
	fs.BoolVar(&c.ShareHeap, "share-heap", false, "the template snapshot's kernel shares its preloaded heap from a file that every sandbox restored from it maps read-only: about 60 MiB less per idle sandbox, and each new sandbox's first calls slower by tens to hundreds of ms while it copies the pages it writes (docs/performance.md); gVisor on x86-64 only")
	fs.IntVar(&c.WarmPool, "warm-pool", 0, "restored sandboxes per template kept ready for creates with the default limits (needs --template-snapshot; each costs an idle sandbox's memory)")
	fs.DurationVar(&c.IdleReclaim, "idle-reclaim", 0, "push the memory of a sandbox idle this long (no call, stream, terminal or port connection, under 5% of a core) out to swap; it runs on and takes back the pages it touches (needs swap turned on, e.g. zram: docs/operations.md; 0: never)")
	fs.Var(&c.Warm, "warm", "warm pool of one template, [PROJECT/]NAME=N (repeat for more): a custom template by name (in PROJECT, or in every project having one of that name), or a built-in to override --warm-pool for it")
}

// validate checks c and fills in the defaults that depend on the machine.
func (c *serveConfig) validate() error {
	var err error
	if c.pool, err = netns.ParsePool(c.AddressPool); err != nil {
		return cli.Usagef("--address-pool: %v", err)
	}
	if err := c.sharedFlags.validate(); err != nil {
		return err
	}
	if err := c.images.validate(); err != nil {
		return err
	}
	if c.DataDir == "" {
		return cli.Usagef("--data-dir must not be empty")
	}
	if c.MaxRestores < 0 {
		return cli.Usagef("--max-restores %d: want 0 (no bound) or more", c.MaxRestores)
	}
	if c.WarmPool < 0 || c.WarmPool > 64 {
		return cli.Usagef("--warm-pool %d: want 0 to 64", c.WarmPool)
	}
	if len(c.Warm) > 0 && !c.TemplateSnapshot {
		return cli.Usagef("--warm needs --template-snapshot=true: the pool is restored from template snapshots")
	}
	for _, m := range preloads(c.Preload) {
		if !moduleName.MatchString(m) {
			return cli.Usagef("--preload %q: %q is not a Python module name (want names such as numpy or matplotlib.pyplot, comma-separated)", c.Preload, m)
		}
	}
	if c.IdleReclaim < 0 {
		return cli.Usagef("--idle-reclaim %s: want a duration such as 5m, or 0 (never)", c.IdleReclaim)
	}
	if err := checkShareHeap(c.ShareHeap, c.Runtime, c.TemplateSnapshot, runtime.GOARCH); err != nil {
		return err
	}
	if c.WarmPool > 0 && !c.TemplateSnapshot {
		return cli.Usagef("--warm-pool needs --template-snapshot=true: the pool is restored from template snapshots")
	}
	if os.Geteuid() != 0 {
		return errors.New("lizard must run as root to run sandboxes: it creates network namespaces and runs runsc (try sudo)")
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the lizard binary: %w", err)
	}
	binDir := filepath.Dir(self)
	if c.Lizard == "" {
		c.Lizard = filepath.Join(binDir, "lizard-client")
	}
	if c.Runtime != "gvisor" && c.Runtime != "qemu" {
		return cli.Usagef("--runtime %q: want gvisor or qemu", c.Runtime)
	}
	if err := c.qemu.validate(c.Runtime, binDir, c.CacheDir); err != nil {
		return err
	}
	if c.Runsc == "" && c.Runtime == "gvisor" {
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
		if *p == "" && flag == "--runsc" && c.Runtime != "gvisor" {
			continue
		}
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

func runServe(ctx context.Context, e cli.Env, args []string) error {
	c, err := parseServe(e, args)
	if err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	if err := c.events.validate(); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(e.Stderr, &slog.HandlerOptions{Level: c.level}))

	// Listen first: a taken port is the likeliest mistake, and the cheapest
	// to report before anything else starts.
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", c.Listen, err)
	}
	defer ln.Close()

	if err := secureDirs(c.DataDir, c.CacheDir); err != nil {
		return err
	}
	unlock, err := lockDataDir(c.DataDir)
	if err != nil {
		return err
	}
	defer unlock()
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
	secretsKey, err := c.secrets.key(c.DataDir, true)
	if err != nil {
		return err
	}
	secretsStore := secretStore(st, secretsKey)
	secretsStore.Audit = audit
	forwardingNote(logger, c.policy.Egress)

	mx := metrics.Serve(ctx, c.MetricsListen, logger)
	stopTracing, err := tracing(ctx, "lizard", mx, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	inj, err := c.secrets.injector(st, secretsKey, c.DataDir, audit, logger)
	if err != nil {
		return err
	}
	parts, err := c.newNode(ctx, e, st, st, logger, mx, c.tokenAPI(ln.Addr()), inj)
	if err != nil {
		return err
	}
	n, pool, rt := parts.node, parts.pool, parts.rt
	evlog := &events.Log{Store: st}
	hooks := c.events.webhooks(st, logger)
	ctl, err := c.newControl(parts, st, secretsStore, evlog, hooks, audit, logger)
	if err != nil {
		return err
	}
	h := server.New(c.serverConfig(ln, apiParts{control: ctl, store: st,
		descriptors: parts.descriptors, audit: audit, logger: logger, metrics: mx, e2bDir: filepath.Join(c.DataDir, "e2b")}))
	// Sandboxes holding a lizardToken reach the API on their own host
	// address, opened and closed as they start and stop.
	listeners := server.NewSandboxListeners(c.sandboxAPIPort(ln.Addr()), h, logger)
	defer listeners.CloseAll()
	if c.SandboxAPIURL == "" {
		n.Subscribe(listeners.Handle)
	}
	n.Subscribe(ctl.Events)
	n.Subscribe(node.Audit(audit))
	n.Subscribe((&events.Recorder{Store: st, Log: logger}).Handle)
	go evlog.RunPruner(ctx, c.events.Retention, logger)
	go hooks.Run(ctx)
	gauges(mx, st, c.pool.Slots())
	if err := startNode(ctx, logger, parts); err != nil {
		return fmt.Errorf("reconciling sandboxes with the runtime: %w", err)
	}

	logger.Info("lizard serving", "url", "http://"+ln.Addr().String(), "data_dir", c.DataDir,
		"cache_dir", c.CacheDir, "runtime", rt.Name(), "address_pool", c.pool.Prefix().String())
	if n, err := st.CountProjects(ctx); err == nil && n == 0 {
		logger.Info("no projects yet: make one and its API key with `lizard admin create-project --data-dir " +
			c.DataDir + " --id proj_123 --json`")
	}
	err = server.Run(ctx, ln, h, logger)
	stopNode(ctx, logger, n, pool, rt)
	return err
}

// newControl is serve's control plane over its node, with the builder of
// custom templates it runs itself.
func (c *serveConfig) newControl(parts nodeParts, st *store.Store, sec *secrets.Store, evlog *events.Log, hooks *webhook.Service, audit, logger *slog.Logger) (*control.Control, error) {
	agentKey, err := loadAgentKey(c.DataDir) // the ports' access tokens derive from it too
	if err != nil {
		return nil, err
	}
	limits, maxLimits := c.policy.limits()
	builder := recipe.New(recipe.Config{CacheDir: c.CacheDir, DataDir: c.DataDir, Node: buildNode{parts.node, limits}, Store: st, Base: parts.builds.Artifact, Logger: logger,
		Images: &oci.Puller{Dir: filepath.Join(c.CacheDir, "oci"), ConfigFile: c.RegistryConfig, Registries: splitList(c.RegistryAllow)}})
	builder.Sweep()
	if err := builder.SweepStepsOf(context.Background(), st); err != nil {
		logger.Error("sweeping the step cache of deleted templates", "err", err) // disk, nothing else; swept again next start
	}
	ccfg := control.Config{
		Node: parts.node, Store: st, Logger: logger, Limits: limits, MaxLimits: maxLimits, Internet: c.policy.Egress == "internet",
		NetworkDefault: c.policy.netDefault, NetworkBound: c.policy.netBound,
		DefaultTimeout: c.DefaultTimeout, MaxTimeout: c.MaxTimeout, MaxChildTimeout: c.MaxChildTimeout,
		Quota: parts.quota, CreateRate: c.policy.CreateRate, CreateBurst: c.policy.CreateBurst,
		Audit: audit, MaxVolumeBytes: c.MaxVolumeMb << 20,
		MaxVolumes: c.policy.MaxVolumes, MaxVolumeTotalBytes: c.policy.MaxVolumeTotalMb << 20,
		PortsKey: agentKey, PortsDomain: c.PortsDomain, PortsResume: c.PortsResume,
		Builder: builder, BuildsPerHour: c.BuildsPerHour,
		MaxTemplates: c.policy.MaxTemplates, MaxTemplateBytes: c.policy.MaxTemplateTotalMb << 20,
		Secrets: sec, ImagesOnDisk: c.images.URL == "",
		Events: evlog, Webhooks: hooks,
	}
	if parts.pool != nil {
		ccfg.Forget = parts.pool.Forget
	}
	return control.New(ccfg)
}

// apiParts are what the public API is served over, under serve and api
// alike.
type apiParts struct {
	control     *control.Control
	store       *store.Store
	descriptors *fdbudget.Budget
	audit       *slog.Logger
	logger      *slog.Logger
	metrics     *metrics.Metrics
	// e2bDir keeps what E2B's Template SDK uploads for its builds, and
	// templates' tags; "" (lizard api, which has no data directory):
	// copies are refused, tags held in memory.
	e2bDir string
}

// serverConfig is the public API's configuration on ln, from the shared
// flags: `lizard serve` and `lizard api` serve the same API.
func (f *sharedFlags) serverConfig(ln net.Listener, p apiParts) server.Config {
	return server.Config{
		Control:   p.control,
		Keys:      &auth.Verifier{Store: p.store, Logger: p.logger},
		Logger:    p.logger,
		KeyLimits: server.KeyLimits{Rate: f.policy.KeyRate, Burst: f.policy.KeyBurst}, Descriptors: p.descriptors,
		MaxFileBytes: f.policy.MaxFileMb << 20,
		Audit:        p.audit,
		Console:      console.Handler(), Metrics: p.metrics,
		PortsDomain: f.PortsDomain,
		E2B:         &e2b.Config{Dir: p.e2bDir},
		// The MCP tools call this API over loopback with the caller's
		// key, like any client (internal/mcp's Handler).
		MCP: mcp.Handler(loopbackURL(ln.Addr()), version.Version, p.logger),
	}
}

// startNode brings a node's sandboxes back and starts its loops, under
// serve and node alike: the volumes first, since paused sandboxes that
// mount them may resume as soon as the API serves, then the sandboxes as
// the runtime and the store find them (Reconcile's error is returned
// unwrapped), then the reaper, the uploader, the sampler and the warm pool.
func startNode(ctx context.Context, logger *slog.Logger, parts nodeParts) error {
	n := parts.node
	if err := n.MountVolumes(ctx); err != nil {
		logger.Error("mounting persistent volumes; sandboxes using the ones named cannot start", "err", err)
	}
	if err := n.Reconcile(ctx); err != nil {
		return err
	}
	go n.RunReaper(ctx)
	go n.RunUploader(ctx)
	go n.RunSampler(ctx)
	go node.RunReclaimer(ctx, n)
	if parts.pool != nil {
		go parts.pool.Run(ctx, n)
	}
	return nil
}

// stopNode ends what a node runs once its server has stopped serving: the
// warm pool, then the runtime, then the volumes no sandbox uses.
func stopNode(ctx context.Context, logger *slog.Logger, n *node.Local, pool *warm.Pool, rt sandbox.Runtime) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if pool != nil {
		pool.Drain(dctx)
	}
	// Last: a create the stop interrupted is still removing what it made
	// (its network namespace, veth and rules); exiting now would leave
	// them behind.
	if cerr := rt.Close(dctx); cerr != nil {
		logger.Error("waiting for the runtime to finish removing sandboxes", "err", cerr)
	}
	if uerr := n.UnmountVolumes(dctx); uerr != nil {
		logger.Error("unmounting persistent volumes", "err", uerr)
	}
}

// nodeParts are what newNode starts.
type nodeParts struct {
	node *node.Local
	pool *warm.Pool // nil without --template-snapshot
	rt   sandbox.Runtime
	// builds are the built-in templates' (custom ones are built on them).
	builds *template.Builds
	// quota is the node's admission, which the control plane refuses
	// early by.
	quota *node.Quota
	// templates are a cluster node's custom templates (nil under serve,
	// whose builder is the control plane's); images its cache of the
	// image store (nil without one).
	templates *recipe.Shared
	images    *imagestore.Cache
	// descriptors is the node's budget of file descriptors, which its
	// API's requests count against too.
	descriptors *fdbudget.Budget
}

// newNode starts the runtime, the template builds and the warm pool, and
// returns the node over them, recording its sandboxes in st: what runs
// sandboxes in `lizard serve` and `lizard node` alike.
//
// Its admission is the project quotas counted in shared, the database every
// node and API process shares (st itself under serve).
func (c *serveConfig) newNode(ctx context.Context, e cli.Env, st, shared *store.Store, logger *slog.Logger, mx *metrics.Metrics,
	tokenAPI func(host string) ([]string, int), inj *inject.Injector) (nodeParts, error) {
	limits, _ := c.policy.limits()
	internet := c.policy.Egress == "internet"
	descriptors, err := c.policy.descriptorBudget(logger, mx)
	if err != nil {
		return nodeParts{}, err
	}
	agentKey, err := loadAgentKey(c.DataDir)
	if err != nil {
		return nodeParts{}, err
	}
	// The secrets key the injector holds also seals the image store's
	// images (imagestore.go).
	images, imageCache, err := c.images.open(ctx, c.DataDir, os.Getenv, inj.Secrets.Key, logger)
	if err != nil {
		return nodeParts{}, err
	}
	// Before any sandbox is made: the released slots of a server that
	// crashed may hold connection tracking entries a new owner of the
	// address would inherit (netns/conntrack.go).
	if n, err := netns.ForgetPoolFlows(c.pool); err != nil {
		logger.Error("deleting the connection tracking entries of unused address slots", "err", err)
	} else if n > 0 {
		logger.Info("deleted the connection tracking entries of unused address slots", "entries", n)
	}
	rt, err := newRuntime(c, logger)
	if err != nil {
		return nodeParts{}, err
	}
	shareImages(images, rt)
	if err := errors.Join(checkIdleReclaim(rt, c.IdleReclaim), checkShareHeapRuntime(ctx, rt, c.ShareHeap)); err != nil {
		rt.Close(context.WithoutCancel(ctx))
		return nodeParts{}, err
	}

	// Templates build in the background so that the API (and its health
	// check) is up at once; creates wait for their template.
	builds := template.NewBuilds(ctx, template.Ensure, c.CacheDir, e.Stderr, logger)
	for _, name := range template.Names() {
		builds.Start(name)
	}
	files := []sandbox.File{{Source: c.Agent, Target: node.AgentPath}, {Source: c.Lizard, Target: node.LizardPath}}

	// A built-in template by name, a custom one by its reference
	// (recipe.Ref) from the template cache; a cluster node's from its own
	// (templates, set below), fetched from the image store if need be.
	var templates *recipe.Shared
	artifact := func(ctx context.Context, name string) (sandbox.Artifact, error) {
		if _, _, custom := template.SplitRef(name); custom {
			if templates != nil {
				return templates.Artifact(ctx, name)
			}
			return recipe.Artifact(c.CacheDir, name)
		}
		return builds.Artifact(ctx, name)
	}

	// Template snapshots and the warm pool.
	var pool *warm.Pool
	if c.TemplateSnapshot {
		wcfg := warm.Config{Store: st, Templates: template.Names(), Artifact: artifact, DataDir: c.DataDir,
			RuntimeKey: rt.ImageKey(), Files: []string{c.Agent, c.Lizard}, Size: c.WarmPool, Preload: preloads(c.Preload), ShareHeap: c.ShareHeap,
			Limits: limits, Internet: internet, Logger: logger, Metrics: mx,
			ImagesKeepShape: c.Runtime == "qemu"}
		if len(c.Warm) > 0 {
			wcfg.Sizes = c.Warm.sizes(st, logger)
		}
		pool = warm.New(wcfg)
	}
	var enforcer *egress.Enforcer
	if internet {
		// Policies by name are enforced here, on the node.
		if enforcer, err = egress.Start(egress.Config{Records: c.policy.testHosts, AllowTo: c.policy.allowTo, Logger: logger, Metrics: mx,
			Interceptor: inj, Budget: descriptors}); err != nil {
			return nodeParts{}, err
		}
	}
	ncfg := node.Config{
		Egress: enforcer, EgressCAs: inj.Authorities, Descriptors: descriptors,
		Runtime: rt, Store: st, Pool: c.pool, Logger: logger, Artifact: artifact, Files: files,
		Limits: limits, Internet: internet, Allow: c.policy.allowTo, TokenAPI: tokenAPI,
		DataDir: c.DataDir, PausedRetention: c.PausedRetention, AgentKey: agentKey, Metrics: mx,
		StartTimeout: c.startTimeout(), MinFreeDisk: c.MinFreeDiskMb << 20, MaxRestores: c.MaxRestores,
		Images: images, ImageCache: imageCache, IdleReclaim: c.IdleReclaim,
	}
	quota := &node.Quota{Store: shared, MaxLive: c.policy.MaxSandboxes, MaxDisk: c.policy.MaxProjectDiskMb << 20, DefaultDisk: limits.DiskBytes}
	ncfg.Admission = quota
	mx.DiskFree(map[string]string{"data": c.DataDir, "cache": c.CacheDir})
	if c.Runtime == "gvisor" {
		// The qemu backend has no way to mount a host directory into its
		// guests yet.
		ncfg.Volumes = &volume.Manager{Dir: filepath.Join(c.DataDir, "volumes")}
	}
	if pool != nil {
		ncfg.Warm = pool
	}
	n, err := node.New(ncfg)
	if err != nil {
		return nodeParts{}, err
	}
	if st.Node() != "" {
		// A cluster node keeps custom templates under its data directory,
		// not in the template cache other data directories on the machine
		// share: its copies are of the image store's, its own to remove.
		b := recipe.New(recipe.Config{CacheDir: filepath.Join(c.DataDir, "template-cache"), DataDir: c.DataDir, Node: buildNode{n, limits}, Store: st,
			Base: builds.Artifact, Logger: logger,
			Images: &oci.Puller{Dir: filepath.Join(c.DataDir, "template-cache", "oci"), ConfigFile: c.RegistryConfig, Registries: splitList(c.RegistryAllow)}})
		b.Sweep()
		templates = &recipe.Shared{Builder: b, Images: images, Cache: imageCache, Log: logger}
		if err := templates.SweepUnused(ctx, shared); err != nil {
			// Left over builds cost disk, nothing else; the next start
			// sweeps again.
			logger.Error("sweeping unused template builds", "err", err)
		}
	}
	return nodeParts{node: n, pool: pool, rt: rt, builds: builds, quota: quota, templates: templates, images: imageCache, descriptors: descriptors}, nil
}

// loopbackURL is the API's URL on this host for calls the server makes to
// itself: a listener on every address is reached on loopback.
func loopbackURL(addr net.Addr) string {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String()
	}
	ip := ta.IP
	if ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return "http://" + (&net.TCPAddr{IP: ip, Port: ta.Port}).String()
}

// checkShareHeap refuses --share-heap where it cannot work.
func checkShareHeap(share bool, rt string, snapshot bool, arch string) error {
	switch {
	case !share:
		return nil
	case rt == "qemu":
		return cli.Usagef("--share-heap works with --runtime gvisor only: a VM's memory is its own, and its kernel cannot map a host file for its guest (drop --share-heap, or use --runtime gvisor)")
	case arch != "amd64":
		return cli.Usagef("--share-heap works on x86-64 only: the kernel's routine that dumps and maps back its heap is x86-64 machine code (this is %s); drop --share-heap", arch)
	case !snapshot:
		return cli.Usagef("--share-heap needs --template-snapshot=true: the heap is shared by the template snapshot's kernel")
	}
	return nil
}

// moduleName is a dotted Python module name, as --preload takes them.
var moduleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// preloads splits --preload into module names; "" is none (an empty,
// not nil, list: nil would mean warm.DefaultPreload).
func preloads(s string) []string {
	out := []string{}
	for _, m := range strings.Split(s, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}
