// Package control is Lizard's control plane: what the public API asks of
// sandboxes, checked and decided before any node runs it. It turns
// requests into plans (validation, defaults and limits), refuses early what
// a project's create rate and quotas cannot take (the node admits each
// sandbox as it records it, and mints its lizardToken), keeps snapshots'
// records, and makes sure a project only ever touches its own sandboxes. The sandboxes themselves run on a node
// (package node), reached through the node.Node interface.
package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/netpolicy"

	"golang.org/x/time/rate"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/events"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/secrets"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
	"github.com/lizard-build/lizard/internal/webhook"
)

// Config says what the control plane allows. Node and Store are required;
// zero values of the rest take the defaults noted.
type Config struct {
	Node   node.Node
	Store  *store.Store
	Logger *slog.Logger // default slog.Default()
	// Templates are the names a create may ask for; default template.Names().
	Templates []string
	// Limits is a sandbox's default shape and MaxLimits bounds what a
	// create may ask for (zero fields: nothing above the default).
	Limits    node.Limits
	MaxLimits node.Limits
	// Internet lets sandboxes reach public addresses unless their create
	// says allowInternet: false.
	Internet bool
	// NetworkDefault is the policy by name of sandboxes whose create gives
	// none (nil: none, the server's egress as it is); NetworkBound the
	// loosest a create or update may ask for (nil: any), whose deny rules
	// every policy gets (lizard serve --network-default, --network-bound).
	NetworkDefault *netpolicy.Policy
	NetworkBound   *netpolicy.Policy
	// DefaultTimeout is a sandbox's life when the request names none
	// (default 5 minutes); MaxTimeout bounds what a request may ask (default
	// 24 hours; 0, never expiring, is always allowed).
	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	// MaxChildTimeout bounds the life of sandboxes created with another
	// sandbox's lizardToken (default 1 hour): code in a sandbox may make
	// more, but none that outlives this bound, so no key minted for one
	// lives on unbounded after the sandbox that asked for it.
	MaxChildTimeout time.Duration
	// Quota holds each project's quotas of live sandboxes and disk: the
	// node enforces them as it records a sandbox (its Admission, the same
	// *node.Quota under `lizard serve`); here they refuse early what would
	// not fit, and lock a project while a volume is recorded. Default: no
	// bounds. CreateRate is creates per second per project, with bursts of
	// CreateBurst (0: no bound).
	Quota       *node.Quota
	CreateRate  float64
	CreateBurst int
	// Audit receives volume events (key IDs, never keys); nil discards
	// them. Sandboxes' and keys' are the node's (node.Audit).
	Audit *slog.Logger
	Now   func() time.Time // default time.Now
	// MaxVolumeBytes bounds a volume's size (default 10 GiB).
	// MaxVolumes and MaxVolumeTotalBytes bound each project's volumes:
	// how many, and their sizes added up (0: no bound). The disk a
	// project is promised, its live sandboxes' disk limits and its
	// volumes' sizes together, is bounded by Quota.MaxDisk.
	MaxVolumeBytes      int64
	MaxVolumes          int
	MaxVolumeTotalBytes int64
	// PortsKey derives each sandbox's port access token (ports.go);
	// empty: tokens are refused. PortsDomain, when set, serves ports at
	// <port>-<sandboxId>.<PortsDomain> too. PortsResume resumes a paused
	// sandbox on access to its ports instead of answering 409.
	PortsKey    []byte
	PortsDomain string
	PortsResume bool
	// ImagesOnDisk: the node's disk is the image store (`lizard serve`
	// without --image-store), so a snapshot is durable once taken.
	ImagesOnDisk bool
	// Builder builds custom templates (templates.go); nil: none can be
	// built. BuildsPerHour bounds each project's builds that are not
	// found in the cache (0: no bound). Forget is told a custom template
	// reference is gone, to end its warm pool and drop its snapshot.
	Builder       TemplateBuilder
	BuildsPerHour float64
	Forget        func(ctx context.Context, ref string)
	// MaxTemplates and MaxTemplateBytes bound each project's custom
	// templates: how many, and their builds' sizes added up (0: no
	// bound). A build past either is refused before it starts, and one
	// that grows past the size left is stopped (templates.go).
	MaxTemplates     int
	MaxTemplateBytes int64
	// Secrets are the projects' secrets, which a policy's inject rules
	// must name (docs/secrets.md); nil: not checked here.
	Secrets *secrets.Store
	// Events reads the lifecycle events recorded in the store, and
	// Webhooks keeps the projects' webhooks (docs/events.md); nil: the
	// API serves neither (EventsKept, WebhooksKept).
	Events   *events.Log
	Webhooks *webhook.Service
}

