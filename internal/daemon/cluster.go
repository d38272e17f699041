package daemon

// The two roles of a cluster (docs/cluster.md): `lizard node` runs
// sandboxes on its machine and serves them to the API; `lizard api` serves
// the public API, placing sandboxes on nodes and routing calls to them.
// Both share one PostgreSQL database and a cluster secret.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/cluster"
	"github.com/lizard-build/lizard/internal/cluster/remote"
	"github.com/lizard-build/lizard/internal/cluster/secret"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/events"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/oci"
	"github.com/lizard-build/lizard/internal/secrets"
	"github.com/lizard-build/lizard/internal/server"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/version"
)

// Environment variables of both roles. Secrets are never flags: flags
// show in `ps`.
const (
	envDatabaseURL   = "LIZARD_DATABASE_URL"
	envClusterSecret = cli.EnvClusterSecret
)

// clusterFlags are the flags both roles share.
type clusterFlags struct {
	DatabaseURL string
	Lease       time.Duration
	secret      string
}

func (f *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.DatabaseURL, "database-url", "", "PostgreSQL URL, postgres://USER:PASSWORD@HOST:5432/DB (default: env "+envDatabaseURL+"; prefer the environment, flags show in ps)")
	fs.DurationVar(&f.Lease, "lease", cluster.DefaultLease, "a node's lease: renewed every third of it; a node that misses it is lost and its running sandboxes fail (\"node lost\"). Give every node and api process the same value")
}

func (f *clusterFlags) validate() error {
	if f.DatabaseURL == "" {
		f.DatabaseURL = os.Getenv(envDatabaseURL)
	}
	if !strings.HasPrefix(f.DatabaseURL, "postgres://") && !strings.HasPrefix(f.DatabaseURL, "postgresql://") {
		return cli.Usagef("a cluster needs PostgreSQL: set %s (or --database-url) to postgres://USER:PASSWORD@HOST:5432/DB", envDatabaseURL)
	}
	f.secret = os.Getenv(envClusterSecret)
	if err := secret.Validate(f.secret, envClusterSecret); err != nil {
		return cli.Usagef("%v", err)
	}
	if f.Lease < 2*time.Second {
		return cli.Usagef("--lease %s: want at least 2s", f.Lease)
	}
	return nil
}

// nodeConfig is what `lizard node` is told: serve's flags for running
// sandboxes, and the cluster's.
type nodeConfig struct {
	serveConfig
	cluster   clusterFlags
	Name      string
	Advertise string
	// UndrainAtStart: a drained node takes sandboxes again when it starts
	// (after DrainOnStop's drain, as the Helm chart runs nodes).
	UndrainAtStart bool
	// DrainOnStop: at a stop signal the node has the lizard api at APIURL
	// drain it — move its sandboxes to the other nodes — and serves them
	// until that is done, then stops.
	DrainOnStop bool
	APIURL      string
}

