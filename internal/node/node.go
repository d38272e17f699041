// Package node runs sandboxes on one machine (docs/architecture.md): the
// runtime backend, their addresses, the one provisioning pipeline every new
// sandbox goes through (boot, restore of a template snapshot, warm-pool
// claim, restore of a snapshot or a fork), pause and resume, checkpoint
// images, expiry, liveness and reconciliation with the runtime after a
// restart. The control plane (package control) decides what may run and
// for whom; a node runs it. The two meet at the Node interface.
//
// The store is the record of what should exist; the runtime is what does.
// Every path that ends a sandbox kills it in the runtime first and records
// the end second, so a failure in between leaves a live row whose sandbox is
// gone — which reconciliation cleans — rather than a running sandbox nobody
// knows about.
package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/lizard-build/lizard/internal/egress"
	"github.com/lizard-build/lizard/internal/netpolicy"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentclient"
	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/fdbudget"
	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/keylock"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/secrets/inject"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/volume"
)

// Node is what the control plane asks of the machine its sandboxes run on.
// Sandboxes are named by ID; the caller has checked who may touch them.
type Node interface {
	// Create provisions one sandbox as p says and returns it running.
	Create(ctx context.Context, p Plan) (Sandbox, error)
	// Fork checkpoints running (or paused) sandbox parent and restores n
	// copies of it shaped by p, all or nothing.
	Fork(ctx context.Context, parent string, p Plan, n int) ([]Sandbox, error)
	// Kill ends sandbox id; ending an ended sandbox is not an error.
	Kill(ctx context.Context, id string) error
	// SetTimeout gives sandbox id a new deadline ms from now (0: never).
	SetTimeout(ctx context.Context, id string, ms int64) (Sandbox, error)
	// Pause checkpoints running sandbox id to disk and stops it.
	Pause(ctx context.Context, id string) (Sandbox, error)
	// Resume restores paused sandbox id; timeoutMs, when set, replaces the
	// time it had left.
	Resume(ctx context.Context, id string, timeoutMs *int64) (Sandbox, error)
	// Snapshot saves running sandbox id into an image of its own, leaving
	// it running, and returns the image and its size in bytes.
	Snapshot(ctx context.Context, id, snapshotID string) (image string, size int64, err error)
	// RemoveImage deletes a snapshot image.
	RemoveImage(ctx context.Context, image string) error
	// Acquire starts one proxied call to sandbox id's agent, resuming the
	// sandbox first if it is paused. The call's context ends when the
	// sandbox stops, with why as its cause.
	Acquire(ctx context.Context, id string) (agentproxy.Call, error)
	// Transport carries proxied calls to agents.
	Transport() http.RoundTripper
	// Subscribe calls fn with every lifecycle event from now on.
	Subscribe(fn func(Event))
	// MakeVolume makes persistent volume id's filesystem, of size bytes,
	// on this machine; RemoveVolume deletes it and its data.
	MakeVolume(ctx context.Context, id string, size int64) error
	RemoveVolume(ctx context.Context, id string) error
	// OpenPort starts one proxied connection to port of sandbox id (an
	// exposed port): its URL is the port's, dialled directly, and its
	// context ends when the sandbox stops or is paused. A paused sandbox
	// is resumed first with resume, else refused (ErrConflict).
	OpenPort(ctx context.Context, id string, port int, resume bool) (agentproxy.Call, error)
	// Metrics returns sandbox id's usage samples of the last minutes,
	// oldest first (none while it is not running).
	Metrics(ctx context.Context, id string) ([]api.SandboxMetric, error)
	// UpdateNetwork replaces sandbox id's network policy for the
	// connections opened from now on; with cut, open ones are ended too.
	UpdateNetwork(ctx context.Context, id string, p *netpolicy.Policy, cut bool) (Sandbox, error)
	// NetworkLog returns sandbox id's egress decisions, oldest first.
	NetworkLog(ctx context.Context, id string) ([]egress.Decision, error)
}