// Control serves the API's sandbox operations. It is safe for concurrent
// use.
type Control struct {
	cfg  Config
	node node.Node
	log  *slog.Logger

	// rateMu guards limiters, the projects' create rates.
	rateMu   sync.Mutex
	limiters map[string]*rate.Limiter
	// snapMu lets restores from snapshots run together and a snapshot's
	// deletion wait for them.
	snapMu sync.RWMutex
	// volMu lets creates and forks that mount volumes run together and a
	// volume's deletion wait for them (volumes.go).
	volMu sync.RWMutex

	ownersMu sync.Mutex
	owners   map[string]owner // sandbox ID → its project, of calls (Acquire)
	// pausingMu guards pausing: sandbox ID → its Pause calls under way.
	pausingMu sync.Mutex
	pausing   map[string]int
	// tmplMu guards building (project/name of builds under way) and
	// buildLimits; it also orders a template's deletion after its build.
	builds      builds
	tmplMu      sync.Mutex
	building    map[string]bool
	buildLimits map[string]*rate.Limiter
}

// New checks cfg and returns the control plane.
func New(cfg Config) (*Control, error) {
	switch {
	case cfg.Node == nil:
		return nil, errors.New("control: no node")
	case cfg.Store == nil:
		return nil, errors.New("control: no store")
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
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Quota == nil {
		cfg.Quota = &node.Quota{Store: cfg.Store}
	}
	if cfg.Quota.DefaultDisk == 0 {
		cfg.Quota.DefaultDisk = cfg.Limits.DiskBytes
	}
	if cfg.MaxChildTimeout == 0 {
		cfg.MaxChildTimeout = time.Hour
	}
	cfg.MaxChildTimeout = min(cfg.MaxChildTimeout, cfg.MaxTimeout)
	p, d := cfg.MaxLimits, cfg.Limits
	switch {
	case cfg.DefaultTimeout > cfg.MaxTimeout:
		return nil, fmt.Errorf("control: default timeout %s is over the maximum %s", cfg.DefaultTimeout, cfg.MaxTimeout)
	case p.MemoryBytes > 0 && d.MemoryBytes > p.MemoryBytes:
		return nil, fmt.Errorf("control: default memory %d is over the maximum %d", d.MemoryBytes, p.MemoryBytes)
	case p.CPUs > 0 && d.CPUs > p.CPUs:
		return nil, fmt.Errorf("control: default CPUs %g is over the maximum %g", d.CPUs, p.CPUs)
	case p.DiskBytes > 0 && d.DiskBytes > p.DiskBytes:
		return nil, fmt.Errorf("control: default disk %d is over the maximum %d", d.DiskBytes, p.DiskBytes)
	}
	c := &Control{cfg: cfg, node: cfg.Node, log: cfg.Logger, limiters: map[string]*rate.Limiter{},
		building: map[string]bool{}, buildLimits: map[string]*rate.Limiter{}}
	c.builds = builds{c}
	return c, nil
}

func (c *Control) now() time.Time { return c.cfg.Now().UTC() }

func (c *Control) audit(msg string, attrs ...any) {
	if a := c.cfg.Audit; a != nil {
		a.Info(msg, attrs...)
	}
}

// Events is what the control plane does on a node's lifecycle events: an
// ended sandbox may free a replaced template's build. Subscribe it to the
// node.
func (c *Control) Events(e node.Event) {
	if e.Kind == node.Stopped && e.State != api.StatePaused {
		if c.cfg.Builder != nil && e.ProjectID != store.InternalProject {
			// It may have been the last user of a replaced template's build.
			go c.builds.collectOrphan(context.Background(), e.SandboxID)
		}
	}
}

// lookup returns projectID's sandbox id; another project's sandbox is
// ErrNotFound, exactly like a missing one.
func (c *Control) lookup(ctx context.Context, projectID, id string) (node.Sandbox, error) {
	sb, err := c.cfg.Store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && sb.ProjectID != projectID {
		return node.Sandbox{}, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("sandbox %s not found in project %s", id, projectID)}
	}
	if err != nil {
		return node.Sandbox{}, err
	}
	return node.SandboxOf(sb), nil
}

