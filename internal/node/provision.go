package node

// The provisioning pipeline. Every sandbox a node runs — booted, restored
// from the template snapshot, claimed from the warm pool, restored from a
// snapshot or a fork's image, resumed from its pause, and the node's own
// template and pool sandboxes — is started by provision, in this order:
// admit and record (a resume: take a new address slot for its row), lock,
// start, wait for the agent, give it its identity, mark it running.

import (
	"context"
	"errors"
	"fmt"
	"github.com/lizard-build/lizard/internal/netpolicy"
	"log/slog"
	"slices"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentclient"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/trace"
)

// Plan is one sandbox to make, as the control plane decided it.
type Plan struct {
	ProjectID string
	// Role is "" for users' sandboxes, or store.RoleTemplate or
	// store.RoleWarm for the node's own.
	Role      string
	Template  string
	TimeoutMs int64 // 0: never expires
	Metadata  map[string]string
	OnTimeout string   // "", api.OnTimeoutKill or api.OnTimeoutPause
	Envs      []string // KEY=VALUE, sorted
	Limits    sandbox.Limits
	Internet  bool
	// Network is the sandbox's policy by name (nil: none); it is
	// enforced by the node's Egress and recorded in its shape.
	Network *netpolicy.Policy
	// Volumes are mounted in the sandbox (and again at each restore);
	// PublicPorts lets anyone reach its ports through the API.
	Volumes     []store.VolumeMount
	PublicPorts bool
	// Image, when set, is the checkpoint to restore (a snapshot, a fork's
	// parent); otherwise the template snapshot or the warm pool may serve,
	// or the template boots.
	Image string
	// Token asks for a lizardToken: the node mints the sandbox an API key
	// of its project, tied to its ID (revoked when it ends), and audits it.
	Token bool
	// KeyExpires, when set, is when that key stops working even while the
	// sandbox lives on: a token child's bound (control's MaxChildTimeout).
	KeyExpires time.Time
	// ParentID is the sandbox whose lizardToken asked for this one, if any.
	ParentID string
	// SnapshotID is the snapshot Image is, for the audit trail.
	SnapshotID string
	// Build, when set, is a template build's private root filesystem: the
	// sandbox boots it writable (sandbox.Spec.WritableRoot) instead of
	// Template's artifact. Role store.RoleBuild.
	Build *sandbox.Artifact
	// forked: Image is a fork's parent (metrics tell forks from snapshots).
	forked bool
	// fork, set by Fork, says whose checkpoint Image will be, and waits
	// for it: the copy is set up meanwhile.
	fork *forkOf
}

// source is where a sandbox comes from: a boot, a checkpoint image, a
// running warm-pool sandbox, or a paused sandbox's own image.
type source struct {
	name  string // for logs
	path  string // for metrics: metrics.PathBoot...
	image string // restore this image; "" with claim false boots
	claim bool
	// resume, set by resumeLocked, is a paused sandbox restored from
	// image into a new address slot: its row is kept, its caller holds
	// its lock, and it keeps its identity and its lizardToken's key.
	resume *resumeOf
	// cached: image is the image cache's (durable.go), not to be removed
	// after a resume.
	cached bool
}

// resumeOf is a paused sandbox to resume, and the deadline it resumes
// with.
type resumeOf struct {
	row       store.Sandbox
	timeoutMs int64
	expires   *time.Time
}

// ownImage is the image a failed resume removes: none when it is the
// cache's.
func (s source) ownImage() string {
	if s.cached {
		return ""
	}
	return s.image
}

var (
	boot     = source{name: "boot", path: metrics.PathBoot}
	warmPool = source{name: "warm pool", path: metrics.PathWarmPool, claim: true}
)

func restoreOf(name, path, image string) source { return source{name: name, path: path, image: image} }

// errNoWarm: the warm pool had no sandbox to claim.
var errNoWarm = errors.New("no warm sandbox")