// EventKind says what happened to a sandbox.
type EventKind string

const (
	// Started: the sandbox runs at HostAddr/GuestAddr (created, restored,
	// resumed, or kept over a restart).
	Started EventKind = "started"
	// Stopped: it no longer runs (ended, or paused). An end revokes its
	// lizardToken's keys: KeyIDs.
	Stopped EventKind = "stopped"
	// Created: a user's new sandbox runs, made as Caller asked (a create,
	// a restore of SnapshotID, a fork of ForkedFrom).
	Created EventKind = "created"
	// Killed: Caller asked for the sandbox's end (a Stopped follows).
	Killed EventKind = "killed"
	// KeyCreated: the sandbox's lizardToken was minted, KeyIDs[0].
	KeyCreated EventKind = "key.created"
	// Resumed: a paused sandbox runs again (after its Started).
	Resumed EventKind = "resumed"
	// Forked: the sandbox was copied into Children.
	Forked EventKind = "forked"
	// Snapshotted: the sandbox was saved as snapshot SnapshotID.
	Snapshotted EventKind = "snapshotted"
	// CallFailed: a run in the sandbox ended with error ErrorName (the
	// agent's TimeoutError, or KernelDiedError) and message Reason; the
	// sandbox lives on.
	CallFailed EventKind = "call.failed"
	// Moved: a drain moved the sandbox off node From to node To;
	// Downtime is the stall of its move.
	Moved EventKind = "moved"
)

// Event is a change in a sandbox's life, for those who hold something per
// running sandbox (the API listener of a lizardToken sandbox, calls in
// flight) and for the audit trail (Audit), which is thus written where
// sandboxes change, the same on one machine and in a cluster.
type Event struct {
	Kind      EventKind
	SandboxID string
	ProjectID string
	HostAddr  string
	GuestAddr string
	// Token: the sandbox holds a lizardToken and reaches the API on
	// HostAddr.
	Token bool
	// State and Reason, for Stopped: what the sandbox is now and why.
	State  string
	Reason string
	// KeyIDs are the lizardToken keys minted (KeyCreated) or revoked
	// (Stopped at an end): IDs only, never keys.
	KeyIDs []string
	// Caller asked for a Created or Killed: who, by key ID.
	Caller auth.Caller
	// Template, ParentID (the sandbox whose lizardToken asked),
	// SnapshotID and ForkedFrom describe a Created sandbox.
	Template   string
	ParentID   string
	SnapshotID string
	ForkedFrom string
	// Children are a Forked sandbox's copies.
	Children []string
	// LostNode, for a Stopped: the cluster node whose lost lease ended
	// the sandbox (cluster.Sweeper).
	LostNode string
	// ErrorName, for a CallFailed: the run's error.
	ErrorName string
	// From, To and Downtime describe a Moved.
	From, To string
	Downtime time.Duration
}