func parseNode(e cli.Env, args []string) (*nodeConfig, error) {
	fs := cli.NewFlags(e, "node")
	c := &nodeConfig{}
	c.serveConfig.register(fs, roleNode)
	c.cluster.register(fs)
	host, _ := os.Hostname()
	fs.StringVar(&c.Name, "name", cmpOr(os.Getenv("LIZARD_NODE_NAME"), host), "the node's name in the cluster, unique and stable across restarts (default: env LIZARD_NODE_NAME, else the host name)")
	fs.StringVar(&c.Advertise, "advertise", os.Getenv("LIZARD_NODE_ADDRESS"), "HOST or HOST:PORT the api processes reach this node at (default: env LIZARD_NODE_ADDRESS, else the --listen address; the port defaults to --listen's)")
	fs.BoolVar(&c.UndrainAtStart, "undrain-at-start", false, "take new sandboxes at start even if this node was drained (`lizard node drain`); with --drain-on-stop, as the Helm chart runs nodes")
	fs.BoolVar(&c.DrainOnStop, "drain-on-stop", false, "at SIGTERM or SIGINT, first have the lizard api at --api-url drain this node (move its sandboxes to the other nodes through the image store), serving them until it is done; a second signal stops at once")
	fs.StringVar(&c.APIURL, "api-url", os.Getenv(client.EnvAPIURL), "the cluster's lizard api URL, for --drain-on-stop (default: env "+client.EnvAPIURL+")")
	fs.Usage = func() {
		// The drain commands are parsed before these flags, so name them here.
		fmt.Fprintf(e.Stderr, "Usage: lizard node [flags]   (run sandboxes for a cluster's lizard api; docs/cluster.md)\n"+
			"       lizard node drain NAME [--api-url URL] [--json]     (move its sandboxes to other nodes; needs $%[1]s)\n"+
			"       lizard node undrain NAME [--api-url URL] [--json]   (it takes new sandboxes again; needs $%[1]s)\n"+
			"       lizard node list [--api-url URL] [--json]           (the nodes, their versions and whether the api places on them; needs $%[1]s)\n\n"+
			"Environment: LIZARD_NODE_VERSION, for tests and upgrade rehearsals only, registers the node as that version instead of its own.\n\nFlags:\n", envClusterSecret)
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, cli.Usagef("lizard node takes no arguments (but drain NAME, undrain NAME and list), got %q", fs.Args())
	}
	return c, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (c *nodeConfig) validate() error {
	if err := c.cluster.validate(); err != nil {
		return err
	}
	if c.DrainOnStop && c.APIURL == "" {
		return cli.Usagef("--drain-on-stop: the drain is asked of a lizard api; give its URL with --api-url or %s", client.EnvAPIURL)
	}
	if c.Name == "" || strings.ContainsAny(c.Name, ": /") {
		return cli.Usagef("--name %q: want a non-empty name without ':', '/' or spaces", c.Name)
	}
	lhost, lport, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return cli.Usagef("--listen %q: want HOST:PORT", c.Listen)
	}
	adv := c.Advertise
	if adv == "" {
		adv = lhost
	}
	if _, _, err := net.SplitHostPort(adv); err != nil {
		adv = net.JoinHostPort(strings.Trim(adv, "[]"), lport)
	}
	if h, _, _ := net.SplitHostPort(adv); h == "" || h == "0.0.0.0" || h == "::" {
		return cli.Usagef("--advertise: the api processes need an address to reach this node at; --listen %s names none", c.Listen)
	}
	c.Advertise = adv
	return c.serveConfig.validate()
}