// provision makes one sandbox of plan p from src and returns it running.
// On failure nothing is left: the sandbox is killed, its address freed
// and its row marked failed (a resume that was only refused or cut short
// leaves the sandbox paused).
func (n *Local) provision(ctx context.Context, p Plan, src source) (_ store.Sandbox, err error) {
	var a sandbox.Artifact
	if p.Build != nil {
		a = *p.Build
	} else if a, err = n.artifact(ctx, p.Template); err != nil {
		return store.Sandbox{}, err
	}
	// A restore waits its turn before anything is recorded (restores.go),
	// and keeps it until its agent answers: the restore's CPU goes on
	// after runsc returns, while the guest's pages load.
	restored := func() {}
	if queues(p, src) {
		if restored, err = n.restores.enter(ctx); err != nil {
			if src.resume != nil {
				return src.resume.row, err
			}
			return store.Sandbox{}, err
		}
		defer restored()
	}
	sb, err := n.record(ctx, p, src)
	if err != nil {
		return sb, err
	}
	ctx, sp := trace.Start(ctx, "node.provision", trace.Sandbox(sb.ID), trace.Project(sb.ProjectID),
		trace.Template(sb.Template), trace.Runtime(n.cfg.Runtime.Name()), trace.String("lizard.source", src.name))
	defer func() { trace.End(sp, err) }()
	if p.Role == "" && src.resume == nil {
		// Creates for users, from the moment one is admitted and recorded.
		defer func(begin time.Time) { n.cfg.Metrics.SandboxCreated(src.path, time.Since(begin), err) }(time.Now())
	}
	log := n.log.With("sandbox_id", sb.ID, "project_id", sb.ProjectID)
	if src.resume == nil {
		// Kill, SetTimeout and the reaper wait until the sandbox is up or
		// gone. A resume's caller holds the lock already.
		unlock := n.locks.Lock(sb.ID)
		defer unlock()
	}
	begin := time.Now()
	fail := func(reason string, err error) (store.Sandbox, error) {
		if src.resume != nil {
			return n.failResume(ctx, log, sb, src.ownImage(), reason, err)
		}
		// An error that already tells the caller what happened (the agent
		// timed out, the sandbox died while starting) is returned as it
		// is, and its message recorded as the reason.
		var e *errdefs.Error
		told := errors.As(err, &e) && (e.Kind != nil || e.Msg != "")
		if told && e.Msg != "" {
			reason = e.Msg
		}
		if ctx.Err() != nil {
			reason = "creation cancelled: the client went away"
		}
		n.cleanupFailed(ctx, log, sb, reason)
		log.Warn("sandbox failed to start", "source", src.name, "reason", reason, "err", err)
		if ctx.Err() != nil {
			return store.Sandbox{}, ctx.Err()
		}
		if told {
			return store.Sandbox{}, err
		}
		return store.Sandbox{}, &errdefs.Error{Msg: fmt.Sprintf("sandbox %s failed to start: %s", sb.ID, reason), Cause: err}
	}
	if src.resume != nil && src.image == "" {
		return fail("its checkpoint image is missing", errors.New("no image recorded"))
	}
	if p.OnTimeout != "" {
		if err := n.cfg.Store.SetOnTimeout(ctx, sb.ID, p.OnTimeout); err != nil {
			return fail("recording onTimeout failed", err)
		}
	}
	env := append(slices.Clone(p.Envs), identityEnv(sb)...)
	tokenEnv, apiPort, err := n.token(ctx, sb, p, src)
	if err != nil {
		return fail("giving it its lizardToken failed", err)
	}
	if !src.claim {
		specEnv := env
		if src.resume == nil {
			specEnv = append(slices.Clone(env), tokenEnv...)
		}
		spec, err := n.spec(sb, a, specEnv, apiPort)
		if err != nil {
			return fail("its addresses are unusable", err)
		}
		spec.WritableRoot = p.Build != nil
		step := "node.start"
		if src.image != "" {
			step = "node.restore"
		}
		if err := trace.Step(ctx, step, func(ctx context.Context) error { return n.start(ctx, p, spec, src) }); err != nil {
			if src.resume != nil {
				if ctx.Err() != nil {
					// Not the image's fault: the sandbox stays paused.
					n.unslot(ctx, log, sb)
					return sb, ctx.Err()
				}
				return fail("its checkpoint image is missing or corrupt", err)
			}
			return fail(fmt.Sprintf("the %s runtime could not start it (the server log says why)", n.cfg.Runtime.Name()), err)
		}
	}
	if src.claim {
		// Restored in the background (sandbox.Spec.Background), it runs
		// for its caller from now on.
		if pr, ok := n.cfg.Runtime.(sandbox.Prioritizer); ok {
			if err := trace.Step(ctx, "node.foreground", func(ctx context.Context) error { return pr.Foreground(ctx, sb.ID) }); err != nil {
				return fail("raising its CPU share failed", err)
			}
		}
	}
	switch {
	case src.resume != nil && src.cached:
		// Paused on another node: its agent holds the secret that node
		// gave it, and takes this node's (and the API's new address).
		r := api.ReseedRequest{SandboxID: sb.ID, Envs: envMap(tokenEnv), KeepSeeds: true}
		if err := n.reseedRestored(ctx, sb, r, src.image); err != nil {
			return fail("its agent did not take this node's secret after the restore", err)
		}
	case src.resume != nil:
		if err := trace.Step(ctx, "node.agent_wait", func(ctx context.Context) error { return n.waitAgent(ctx, sb) }); err != nil {
			return fail("its agent did not answer after the restore", err)
		}
		// It keeps its identity and seeds; only the API's address, on
		// its new host address, is news to it.
		if len(tokenEnv) > 0 {
			r := api.ReseedRequest{SandboxID: sb.ID, Envs: envMap(tokenEnv), KeepSeeds: true}
			if err := trace.Step(ctx, "node.reseed", func(ctx context.Context) error { return n.agents.Reseed(ctx, r, "") }); err != nil {
				return fail("telling its agent the new API address failed", err)
			}
		}
	case src.image == "" && !src.claim:
		if err := trace.Step(ctx, "node.agent_wait", func(ctx context.Context) error { return n.waitAgent(ctx, sb) }); err != nil {
			return fail("its agent did not answer", err)
		}
	default:
		// A copy of another sandbox takes its own identity, seeds and
		// agent secret, in the first request its agent gets.
		// A warm-pool sandbox took fresh seeds at its own restore: its
		// claim only gives it its caller's identity.
		r := api.ReseedRequest{SandboxID: sb.ID, Envs: envMap(append(env, tokenEnv...)), KeepSeeds: src.claim}
		if !p.Token {
			// The image may hold another sandbox's lizardToken (a fork's parent).
			r.Unset = []string{"LIZARD_API_KEY", "LIZARD_API_URL"}
		}
		// A restored agent is waited for in the reseed: it answers the
		// reseed as soon as it is up.
		err = trace.Step(ctx, "node.reseed", func(ctx context.Context) error {
			if src.claim {
				return n.agents.Reseed(ctx, r, "")
			}
			return n.reseedRestored(ctx, sb, r, src.image)
		})
		if err != nil {
			return fail("giving it its identity failed", err)
		}
	}
	restored()
	// An image of another sandbox (a fork's parent, a snapshot's), or its
	// own from before an update while paused, may trust a CA it must not.
	fromImage := src.resume != nil || p.forked || p.SnapshotID != ""
	parent := ""
	if p.fork != nil {
		parent = p.fork.parent
	}
	if err := n.trustEgress(ctx, sb.ID, p.Network, fromImage, parent); err != nil {
		return fail("installing its egress CA failed", err)
	}
	if err := n.markRunning(ctx, log, sb, p, src); err != nil {
		return fail("recording the running sandbox failed", err)
	}
	got, err := n.cfg.Store.GetSandbox(ctx, sb.ID)
	if err != nil {
		return store.Sandbox{}, err
	}
	msg := "sandbox running"
	switch {
	case src.resume != nil:
		msg = "sandbox resumed"
	case src.claim:
		msg = "sandbox claimed from the warm pool"
	case src.image != "":
		msg = "sandbox restored"
	}
	log.Info(msg, "source", src.name, "image", src.image, "template", sb.Template, "role", sb.Role, "guest_addr", sb.GuestAddr,
		"timeout_ms", p.TimeoutMs, "took", time.Since(begin).Round(time.Millisecond))
	n.started(got)
	if src.resume != nil {
		n.emit(Event{Kind: Resumed, SandboxID: got.ID, ProjectID: got.ProjectID, Token: p.Token})
	}
	if p.Role == "" && src.resume == nil {
		caller, _ := auth.CallerOf(ctx)
		e := Event{Kind: Created, SandboxID: got.ID, ProjectID: got.ProjectID, Token: p.Token, Caller: caller,
			Template: got.Template, ParentID: p.ParentID, SnapshotID: p.SnapshotID}
		if p.fork != nil {
			e.ForkedFrom = p.fork.parent
		}
		n.emit(e)
	}
	return got, nil
}

