package node

// Provisioning sources. A sandbox comes from one of four sources, each its
// own type in its own file:
//
//	source_boot.go     bootSource: the template (or a build's root) booted cold
//	source_restore.go  restoreSource: an image restored — the template snapshot,
//	                   a user's snapshot, a fork's parent
//	source_claim.go    claimSource: a running warm-pool sandbox handed over
//	source_resume.go   resumeSource: a paused sandbox restored from its own image
//
// provision (provision.go) runs the same steps, in the same order, for
// all; a source says what its kind does at each step where they differ.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/store"
)

// source is where a sandbox comes from, at each step of provision where
// the sources differ. Steps that fail say why in words (reason), which
// fail records.
type source interface {
	// about is what the source is for plan p, asked once: its names and
	// the answers that do not change along the steps.
	about(p Plan) about
	// record admits plan p and records its sandbox, holding an address
	// slot. On failure nothing is left to clean up.
	record(ctx context.Context, n *Local, p Plan) (store.Sandbox, error)
	// token gives l's sandbox, whose plan asks for one, its lizardToken:
	// the environment to add, and the port its egress must let through.
	// A plan without a token passes no source's token step.
	token(ctx context.Context, l *launch) (env []string, apiPort int, err error)
	// start has the runtime start the sandbox (a claim: bring it to the
	// foreground) and gives its agent its identity once it answers.
	start(ctx context.Context, l *launch) (reason string, err error)
	// markRunning records the sandbox running.
	markRunning(ctx context.Context, l *launch) error
	// fail cleans up after a step that failed for reason and returns
	// what provision returns.
	fail(ctx context.Context, l *launch, reason string, err error) (store.Sandbox, error)
	// announce emits its event (Created or Resumed).
	announce(ctx context.Context, l *launch, got store.Sandbox)
}

// about is what a source is for a plan: data, not steps, so that provision
// asks for it once (issue 35: a runCode's resume passed 14 of its stops
// through resumeSource, 8 of them such answers).
type about struct {
	// name is the source in logs and on the node.provision span
	// (lizard.source); image is the image it restores, if any; running
	// is the log message of a sandbox up from it.
	name, image, running string
	// path is the metrics path a user's create from it counts under
	// (metrics.PathBoot...): "" for a resume, which is not a create.
	path string
	// queues: the sandbox waits its turn at the restore gate
	// (restores.go) before it is recorded.
	queues bool
	// fromImage: it runs from an image that may trust a CA it must not
	// (trustEgress).
	fromImage bool
	// keepsCA: it trusts what it trusted when its image was taken, and
	// provision installs no egress CA (a resume: trust.go, a paused
	// sandbox keeps its CA).
	keepsCA bool
	// locked: provision's caller holds the sandbox's lock already (a
	// resume's); else provision takes it once the sandbox is recorded.
	locked bool
	// prior is what a refusal before record returns: a resume's paused
	// row; nothing for a new sandbox.
	prior store.Sandbox
}

// fresh is what the sources of a new sandbox (boot, restore, claim) share:
// it is admitted and recorded with a row of its own, locked by provision,
// minted a key, counted as a create, cleaned up by cleanupFailed, and
// announced as Created.
type fresh struct{}

// about is a new sandbox's source named name: an image of another sandbox
// (a fork's parent, a snapshot's) may trust a CA it must not.
func (fresh) about(p Plan, name, image, path, running string, queues bool) about {
	return about{name: name, image: image, path: path, running: running, queues: queues,
		fromImage: p.forked || p.SnapshotID != ""}
}