func runNode(ctx context.Context, e cli.Env, args []string) error {
	if len(args) > 0 && (args[0] == "drain" || args[0] == "undrain" || args[0] == "list") {
		return cli.NodeCommand(ctx, e, args[0], args[1:])
	}
	c, err := parseNode(e, args)
	if err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(e.Stderr, &slog.HandlerOptions{Level: c.level})).With("node", c.Name)
	ctx, stopServing := c.serveUntilStopped(ctx, logger)
	defer stopServing()
	if err := secureDirs(c.DataDir, c.CacheDir); err != nil {
		return err
	}
	unlock, err := lockDataDir(c.DataDir)
	if err != nil {
		return err
	}
	defer unlock()
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", c.Listen, err)
	}
	defer ln.Close()
	shared, err := openRetrying(ctx, c.cluster.DatabaseURL, logger)
	if err != nil {
		return err
	}
	defer shared.Close()
	// The node's own view: its sandboxes, its address slots.
	st := shared.OnNode(c.Name)
	if c.UndrainAtStart {
		if err := shared.Nodes().SetDraining(ctx, c.Name, false); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("undraining node %s at start: %w", c.Name, err)
		}
	}
	forwardingNote(logger, c.policy.Egress)
	mx := metrics.Serve(ctx, c.MetricsListen, logger)
	stopTracing, err := tracing(ctx, "lizard-node", mx, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	var tokenAPI func(string) ([]string, int)
	if c.SandboxAPIURL != "" {
		tokenAPI = c.tokenAPI(ln.Addr())
	}
	// The node writes the audit trail of its sandboxes and their keys,
	// every path that makes or ends one, and of the secrets it injects,
	// as `lizard serve` does.
	audit, auditFile, err := openAudit(c.DataDir)
	if err != nil {
		return err
	}
	defer auditFile.Close()
	secretsKey, err := c.secrets.key("", false)
	if err != nil {
		return err
	}
	if secretsKey == nil {
		logger.Warn("no secrets key (--secrets-key-file or " + secrets.KeyEnv + "): requests whose policy injects a secret are answered 502")
	}
	inj, err := c.secrets.injector(shared, secretsKey, c.DataDir, audit, logger)
	if err != nil {
		return err
	}
	parts, err := c.newNode(ctx, e, st, shared, logger, mx, tokenAPI, inj)
	if err != nil {
		return err
	}
	n, pool, rt := parts.node, parts.pool, parts.rt
	// The API's agent calls, checked there, reach the agents through the
	// internal API's agentproxy.Proxy, behind the secret.
	// LIZARD_NODE_VERSION: for tests and upgrade rehearsals only, a node
	// that registers — and answers apis — as another version
	// (docs/cluster.md).
	registered := cmpOr(os.Getenv("LIZARD_NODE_VERSION"), version.Version)
	hcfg := remote.HandlerConfig{Node: n, Secret: c.cluster.secret, Logger: logger, Metrics: mx, DataDir: c.DataDir, Templates: parts.templates, Version: registered,
		Peers: func(ctx context.Context, name string) (string, error) {
			peer, err := shared.Nodes().Get(ctx, name)
			return peer.Addr, err
		}}
	if pool != nil {
		hcfg.Forget = pool.Forget
	}
	h := remote.Handler(hcfg)
	n.Subscribe(node.Audit(audit))
	// Its sandboxes' lifecycle events go to the shared database, where
	// the api processes read them.
	n.Subscribe((&events.Recorder{Store: shared, Log: logger}).Handle)
	gauges(mx, st, c.pool.Slots())
	if err := startNode(ctx, logger, parts); err != nil {
		return fmt.Errorf("reconciling sandboxes with the runtime and the database: %w", err)
	}
	member := &cluster.Member{Store: shared, Name: c.Name, Addr: c.Advertise, Slots: c.pool.Slots(), ImageStore: c.images.URL, Lease: c.cluster.Lease, Log: logger,
		Version: registered,
		Images: func() []string {
			// Custom template builds first: they are what creates name.
			held := parts.templates.Held()
			if parts.images != nil {
				held = append(held, parts.images.Names(store.MaxNodeImages)...)
			}
			return held
		}}
	go member.Run(ctx)
	go func() {
		<-ctx.Done()
		if err := member.Drain(context.WithoutCancel(ctx)); err != nil {
			logger.Warn("telling the api processes this node stops", "err", err)
		}
	}()
	logger.Info("lizard node serving", "listen", ln.Addr().String(), "advertise", c.Advertise, "data_dir", c.DataDir,
		"runtime", rt.Name(), "address_pool", c.pool.Prefix().String(), "lease", c.cluster.Lease)
	err = server.Run(ctx, ln, h, logger)
	stopNode(ctx, logger, n, pool, rt)
	return err
}

// serveUntilStopped is the context a node runs on, out of stopping, which
// a stop signal ends: it ends then too — with --drain-on-stop only once an
// api has moved the node's sandboxes off, the node serving them (their
// calls, their moves, its lease) until then.
func (c *nodeConfig) serveUntilStopped(stopping context.Context, logger *slog.Logger) (context.Context, context.CancelFunc) {
	ctx, stop := context.WithCancel(context.WithoutCancel(stopping))
	go func() {
		select {
		case <-stopping.Done():
		case <-ctx.Done():
			return
		}
		if c.DrainOnStop {
			c.drainOnStop(ctx, logger)
		}
		stop()
	}()
	return ctx, stop
}