// Get returns projectID's sandbox id, live or ended.
func (c *Control) Get(ctx context.Context, projectID, id string) (api.Sandbox, error) {
	sb, err := c.lookup(ctx, projectID, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	return c.toAPI(sb), nil
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
func (c *Control) List(ctx context.Context, projectID string, f ListFilter) ([]api.Sandbox, error) {
	for _, s := range f.States {
		if !slices.Contains(states, s) {
			return nil, errdefs.Invalidf("unknown state %q; states are %s", s, strings.Join(states, ", "))
		}
	}
	rows, err := c.cfg.Store.ListSandboxes(ctx, store.Filter{ProjectID: projectID, States: f.States, LiveOnly: len(f.States) == 0})
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
			out = append(out, c.toAPI(node.SandboxOf(sb)))
		}
	}
	return out, nil
}

// Kill ends projectID's sandbox id at once. Killing an ended sandbox is not
// an error.
func (c *Control) Kill(ctx context.Context, projectID, id string) error {
	if _, err := c.lookup(ctx, projectID, id); err != nil {
		return err
	}
	return c.node.Kill(ctx, id)
}

// SetTimeout gives projectID's sandbox id a new deadline ms from now; 0
// means it never expires.
func (c *Control) SetTimeout(ctx context.Context, projectID, id string, ms int64) (api.Sandbox, error) {
	if err := c.checkTimeout(ms); err != nil {
		return api.Sandbox{}, err
	}
	sb, err := c.lookup(ctx, projectID, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	if err := c.checkChildDeadline(sb, ms); err != nil {
		return api.Sandbox{}, err
	}
	sb, err = c.node.SetTimeout(ctx, id, ms)
	if err != nil {
		return api.Sandbox{}, err
	}
	return c.toAPI(sb), nil
}

// Metrics returns projectID's sandbox id's usage samples of the last
// minutes, oldest first.
func (c *Control) Metrics(ctx context.Context, projectID, id string) (api.SandboxMetrics, error) {
	if _, err := c.lookup(ctx, projectID, id); err != nil {
		return api.SandboxMetrics{}, err
	}
	m, err := c.node.Metrics(ctx, id)
	if err != nil {
		return api.SandboxMetrics{}, err
	}
	return api.SandboxMetrics{Metrics: m}, nil
}

// Pause checkpoints projectID's running sandbox id to disk and stops it.
func (c *Control) Pause(ctx context.Context, projectID, id string, req api.PauseRequest) (api.Sandbox, error) {
	sb, err := c.lookup(ctx, projectID, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	if req.WaitDurable && len(sb.Shape.Volumes) > 0 {
		// Its image restores only beside its volumes, on its node's disk,
		// so it is never uploaded: a wait would end in a 503 after five
		// minutes saying it "keeps uploading", with the sandbox paused.
		return api.Sandbox{}, &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf(
			"sandbox %s mounts volumes: its pause stays on its node's disk, beside them, and never reaches the image store; pause it without waitDurable", id)}
	}
	if req.Memory != nil && sb.Check(node.WantRunning) == nil {
		// What it keeps is the sandbox's record, which the node reads
		// at this pause and at later ones (its timeout's). A paused
		// sandbox's image is as it was paused.
		if err := c.cfg.Store.SetPauseDiskOnly(ctx, id, !*req.Memory); err != nil {
			return api.Sandbox{}, err
		}
	}
	c.markPausing(id, 1)
	sb, err = c.node.Pause(ctx, id)
	c.markPausing(id, -1)
	if err != nil {
		return api.Sandbox{}, err
	}
	if req.WaitDurable && !sb.Durable {
		if sb, err = c.waitDurable(ctx, id); err != nil {
			return api.Sandbox{}, err
		}
	}
	return c.toAPI(sb), nil
}

func (c *Control) markPausing(id string, d int) {
	c.pausingMu.Lock()
	defer c.pausingMu.Unlock()
	if c.pausing == nil {
		c.pausing = map[string]int{}
	}
	if c.pausing[id] += d; c.pausing[id] <= 0 {
		delete(c.pausing, id)
	}
}

// What Settling says is being done to a sandbox whose record still says
// it runs.
const (
	SettlingPause = "pause"
	SettlingKill  = "kill"
)

// Settling says what is being done to live sandbox sb, whose record says
// it runs until that is done: SettlingPause while a Pause through this
// Control is under way, or while the reaper pauses it at its timeout
// (onTimeout pause); SettlingKill while the reaper ends it at its
// timeout; "" otherwise. E2B's API shows a pausing sandbox as paused and
// a killing one as gone at once. A pause asked of another lizard api of
// a cluster is not seen here until it is done.
func (c *Control) Settling(ctx context.Context, sb api.Sandbox) (string, error) {
	// Only one starting or running may be settling: one paused or ended
	// is what it shows (Check decides which, TestOneDecision).
	if err := Check(sb, node.WantRunning); errors.Is(err, errdefs.ErrGone) || errors.Is(err, node.ErrPaused) {
		return "", nil
	}
	c.pausingMu.Lock()
	n := c.pausing[sb.SandboxID]
	c.pausingMu.Unlock()
	if n > 0 {
		return SettlingPause, nil
	}
	if sb.ExpiresAt == nil || !c.cfg.Now().After(*sb.ExpiresAt) {
		return "", nil
	}
	p, err := c.cfg.Store.GetPause(ctx, sb.SandboxID)
	if err != nil {
		return "", err
	}
	if p.OnTimeout == api.OnTimeoutPause {
		return SettlingPause, nil
	}
	return SettlingKill, nil
}

// DurableWait bounds a pause's wait for its image to reach the image store.
const DurableWait = 5 * time.Minute

// waitDurable waits until paused sandbox id's image is in the image store
// (the node uploads it in the background), reading the record the node
// writes, which is shared in a cluster.
func (c *Control) waitDurable(ctx context.Context, id string) (node.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, DurableWait)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		row, err := c.cfg.Store.GetSandbox(ctx, id)
		sb := node.SandboxOf(row)
		switch {
		case err != nil && ctx.Err() == nil:
			return sb, err
		case err == nil && sb.Durable:
			return sb, nil
		case err == nil && !errors.Is(sb.Check(node.WantRunning), node.ErrPaused):
			return sb, &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf("sandbox %s is %s: it left its pause before its image was durable", id, sb.State)}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return sb, &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: fmt.Sprintf("sandbox %s is paused but its image did not reach the image store within %s (is the store reachable? the node log says); it keeps uploading: GET the sandbox for durable", id, DurableWait)}
			}
			return sb, ctx.Err()
		case <-t.C:
		}
	}
}

