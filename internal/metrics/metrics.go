// Package metrics is Lizard's Prometheus instrumentation (docs/metrics.md):
// one registry per server, an HTTP middleware for the API, and the methods
// the sandbox core calls when it creates, pauses, resumes, forks and kills
// sandboxes. Every method is safe on a nil *Metrics, so code that is not
// given one (tests, the agent) needs no checks.
//
// Labels carry only what an operator may see: routes as patterns (never a
// sandbox id), methods, status codes, outcomes, create paths, operations and
// template names. No project id, key, metadata or path inside a sandbox.
package metrics

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Create paths: how a sandbox came to be (the `path` label of
// lizard_sandbox_creates_total).
const (
	PathBoot            = "boot"             // booted from the template's root file system
	PathTemplateRestore = "template_restore" // restored from the template's checkpoint
	PathWarmPool        = "warm_pool"        // claimed from the warm pool
	PathSnapshot        = "snapshot"         // restored from a user snapshot (create with snapshotId)
	PathFork            = "fork"             // one sandbox of a fork
)

// Lifecycle operations (the `op` label of lizard_sandbox_op_seconds).
const (
	OpPause    = "pause"
	OpResume   = "resume"
	OpFork     = "fork"
	OpKill     = "kill"
	OpSnapshot = "snapshot"
)

// Sandbox work spans milliseconds (a warm claim) to minutes (a cold boot
// behind a template build); API calls from under a millisecond to long
// streams.
var (
	sandboxBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	httpBuckets    = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
)

// Metrics holds Lizard's collectors and the registry they are served from.
type Metrics struct {
	reg *prometheus.Registry

	httpRequests *prometheus.CounterVec   // route, method, code
	httpDuration *prometheus.HistogramVec // route, method

	executions        *prometheus.CounterVec   // language, outcome
	executionDuration *prometheus.HistogramVec // language, outcome
	processes         *prometheus.CounterVec   // outcome
	processDuration   *prometheus.HistogramVec // outcome

	creates        *prometheus.CounterVec   // path, outcome
	createDuration *prometheus.HistogramVec // path (successful creates)
	ops            *prometheus.HistogramVec // op, outcome
	restoreQueue   *prometheus.HistogramVec // outcome
	kernelDeaths   prometheus.Counter
	templateBuilds *prometheus.CounterVec   // template, kind, outcome
	templateBuild  *prometheus.HistogramVec // template, kind
	spansDropped   *prometheus.CounterVec   // reason
	secretRefusals *prometheus.CounterVec   // surface, reason

	egressDecisions *prometheus.CounterVec // kind, verdict
	egressBytes     *prometheus.CounterVec // direction
	fdRefusals      *prometheus.CounterVec // kind, bound

	states      *funcCollector
	warmPool    *funcCollector
	restores    *funcCollector
	addressPool *funcCollector
	diskFree    *funcCollector
	descriptors *funcCollector

	imagesRejected *prometheus.CounterVec // reason
}

// New returns Metrics with every collector registered, plus Go runtime and
// process collectors and the node's available memory.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lizard_http_requests_total",
		Help: "API responses by route pattern, method and status code.",
	}, []string{"route", "method", "code"})
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "lizard_http_request_duration_seconds", Buckets: httpBuckets,
		Help: "Time from request to the end of the response (streams included), by route pattern and method.",
	}, []string{"route", "method"})
	m.executions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lizard_executions_total",
		Help: "runCode calls (POST /v1/sandboxes/{id}/execute) by language and outcome: ok, error (the code raised), timeout, kernel_died, cut (stream ended without end event), rejected (non-200).",
	}, []string{"language", "outcome"})
	m.executionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "lizard_execution_duration_seconds", Buckets: httpBuckets,
		Help: "Duration of runCode calls by language and outcome.",
	}, []string{"language", "outcome"})
	m.processes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lizard_processes_total",
		Help: "Command runs (POST /v1/sandboxes/{id}/process) by outcome: ok (exit 0), exit_nonzero, timeout, failed (could not start), cut, rejected.",
	}, []string{"outcome"})
	m.processDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "lizard_process_duration_seconds", Buckets: httpBuckets,
		Help: "Duration of command runs by outcome.",
	}, []string{"outcome"})
	m.creates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lizard_sandbox_creates_total",
		Help: "Sandbox creates by path (boot, template_restore, warm_pool, snapshot, fork) and outcome (ok, error).",
	}, []string{"path", "outcome"})
	m.createDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "lizard_sandbox_create_duration_seconds", Buckets: sandboxBuckets,
		Help: "Time to a running sandbox whose agent answers, by create path (successful creates).",
	}, []string{"path"})
	m.ops = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "lizard_sandbox_op_duration_seconds", Buckets: sandboxBuckets,
		Help: "Duration of pause, resume, fork, kill and snapshot by outcome (ok, error).",
	}, []string{"op", "outcome"})
	m.restoreQueue = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "lizard_restore_queue_seconds", Buckets: sandboxBuckets,
		Help: "Time a restore (a create from an image, a fork's copy, a resume) waited for its turn (--max-restores), by outcome: ok (it started), error (its client went away first).",
	}, []string{"outcome"})
	m.kernelDeaths = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lizard_kernel_deaths_total",
		Help: "Python kernels that died (out of memory, killed) and were restarted, as the agent reported them in runCode streams.",
	})
	m.templateBuilds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lizard_template_builds_total",
		Help: "Template builds by template, kind (rootfs, snapshot) and outcome (ok, error).",
	}, []string{"template", "kind", "outcome"})
	m.templateBuild = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "lizard_template_build_duration_seconds", Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200},
		Help: "Duration of successful template builds by template and kind.",
	}, []string{"template", "kind"})
	m.egressDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lizard_egress_decisions_total",
		Help: "Egress decisions of sandboxes with a network policy by kind (dns, http, tls) and verdict (allowed, denied); each sandbox's own log (GET /v1/sandboxes/{id}/network/log) names the sandbox, name, address and port.",
	}, []string{"kind", "verdict"})
	m.egressBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lizard_egress_bytes_total",
		Help: "Bytes carried by the egress proxy by direction (out: sandbox to upstream, in: back), counted when a connection ends.",
	}, []string{"direction"})
	m.fdRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lizard_descriptor_refusals_total",
		Help: "Holds of the node's file descriptors refused (docs/security.md, the descriptor budget) by kind (egress: a proxied connection, reset; dns: a query forwarded upstream, SERVFAIL; call: a call or stream to an agent, 429; port: a request to an exposed port, 429) and the bound met (project, node).",
	}, []string{"kind", "bound"})
	m.spansDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lizard_trace_spans_dropped_total",
		Help: "Trace spans not exported (docs/traces.md): queue_full (the export queue was full, the collector slow or down), export_failed (the collector refused them or did not answer in time).",
	}, []string{"reason"})
	m.secretRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lizard_cluster_secret_refusals_total",
		Help: "Requests refused for the cluster secret by surface (node: a node's API; api: the API's /v1/nodes) and reason: wrong (no or a wrong secret), throttled (429: the address failed too often).",
	}, []string{"surface", "reason"})
	m.states = newFuncCollector(prometheus.NewDesc("lizard_sandboxes",
		"Sandboxes by state (starting, running, paused); ended sandboxes are not counted.", []string{"state"}, nil))
	m.warmPool = newFuncCollector(prometheus.NewDesc("lizard_warm_pool_ready",
		"Restored sandboxes ready in the warm pool, by template.", []string{"template"}, nil))
	m.restores = newFuncCollector(prometheus.NewDesc("lizard_restores",
		"Restores of users' sandboxes by state: waiting for their turn (--max-restores), running (until the agent answers).", []string{"state"}, nil))
	m.addressPool = newFuncCollector(prometheus.NewDesc("lizard_address_pool_slots",
		"Sandbox address slots (a /30 each) in the address pool: used and total.", []string{"kind"}, nil))
	m.descriptors = newFuncCollector(prometheus.NewDesc("lizard_descriptors",
		"The node's file descriptors: limit (the process's, raised at start), tenants_max (what sandboxes and keys may hold together; the rest is the node's reserve), tenants_held (what they hold now).", []string{"kind"}, nil))
	m.diskFree = newFuncCollector(prometheus.NewDesc("lizard_disk_free_bytes",
		"Space available to new files on the disk of the data directory (dir=\"data\") and of the template cache (dir=\"cache\").", []string{"dir"}, nil))

	m.reg.MustRegister(m.httpRequests, m.httpDuration, m.executions, m.executionDuration,
		m.processes, m.processDuration, m.creates, m.createDuration, m.ops, m.restoreQueue, m.kernelDeaths,
		m.templateBuilds, m.templateBuild, m.egressDecisions, m.egressBytes, m.fdRefusals, m.descriptors, m.spansDropped, m.secretRefusals, m.states, m.warmPool, m.restores, m.addressPool, m.diskFree,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lizard_node_memory_available_bytes",
			Help: "MemAvailable of the node (/proc/meminfo): what new sandboxes can still get.",
		}, memAvailable),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.imagesRejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lizard_images_rejected_total",
		Help: "Images from the image store that failed their authentication and were not restored (docs/storage.md#sealing), by reason: tampered (a manifest or chunk does not open: altered in the bucket), unsealed (stored before images were sealed), wrong_key (sealed with another key).",
	}, []string{"reason"})
	m.reg.MustRegister(m.imagesRejected)
	return m
}

