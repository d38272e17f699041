package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/trace"
)

// resumeSource restores a paused sandbox (resumeLocked, pause.go) from its
// own image into a new address slot: its row is kept, its caller holds its
// lock, and it keeps its identity and its lizardToken's key. An image that
// cannot be restored fails the sandbox; a lack of addresses, a client gone
// during the restore, or an image made by another runtime build (which
// that build can still restore) leaves it paused.
type resumeSource struct {
	row store.Sandbox
	// timeoutMs and expires are the deadline it resumes with.
	timeoutMs int64
	expires   *time.Time
	dir       string // its image; "" if none was recorded
	// cached: dir is the image cache's (durable.go), fetched from the
	// image store, not to be removed after the resume.
	cached bool
	// disk: dir is a disk alone (diskOnly), which the template boots
	// over, not an image of its memory to restore: decided once, when
	// the source is chosen, for start.
	disk bool
}

// about: a resume is not a create (no metrics path: an explicit Resume
// is counted as metrics.OpResume); a user's sandbox with an image to
// restore waits its turn; it keeps the egress CA its image trusts unless
// its policy injects now (an UpdateNetwork while it was paused may have
// added the rules: the CA, its own as before, is installed again — one
// call to its agent, for such sandboxes alone); its caller (resumeLocked)
// holds its lock already; a refusal leaves it as it was, paused.
func (r resumeSource) about(p Plan) about {
	return about{name: "resume", image: r.dir, running: "sandbox resumed", queues: p.Role == "" && r.dir != "",
		keepsCA: !injects(r.row.Shape.Network), locked: true, prior: r.row}
}

// record gives the paused row a new address slot to resume into. It is
// not admitted again: it counted against its project's quotas all along.
// On failure it stays paused.
func (r resumeSource) record(ctx context.Context, n *Local, _ Plan) (store.Sandbox, error) {
	sb := r.row
	// A resume cut short by a server crash may have left the sandbox up.
	// Nothing is made yet: a client gone meanwhile leaves it paused, and
	// the next resume kills again.
	if err := n.cfg.Runtime.Kill(ctx, sb.ID); err != nil {
		return sb, fmt.Errorf("clearing sandbox %s before resuming it: %w", sb.ID, err)
	}
	host, guest, err := n.cfg.Store.AssignSlot(ctx, sb.ID, n.cfg.Pool.Slots(), n.cfg.Pool.AddrStrings, n.cfg.Pool.Settling()...)
	if errors.Is(err, store.ErrFull) {
		return sb, &errdefs.Error{Kind: errdefs.ErrUnavailable, Cause: err,
			Msg: fmt.Sprintf("no free sandbox address to resume sandbox %s; it stays paused; kill sandboxes or widen --address-pool", sb.ID)}
	}
	if err != nil {
		return sb, err
	}
	sb.HostAddr, sb.GuestAddr = host, guest
	return sb, nil
}

// token: a resumed sandbox keeps its key while it is good; only the API's
// address, on its new host address, is given again.
func (resumeSource) token(ctx context.Context, l *launch) (env []string, apiPort int, err error) {
	n, sb := l.n, l.sb
	if n.cfg.TokenAPI == nil {
		return nil, 0, nil
	}
	has, err := n.cfg.Store.SandboxHasLiveKey(ctx, sb.ID, n.clock.now())
	if err != nil {
		// It resumes without the API: its code can still run.
		n.log.Error("looking up the lizardToken of a resumed sandbox", "sandbox_id", sb.ID, "err", err)
	}
	if err != nil || !has {
		return nil, 0, nil
	}
	env, apiPort = n.cfg.TokenAPI(sb.HostAddr)
	return env, apiPort, nil
}

// cutShort is a restore whose client went away: not the image's fault, so
// fail leaves the sandbox paused.
type cutShort struct{ error }

func (c cutShort) Unwrap() error { return c.error }

// start has the runtime restore its image and waits for its agent. Its
// environment is in the image already, and it keeps its identity and
// seeds: only the API's address, on its new host address, is news to its
// agent — and, paused on another node (its image the cache's), the secret
// this node gives it. An image of its disk alone (a pause with memory:
// false) has no memory to restore: the template boots fresh with that
// disk over it (boot).
func (r resumeSource) start(ctx context.Context, l *launch) (string, error) {
	if r.dir == "" {
		return "its checkpoint image is missing", errors.New("no image recorded")
	}
	if r.disk {
		return r.boot(ctx, l)
	}
	spec, err := l.spec(l.env)
	if err != nil {
		return "its addresses are unusable", err
	}
	if err := trace.Step(ctx, "node.restore", func(ctx context.Context) error { return l.n.restoreImage(ctx, l.p, spec, r.dir) }); err != nil {
		if ctx.Err() != nil {
			return "", cutShort{ctx.Err()}
		}
		if errors.Is(err, sandbox.ErrOtherBuild) {
			return "", keptImage{err}
		}
		return "its checkpoint image is missing or corrupt", err
	}
	req := api.ReseedRequest{SandboxID: l.sb.ID, KeepSeeds: true}
	if r.cached {
		req.Envs = envMap(l.tokenEnv)
		if err := l.n.agents.wait(ctx, l.sb, &req, l.n.images.imageAuth(r.dir)); err != nil {
			return "its agent did not take this node's secret after the restore", err
		}
		return "", nil
	}
	if err := trace.Step(ctx, "node.agent_wait", func(ctx context.Context) error { return l.n.agents.wait(ctx, l.sb, nil, "") }); err != nil {
		return "its agent did not answer after the restore", err
	}
	if len(l.tokenEnv) > 0 {
		req.Envs = envMap(l.tokenEnv)
		if err := trace.Step(ctx, "node.reseed", func(ctx context.Context) error { return l.n.agents.Reseed(ctx, req, "") }); err != nil {
			return "telling its agent the new API address failed", err
		}
	}
	return "", nil
}

