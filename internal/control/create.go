package control

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/template"
	"github.com/lizard-build/lizard/internal/trace"
)

// Bounds on what a create request may ask for.
const (
	MaxMetadataPairs = 64
	MaxMetadataKey   = 256
	MaxMetadataValue = 2048
	MaxEnvs          = 512
	MaxEnvBytes      = 256 << 10
)

// Create makes a sandbox for projectID and returns once its agent answers.
func (c *Control) Create(ctx context.Context, projectID string, req api.CreateSandboxRequest) (api.Sandbox, error) {
	return c.CreateBy(ctx, projectID, "", req)
}

// CreateBy is Create asked for with the lizardToken of sandbox parent
// ("": with a project key). A parent's child must expire within
// MaxChildTimeout, and records its parent.
func (c *Control) CreateBy(ctx context.Context, projectID, parent string, req api.CreateSandboxRequest) (api.Sandbox, error) {
	if err := c.childTimeout(parent, &req.TimeoutMs); err != nil {
		return api.Sandbox{}, err
	}
	if parent != "" && req.OnTimeout == api.OnTimeoutPause {
		// Pausing at its timeout would keep it, and a key of its own,
		// past its bound: a child ends at its timeout.
		return api.Sandbox{}, errdefs.Invalidf("onTimeout %q: a sandbox made with another sandbox's lizardToken (%s) ends at its timeout, within the server's --max-child-timeout (%s); it cannot be kept paused past it: leave onTimeout out",
			req.OnTimeout, parent, c.cfg.MaxChildTimeout)
	}
	if req.SnapshotID != "" {
		if req.Network != nil {
			return api.Sandbox{}, errdefs.Invalidf("network: a sandbox restored from a snapshot keeps the snapshot's policy; change it once it runs (PATCH /v1/sandboxes/{id}/network)")
		}
		return c.createFromSnapshot(ctx, projectID, parent, req)
	}
	ref, err := c.Project(projectID).Templates().resolve(ctx, req.Template)
	if err != nil {
		return api.Sandbox{}, err
	}
	req.Template = ref
	if parent != "" {
		// A child asked for with a sandbox's key reaches no further than
		// that sandbox: without a word of its own, it gets its egress.
		ownNet, own, err := c.ownEgress(ctx, parent)
		if err != nil {
			return api.Sandbox{}, err
		}
		if req.Network == nil && own != nil {
			req.Network = own.API()
		}
		if req.AllowInternet == nil && !ownNet {
			req.AllowInternet = new(bool)
		}
	}
	if req.Network == nil {
		// The project's default comes before the server's, and is
		// bounded at each create: the operator's bound may have
		// narrowed since it was set.
		pol, err := c.cfg.Store.ProjectNetwork(ctx, projectID)
		if err != nil {
			return api.Sandbox{}, err
		}
		req.Network = pol.API()
	}
	p, err := c.plan(projectID, req)
	if err != nil {
		return api.Sandbox{}, err
	}
	if req.Network != nil {
		if err := c.checkSecrets(ctx, projectID, p.Network); err != nil {
			return api.Sandbox{}, err
		}
	}
	if err := c.noWider(ctx, parent, p.Internet, p.Network); err != nil {
		return api.Sandbox{}, err
	}
	p.ParentID = parent
	if req.LizardToken {
		if parent != "" {
			// A child's key dies at the child's bound, whatever becomes
			// of the child (pauses, setTimeout) meanwhile.
			p.KeyExpires = c.now().Add(c.cfg.MaxChildTimeout)
		}
		p.Token = true
	}
	p.PublicPorts = req.PublicPorts
	if p.PortsHost, err = portsHost(req.PortsHost); err != nil {
		return api.Sandbox{}, err
	}
	if len(req.Volumes) > 0 {
		c.volMu.RLock()
		defer c.volMu.RUnlock()
		if p.Volumes, err = c.Project(projectID).Volumes().mounts(ctx, req.Volumes); err != nil {
			return api.Sandbox{}, err
		}
	}
	if err := c.fits(ctx, projectID, 1, p.Limits.DiskBytes); err != nil {
		return api.Sandbox{}, err
	}
	cctx, sp := trace.Start(ctx, "control.create", trace.Project(projectID), trace.Template(p.Template))
	sb, err := c.node.Create(cctx, p)
	sp.SetAttributes(trace.Sandbox(sb.ID))
	trace.End(sp, err)
	if err != nil {
		return api.Sandbox{}, err
	}
	// The API call's span names the sandbox it made.
	trace.Annotate(ctx, trace.Sandbox(sb.ID))
	return c.toAPI(sb), nil
}