// drainOnStop has the api drain this node, as `lizard node drain` does,
// until the drain answers or a second stop signal. A drain refused (the
// last node that could take the sandboxes, no image store, a sandbox that
// mounts a volume: docs/cluster.md) or failed leaves them here, as a stop
// without the flag does: they keep running on the host and are served
// again when the node is back.
func (c *nodeConfig) drainOnStop(ctx context.Context, logger *slog.Logger) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(again)
	go func() {
		select {
		case <-again:
			logger.Warn("a second stop signal: stopping without waiting for the drain")
			cancel()
		case <-ctx.Done():
		}
	}()
	api, err := client.New(client.Config{BaseURL: c.APIURL, APIKey: c.cluster.secret})
	if err != nil {
		logger.Error("stopping without a drain", "api_url", c.APIURL, "err", err)
		return
	}
	logger.Info("stopping: draining this node first (--drain-on-stop)", "api_url", c.APIURL)
	d, err := api.DrainNode(ctx, c.Name)
	if err != nil {
		logger.Warn("stopping without a drain: this node's sandboxes stay on its host", "err", err)
		return
	}
	for _, l := range d.Left {
		logger.Warn("drain: sandbox left on this node", "sandbox", l.SandboxID, "reason", l.Reason)
	}
	logger.Info("drained; stopping", "moved", len(d.Moved), "left", len(d.Left), "took_ms", d.TookMs)
}

// apiConfig is what `lizard api` is told.
type apiConfig struct {
	sharedFlags
	// Choices is how many nodes a placement samples.
	Choices int
	cluster clusterFlags
	events  eventFlags
}

func parseAPI(e cli.Env, args []string) (*apiConfig, error) {
	fs := cli.NewFlags(e, "api")
	c := &apiConfig{}
	c.sharedFlags.register(fs, roleAPI)
	fs.IntVar(&c.Choices, "placement-choices", 2, "live nodes sampled per create; the one with the most free capacity gets it")
	c.cluster.register(fs)
	c.events.register(fs)
	if err := cli.Parse(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, cli.Usagef("lizard api takes no arguments, got %q", fs.Args())
	}
	return c, nil
}

func (c *apiConfig) validate() error {
	if err := c.cluster.validate(); err != nil {
		return err
	}
	if c.Choices < 1 {
		return cli.Usagef("--placement-choices %d: want at least 1", c.Choices)
	}
	if err := c.sharedFlags.validate(); err != nil {
		return err
	}
	return c.events.validate()
}