// record admits plan p (a user's sandbox, by the node's Admission) and
// records its sandbox: a new row holding an address slot.
func (f fresh) record(ctx context.Context, n *Local, p Plan) (store.Sandbox, error) {
	quota, release, err := f.admit(ctx, n, p)
	if err != nil {
		return store.Sandbox{}, err
	}
	defer release()
	sb := store.Sandbox{
		ID: NewID(), ProjectID: p.ProjectID, Template: p.Template, State: api.StateStarting,
		TimeoutMs: p.TimeoutMs, Metadata: p.Metadata, CreatedAt: n.clock.now(), Shape: p.Shape(), Role: p.Role,
		ParentID: p.ParentID,
	}
	// A slot released just before is the lowest free under churn, and its
	// Create would wait for its conntrack entries to go (netns.Pool.Settling).
	err = n.cfg.Store.CreateAdmitted(ctx, &sb, quota, n.cfg.Pool.Slots(), n.cfg.Pool.AddrStrings, n.cfg.Pool.Settling()...)
	var over *store.OverQuota
	if errors.As(err, &over) {
		return sb, Refusal(over)
	}
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

// token mints the sandbox an API key of its project, tied to its ID
// (revoked when it ends), here, in the one place every sandbox is made on
// one machine or in a cluster; its ID (never the key) goes to the audit
// trail as a KeyCreated event. The API's address comes with it.
func (fresh) token(ctx context.Context, l *launch) (env []string, apiPort int, err error) {
	n, sb := l.n, l.sb
	k, err := auth.CreateUntil(ctx, n.cfg.Store, sb.ProjectID, sb.ID, l.p.KeyExpires)
	if err != nil {
		return nil, 0, fmt.Errorf("minting the sandbox's API key: %w", err)
	}
	n.bus.emit(Event{Kind: KeyCreated, SandboxID: sb.ID, ProjectID: sb.ProjectID, KeyIDs: []string{k.ID}})
	env = []string{"LIZARD_API_KEY=" + k.String()}
	if n.cfg.TokenAPI != nil {
		apiEnv, port := n.cfg.TokenAPI(sb.HostAddr)
		env, apiPort = append(env, apiEnv...), port
	}
	return env, apiPort, nil
}

func (fresh) markRunning(ctx context.Context, l *launch) error {
	return l.n.cfg.Store.MarkRunning(ctx, l.sb.ID, l.n.clock.deadline(l.p.TimeoutMs))
}

// fail removes the sandbox and records why. An error that already tells
// the caller what happened (the agent timed out, the sandbox died while
// starting) is returned as it is, and its message recorded as the reason.
func (fresh) fail(ctx context.Context, l *launch, reason string, err error) (store.Sandbox, error) {
	var e *errdefs.Error
	told := errors.As(err, &e) && (e.Kind != nil || e.Msg != "")
	if told && e.Msg != "" {
		reason = e.Msg
	}
	if ctx.Err() != nil {
		reason = "creation cancelled: the client went away"
	}
	l.n.cleanupFailed(ctx, l.log, l.sb, reason)
	l.log.Warn("sandbox failed to start", "source", l.ab.name, "reason", reason, "err", err)
	if ctx.Err() != nil {
		return store.Sandbox{}, ctx.Err()
	}
	if told {
		return store.Sandbox{}, err
	}
	return store.Sandbox{}, &errdefs.Error{Msg: fmt.Sprintf("sandbox %s failed to start: %s", l.sb.ID, reason), Cause: err}
}

// announce emits Created for a user's sandbox (the node's own are not
// created for anyone).
func (fresh) announce(ctx context.Context, l *launch, got store.Sandbox) {
	if l.p.Role != "" {
		return
	}
	caller, _ := auth.CallerOf(ctx)
	l.n.bus.emit(Event{Kind: Created, SandboxID: got.ID, ProjectID: got.ProjectID, Token: l.p.Token, Caller: caller,
		Template: got.Template, ParentID: l.p.ParentID, SnapshotID: l.p.SnapshotID, ForkedFrom: l.p.fork.parentID()})
}

// admit admits plan p, a user's sandbox, by node n's Admission: the
// quota its row is recorded under (none for the node's own sandboxes) and
// the function that ends the admission once it is recorded.
func (fresh) admit(ctx context.Context, n *Local, p Plan) (q store.Quota, release func(), err error) {
	if p.Role != "" || n.cfg.Admission == nil {
		return store.Quota{}, func() {}, nil
	}
	return n.cfg.Admission.Admit(ctx, p.ProjectID, p.Limits.DiskBytes)
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
	if err := n.cfg.Store.EndSandbox(cctx, sb.ID, api.StateFailed, reason, n.clock.now()); err != nil {
		log.Error("recording a failed sandbox", "err", err)
	}
	n.stopped(sb, api.StateFailed, reason)
}