// plan checks req and turns it into a plan for projectID.
func (c *Control) plan(projectID string, req api.CreateSandboxRequest) (node.Plan, error) {
	p := node.Plan{ProjectID: projectID, Template: req.Template, Metadata: req.Metadata, OnTimeout: req.OnTimeout}
	if p.Template == "" {
		p.Template = template.Default
	}
	// A custom template's reference comes from Templates.resolve or from
	// the store (a snapshot's, a fork parent's), never from the caller.
	if _, _, custom := template.SplitRef(p.Template); !custom && !slices.Contains(c.cfg.Templates, p.Template) {
		return p, errdefs.Invalidf("unknown template %q; available: %s", p.Template, strings.Join(c.cfg.Templates, ", "))
	}
	p.TimeoutMs = c.cfg.DefaultTimeout.Milliseconds()
	if req.TimeoutMs != nil {
		p.TimeoutMs = *req.TimeoutMs
		if err := c.checkTimeout(p.TimeoutMs); err != nil {
			return p, err
		}
	}
	p.PauseDiskOnly = req.PauseMemory != nil && !*req.PauseMemory
	switch req.OnTimeout {
	case "", api.OnTimeoutKill, api.OnTimeoutPause:
	default:
		return p, errdefs.Invalidf("onTimeout %q: want %q or %q", req.OnTimeout, api.OnTimeoutKill, api.OnTimeoutPause)
	}
	if len(req.Metadata) > MaxMetadataPairs {
		return p, errdefs.Invalidf("metadata has %d pairs; at most %d are allowed", len(req.Metadata), MaxMetadataPairs)
	}
	for k, v := range req.Metadata {
		switch {
		case k == "" || len(k) > MaxMetadataKey:
			return p, errdefs.Invalidf("metadata key %q: want 1 to %d bytes", k, MaxMetadataKey)
		case strings.Contains(k, "="):
			return p, errdefs.Invalidf("metadata key %q contains '=', which the list filter (metadata=key=value) cannot express", k)
		case len(v) > MaxMetadataValue:
			return p, errdefs.Invalidf("metadata value of %q is %d bytes; at most %d are allowed", k, len(v), MaxMetadataValue)
		}
	}
	if err := c.planEnvs(&p, req); err != nil {
		return p, err
	}
	if err := c.planLimits(&p, req); err != nil {
		return p, err
	}
	if err := c.planNetwork(&p, req.Network); err != nil {
		return p, err
	}
	return p, nil
}

func (c *Control) planEnvs(p *node.Plan, req api.CreateSandboxRequest) error {
	if len(req.Envs) > MaxEnvs {
		return errdefs.Invalidf("envs has %d variables; at most %d are allowed", len(req.Envs), MaxEnvs)
	}
	size := 0
	for k, v := range req.Envs {
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00"):
			return errdefs.Invalidf("env name %q is not valid: names are non-empty and hold no '=' or NUL", k)
		case strings.Contains(v, "\x00"):
			return errdefs.Invalidf("env %s: values cannot hold NUL bytes", k)
		case k == "LIZARD_SANDBOX_ID" || k == "LIZARD_PROJECT_ID":
			return errdefs.Invalidf("env %s is set by Lizard; choose another name", k)
		case req.LizardToken && (k == "LIZARD_API_KEY" || k == "LIZARD_API_URL"):
			return errdefs.Invalidf("env %s is set by Lizard when lizardToken is true; drop one of them", k)
		}
		size += len(k) + len(v) + 2
		p.Envs = append(p.Envs, k+"="+v)
	}
	if size > MaxEnvBytes {
		return errdefs.Invalidf("envs total %d bytes; at most %d are allowed", size, MaxEnvBytes)
	}
	sort.Strings(p.Envs)
	return nil
}