// ImageRejected records one image from the image store refused for
// reason (imagestore.Reason): nothing of it was restored.
func (m *Metrics) ImageRejected(reason string) {
	if m == nil {
		return
	}
	m.imagesRejected.WithLabelValues(reason).Inc()
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry is the registry, for tests and for collectors of other packages.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Serve returns new Metrics and serves them at /metrics on addr until ctx
// ends; an empty addr serves nothing. A listener that cannot be had (the
// port is taken) is logged as an error and the API runs on without
// /metrics: monitoring must never be the reason the service is down.
func Serve(ctx context.Context, addr string, logger *slog.Logger) *Metrics {
	m := New()
	if addr == "" {
		return m
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		logger.Error("metrics listener not started; /metrics is not served (choose another --metrics-listen, or \"\" to turn it off)", "addr", addr, "err", err)
		return m
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "Lizard serves Prometheus metrics at GET /metrics", http.StatusNotFound)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics listener stopped", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		srv.Close() // scrapes are short; nothing to drain
	}()
	logger.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return m
}

func outcome(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// SandboxCreated records one create by path (PathBoot...), how long it took
// to a running sandbox and whether it failed. The core calls it once per
// sandbox, so a fork of n records n creates with PathFork.
func (m *Metrics) SandboxCreated(path string, took time.Duration, err error) {
	if m == nil {
		return
	}
	m.creates.WithLabelValues(path, outcome(err)).Inc()
	if err == nil {
		m.createDuration.WithLabelValues(path).Observe(took.Seconds())
	}
}

// SandboxOp records one pause, resume, fork, kill or snapshot (OpPause...).
func (m *Metrics) SandboxOp(op string, took time.Duration, err error) {
	if m == nil {
		return
	}
	m.ops.WithLabelValues(op, outcome(err)).Observe(took.Seconds())
}

// EgressDecision records one egress decision of kind (dns, http, tls) and
// the bytes its connection carried each way.
func (m *Metrics) EgressDecision(kind string, allowed bool, out, in int64) {
	if m == nil {
		return
	}
	verdict := "denied"
	if allowed {
		verdict = "allowed"
	}
	m.egressDecisions.WithLabelValues(kind, verdict).Inc()
	if out > 0 {
		m.egressBytes.WithLabelValues("out").Add(float64(out))
	}
	if in > 0 {
		m.egressBytes.WithLabelValues("in").Add(float64(in))
	}
}

// Template build kinds (the `kind` label of lizard_template_builds_total).
const (
	BuildRootFS   = "rootfs"   // the template's root file system (debootstrap and packages)
	BuildSnapshot = "snapshot" // the checkpoint of the template's booted sandbox
)

// TemplateBuilt records one template build of kind BuildRootFS or
// BuildSnapshot. A build found in the cache is not a build.
func (m *Metrics) TemplateBuilt(template, kind string, took time.Duration, err error) {
	if m == nil {
		return
	}
	m.templateBuilds.WithLabelValues(template, kind, outcome(err)).Inc()
	if err == nil {
		m.templateBuild.WithLabelValues(template, kind).Observe(took.Seconds())
	}
}

// Reasons a span is dropped (the `reason` label of
// lizard_trace_spans_dropped_total).
const (
	DropQueueFull    = "queue_full"
	DropExportFailed = "export_failed"
)

// SpansDropped records n trace spans that were not exported, for reason
// (DropQueueFull...).
func (m *Metrics) SpansDropped(reason string, n int) {
	if m == nil {
		return
	}
	m.spansDropped.WithLabelValues(reason).Add(float64(n))
}

// DescriptorRefused records a hold of the node's descriptors refused: its
// kind and the bound it met.
func (m *Metrics) DescriptorRefused(kind, bound string) {
	if m == nil {
		return
	}
	m.fdRefusals.WithLabelValues(kind, bound).Inc()
}

// Descriptors makes every scrape call f for the node's descriptor limit,
// what tenants may hold and what they hold.
func (m *Metrics) Descriptors(f func() map[string]int) {
	if m == nil {
		return
	}
	m.descriptors.set(f)
}

// Reasons of lizard_cluster_secret_refusals_total.
const (
	SecretWrong     = "wrong"
	SecretThrottled = "throttled"
)

// ClusterSecretRefused records a request that surface ("node", "api")
// refused for the cluster secret, for reason (SecretWrong...).
func (m *Metrics) ClusterSecretRefused(surface, reason string) {
	if m == nil {
		return
	}
	m.secretRefusals.WithLabelValues(surface, reason).Inc()
}

// SandboxStates makes every scrape call f for the number of live sandboxes
// by state. Reading the truth at scrape time keeps the gauge from drifting
// when a transition is missed (a crash, a reconcile at start).
func (m *Metrics) SandboxStates(f func() map[string]int) {
	if m == nil {
		return
	}
	m.states.set(f)
}

// WarmPool makes every scrape call f for the ready sandboxes per template.
func (m *Metrics) WarmPool(f func() map[string]int) {
	if m == nil {
		return
	}
	m.warmPool.set(f)
}

// RestoreQueued records how long one restore waited for its turn, and
// whether it got one (err nil) or its caller gave up.
func (m *Metrics) RestoreQueued(took time.Duration, err error) {
	if m == nil {
		return
	}
	m.restoreQueue.WithLabelValues(outcome(err)).Observe(took.Seconds())
}

// Restores makes every scrape call f for the restores waiting and running.
func (m *Metrics) Restores(f func() map[string]int) {
	if m == nil {
		return
	}
	m.restores.set(f)
}

// AddressPool makes every scrape call f for the used and total address
// slots.
func (m *Metrics) AddressPool(f func() (used, total int)) {
	if m == nil {
		return
	}
	m.addressPool.set(func() map[string]int {
		used, total := f()
		return map[string]int{"used": used, "total": total}
	})
}

// DiskFree makes every scrape report the space available to new files on
// the disk of each directory in dirs, by label (data, cache). A directory
// that cannot be read is left out.
func (m *Metrics) DiskFree(dirs map[string]string) {
	if m == nil {
		return
	}
	m.diskFree.set(func() map[string]int {
		free := map[string]int{}
		for label, dir := range dirs {
			var st syscall.Statfs_t
			if syscall.Statfs(dir, &st) == nil {
				free[label] = int(int64(st.Bavail) * st.Bsize)
			}
		}
		return free
	})
}

// memAvailable reads MemAvailable from /proc/meminfo, in bytes; NaN when
// it cannot be read, so a broken reading is not mistaken for zero.
func memAvailable() float64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return nan()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
		if err != nil {
			return nan()
		}
		return kb * 1024
	}
	return nan()
}
