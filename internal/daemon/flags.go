package daemon

import (
	"encoding/json"
	"flag"
	"fmt"
	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/egress"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/netpolicy"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/fdbudget"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/sandbox/qemu"
)

// sharedFlags are the flags `lizard serve`, `lizard api` and `lizard node`
// all take, each declared once here — name, default, help and check — so a
// flag cannot mean one thing on one machine and another in a cluster. Each
// command adds its own beside them: serve and node the machine's
// (serveConfig), api and node the cluster's (clusterFlags), serve and api
// the events' (eventFlags). `lizard node` takes the control plane's flags
// too, without using them, so that one set of flags (the Helm chart's
// shared ones) starts either role.
type sharedFlags struct {
	Listen        string
	MetricsListen string // Prometheus /metrics listener; "": none
	LogLevel      string
	// DefaultTimeout and MaxTimeout bound a sandbox's life;
	// MaxChildTimeout bounds sandboxes made with a sandbox's lizardToken.
	DefaultTimeout  time.Duration
	MaxTimeout      time.Duration
	MaxChildTimeout time.Duration
	// PortsDomain serves exposed ports at <port>-<id>.<domain>;
	// PortsResume resumes a paused sandbox when its port is reached
	// (docs/ports.md).
	PortsDomain string
	PortsResume bool
	// MaxVolumeMb bounds a persistent volume's size (docs/volumes.md).
	MaxVolumeMb int64
	// BuildsPerHour bounds each project's custom template builds.
	BuildsPerHour float64
	// RegistryConfig is a docker config.json whose credentials pull the
	// images templates are built on, for builds that bring none;
	// RegistryAllow the registries they may come from (empty: any).
	RegistryConfig string
	RegistryAllow  string
	// policy is untrusted code's limits and network (policyFlags).
	policy policyFlags
	// secrets is where the secrets key is (secrets.go).
	secrets secretsFlags

	level slog.Level
}

// The roles, as register tells them apart where a flag's default or a note
// of its help is one role's.
const (
	roleServe = "serve"
	roleAPI   = "api"
	roleNode  = "node"
)

func (f *sharedFlags) register(fs *flag.FlagSet, role string) {
	listen, listenHelp := "127.0.0.1:8080", "address to serve the API on"
	portsAt, volumes, builds := "this listener", "volumes are sparse files under DATA/volumes", ""
	switch role {
	case roleAPI:
		listenHelp = "address to serve the public API on"
		portsAt, volumes = "the api processes", "each lives on one node's disk"
		builds = "; a node placement picks builds each, which needs --image-store on every node of a cluster of several"
	case roleNode:
		listen = "127.0.0.1:8081" // beside an api process on 8080
	}
	fs.StringVar(&f.Listen, "listen", listen, listenHelp)
	fs.StringVar(&f.MetricsListen, "metrics-listen", "127.0.0.1:9464", "address to serve Prometheus metrics on at /metrics (docs/metrics.md); \"\" turns them off")
	fs.StringVar(&f.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&f.DefaultTimeout, "default-timeout", 5*time.Minute, "life of a sandbox whose create names no timeout")
	fs.DurationVar(&f.MaxTimeout, "max-timeout", 24*time.Hour, "longest timeout a create or setTimeout may ask for (0, never expire, is always allowed)")
	fs.DurationVar(&f.MaxChildTimeout, "max-child-timeout", time.Hour, "longest life of a sandbox created with another sandbox's lizardToken (it must expire; forks and creates from snapshots alike)")
	fs.StringVar(&f.PortsDomain, "ports-domain", "", "wildcard domain whose hosts <port>-<sandboxId>.<domain> reach sandboxes' exposed ports, each its own origin (point *.<domain> at "+portsAt+"; make it a registrable domain apart from the API's, docs/ports.md); \"\": path-based URLs only, where pages run in an opaque origin")
	fs.BoolVar(&f.PortsResume, "ports-resume", false, "resume a paused sandbox when one of its exposed ports is reached, instead of answering 409")
	fs.Int64Var(&f.MaxVolumeMb, "max-volume-mb", 10240, "largest persistent volume a project may create (sizeMb), MiB; "+volumes)
	fs.Float64Var(&f.BuildsPerHour, "template-builds-per-hour", 20, "custom template builds per hour per project, not counting builds found in the cache (0: no bound)"+builds)
	fs.StringVar(&f.RegistryConfig, "registry-config", os.Getenv("LIZARD_REGISTRY_CONFIG"), "a docker config.json whose auths pull the images templates are built on (recipe from) when a build brings no credentials (default: env LIZARD_REGISTRY_CONFIG; credential helpers are not run; in a cluster, give it to the api processes, which resolve images, and the nodes, which pull them)")
	fs.StringVar(&f.RegistryAllow, "registry-allow", "", "comma-separated registries (host:port, or a host for any port; docker.io for Docker Hub) templates' images may be pulled from; \"\": any at a public address (never loopback, private or link-local ones, whatever a name resolves to)")
	f.policy.register(fs)
	f.secrets.register(fs, role)
}