func runAPI(ctx context.Context, e cli.Env, args []string) error {
	c, err := parseAPI(e, args)
	if err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(e.Stderr, &slog.HandlerOptions{Level: c.level}))
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", c.Listen, err)
	}
	defer ln.Close()
	st, err := openRetrying(ctx, c.cluster.DatabaseURL, logger)
	if err != nil {
		return err
	}
	defer st.Close()
	// Stateless: its audit trail (volumes, templates, the ends of
	// sandboxes of lost nodes) goes to the log, marked, for the cluster's
	// log collection; sandboxes' and keys' are their nodes' audit.log.
	audit := logger.With("audit", true)
	secretsKey, err := c.secrets.key("", false)
	if err != nil {
		return err
	}
	if secretsKey == nil {
		logger.Warn("no secrets key (--secrets-key-file or " + secrets.KeyEnv + "): the secrets API answers 503")
	}
	limits, maxLimits := c.policy.limits()
	mx := metrics.Serve(ctx, c.MetricsListen, logger)
	stopTracing, err := tracing(ctx, "lizard-api", mx, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	router, err := cluster.NewRouter(cluster.Config{Store: st, Secret: c.cluster.secret, Logger: logger, Choices: c.Choices, Metrics: mx})
	if err != nil {
		return err
	}
	sec := secretStore(st, secretsKey)
	evlog := &events.Log{Store: st}
	hooks := c.events.webhooks(st, logger)
	templates := cluster.Templates{Router: router, Images: &oci.Puller{ConfigFile: c.RegistryConfig, Registries: splitList(c.RegistryAllow)}}
	ctl, err := control.New(control.Config{
		Builder: templates, Forget: templates.Forget, BuildsPerHour: c.BuildsPerHour,
		MaxTemplates: c.policy.MaxTemplates, MaxTemplateBytes: c.policy.MaxTemplateTotalMb << 20,
		Node: router, Store: st, Logger: logger, Limits: limits, MaxLimits: maxLimits, Internet: c.policy.Egress == "internet",
		NetworkDefault: c.policy.netDefault, NetworkBound: c.policy.netBound,
		DefaultTimeout: c.DefaultTimeout, MaxTimeout: c.MaxTimeout, MaxChildTimeout: c.MaxChildTimeout,
		CreateRate: c.policy.CreateRate, CreateBurst: c.policy.CreateBurst,
		Audit: audit, PortsKey: portsKey(c.cluster.secret), PortsDomain: c.PortsDomain, PortsResume: c.PortsResume,
		MaxVolumeBytes: c.MaxVolumeMb << 20,
		MaxVolumes:     c.policy.MaxVolumes, MaxVolumeTotalBytes: c.policy.MaxVolumeTotalMb << 20,
		Quota:   &node.Quota{Store: st, MaxLive: c.policy.MaxSandboxes, MaxDisk: c.policy.MaxProjectDiskMb << 20, DefaultDisk: limits.DiskBytes},
		Secrets: sec, Events: evlog, Webhooks: hooks,
	})
	if err != nil {
		return err
	}
	router.Subscribe(ctl.Events)
	router.Subscribe(node.Audit(audit))
	// The router tells only of the ends it records (lost nodes, once per
	// cluster under the sweeper's lock); nodes record the rest.
	router.Subscribe((&events.Recorder{Store: st, Log: logger}).Handle)
	go evlog.RunPruner(ctx, c.events.Retention, logger)
	go hooks.Run(ctx)
	// The API's own descriptors: its requests under way, per project.
	descriptors, err := c.policy.descriptorBudget(logger, mx)
	if err != nil {
		return err
	}
	scfg := c.serverConfig(ln, apiParts{control: ctl, store: st,
		descriptors: descriptors, audit: audit, logger: logger, metrics: mx})
	scfg.Nodes = router.AdminHandler()
	h := server.New(scfg)
	sweeper := &cluster.Sweeper{Store: st, Router: router, Lease: c.cluster.Lease, Log: logger}
	go sweeper.Run(ctx)
	logger.Info("lizard api serving", "url", "http://"+ln.Addr().String(), "lease", c.cluster.Lease)
	return server.Run(ctx, ln, h, logger)
}

// portsKey derives the key of sandboxes' port access tokens from the
// cluster secret: every api process must give a sandbox the same token.
func portsKey(secret string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("lizard ports"))
	return m.Sum(nil)
}

// openRetrying opens the database, waiting for it while it is not up yet
// (a cluster's pods start in any order).
func openRetrying(ctx context.Context, url string, logger *slog.Logger) (*store.Store, error) {
	for i := 0; ; i++ {
		st, err := store.OpenURL(ctx, url)
		if err == nil {
			return st, nil
		}
		if !errors.Is(err, store.ErrUnavailable) || i == 60 {
			return nil, fmt.Errorf("opening the database: %w", err)
		}
		if i == 0 {
			logger.Warn("the database is unreachable; waiting for it", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