// Config says how a node works. Runtime, Store, Pool and Artifact are
// required; zero values of the rest take the defaults noted.
type Config struct {
	Runtime sandbox.Runtime
	Store   *store.Store
	Pool    netns.Pool
	Logger  *slog.Logger // default slog.Default()
	// Artifact returns a template's artifact for the runtime, waiting (as
	// ctx allows) while it is built.
	Artifact func(ctx context.Context, template string) (sandbox.Artifact, error)
	// Files are injected read-only into every sandbox (the agent, the
	// client-only lizard CLI).
	Files []sandbox.File
	// Limits are the default shape of a sandbox; Internet its default
	// egress; Allow narrows the internet it may reach (tests).
	Limits   Limits
	Internet bool
	Allow    sandbox.Prefixes
	// TokenAPI returns, for a sandbox holding a lizardToken whose host
	// address is host, the environment telling it where the API is and
	// the port its egress must let through to host (0: none).
	TokenAPI func(host string) (env []string, port int)
	// MaxRestores is how many restores of users' sandboxes (creates from
	// an image, forks' copies, resumes) run at once, each until its agent
	// answers; more wait their turn in order (restores.go). 0: no bound.
	MaxRestores int
	// StartTimeout bounds the wait for a new sandbox's agent (default 30 s).
	StartTimeout time.Duration
	// ReapInterval is how often expired sandboxes are looked for (default
	// 1 s); LivenessInterval how often running ones are checked for a dead
	// runtime (default 5 s).
	ReapInterval     time.Duration
	LivenessInterval time.Duration
	// DataDir holds checkpoint images: DataDir/images/<sandboxID> of paused
	// sandboxes and DataDir/snapshots/<snapshotID>. Empty disables pause,
	// snapshots and forks.
	DataDir string
	// MinFreeDisk is the free space, in bytes, kept on DataDir's disk:
	// below it, calls that grow disk use (create, fork, snapshot, pause,
	// volume) are refused with ErrDiskFull, so that what only records a
	// state change (setTimeout, kill, resume, an end) still has room.
	// 0: no bound.
	MinFreeDisk int64
	// PausedRetention is how long a paused sandbox is kept before the
	// reaper ends it (default 7 days); PauseWait bounds how long a pause
	// waits for calls in flight (default 10 s).
	PausedRetention time.Duration
	PauseWait       time.Duration
	// MoveWait bounds how long a move (MoveOut) waits for the image store
	// to take the sandbox's image when no upload fails (default MoveWait):
	// one that fails ends the move at once.
	MoveWait time.Duration
	// AgentKey derives each sandbox's agent secret (agentSecret); the
	// server keeps it in its data directory. Empty: agents take no secret
	// (tests with fake agents).
	AgentKey []byte
	// Metrics receives creates, pauses, resumes, forks, kills and
	// snapshots; nil records nothing.
	Metrics *metrics.Metrics
	// Warm serves creates from template snapshots and a warm pool (package
	// warm); nil: every create boots.
	Warm Warm
	// AgentAddr returns the host:port a sandbox's agent is dialled at;
	// default its guest address and api.AgentPort. Tests point it at a
	// fake agent. Transport, when set, replaces the direct one.
	AgentAddr func(sandboxID, guestAddr string) string
	Transport http.RoundTripper
	Now       func() time.Time // default time.Now
	// Volumes keeps persistent volumes on this machine (a
	// *volume.Manager); nil: none (volume calls are refused).
	Volumes Volumes
	// Egress enforces sandboxes' policies by name (its resolver, proxy
	// and table); nil: a create with a policy is refused.
	Egress *egress.Enforcer
	// Descriptors, when set, counts the node's file descriptors each
	// project's calls, streams and port requests hold (package fdbudget;
	// the egress proxy counts its own against the same budget): past
	// the project's bound, or all tenants', the next is a 429.
	Descriptors *fdbudget.Budget
	// Admission admits each user's sandbox against its project's quotas
	// as it is recorded (a *Quota); nil admits all.
	Admission Admission
	// EgressCAs are the sandboxes' egress certificate authorities
	// (trust.go): a sandbox whose policy injects secrets trusts its own;
	// nil: none is made or installed.
	EgressCAs *inject.Authorities
	// Images is the image store (docs/storage.md): paused sandboxes' and
	// snapshots' images are uploaded to it in the background
	// (RunUploader), and an image another node made is fetched from it,
	// through ImageCache, which is required with it. nil: the node's disk
	// is the store, and an image is durable once written.
	Images     *imagestore.Store
	ImageCache *imagestore.Cache
	// IdleReclaim, when set, pushes the memory of a users' sandbox idle
	// that long out to the host's swap (reclaim.go); the runtime must be a
	// sandbox.Reclaimer and a sandbox.Meter. 0: never.
	IdleReclaim time.Duration
}