// markRunning records sb running: a claim is running already; a resume
// gets its deadline back and its image goes.
func (n *Local) markRunning(ctx context.Context, log *slog.Logger, sb store.Sandbox, p Plan, src source) error {
	switch {
	case src.claim:
		return nil
	case src.resume != nil:
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		if err := n.cfg.Store.MarkResumed(cctx, sb.ID, src.resume.timeoutMs, src.resume.expires); err != nil {
			return err
		}
		if !src.cached {
			removeDir(log, "the image of a resumed sandbox", src.image)
		}
		return nil
	}
	return n.cfg.Store.MarkRunning(ctx, sb.ID, n.deadline(p.TimeoutMs))
}

// failResume ends sandbox sb, which could not be resumed from image, as
// failed for reason, and returns the gone error its caller gets.
func (n *Local) failResume(ctx context.Context, log *slog.Logger, sb store.Sandbox, image, reason string, err error) (store.Sandbox, error) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if kerr := n.cfg.Runtime.Kill(cctx, sb.ID); kerr != nil {
		log.Error("killing a sandbox that failed to resume", "err", kerr)
	}
	if eerr := n.cfg.Store.EndSandbox(cctx, sb.ID, api.StateFailed, reason, n.now()); eerr != nil {
		log.Error("recording a sandbox that failed to resume", "err", eerr)
	}
	if image != "" {
		removeDir(log, "the image of a sandbox that failed to resume", image)
	}
	n.forget(PausedImage(sb.ID))
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