// Resume restores projectID's paused sandbox id; req.TimeoutMs, when set,
// replaces the time it had left.
func (c *Control) Resume(ctx context.Context, projectID, id string, req api.ResumeRequest) (api.Sandbox, error) {
	sb, err := c.lookup(ctx, projectID, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	if sb.Check(node.WantLive) == nil {
		if err := c.pastBound(id, sb.ParentID, c.childBound(sb)); err != nil {
			return api.Sandbox{}, err
		}
	}
	if req.TimeoutMs != nil {
		if err := c.checkTimeout(*req.TimeoutMs); err != nil {
			return api.Sandbox{}, err
		}
		if err := c.checkChildDeadline(sb, *req.TimeoutMs); err != nil {
			return api.Sandbox{}, err
		}
	}
	if req.Memory != nil && !*req.Memory && errors.Is(sb.Check(node.WantRunning), node.ErrPaused) {
		p, err := c.cfg.Store.GetPause(ctx, id)
		if err != nil {
			return api.Sandbox{}, err
		}
		if !p.DiskOnly {
			return api.Sandbox{}, &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf(
				"sandbox %s was paused with its memory, which holds its disk: it cannot boot fresh from the disk alone; resume it without memory: false, or pause it with memory: false", id)}
		}
	}
	sb, err = c.node.Resume(ctx, id, req.TimeoutMs)
	if err != nil {
		return api.Sandbox{}, err
	}
	return c.toAPI(sb), nil
}