// Volumes makes, mounts and removes persistent volumes' filesystems on this
// machine (package volume; a fake in tests).
type Volumes interface {
	Create(ctx context.Context, id string, size int64) error
	Mount(ctx context.Context, id string) error
	Remove(ctx context.Context, id string) error
	// Path is the host directory a sandbox bind-mounts.
	Path(id string) string
	// UnmountAll unmounts every volume but those in keep.
	UnmountAll(keep map[string]bool) error
}

var _ Volumes = (*volume.Manager)(nil)

// Warm is what the provisioning pipeline asks of template snapshots and
// the warm pool.
type Warm interface {
	// Image returns template's snapshot image for a sandbox of limits, or
	// "" if there is none yet or it cannot serve them (a checkpoint
	// restores only under the disk limit it was taken with).
	Image(template string, limits Limits) string
	// Pool reports whether warm-pool sandboxes of template are kept for
	// creates shaped like limits and internet.
	Pool(template string, limits Limits, internet bool) bool
	// Claimed is told a warm-pool sandbox of template was taken, so the
	// pool fills again.
	Claimed(template string)
	// Restored is told whether a restore of image worked: after several
	// failures in a row the image is made again.
	Restored(ctx context.Context, template, image string, err error)
}

// Local is the Node of this machine. It is safe for concurrent use.
type Local struct {
	cfg    Config
	log    *slog.Logger
	agents *agents
	locks  keylock.Map
	calls  inflight // proxied calls in flight, per sandbox (pause.go)
	ports  inflight // proxied connections to exposed ports (ports.go)
	meters meters   // each running sandbox's metrics samples (metrics.go)
	idle   idleness // when each sandbox was last used (reclaim.go)
	// restores admits restores of users' sandboxes (restores.go).
	restores *restoreGate

	images  images  // checkpoint images, on disk and in the image store (durable.go)
	network network // policies by name and their egress CAs (network.go, trust.go)
	bus     bus     // lifecycle events' subscribers
	clock   clock
}

// bus calls every subscriber with each lifecycle event.
type bus struct {
	mu   sync.Mutex
	subs []func(Event)
}

// clock is the node's time (Config.Now), in UTC.
type clock func() time.Time

var _ Node = (*Local)(nil)

