// Package manager runs the lifecycle of sandboxes: it creates them on a
// sandbox.Runtime and records them in the store, hands out their addresses,
// ends them when asked or when their deadline passes (the reaper), and on
// start reconciles the store with what the runtime still runs.
//
// The store is the record of what should exist; the runtime is what does.
// Every path that ends a sandbox kills it in the runtime first and records
// the end second, so a failure in between leaves a live row whose sandbox is
// gone — which reconciliation cleans — rather than a running sandbox nobody
// knows about.
package manager

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
)

// Paths inside every sandbox.
const (
	AgentPath  = "/opt/lizard/bin/lizard-agent"
	LizardPath = "/usr/local/bin/lizard"
)

// Bounds on what a create request may ask for.
const (
	MaxMetadataPairs = 64
	MaxMetadataKey   = 256
	MaxMetadataValue = 2048
	MaxEnvs          = 512
	MaxEnvBytes      = 256 << 10
)

// cleanupTimeout bounds tearing a sandbox down after its request has gone.
const cleanupTimeout = 30 * time.Second

// Config says how the manager works. Runtime, Store, RootFS and Pool are
// required; zero values of the rest take the defaults noted.
type Config struct {
	Runtime sandbox.Runtime
	Store   *store.Store
	Logger  *slog.Logger // default slog.Default()
	Pool    Pool
	// RootFS returns a template's root filesystem, waiting (as ctx allows)
	// while it is built; Templates.RootFS.
	RootFS func(ctx context.Context, template string) (string, error)
	// Templates are the names a create may ask for; default template.Names().
	Templates []string
	// AgentBinary and LizardBinary are host paths mounted read-only into
	// every sandbox at AgentPath and LizardPath.
	AgentBinary  string
	LizardBinary string
	Limits       sandbox.Limits
	// Policy bounds untrusted code and clients (policy.go).
	Policy Policy
	// DefaultTimeout is a sandbox's life when the request names none
	// (default 5 minutes); MaxTimeout bounds what a request may ask (default
	// 24 hours; 0, never expiring, is always allowed).
	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	// StartTimeout bounds the wait for a new sandbox's agent (default 30 s).
	StartTimeout time.Duration
	// ReapInterval is how often expired sandboxes are looked for (default 1 s).
	ReapInterval time.Duration
	// APIURL, when set, is given to sandboxes created with lizardToken as
	// LIZARD_API_URL, so the CLI inside reaches the server.
	APIURL string
	// AgentAddr returns the host:port a sandbox's agent is dialled at;
	// default guestAddr:api.AgentPort. Tests point it at a fake agent.
	AgentAddr func(sandboxID, guestAddr string) string
	// Transport carries requests to agents (health checks and, through
	// Transport(), the API's proxy); default a direct http.Transport.
	Transport http.RoundTripper
	Now       func() time.Time // default time.Now
	// DataDir holds checkpoint images: DataDir/images/<sandboxID> of paused
	// sandboxes and DataDir/snapshots/<snapshotID>. Empty disables pause,
	// snapshots and forks.
	DataDir string
	// PausedRetention is how long a paused sandbox is kept before the
	// reaper ends it (default 7 days); PauseWait bounds how long a pause
	// waits for calls in flight (default 10 s).
	PausedRetention time.Duration
	PauseWait       time.Duration
	// NoTemplateSnapshots turns template snapshots (tsnap.go) off: every
	// create boots. RuntimeBinary (runsc) is hashed into their key, with
	// the agent and lizard binaries; Preload is what their default kernel
	// imports (default DefaultPreload).
	NoTemplateSnapshots bool
	RuntimeBinary       string
	Preload             []string
	// WarmPool is how many restored sandboxes per template are kept ready
	// for creates with the default shape (0: none). Below
	// WarmPoolMinAvailable bytes of MemAvailable (default 1 GiB; negative:
	// never) the pool shrinks instead. MemAvailable defaults to reading
	// /proc/meminfo.
	WarmPool             int
	WarmPoolMinAvailable int64
	MemAvailable         func() (int64, error)
}

// Manager runs sandboxes. It is safe for concurrent use.
type Manager struct {
	cfg       Config
	log       *slog.Logger
	transport http.RoundTripper
	pol       *policyState
	locks     keyedMutex
	calls     inflight // proxied calls in flight, per sandbox (snapshot.go)
	ts        tsnaps   // template snapshots and the warm pool (tsnap.go)
}