// Acquire starts one proxied call to projectID's sandbox id, resuming the
// sandbox first if it is paused. Release the call when it has ended: a
// pause waits for calls in flight.
func (c *Control) Acquire(ctx context.Context, projectID, id string) (agentproxy.Call, error) {
	o, ok := c.owned(projectID, id)
	if !ok {
		sb, err := c.lookup(ctx, projectID, id)
		if err != nil {
			return agentproxy.Call{}, err
		}
		o = owner{project: projectID, parent: sb.ParentID, bound: c.childBound(sb)}
		c.own(id, o)
	}
	// A call would resume a paused child: not past its bound, as with
	// Resume itself.
	if err := c.pastBound(id, o.parent, o.bound); err != nil {
		return agentproxy.Call{}, err
	}
	return c.node.Acquire(ctx, id)
}

// owner is what Acquire remembers of a sandbox: its project, and for a
// sandbox made with a lizardToken its parent and the end of its life.
type owner struct {
	project, parent string
	bound           time.Time // zero: not a token child
}

// maxOwners bounds the sandboxes whose project is remembered.
const maxOwners = 100_000

// owned reports whether sandbox id is known to be projectID's. A
// sandbox's project never changes once a caller has seen its ID (a warm
// sandbox is handed to its project before its ID is returned), so calls
// after the first skip reading its row for it: the node reads the row for
// its state anyway, and in a cluster every read is a database round trip.
func (c *Control) owned(projectID, id string) (owner, bool) {
	c.ownersMu.Lock()
	defer c.ownersMu.Unlock()
	o, ok := c.owners[id]
	return o, ok && o.project == projectID
}

func (c *Control) own(id string, o owner) {
	c.ownersMu.Lock()
	defer c.ownersMu.Unlock()
	if c.owners == nil || len(c.owners) >= maxOwners {
		c.owners = map[string]owner{}
	}
	c.owners[id] = o
}

// CheckRunning says whether projectID's sandbox id runs: an ErrGone error
// naming how it ended, or ErrConflict if it is paused or starting.
func (c *Control) CheckRunning(ctx context.Context, projectID, id string) error {
	sb, err := c.lookup(ctx, projectID, id)
	if err != nil {
		return err
	}
	return sb.Check(node.WantRunning)
}

// Check is node.Sandbox.Check of sb as the API shows it, for a surface
// that holds one (E2B's, envd) and must not decide from its state itself
// whether it has ended or is paused. Go by the error's kind: the API's
// sandbox has no end reason for the message.
func Check(sb api.Sandbox, want node.Want) error {
	return node.Sandbox{ID: sb.SandboxID, State: sb.State, EndedAt: sb.EndedAt}.Check(want)
}

// Transport carries proxied calls to agents.
func (c *Control) Transport() http.RoundTripper { return c.node.Transport() }

func (c *Control) toAPI(sb node.Sandbox) api.Sandbox {
	meta := sb.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	// The shape it runs with: recorded at create, or for rows from before
	// shapes were recorded, the defaults.
	l := c.cfg.Limits
	if sh := sb.Shape; sh.Recorded {
		l.MemoryBytes, l.CPUs, l.DiskBytes = sh.MemoryBytes, sh.CPUs, sh.DiskBytes
	}
	return api.Sandbox{
		SandboxID:       sb.ID,
		ProjectID:       sb.ProjectID,
		Template:        template.Name(sb.Template),
		State:           sb.State,
		TimeoutMs:       sb.TimeoutMs,
		Metadata:        meta,
		CreatedAt:       sb.CreatedAt,
		ExpiresAt:       sb.ExpiresAt,
		EndedAt:         sb.EndedAt,
		MemoryMb:        l.MemoryBytes >> 20,
		Cpus:            l.CPUs,
		DiskMb:          l.DiskBytes >> 20,
		ParentSandboxID: sb.ParentID,
		Volumes:         volumesAPI(sb.Shape.Volumes),
		AccessToken:     c.accessToken(sb.ID),
		PublicPorts:     sb.Shape.PublicPorts,
		PortsDomain:     c.cfg.PortsDomain,
		PortsHost:       sb.Shape.PortsHost,
		Network:         sb.Shape.Network.API(),
		Durable:         sb.Durable,
	}
}

func volumesAPI(ms []store.VolumeMount) []api.SandboxVolume {
	var out []api.SandboxVolume
	for _, m := range ms {
		out = append(out, api.SandboxVolume{Name: m.Name, Path: m.Path})
	}
	return out
}