// validate checks the shared flags, the same on every role.
func (f *sharedFlags) validate() error {
	if f.DefaultTimeout <= 0 || f.MaxTimeout <= 0 || f.DefaultTimeout > f.MaxTimeout {
		return cli.Usagef("--default-timeout %s and --max-timeout %s: want 0 < default <= max", f.DefaultTimeout, f.MaxTimeout)
	}
	if err := f.policy.validate(); err != nil {
		return err
	}
	if err := f.level.UnmarshalText([]byte(f.LogLevel)); err != nil {
		return cli.Usagef("--log-level %q: want debug, info, warn or error", f.LogLevel)
	}
	if _, _, err := net.SplitHostPort(f.Listen); err != nil {
		return cli.Usagef("--listen %q: want HOST:PORT, such as 127.0.0.1:8080", f.Listen)
	}
	if f.MaxVolumeMb < 16 {
		return cli.Usagef("--max-volume-mb %d: want at least 16", f.MaxVolumeMb)
	}
	if d := f.PortsDomain; d != "" && (strings.ContainsAny(d, "/:* ") || strings.HasPrefix(d, ".") || strings.HasSuffix(d, ".")) {
		return cli.Usagef("--ports-domain %q: want a domain such as sandboxes.example.com, without scheme, port or '*'", d)
	}
	if f.BuildsPerHour < 0 {
		return cli.Usagef("--template-builds-per-hour cannot be negative")
	}
	return nil
}

// policyFlags are serve's flags for untrusted code and clients: sandbox
// limits, project quotas, key rates and network egress (docs/security.md).
type policyFlags struct {
	Egress       string
	EgressAllow  string
	MemoryMb     int64
	MaxMemoryMb  int64
	CPUs         float64
	MaxCPUs      float64
	DiskMb       int64
	MaxDiskMb    int64
	MaxFileMb    int64
	Processes    int64
	OpenFiles    int64
	MaxSandboxes int
	// MaxDescriptors bounds the node's file descriptors one project's
	// sandboxes and keys hold (package fdbudget); 0: fdbudget.Split's.
	MaxDescriptors int
	// Per project: volumes, their sizes in all, and the disk promised
	// to live sandboxes and volumes together (docs/volumes.md).
	MaxVolumes       int
	MaxVolumeTotalMb int64
	MaxProjectDiskMb int64
	// Per project: custom templates, and their builds' sizes added up
	// (docs/templates.md).
	MaxTemplates       int
	MaxTemplateTotalMb int64
	CreateRate         float64
	CreateBurst        int
	KeyRate            float64
	KeyBurst           int
	SandboxAPIPort     int
	// Network policies by name (docs/network.md).
	NetworkDefault  string
	NetworkBound    string
	EgressTestHosts string

	allowTo    []netip.Prefix
	netDefault *netpolicy.Policy
	netBound   *netpolicy.Policy
	testHosts  map[string][]netip.Addr
}