// New checks cfg and returns a manager. Call Reconcile before serving and
// run RunReaper in the background.
func New(cfg Config) (*Manager, error) {
	switch {
	case cfg.Runtime == nil:
		return nil, errors.New("manager: no runtime")
	case cfg.Store == nil:
		return nil, errors.New("manager: no store")
	case cfg.RootFS == nil:
		return nil, errors.New("manager: no RootFS")
	case !cfg.Pool.prefix.IsValid():
		return nil, errors.New("manager: no address pool")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Templates == nil {
		cfg.Templates = template.Names()
	}
	if cfg.DefaultTimeout == 0 {
		cfg.DefaultTimeout = 5 * time.Minute
	}
	if cfg.MaxTimeout == 0 {
		cfg.MaxTimeout = 24 * time.Hour
	}
	if cfg.DefaultTimeout > cfg.MaxTimeout {
		return nil, fmt.Errorf("manager: default timeout %s is over the maximum %s", cfg.DefaultTimeout, cfg.MaxTimeout)
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if cfg.ReapInterval == 0 {
		cfg.ReapInterval = time.Second
	}
	if cfg.AgentAddr == nil {
		cfg.AgentAddr = func(_, guest string) string {
			return net.JoinHostPort(guest, strconv.Itoa(api.AgentPort))
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := checkPolicy(cfg); err != nil {
		return nil, err
	}
	if cfg.MemAvailable == nil {
		cfg.MemAvailable = memAvailable
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, transport: cfg.Transport}
	m.ts = tsnaps{dirs: map[string]string{}, failures: map[string]int{}, kick: make(chan struct{}, 1)}
	m.pol = &policyState{limiters: map[string]*rate.Limiter{}}
	if m.transport == nil {
		m.transport = &http.Transport{
			// Never through an HTTP proxy from the environment: agents
			// live on this machine's own links.
			Proxy:               nil,
			DialContext:         m.dialAgent,
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     90 * time.Second,
		}
	}
	return m, nil
}

// agentHost is the host agent URLs name: the sandbox ID, not its address.
// Addresses are reused once a sandbox ends, and a kept-alive connection to
// the old sandbox's address must never carry a request meant for the new
// one; keying the connection pool by ID makes that impossible.
func agentHost(id string) string { return net.JoinHostPort(id, strconv.Itoa(api.AgentPort)) }

// dialAgent connects to the agent of the sandbox an agentHost names.
func (m *Manager) dialAgent(ctx context.Context, network, addr string) (net.Conn, error) {
	id, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	sb, err := m.cfg.Store.GetSandbox(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("dialing agent of sandbox %s: %w", id, err)
	}
	if !sb.Live() {
		return nil, fmt.Errorf("dialing agent of sandbox %s: it has ended", id)
	}
	d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return d.DialContext(ctx, network, m.cfg.AgentAddr(sb.ID, sb.GuestAddr))
}

// Transport is what carries requests to agents.
func (m *Manager) Transport() http.RoundTripper { return m.transport }

func (m *Manager) now() time.Time { return m.cfg.Now().UTC() }

// newID returns a sandbox ID: 20 characters of [a-z0-9], short enough for
// the runtime's 40 and easy to double-click.
func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 20)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

type createPlan struct {
	template  string
	timeoutMs int64
	envs      []string // KEY=VALUE, sorted
	limits    sandbox.Limits
	internet  bool
	token     bool // mint a lizardToken
	// admit counts the sandbox against its project's quotas.
	admit bool
}

func (m *Manager) validate(req api.CreateSandboxRequest) (createPlan, error) {
	p := createPlan{template: req.Template, token: req.LizardToken}
	if p.template == "" {
		p.template = template.Default
	}
	if !slices.Contains(m.cfg.Templates, p.template) {
		return p, invalidf(fmt.Sprintf("unknown template %q; available: %s", p.template, strings.Join(m.cfg.Templates, ", ")))
	}
	p.timeoutMs = m.cfg.DefaultTimeout.Milliseconds()
	if req.TimeoutMs != nil {
		p.timeoutMs = *req.TimeoutMs
		if err := m.checkTimeout(p.timeoutMs); err != nil {
			return p, err
		}
	}
	if len(req.Metadata) > MaxMetadataPairs {
		return p, invalidf(fmt.Sprintf("metadata has %d pairs; at most %d are allowed", len(req.Metadata), MaxMetadataPairs))
	}
	for k, v := range req.Metadata {
		switch {
		case k == "" || len(k) > MaxMetadataKey:
			return p, invalidf(fmt.Sprintf("metadata key %q: want 1 to %d bytes", k, MaxMetadataKey))
		case strings.Contains(k, "="):
			return p, invalidf(fmt.Sprintf("metadata key %q contains '=', which the list filter (metadata=key=value) cannot express", k))
		case len(v) > MaxMetadataValue:
			return p, invalidf(fmt.Sprintf("metadata value of %q is %d bytes; at most %d are allowed", k, len(v), MaxMetadataValue))
		}
	}
	if len(req.Envs) > MaxEnvs {
		return p, invalidf(fmt.Sprintf("envs has %d variables; at most %d are allowed", len(req.Envs), MaxEnvs))
	}
	size := 0
	for k, v := range req.Envs {
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00"):
			return p, invalidf(fmt.Sprintf("env name %q is not valid: names are non-empty and hold no '=' or NUL", k))
		case strings.Contains(v, "\x00"):
			return p, invalidf(fmt.Sprintf("env %s: values cannot hold NUL bytes", k))
		case k == "LIZARD_SANDBOX_ID" || k == "LIZARD_PROJECT_ID":
			return p, invalidf(fmt.Sprintf("env %s is set by Lizard; choose another name", k))
		case req.LizardToken && (k == "LIZARD_API_KEY" || k == "LIZARD_API_URL"):
			return p, invalidf(fmt.Sprintf("env %s is set by Lizard when lizardToken is true; drop one of them", k))
		}
		size += len(k) + len(v) + 2
		p.envs = append(p.envs, k+"="+v)
	}
	if size > MaxEnvBytes {
		return p, invalidf(fmt.Sprintf("envs total %d bytes; at most %d are allowed", size, MaxEnvBytes))
	}
	sort.Strings(p.envs)
	if err := m.planPolicy(&p, req); err != nil {
		return p, err
	}
	return p, nil
}

func (m *Manager) checkTimeout(ms int64) error {
	if ms < 0 || ms > m.cfg.MaxTimeout.Milliseconds() {
		return invalidf(fmt.Sprintf("timeoutMs %d is out of range: want 0 (never expire) to %d (%s)",
			ms, m.cfg.MaxTimeout.Milliseconds(), m.cfg.MaxTimeout))
	}
	return nil
}

// Create boots a sandbox for projectID and returns once its agent answers.
// On failure nothing is left: the sandbox is killed, its address freed and
// its row marked failed.
func (m *Manager) Create(ctx context.Context, projectID string, req api.CreateSandboxRequest) (api.Sandbox, error) {
	if req.SnapshotID != "" {
		return m.createFromSnapshot(ctx, projectID, req)
	}
	plan, err := m.validate(req)
	if err != nil {
		return api.Sandbox{}, err
	}
	if err := checkOnTimeout(req.OnTimeout); err != nil {
		return api.Sandbox{}, err
	}
	rootfs, err := m.cfg.RootFS(ctx, plan.template)
	if err != nil {
		if ctx.Err() != nil {
			return api.Sandbox{}, fmt.Errorf("waiting for template %s: %w", plan.template, ctx.Err())
		}
		return api.Sandbox{}, &Error{Kind: ErrUnavailable, Cause: err,
			Msg: fmt.Sprintf("template %q is not available: building it failed (the server log says why); try again later", plan.template)}
	}

	if got, ok, err := m.createRestored(ctx, projectID, plan, rootfs, req); ok {
		return got, err
	}
	sb := store.Sandbox{
		ID: newID(), ProjectID: projectID, Template: plan.template, State: api.StateStarting,
		TimeoutMs: plan.timeoutMs, Metadata: req.Metadata, CreatedAt: m.now(), Shape: plan.shape(),
	}
	release, err := m.admit(ctx, projectID)
	if err != nil {
		return api.Sandbox{}, err
	}
	err = m.cfg.Store.CreateSandbox(ctx, &sb, m.cfg.Pool.Slots(), m.cfg.Pool.addrStrings)
	release()
	if err != nil {
		if errors.Is(err, store.ErrFull) {
			return api.Sandbox{}, &Error{Kind: ErrUnavailable, Cause: err,
				Msg: fmt.Sprintf("no free sandbox address: all %d addresses of the pool %s are in use; kill sandboxes or widen --address-pool",
					m.cfg.Pool.Slots(), m.cfg.Pool.Prefix())}
		}
		return api.Sandbox{}, fmt.Errorf("recording sandbox: %w", err)
	}
	log := m.log.With("sandbox_id", sb.ID, "project_id", projectID)
	// Kill, SetTimeout and the reaper wait until the sandbox is up or gone.
	unlock := m.locks.lock(sb.ID)
	defer unlock()

	start := time.Now()
	if req.OnTimeout != "" {
		if err := m.cfg.Store.SetOnTimeout(ctx, sb.ID, req.OnTimeout); err != nil {
			m.cleanupFailed(ctx, log, sb.ID, "failed to record onTimeout")
			return api.Sandbox{}, err
		}
	}
	if err := m.boot(ctx, log, sb, rootfs, plan); err != nil {
		var e *Error
		reason := "failed to start"
		if errors.As(err, &e) {
			reason = e.Msg
		}
		if ctx.Err() != nil {
			reason = "creation cancelled: the client went away"
		}
		m.cleanupFailed(ctx, log, sb.ID, reason)
		log.Warn("sandbox failed to start", "err", err)
		return api.Sandbox{}, err
	}
	var expires *time.Time
	if plan.timeoutMs > 0 {
		t := m.now().Add(time.Duration(plan.timeoutMs) * time.Millisecond)
		expires = &t
	}
	if err := m.cfg.Store.MarkRunning(ctx, sb.ID, expires); err != nil {
		m.cleanupFailed(ctx, log, sb.ID, "failed to record the running sandbox")
		return api.Sandbox{}, fmt.Errorf("recording sandbox %s running: %w", sb.ID, err)
	}
	log.Info("sandbox running", "template", sb.Template, "guest_addr", sb.GuestAddr,
		"timeout_ms", plan.timeoutMs, "took", time.Since(start).Round(time.Millisecond))
	got, err := m.cfg.Store.GetSandbox(ctx, sb.ID)
	if err != nil {
		return api.Sandbox{}, err
	}
	return toAPI(got), nil
}

// boot starts sandbox sb in the runtime and waits for its agent.
func (m *Manager) boot(ctx context.Context, log *slog.Logger, sb store.Sandbox, rootfs string, plan createPlan) error {
	env := append(slices.Clone(plan.envs), identityEnv(sb)...)
	tokenEnv, apiPort, err := m.mintToken(ctx, sb, plan)
	if err != nil {
		return err
	}
	spec, err := m.spec(sb, rootfs, append(env, tokenEnv...), apiPort)
	if err != nil {
		return err
	}
	if err := m.cfg.Runtime.Create(ctx, spec); err != nil {
		return &Error{Msg: fmt.Sprintf("sandbox %s failed to boot (the server log says why)", sb.ID),
			Cause: fmt.Errorf("creating sandbox in %s runtime: %w", m.cfg.Runtime.Name(), err)}
	}
	log.Debug("sandbox booted; waiting for its agent")
	return m.waitAgent(ctx, sb)
}

// mintToken gives sb, if its plan asks for a lizardToken, an API key and
// the API on its host address: the environment to add, and the port its
// egress policy must let through.
func (m *Manager) mintToken(ctx context.Context, sb store.Sandbox, plan createPlan) (env []string, apiPort int, err error) {
	if !plan.token {
		return nil, 0, nil
	}
	host, err := netip.ParseAddr(sb.HostAddr)
	if err != nil {
		return nil, 0, fmt.Errorf("parsing sandbox addresses: %w", err)
	}
	k, err := auth.Create(ctx, m.cfg.Store, sb.ProjectID, sb.ID)
	if err != nil {
		return nil, 0, fmt.Errorf("minting the sandbox's API key: %w", err)
	}
	m.audit("key.create", "key_id", k.ID, "project_id", sb.ProjectID, "sandbox_id", sb.ID, "by", "lizardToken")
	apiEnv, port, err := m.tokenAPI(sb, host)
	if err != nil {
		return nil, 0, err
	}
	return append([]string{"LIZARD_API_KEY=" + k.String()}, apiEnv...), port, nil
}

// waitAgent polls the agent's /health until it answers 200, the sandbox
// stops, or StartTimeout passes.
func (m *Manager) waitAgent(ctx context.Context, sb store.Sandbox) error {
	wctx, cancel := context.WithTimeout(ctx, m.cfg.StartTimeout)
	defer cancel()
	client := &http.Client{Transport: m.transport, Timeout: 2 * time.Second}
	u := "http://" + agentHost(sb.ID) + "/health"
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var last error
	for i := 1; ; i++ {
		req, err := http.NewRequestWithContext(wctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("agent health answered %s", resp.Status)
		}
		last = err
		// Every half second, make sure the sandbox has not died: then no
		// agent will ever answer.
		if i%50 == 0 {
			if st, err := m.cfg.Runtime.State(wctx, sb.ID); err == nil && st != sandbox.Running || errors.Is(err, sandbox.ErrNotFound) {
				return &Error{Msg: fmt.Sprintf("sandbox %s stopped before its agent started (the server log says why)", sb.ID),
					Cause: fmt.Errorf("runtime state %q, %v; last health check: %v", st, err, last)}
			}
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &Error{Msg: fmt.Sprintf("sandbox %s's agent did not answer within %s", sb.ID, m.cfg.StartTimeout),
				Cause: fmt.Errorf("waiting for %s: %w", u, last)}
		case <-tick.C:
		}
	}
}

// cleanupFailed removes a sandbox that did not start and records why. It
// runs even if ctx is cancelled: a client that gives up must not leave a
// half-made sandbox.
func (m *Manager) cleanupFailed(ctx context.Context, log *slog.Logger, id, reason string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := m.cfg.Runtime.Kill(cctx, id); err != nil {
		// The row ends anyway; the orphan sweep retries the kill.
		log.Error("killing a sandbox that failed to start", "err", err)
	}
	if err := m.cfg.Store.EndSandbox(cctx, id, api.StateFailed, reason, m.now()); err != nil {
		log.Error("recording a failed sandbox", "err", err)
	}
	m.released(store.Sandbox{ID: id}, api.StateFailed, reason)
}

// lookup returns projectID's sandbox id; another project's sandbox is
// ErrNotFound, exactly like a missing one.
func (m *Manager) lookup(ctx context.Context, projectID, id string) (store.Sandbox, error) {
	sb, err := m.cfg.Store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && sb.ProjectID != projectID {
		return store.Sandbox{}, &Error{Kind: ErrNotFound, Msg: fmt.Sprintf("sandbox %s not found in project %s", id, projectID)}
	}
	if err != nil {
		return store.Sandbox{}, err
	}
	return sb, nil
}

// Get returns projectID's sandbox id, live or ended.
func (m *Manager) Get(ctx context.Context, projectID, id string) (api.Sandbox, error) {
	sb, err := m.lookup(ctx, projectID, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	return toAPI(sb), nil
}

// States a List filter may name.
var states = []string{api.StateStarting, api.StateRunning, api.StatePaused, api.StateKilled, api.StateExpired, api.StateFailed}

// ListFilter selects sandboxes. Every metadata pair must match; with no
// States, only live sandboxes (not ended) are listed.
type ListFilter struct {
	Metadata map[string]string
	States   []string
}

// List returns projectID's sandboxes that f selects, newest first.
func (m *Manager) List(ctx context.Context, projectID string, f ListFilter) ([]api.Sandbox, error) {
	for _, s := range f.States {
		if !slices.Contains(states, s) {
			return nil, invalidf(fmt.Sprintf("unknown state %q; states are %s", s, strings.Join(states, ", ")))
		}
	}
	rows, err := m.cfg.Store.ListSandboxes(ctx, store.Filter{ProjectID: projectID, States: f.States, LiveOnly: len(f.States) == 0})
	if err != nil {
		return nil, err
	}
	out := []api.Sandbox{}
	for i := len(rows) - 1; i >= 0; i-- {
		sb := rows[i]
		match := true
		for k, v := range f.Metadata {
			if got, ok := sb.Metadata[k]; !ok || got != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, toAPI(sb))
		}
	}
	return out, nil
}

// lockSandbox checks that projectID owns sandbox id, takes the sandbox's
// lock and reads it again under the lock, since it may have changed while
// we waited. The caller calls unlock.
func (m *Manager) lockSandbox(ctx context.Context, projectID, id string) (sb store.Sandbox, unlock func(), err error) {
	if _, err := m.lookup(ctx, projectID, id); err != nil {
		return store.Sandbox{}, nil, err
	}
	unlock = m.locks.lock(id)
	if sb, err = m.cfg.Store.GetSandbox(ctx, id); err != nil {
		unlock()
		return store.Sandbox{}, nil, err
	}
	return sb, unlock, nil
}

// Kill ends projectID's sandbox id at once. Killing an ended sandbox is not
// an error.
func (m *Manager) Kill(ctx context.Context, projectID, id string) error {
	sb, unlock, err := m.lockSandbox(ctx, projectID, id)
	if err != nil {
		return err
	}
	defer unlock()
	if !sb.Live() {
		return nil
	}
	return m.end(ctx, sb, api.StateKilled, "killed through the API")
}

// end kills a live sandbox in the runtime and records its end. The caller
// holds the sandbox's lock.
func (m *Manager) end(ctx context.Context, sb store.Sandbox, state, reason string) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	log := m.log.With("sandbox_id", sb.ID, "project_id", sb.ProjectID)
	if err := m.cfg.Runtime.Kill(cctx, sb.ID); err != nil {
		return &Error{Msg: fmt.Sprintf("could not kill sandbox %s; try again", sb.ID), Cause: fmt.Errorf("killing sandbox: %w", err)}
	}
	err := m.cfg.Store.EndSandbox(cctx, sb.ID, state, reason, m.now())
	if errors.Is(err, store.ErrConflict) {
		return nil // ended meanwhile by another server process
	}
	if err != nil {
		return fmt.Errorf("recording the end of sandbox %s: %w", sb.ID, err)
	}
	m.removeImage(cctx, sb.ID) // a paused sandbox's checkpoint
	m.released(sb, state, reason)
	log.Info("sandbox ended", "state", state, "reason", reason)
	return nil
}

// SetTimeout gives projectID's sandbox id a new deadline ms from now; 0
// means it never expires.
func (m *Manager) SetTimeout(ctx context.Context, projectID, id string, ms int64) (api.Sandbox, error) {
	if err := m.checkTimeout(ms); err != nil {
		return api.Sandbox{}, err
	}
	sb, unlock, err := m.lockSandbox(ctx, projectID, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	defer unlock()
	if !sb.Live() {
		return api.Sandbox{}, gone(sb)
	}
	var expires *time.Time
	if ms > 0 {
		t := m.now().Add(time.Duration(ms) * time.Millisecond)
		expires = &t
	}
	if err := m.cfg.Store.SetTimeout(ctx, id, ms, expires); err != nil {
		return api.Sandbox{}, err
	}
	sb, err = m.cfg.Store.GetSandbox(ctx, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	return toAPI(sb), nil
}

// AgentURL returns the base URL of projectID's sandbox id's agent, if the
// sandbox is running.
func (m *Manager) AgentURL(ctx context.Context, projectID, id string) (*url.URL, error) {
	sb, err := m.lookup(ctx, projectID, id)
	if err != nil {
		return nil, err
	}
	switch {
	case !sb.Live():
		return nil, gone(sb)
	case sb.State != api.StateRunning:
		return nil, &Error{Kind: ErrConflict, Msg: fmt.Sprintf("sandbox %s is %s, not running; wait until it runs", id, sb.State)}
	}
	return &url.URL{Scheme: "http", Host: agentHost(sb.ID)}, nil
}

// gone is the error for using an ended sandbox.
func gone(sb store.Sandbox) error {
	at := ""
	if sb.EndedAt != nil {
		at = " at " + sb.EndedAt.Format(time.RFC3339)
	}
	var how string
	switch sb.State {
	case api.StateKilled:
		how = "was killed" + at
	case api.StateExpired:
		how = "expired" + at + " (its timeout passed; extend it with setTimeout next time)"
	default:
		how = "failed" + at
		if sb.EndReason != "" {
			how += ": " + sb.EndReason
		}
	}
	return &Error{Kind: ErrGone, Msg: fmt.Sprintf("sandbox %s %s; create a new sandbox", sb.ID, how)}
}

func toAPI(sb store.Sandbox) api.Sandbox {
	meta := sb.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	return api.Sandbox{
		SandboxID: sb.ID,
		ProjectID: sb.ProjectID,
		Template:  sb.Template,
		State:     sb.State,
		TimeoutMs: sb.TimeoutMs,
		Metadata:  meta,
		CreatedAt: sb.CreatedAt,
		ExpiresAt: sb.ExpiresAt,
		EndedAt:   sb.EndedAt,
	}
}

// keyedMutex is a mutex per sandbox ID, dropped when nobody holds it.
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*refMutex
}

type refMutex struct {
	sync.Mutex
	refs int
}

func (k *keyedMutex) lock(id string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*refMutex{}
	}
	e := k.m[id]
	if e == nil {
		e = &refMutex{}
		k.m[id] = e
	}
	e.refs++
	k.mu.Unlock()
	e.Lock()
	return func() {
		e.Unlock()
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.m, id)
		}
		k.mu.Unlock()
	}
}