// start has the runtime start sandbox spec from src: a boot, a restore,
// or the restore of a fork's copy, overlapped with its parent's
// checkpoint where the runtime can (sandbox.ForkRestorer).
func (n *Local) start(ctx context.Context, p Plan, spec sandbox.Spec, src source) error {
	switch {
	case src.image == "":
		return n.cfg.Runtime.Create(ctx, spec)
	case p.fork == nil:
		return n.cfg.Runtime.Restore(ctx, spec, src.image)
	}
	if fr, ok := n.cfg.Runtime.(sandbox.ForkRestorer); ok {
		return fr.RestoreFork(ctx, spec, p.fork.parent, src.image, p.fork.wait)
	}
	if err := p.fork.wait(ctx); err != nil {
		return fmt.Errorf("restoring sandbox %s: its image was not made: %w", spec.ID, err)
	}
	return n.cfg.Runtime.Restore(ctx, spec, src.image)
}

// record admits plan p (a user's sandbox, by the node's Admission) and
// records its sandbox: a new row holding an address slot, for a warm-pool
// claim the claimed sandbox's row handed to p's project, for a resume the
// paused sandbox's row given a new slot.
func (n *Local) record(ctx context.Context, p Plan, src source) (store.Sandbox, error) {
	if src.resume != nil {
		return n.reslot(ctx, *src.resume)
	}
	if p.Role == "" && n.cfg.Admission != nil {
		release, err := n.cfg.Admission.Admit(ctx, p.ProjectID, p.Limits.DiskBytes)
		if err != nil {
			return store.Sandbox{}, err
		}
		defer release()
	}
	if src.claim {
		sb, err := n.cfg.Store.ClaimWarm(ctx, p.Template, p.ProjectID, p.Metadata, p.TimeoutMs, n.now(), n.deadline(p.TimeoutMs))
		if errors.Is(err, store.ErrNotFound) {
			return sb, errNoWarm
		}
		return sb, err
	}
	sb := store.Sandbox{
		ID: NewID(), ProjectID: p.ProjectID, Template: p.Template, State: api.StateStarting,
		TimeoutMs: p.TimeoutMs, Metadata: p.Metadata, CreatedAt: n.now(), Shape: p.Shape(), Role: p.Role,
		ParentID: p.ParentID,
	}
	// A slot released just before is the lowest free under churn, and its
	// Create would wait for its conntrack entries to go (netns.Pool.Settling).
	err := n.cfg.Store.CreateSandbox(ctx, &sb, n.cfg.Pool.Slots(), n.cfg.Pool.AddrStrings, n.cfg.Pool.Settling()...)
	if errors.Is(err, store.ErrFull) {
		return sb, &errdefs.Error{Kind: errdefs.ErrUnavailable, Cause: err,
			Msg: fmt.Sprintf("no free sandbox address: all %d addresses of the pool %s are in use; kill sandboxes or widen --address-pool",
				n.cfg.Pool.Slots(), n.cfg.Pool.Prefix())}
	}
	if err != nil {
		return sb, fmt.Errorf("recording sandbox: %w", err)
	}
	return sb, nil
}