// New checks cfg and returns a node. Call Reconcile before serving and run
// RunReaper in the background.
func New(cfg Config) (*Local, error) {
	switch {
	case cfg.Runtime == nil:
		return nil, errors.New("node: no runtime")
	case cfg.Store == nil:
		return nil, errors.New("node: no store")
	case cfg.Artifact == nil:
		return nil, errors.New("node: no template artifacts")
	case !cfg.Pool.Prefix().IsValid():
		return nil, errors.New("node: no address pool")
	case cfg.Images != nil && cfg.ImageCache == nil:
		return nil, errors.New("node: an image store without an image cache")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if cfg.ReapInterval == 0 {
		cfg.ReapInterval = time.Second
	}
	if cfg.LivenessInterval == 0 {
		cfg.LivenessInterval = 5 * time.Second
	}
	if cfg.PausedRetention == 0 {
		cfg.PausedRetention = DefaultPausedRetention
	}
	if cfg.PauseWait == 0 {
		cfg.PauseWait = DefaultPauseWait
	}
	if cfg.MoveWait == 0 {
		cfg.MoveWait = MoveWait
	}
	if cfg.AgentAddr == nil {
		cfg.AgentAddr = func(_, guest string) string { return agentclient.Addr(guest) }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	n := &Local{cfg: cfg, log: cfg.Logger, restores: newRestoreGate(cfg.MaxRestores, cfg.Metrics), clock: cfg.Now}
	n.agents = &agents{store: cfg.Store, addr: cfg.AgentAddr, key: cfg.AgentKey, timeout: cfg.StartTimeout, dead: n.dead}
	n.agents.Client = agentclient.New(n.agents.resolve, n.agents.secret, cfg.Transport)
	n.meters.limits = cfg.Limits
	if cfg.IdleReclaim > 0 {
		n.calls.now, n.ports.now = cfg.Now, cfg.Now
	}
	n.images = images{dataDir: cfg.DataDir, minFree: cfg.MinFreeDisk, store: cfg.Store, remote: cfg.Images, cache: cfg.ImageCache,
		metrics: cfg.Metrics, locks: &n.locks, log: cfg.Logger, kick: make(chan struct{}, 1), passes: &uploadPasses{}, secret: n.agents.secret}
	n.network = network{enforcer: cfg.Egress, allow: cfg.Allow, tokenAPI: cfg.TokenAPI, cas: cfg.EgressCAs, agents: n.agents.Client,
		log: cfg.Logger, shaped: n.Shaped}
	return n, nil
}

// Transport implements Node.
func (n *Local) Transport() http.RoundTripper { return n.agents.Transport() }

// Agents is the node's client for agents (the warm pool waits on them).
func (n *Local) Agents() *agentclient.Client { return n.agents.Client }

// Subscribe implements Node. Subscribers run synchronously and must not
// block.
func (n *Local) Subscribe(fn func(Event)) {
	n.bus.mu.Lock()
	defer n.bus.mu.Unlock()
	n.bus.subs = append(n.bus.subs, fn)
}

func (b *bus) emit(e Event) {
	b.mu.Lock()
	subs := b.subs
	b.mu.Unlock()
	for _, fn := range subs {
		fn(e)
	}
}

func (n *Local) started(sb store.Sandbox) {
	n.bus.emit(Event{Kind: Started, SandboxID: sb.ID, ProjectID: sb.ProjectID, HostAddr: sb.HostAddr,
		GuestAddr: sb.GuestAddr, Token: sb.Shape.Token})
}

func (n *Local) stopped(sb store.Sandbox, state, reason string) {
	if n.cfg.Egress != nil {
		if state == api.StatePaused {
			n.cfg.Egress.Table.Unset(sb.ID) // its log stays for the resume
		} else {
			n.cfg.Egress.Table.Remove(sb.ID)
		}
	}
	if state != api.StatePaused {
		n.network.forgetEgressCA(sb.ID)
	}
	n.calls.cancelAll(sb.ID, stopReason(sb.ID, state, reason))
	n.ports.cancelAll(sb.ID, stopReason(sb.ID, state, reason))
	e := Event{Kind: Stopped, SandboxID: sb.ID, ProjectID: sb.ProjectID, State: state, Reason: reason, Token: sb.Shape.Token}
	if state != api.StatePaused && sb.Shape.Token {
		// The end revoked its keys (store.EndSandbox): name them.
		ctx, cancel := cleanupContext(context.Background())
		ids, err := n.cfg.Store.SandboxKeyIDs(ctx, sb.ID)
		cancel()
		if err != nil {
			n.log.Error("listing the revoked keys of an ended sandbox", "sandbox_id", sb.ID, "err", err)
		}
		e.KeyIDs = ids
	}
	n.bus.emit(e)
}

func (c clock) now() time.Time { return c().UTC() }

// deadline is when a sandbox given ms from now expires; nil for 0, never.
// Every deadline is computed here.
func (c clock) deadline(ms int64) *time.Time {
	if ms <= 0 {
		return nil
	}
	t := c.now().Add(time.Duration(ms) * time.Millisecond)
	return &t
}

// NewID returns a sandbox ID: 20 characters of [a-z0-9], short enough for
// the runtime's 40 and easy to double-click.
func NewID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 20)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// get reads sandbox id.
func (n *Local) get(ctx context.Context, id string) (store.Sandbox, error) {
	sb, err := n.cfg.Store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return sb, NotFound(id)
	}
	if me := n.cfg.Store.Node(); err == nil && me != "" && sb.Live() && sb.Node != me {
		// Moved to another node while this one was lost (docs/storage.md):
		// an API process that remembered it here must not have it acted
		// on here.
		return sb, &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: fmt.Sprintf("sandbox %s runs on node %s now, not on %s; retry", id, sb.Node, me),
			Cause: &MovedTo{To: sb.Node}}
	}
	return sb, err
}