func (p *policyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.Egress, "egress", "internet", "network egress of sandboxes: internet (public addresses only, never the host, other sandboxes, private or metadata addresses) or none")
	fs.StringVar(&p.EgressAllow, "egress-allow", "", "comma-separated prefixes narrowing --egress=internet to these destinations; a prefix inside a documentation or benchmarking range (203.0.113.0/24, 198.18.0.0/15, ...) opens it, which tests use to keep traffic on the machine")
	fs.Int64Var(&p.MemoryMb, "memory-mb", 1024, "memory of a sandbox, MiB")
	fs.Int64Var(&p.MaxMemoryMb, "max-memory-mb", 4096, "most memory a create may ask for (memoryMb), MiB")
	fs.Float64Var(&p.CPUs, "cpus", 1, "CPU time of a sandbox, in cores")
	fs.Float64Var(&p.MaxCPUs, "max-cpus", 4, "most CPU a create may ask for (cpus), in cores")
	fs.Int64Var(&p.DiskMb, "disk-mb", 2048, "writable disk of a sandbox, MiB")
	fs.Int64Var(&p.MaxDiskMb, "max-disk-mb", 10240, "most writable disk a create may ask for (diskMb), MiB")
	fs.Int64Var(&p.MaxFileMb, "max-file-mb", 10240, "largest file upload (PUT /files) the API passes to a sandbox, MiB; the sandbox's disk bounds it too")
	fs.Int64Var(&p.Processes, "processes", 512, "processes the sandbox user may run at once (RLIMIT_NPROC)")
	fs.Int64Var(&p.OpenFiles, "open-files", 8192, "open files per sandbox process (RLIMIT_NOFILE)")
	fs.IntVar(&p.MaxSandboxes, "max-sandboxes-per-project", 100, "live sandboxes a project may have (0: no bound)")
	fs.IntVar(&p.MaxDescriptors, "max-descriptors-per-project", 0, "the node's file descriptors one project's sandboxes and keys may hold at once: proxied connections (6 each), DNS queries forwarded (1), calls, streams, terminals, watches and port requests (2); past it the next is reset or 429 (default: a quarter of what the node leaves its tenants, at most 65536; docs/security.md)")
	fs.IntVar(&p.MaxVolumes, "max-volumes-per-project", 32, "persistent volumes a project may have (0: no bound)")
	fs.Int64Var(&p.MaxVolumeTotalMb, "max-volume-total-mb", 51200, "sizes of a project's persistent volumes added up, MiB (0: no bound)")
	fs.Int64Var(&p.MaxProjectDiskMb, "max-disk-per-project-mb", 256000, "disk a project is promised, MiB: its live sandboxes' diskMb and its volumes' sizes added up (0: no bound; the default fits 100 sandboxes of 2048 MiB and 51200 MiB of volumes)")
	fs.IntVar(&p.MaxTemplates, "max-templates-per-project", 50, "custom templates a project may have (0: no bound)")
	fs.Int64Var(&p.MaxTemplateTotalMb, "max-template-disk-per-project-mb", 102400, "sizes of a project's custom template builds added up, MiB: each a full root filesystem, about 1,300 MiB on interpreter (0: no bound)")
	fs.Float64Var(&p.CreateRate, "creates-per-second", 5, "sandbox creates per second per project (0: no bound)")
	fs.IntVar(&p.CreateBurst, "create-burst", 20, "burst of sandbox creates per project")
	fs.Float64Var(&p.KeyRate, "requests-per-second", 100, "API requests per second per key (0: no bound)")
	fs.IntVar(&p.KeyBurst, "request-burst", 200, "burst of API requests per key")
	fs.StringVar(&p.NetworkDefault, "network-default", "", `network policy by name (JSON, as a create's "network") of sandboxes whose create gives none; empty: none, --egress as it is (docs/network.md)`)
	fs.StringVar(&p.NetworkBound, "network-bound", "", `the loosest network policy (JSON) a create or update may ask for: with "default":"deny", a policy must deny by default and allow only within the bound's allow rules; its deny rules are added to every policy; empty: any`)
	fs.StringVar(&p.EgressTestHosts, "egress-test-hosts", "", "name=IPv4,... the only names the node's egress resolver knows, nothing forwarded to the host's resolvers (tests)")
	fs.IntVar(&p.SandboxAPIPort, "sandbox-api-port", 0, "port the API is served on to sandboxes with lizardToken, on each one's host address (default: the --listen port)")
}