// reslot gives paused sandbox r.row a new address slot to resume into.
// It is not admitted again: it counted against its project's quotas all
// along. On failure it stays paused.
func (n *Local) reslot(ctx context.Context, r resumeOf) (store.Sandbox, error) {
	sb := r.row
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	// A resume cut short by a server crash may have left the sandbox up.
	if err := n.cfg.Runtime.Kill(cctx, sb.ID); err != nil {
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

// token gives sb, if its plan asks for a lizardToken, its API key and the
// API's address: the environment to add, and the port its egress policy
// must let through. The key is minted here, in the one place every
// sandbox is made on one machine or in a cluster, and its ID (never the
// key) goes to the audit trail as a KeyCreated event.
//
// A resumed sandbox keeps its key while it is good: only the API's address,
// on its new host address, is given again.
func (n *Local) token(ctx context.Context, sb store.Sandbox, p Plan, src source) (env []string, apiPort int, err error) {
	if !p.Token {
		return nil, 0, nil
	}
	if src.resume != nil {
		if n.cfg.TokenAPI == nil {
			return nil, 0, nil
		}
		has, err := n.cfg.Store.SandboxHasLiveKey(ctx, sb.ID, n.now())
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
	k, err := auth.CreateUntil(ctx, n.cfg.Store, sb.ProjectID, sb.ID, p.KeyExpires)
	if err != nil {
		return nil, 0, fmt.Errorf("minting the sandbox's API key: %w", err)
	}
	n.emit(Event{Kind: KeyCreated, SandboxID: sb.ID, ProjectID: sb.ProjectID, KeyIDs: []string{k.ID}})
	env = []string{"LIZARD_API_KEY=" + k.String()}
	if n.cfg.TokenAPI != nil {
		apiEnv, port := n.cfg.TokenAPI(sb.HostAddr)
		env, apiPort = append(env, apiEnv...), port
	}
	return env, apiPort, nil
}

// reseedRestored gives sandbox sb, just restored from image, its identity
// r and its own agent secret as soon as its agent answers. Its agent holds
// the secret of the sandbox the image was taken from until then.
func (n *Local) reseedRestored(ctx context.Context, sb store.Sandbox, r api.ReseedRequest, image string) error {
	r.Secret = n.agentSecret(sb.ID)
	auth := n.imageAuth(image)
	return n.awaitAgent(ctx, sb, "answered after the restore", func(ctx context.Context, alive func(context.Context) error) error {
		return n.agents.ReseedWhenUp(ctx, r, auth, alive)
	})
}

// waitAgent waits for sandbox sb's agent to answer.
func (n *Local) waitAgent(ctx context.Context, sb store.Sandbox) error {
	return n.awaitAgent(ctx, sb, "started", func(ctx context.Context, alive func(context.Context) error) error {
		return n.agents.Wait(ctx, sb.ID, alive)
	})
}

// awaitAgent runs wait, which waits on sandbox sb's agent, for at most
// StartTimeout and no longer than sb's runtime runs, and says in words for
// the caller which ended it: "did not answer within", or "stopped before
// its agent <what>".
func (n *Local) awaitAgent(ctx context.Context, sb store.Sandbox, what string, wait func(context.Context, func(context.Context) error) error) error {
	wctx, cancel := context.WithTimeout(ctx, n.cfg.StartTimeout)
	defer cancel()
	err := wait(wctx, func(ctx context.Context) error {
		if n.dead(ctx, sb.ID) {
			return errors.New("its runtime stopped")
		}
		return nil
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case wctx.Err() != nil:
		return &errdefs.Error{Msg: fmt.Sprintf("sandbox %s's agent did not answer within %s", sb.ID, n.cfg.StartTimeout), Cause: err}
	case errors.Is(err, agentclient.ErrStopped):
		return &errdefs.Error{Msg: fmt.Sprintf("sandbox %s stopped before its agent %s (the server log says why)", sb.ID, what), Cause: err}
	}
	return err
}

// cleanupFailed removes a sandbox that did not start and records why. It
// runs even if ctx is cancelled: a client that gives up must not leave a
// half-made sandbox.
func (n *Local) cleanupFailed(ctx context.Context, log *slog.Logger, sb store.Sandbox, reason string) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if err := n.cfg.Runtime.Kill(cctx, sb.ID); err != nil {
		// The row ends anyway; the orphan sweep retries the kill.
		log.Error("killing a sandbox that failed to start", "err", err)
	}
	if err := n.cfg.Store.EndSandbox(cctx, sb.ID, api.StateFailed, reason, n.now()); err != nil {
		log.Error("recording a failed sandbox", "err", err)
	}
	n.stopped(sb, api.StateFailed, reason)
}
