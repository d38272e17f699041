package node

// The provisioning pipeline. Every sandbox a node runs — booted, restored
// from the template snapshot, claimed from the warm pool, restored from a
// snapshot or a fork's image, resumed from its pause, and the node's own
// template and pool sandboxes — is started by provision, in this order:
// wait for a restore turn, admit and record (a resume: take a new address
// slot for its row), lock, mint its lizardToken, start it and give its
// agent its identity, mark it running. Where the sources differ, each says what it
// does (source.go; source_boot.go, source_restore.go, source_claim.go,
// source_resume.go).

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/lizard-build/lizard/internal/netpolicy"

	"github.com/lizard-build/lizard/api"
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
	OnTimeout string // "", api.OnTimeoutKill or api.OnTimeoutPause
	// PauseDiskOnly: its pauses keep its disk alone (store.Pause.DiskOnly).
	PauseDiskOnly bool
	Envs          []string // KEY=VALUE, sorted
	Limits        Limits
	Internet      bool
	// Network is the sandbox's policy by name (nil: none); it is
	// enforced by the node's Egress and recorded in its shape.
	Network *netpolicy.Policy
	// Volumes are mounted in the sandbox (and again at each restore);
	// PublicPorts lets anyone reach its ports through the API.
	Volumes     []store.VolumeMount
	PublicPorts bool
	// PortsHost is the Host its ports' requests carry ("": the caller's).
	PortsHost string
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
	// HeapDir, set only on a template snapshot's sandbox built with
	// --share-heap, is the host directory mounted read-only at
	// api.HeapMount, holding the file its kernel maps its preloaded heap
	// from (sandbox.Spec.HeapDir).
	HeapDir string
	// forked: Image is a fork's parent (metrics tell forks from snapshots).
	forked bool
	// fork, set by Fork, says whose checkpoint Image will be, and waits
	// for it: the copy is set up meanwhile.
	fork *forkOf
}

// provision makes one sandbox of plan p from src and returns it running.
// On failure nothing is left: the sandbox is killed, its address freed
// and its row marked failed (a resume that was only refused or cut short
// leaves the sandbox paused). The steps are the same for every source, in
// this order; src says what its kind does at each (source.go).
func (n *Local) provision(ctx context.Context, p Plan, src source) (_ store.Sandbox, err error) {
	var a sandbox.Artifact
	if p.Build != nil {
		a = *p.Build // a template build's own root
	} else if a, err = n.artifact(ctx, p.Template); err != nil {
		return store.Sandbox{}, err
	}
	// A restore waits its turn before anything is recorded (restores.go),
	// and keeps it until its agent answers: the restore's CPU goes on
	// after runsc returns, while the guest's pages load.
	ab := src.about(p)
	restored := func() {}
	if ab.queues {
		if restored, err = n.restores.enter(ctx); err != nil {
			return ab.prior, err
		}
		defer restored()
	}
	sb, err := src.record(ctx, n, p)
	if err != nil {
		return sb, err
	}
	ctx, sp := trace.Start(ctx, "node.provision", trace.Sandbox(sb.ID), trace.Project(sb.ProjectID),
		trace.Template(sb.Template), trace.Runtime(n.cfg.Runtime.Name()), trace.String("lizard.source", ab.name))
	defer func() { trace.End(sp, err) }()
	if path := ab.path; p.Role == "" && path != "" {
		// Creates for users, from the moment one is admitted and recorded.
		defer func(begin time.Time) { n.cfg.Metrics.SandboxCreated(path, time.Since(begin), err) }(time.Now())
	}
	if !ab.locked {
		// Kill, SetTimeout and the reaper wait until the sandbox is up
		// or gone.
		defer n.locks.Lock(sb.ID)()
	}
	begin := time.Now()
	l := &launch{n: n, p: p, src: src, ab: ab, sb: sb, art: a, log: n.log.With("sandbox_id", sb.ID, "project_id", sb.ProjectID)}
	fail := func(reason string, err error) (store.Sandbox, error) { return src.fail(ctx, l, reason, err) }
	if p.OnTimeout != "" {
		if err := n.cfg.Store.SetOnTimeout(ctx, sb.ID, p.OnTimeout); err != nil {
			return fail("recording onTimeout failed", err)
		}
	}
	if p.PauseDiskOnly {
		if err := n.cfg.Store.SetPauseDiskOnly(ctx, sb.ID, true); err != nil {
			return fail("recording pauseMemory failed", err)
		}
	}
	// Its identity, which Lizard itself gives every sandbox.
	l.env = append(slices.Clone(p.Envs), "LIZARD_SANDBOX_ID="+sb.ID, "LIZARD_PROJECT_ID="+sb.ProjectID)
	if p.Token {
		if l.tokenEnv, l.apiPort, err = src.token(ctx, l); err != nil {
			return fail("giving it its lizardToken failed", err)
		}
	}
	if reason, err := src.start(ctx, l); err != nil {
		return fail(reason, err)
	}
	restored()
	if !ab.keepsCA {
		// A resume's plan names no policy: its row has the one it has now.
		pol := p.Network
		if pol == nil {
			pol = sb.Shape.Network
		}
		if err := n.network.trustEgress(ctx, sb.ID, pol, ab.fromImage, p.fork.parentID()); err != nil {
			return fail("installing its egress CA failed", err)
		}
	}
	if err := src.markRunning(ctx, l); err != nil {
		return fail("recording the running sandbox failed", err)
	}
	got, err := n.cfg.Store.GetSandbox(ctx, sb.ID)
	if err != nil {
		return store.Sandbox{}, err
	}
	l.log.Info(ab.running, "source", ab.name, "image", ab.image, "template", sb.Template, "role", sb.Role, "guest_addr", sb.GuestAddr,
		"timeout_ms", p.TimeoutMs, "took", time.Since(begin).Round(time.Millisecond))
	n.started(got)
	src.announce(ctx, l, got)
	return got, nil
}

// launch is one sandbox on its way through provision: its plan and row,
// and what the steps so far gave it.
type launch struct {
	n   *Local
	p   Plan
	src source
	ab  about
	sb  store.Sandbox
	art sandbox.Artifact
	log *slog.Logger
	// env is the plan's environment and the sandbox's identity;
	// tokenEnv and apiPort its lizardToken's (source.token).
	env      []string
	tokenEnv []string
	apiPort  int
}

// runtimeFailed is the reason a boot or restore the runtime refused
// records.
func (l *launch) runtimeFailed() string {
	return fmt.Sprintf("the %s runtime could not start it (the server log says why)", l.n.cfg.Runtime.Name())
}

// identity is the reseed that gives a copy of another sandbox (a restore,
// a claim) its own identity and lizardToken; keepSeeds for a warm-pool
// sandbox, which took fresh seeds at its own restore.
func (l *launch) identity(keepSeeds bool) api.ReseedRequest {
	r := api.ReseedRequest{SandboxID: l.sb.ID, Envs: envMap(append(l.env, l.tokenEnv...)), KeepSeeds: keepSeeds}
	if !l.p.Token {
		// The image may hold another sandbox's lizardToken (a fork's parent).
		r.Unset = []string{"LIZARD_API_KEY", "LIZARD_API_URL"}
	}
	return r
}