// planLimits fills p's limits and egress from req within the maxima.
func (c *Control) planLimits(p *node.Plan, req api.CreateSandboxRequest) error {
	p.Limits = c.cfg.Limits
	top := c.cfg.MaxLimits
	if req.MemoryMb != nil {
		mb, max := *req.MemoryMb, orDefault(top.MemoryBytes, c.cfg.Limits.MemoryBytes)>>20
		if mb < 64 || max > 0 && mb > max {
			return errdefs.Invalidf("memoryMb %d is out of range: want 64 to %d (the server's --max-memory)", mb, max)
		}
		p.Limits.MemoryBytes = mb << 20
	}
	if req.Cpus != nil {
		cpus, max := *req.Cpus, orDefault(top.CPUs, c.cfg.Limits.CPUs)
		if math.IsNaN(cpus) || cpus < 0.1 || max > 0 && cpus > max {
			return errdefs.Invalidf("cpus %g is out of range: want 0.1 to %s (the server's --max-cpus)", cpus, strconv.FormatFloat(max, 'g', -1, 64))
		}
		p.Limits.CPUs = cpus
	}
	if req.DiskMb != nil {
		mb, max := *req.DiskMb, orDefault(top.DiskBytes, c.cfg.Limits.DiskBytes)>>20
		if mb < 16 || max > 0 && mb > max {
			return errdefs.Invalidf("diskMb %d is out of range: want 16 to %d (the server's --max-disk)", mb, max)
		}
		p.Limits.DiskBytes = mb << 20
	}
	p.Internet = c.cfg.Internet
	if req.AllowInternet != nil && !*req.AllowInternet {
		p.Internet = false
	}
	return nil
}

func orDefault[T int64 | float64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// childTimeout fills in and bounds the timeout of a sandbox asked for by
// sandbox parent ("": nothing to do).
func (c *Control) childTimeout(parent string, ms **int64) error {
	if parent == "" {
		return nil
	}
	if *ms == nil {
		def := min(c.cfg.DefaultTimeout, c.cfg.MaxChildTimeout).Milliseconds()
		*ms = &def
	}
	return c.checkChildTimeout(parent, **ms)
}

// checkChildTimeout checks the timeout of a sandbox whose parent is
// parent ("": any timeout checkTimeout allows).
func (c *Control) checkChildTimeout(parent string, ms int64) error {
	if parent == "" {
		return nil
	}
	if top := c.cfg.MaxChildTimeout.Milliseconds(); ms <= 0 || ms > top {
		return errdefs.Invalidf("timeoutMs %d: a sandbox made with another sandbox's lizardToken (%s) must expire within the server's --max-child-timeout: want 1 to %d (%s)",
			ms, parent, top, c.cfg.MaxChildTimeout)
	}
	return nil
}

// childBound is the end of sandbox sb's life if it was made with another
// sandbox's lizardToken (its creation + MaxChildTimeout, when its key
// dies), or zero.
func (c *Control) childBound(sb node.Sandbox) time.Time {
	if sb.ParentID == "" {
		return time.Time{}
	}
	return sb.CreatedAt.Add(c.cfg.MaxChildTimeout)
}

// pastBound refuses to bring back (resume, or a call or port that would
// resume it) a token child whose life has ended, whatever paused it.
func (c *Control) pastBound(id, parent string, bound time.Time) error {
	if bound.IsZero() || c.now().Before(bound) {
		return nil
	}
	return &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf(
		"sandbox %s was made with sandbox %s's lizardToken, so its life ended at %s (its creation + the server's --max-child-timeout of %s): it cannot be resumed; kill it",
		id, parent, bound.Format(time.RFC3339), c.cfg.MaxChildTimeout)}
}

// checkChildDeadline checks a new timeout of ms from now for sandbox sb:
// a token child's may not reach past its bound, so that neither its
// parent nor anyone else keeps it alive after its key has died.
func (c *Control) checkChildDeadline(sb node.Sandbox, ms int64) error {
	if err := c.checkChildTimeout(sb.ParentID, ms); err != nil {
		return err
	}
	bound := c.childBound(sb)
	if bound.IsZero() {
		return nil
	}
	if left := bound.Sub(c.now()).Milliseconds(); ms > left {
		return errdefs.Invalidf("timeoutMs %d: sandbox %s was made with sandbox %s's lizardToken and its life ends at %s (its creation + the server's --max-child-timeout of %s): want at most %d",
			ms, sb.ID, sb.ParentID, bound.Format(time.RFC3339), c.cfg.MaxChildTimeout, max(left, 0))
	}
	return nil
}

func (c *Control) checkTimeout(ms int64) error {
	if ms < 0 || ms > c.cfg.MaxTimeout.Milliseconds() {
		return errdefs.Invalidf("timeoutMs %d is out of range: want 0 (never expire) to %d (%s)",
			ms, c.cfg.MaxTimeout.Milliseconds(), c.cfg.MaxTimeout)
	}
	return nil
}