// keptImage is a restore refused because another runtime build made the
// image (an upgrade changed runsc): the image is intact, so fail leaves
// the sandbox paused with it, for the build that made it to resume.
type keptImage struct{ error }

func (k keptImage) Unwrap() error { return k.error }

// boot starts a sandbox paused keeping its disk alone: the template,
// booted with its identity, environment and API address, and its saved
// disk over the template's root; then waits for its agent.
func (r resumeSource) boot(ctx context.Context, l *launch) (string, error) {
	if _, ok := l.n.cfg.Runtime.(sandbox.DiskSaver); !ok {
		return "this node's runtime cannot boot it over its saved disk", fmt.Errorf("the %s runtime is no sandbox.DiskSaver", l.n.cfg.Runtime.Name())
	}
	env, err := savedEnv(r.dir, append(slices.Clone(l.env), l.tokenEnv...))
	if err != nil {
		return "its saved environment is missing or corrupt", err
	}
	spec, err := l.spec(env)
	if err != nil {
		return "its addresses are unusable", err
	}
	spec.Disk = r.dir
	if err := trace.Step(ctx, "node.start", func(ctx context.Context) error { return l.n.cfg.Runtime.Create(ctx, spec) }); err != nil {
		if ctx.Err() != nil {
			return "", cutShort{ctx.Err()}
		}
		return "its saved disk could not be booted over (the server log says why)", err
	}
	if err := trace.Step(ctx, "node.agent_wait", func(ctx context.Context) error { return l.n.agents.wait(ctx, l.sb, nil, "") }); err != nil {
		return "its agent did not answer after the restore", err
	}
	return "", nil
}

// markRunning gives it its deadline back; its image goes.
func (r resumeSource) markRunning(ctx context.Context, l *launch) error {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if err := l.n.cfg.Store.MarkResumed(cctx, l.sb.ID, r.timeoutMs, r.expires); err != nil {
		return err
	}
	if !r.cached {
		removeDir(l.log, "the image of a resumed sandbox", r.dir)
	}
	return nil
}

// fail ends the sandbox failed (its own image removed, the cache's kept),
// unless its restore was only cut short: then it stays paused, its runtime
// sandbox killed and its address slot freed.
func (r resumeSource) fail(ctx context.Context, l *launch, reason string, err error) (store.Sandbox, error) {
	if errors.As(err, new(cutShort)) {
		l.n.unslot(ctx, l.log, l.sb)
		return l.sb, ctx.Err()
	}
	if errors.As(err, new(keptImage)) {
		l.n.unslot(ctx, l.log, l.sb)
		l.log.Warn("sandbox not resumed: its image was made by another runtime build; it stays paused", "image", r.dir, "err", err)
		return l.sb, err
	}
	image := r.dir
	if r.cached {
		image = ""
	}
	return l.n.failResume(ctx, l.log, l.sb, image, reason, err)
}

func (resumeSource) announce(_ context.Context, l *launch, got store.Sandbox) {
	l.n.bus.emit(Event{Kind: Resumed, SandboxID: got.ID, ProjectID: got.ProjectID, Token: l.p.Token})
}

// failResume ends sandbox sb, which could not be resumed from image, as
// failed for reason, and returns the gone error its caller gets.
func (n *Local) failResume(ctx context.Context, log *slog.Logger, sb store.Sandbox, image, reason string, err error) (store.Sandbox, error) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if kerr := n.cfg.Runtime.Kill(cctx, sb.ID); kerr != nil {
		log.Error("killing a sandbox that failed to resume", "err", kerr)
	}
	if eerr := n.cfg.Store.EndSandbox(cctx, sb.ID, api.StateFailed, reason, n.clock.now()); eerr != nil {
		log.Error("recording a sandbox that failed to resume", "err", eerr)
	}
	if image != "" {
		removeDir(log, "the image of a sandbox that failed to resume", image)
	}
	n.images.forget(PausedImage(sb.ID))
	n.stopped(sb, api.StateFailed, reason)
	log.Warn("sandbox failed to resume", "reason", reason, "err", err)
	return sb, &errdefs.Error{Kind: errdefs.ErrGone, Msg: fmt.Sprintf("sandbox %s could not be resumed: %s", sb.ID, reason), Cause: err}
}

// unslot puts sandbox sb, whose resume was cut short, back to paused: its
// runtime sandbox killed and its address slot freed.
func (n *Local) unslot(ctx context.Context, log *slog.Logger, sb store.Sandbox) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if err := n.cfg.Runtime.Kill(cctx, sb.ID); err != nil {
		log.Error("killing a sandbox whose resume was cut short", "err", err)
	}
	if err := n.cfg.Store.ReleaseSlot(cctx, sb.ID); err != nil {
		log.Error("freeing the address of a sandbox whose resume was cut short", "err", err)
	}
}