func (p *policyFlags) validate() error {
	switch p.Egress {
	case "internet", "none":
	default:
		return cli.Usagef("--egress %q: want internet or none", p.Egress)
	}
	for _, s := range strings.Split(p.EgressAllow, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		pf, err := netip.ParsePrefix(s)
		if err != nil || !pf.Addr().Is4() {
			return cli.Usagef("--egress-allow %q: want IPv4 prefixes such as 203.0.113.0/24", s)
		}
		p.allowTo = append(p.allowTo, pf)
	}
	if err := p.validateNetwork(); err != nil {
		return err
	}
	switch {
	case p.MemoryMb < 64 || p.MemoryMb > p.MaxMemoryMb:
		return cli.Usagef("--memory-mb %d and --max-memory-mb %d: want 64 <= default <= max", p.MemoryMb, p.MaxMemoryMb)
	case p.CPUs < 0.1 || p.CPUs > p.MaxCPUs:
		return cli.Usagef("--cpus %g and --max-cpus %g: want 0.1 <= default <= max", p.CPUs, p.MaxCPUs)
	case p.DiskMb < 16 || p.DiskMb > p.MaxDiskMb:
		return cli.Usagef("--disk-mb %d and --max-disk-mb %d: want 16 <= default <= max", p.DiskMb, p.MaxDiskMb)
	case p.MaxFileMb < 1:
		return cli.Usagef("--max-file-mb %d: want at least 1", p.MaxFileMb)
	case p.Processes < 16 || p.OpenFiles < 64:
		return cli.Usagef("--processes %d and --open-files %d: want at least 16 and 64", p.Processes, p.OpenFiles)
	case p.MaxSandboxes < 0 || p.CreateRate < 0 || p.KeyRate < 0 || p.MaxDescriptors < 0:
		return cli.Usagef("--max-sandboxes-per-project, --max-descriptors-per-project, --creates-per-second and --requests-per-second cannot be negative")
	case p.MaxVolumes < 0 || p.MaxVolumeTotalMb < 0 || p.MaxProjectDiskMb < 0:
		return cli.Usagef("--max-volumes-per-project, --max-volume-total-mb and --max-disk-per-project-mb cannot be negative")
	case p.MaxTemplates < 0 || p.MaxTemplateTotalMb < 0:
		return cli.Usagef("--max-templates-per-project and --max-template-disk-per-project-mb cannot be negative")
	case p.MaxProjectDiskMb > 0 && p.DiskMb > p.MaxProjectDiskMb:
		return cli.Usagef("--disk-mb %d is over --max-disk-per-project-mb %d: no sandbox could be made", p.DiskMb, p.MaxProjectDiskMb)
	}
	if err := netns.CheckEgress(); err != nil {
		return err
	}
	return nil
}

func (p *policyFlags) validateNetwork() error {
	parse := func(flag, s string) (*netpolicy.Policy, error) {
		if s == "" {
			return nil, nil
		}
		var a api.NetworkPolicy
		dec := json.NewDecoder(strings.NewReader(s))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&a); err != nil {
			return nil, cli.Usagef("--%s: want a network policy in JSON: %v", flag, err)
		}
		pol, err := netpolicy.FromAPI(a, "--"+flag)
		if err != nil {
			return nil, cli.Usagef("%s", errdefs.Message(err))
		}
		return pol, nil
	}
	var err error
	if p.netBound, err = parse("network-bound", p.NetworkBound); err != nil {
		return err
	}
	if p.netDefault, err = parse("network-default", p.NetworkDefault); err != nil {
		return err
	}
	if p.netDefault != nil {
		if err := p.netDefault.Within(p.netBound, "--network-default"); err != nil {
			return cli.Usagef("%s (--network-bound)", errdefs.Message(err))
		}
		if p.netDefault, err = p.netDefault.Tighten(p.netBound, "--network-default"); err != nil {
			return cli.Usagef("%s", errdefs.Message(err))
		}
	}
	if p.EgressTestHosts != "" {
		if p.testHosts, err = egress.ParseTestHosts(p.EgressTestHosts); err != nil {
			return cli.Usagef("--egress-test-hosts: %v", err)
		}
	}
	return nil
}

func (p *policyFlags) limits() (def, max node.Limits) {
	def = node.Limits{MemoryBytes: p.MemoryMb << 20, CPUs: p.CPUs, DiskBytes: p.DiskMb << 20,
		Processes: p.Processes, OpenFiles: p.OpenFiles}
	max = node.Limits{MemoryBytes: p.MaxMemoryMb << 20, CPUs: p.MaxCPUs, DiskBytes: p.MaxDiskMb << 20}
	return def, max
}

// openAudit opens DATA/audit.log, JSON lines of create, kill and key
// events with key IDs (never keys).
func openAudit(dataDir string) (*slog.Logger, *os.File, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(filepath.Join(dataDir, "audit.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the audit log: %w", err)
	}
	return slog.New(slog.NewJSONHandler(f, nil)), f, nil
}

// forwardingNote warns when internet egress cannot work: replies from the
// uplink are forwarded back only if the host forwards IPv4.
func forwardingNote(logger *slog.Logger, egress string) {
	if egress != "internet" {
		return
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if err == nil && strings.TrimSpace(string(b)) == "0" {
		logger.Warn("--egress=internet but net.ipv4.ip_forward is 0: sandboxes can send but replies from the uplink are not forwarded back; enable forwarding on the uplink interface (sysctl net.ipv4.conf.<uplink>.forwarding=1)")
	}
}

// qemuFlags are serve's flags for --runtime qemu (docs/qemu.md).
type qemuFlags struct {
	Accel       string
	KernelDir   string
	Init        string
	BootTimeout time.Duration
}

func (q *qemuFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&q.Accel, "qemu-accel", qemu.AccelAuto, "--runtime qemu: auto (KVM if a probe VM boots with it, else TCG), kvm or tcg")
	fs.StringVar(&q.KernelDir, "qemu-kernel-dir", "", "--runtime qemu: Debian's linux-image-cloud-amd64 unpacked (default: CACHE_DIR/qemu/kernel, made by make qemu)")
	fs.StringVar(&q.Init, "qemu-init", "", "--runtime qemu: the guest's init (default: lizard-vminit next to lizard)")
	fs.DurationVar(&q.BootTimeout, "qemu-boot-timeout", qemu.DefaultBootTimeout, "--runtime qemu: longest boot, restore or checkpoint of one VM")
}

// validate fills in the defaults that depend on where lizard and the
// cache are, for runtime qemu only.
func (q *qemuFlags) validate(runtime, binDir, cacheDir string) error {
	if runtime != "qemu" {
		return nil
	}
	switch q.Accel {
	case qemu.AccelAuto, qemu.AccelKVM, qemu.AccelTCG:
	default:
		return cli.Usagef("--qemu-accel %q: want auto, kvm or tcg", q.Accel)
	}
	if q.BootTimeout <= 0 {
		return cli.Usagef("--qemu-boot-timeout %s: want more than 0", q.BootTimeout)
	}
	if q.KernelDir == "" {
		q.KernelDir = filepath.Join(cacheDir, "qemu", "kernel")
	}
	if q.Init == "" {
		q.Init = filepath.Join(binDir, "lizard-vminit")
	}
	if !isFile(q.Init) {
		return fmt.Errorf("--qemu-init %s: no such file (run `make build`, or pass --qemu-init)", q.Init)
	}
	return nil
}

// startTimeout is --start-timeout, else the backend's default: a VM under
// software emulation starts its agent many times slower than gVisor.
func (c *serveConfig) startTimeout() time.Duration {
	switch {
	case c.StartTimeout > 0:
		return c.StartTimeout
	case c.Runtime == "qemu":
		return 5 * time.Minute
	}
	return 0
}

// descriptorBudget raises the process's descriptor limit as far as the
// kernel allows and splits it between the node's reserve and its tenants
// (package fdbudget), saying the figures in the log.
func (p *policyFlags) descriptorBudget(log *slog.Logger, mx *metrics.Metrics) (*fdbudget.Budget, error) {
	limit, err := fdbudget.RaiseLimit()
	if err != nil {
		return nil, err
	}
	tenants, project := fdbudget.Split(limit)
	if p.MaxDescriptors > 0 {
		project = p.MaxDescriptors
	}
	if project > tenants {
		log.Warn("--max-descriptors-per-project is over what the node leaves its tenants: one project can hold all of it", "max_descriptors_per_project", project, "tenants_max", tenants)
	}
	b := fdbudget.New(tenants, project, log)
	b.Refused = func(k fdbudget.Kind, bound string) { mx.DescriptorRefused(string(k), bound) }
	mx.Descriptors(func() map[string]int {
		_, held := b.Held("")
		return map[string]int{"limit": limit, "tenants_max": tenants, "tenants_held": held}
	})
	log.Info("file descriptors", "limit", limit, "reserve", limit-tenants, "tenants_max", tenants, "per_project", b.Project)
	return b, nil
}

// splitList is a comma-separated flag's items, blanks left out.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
