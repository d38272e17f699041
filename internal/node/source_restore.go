package node

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/trace"
)

// restoreSource restores a checkpoint image as a new sandbox: the
// template snapshot, a user's snapshot, or a fork's parent (Plan.fork:
// restored while the parent is checkpointed).
type restoreSource struct {
	fresh
	what        string // for logs: "template snapshot", "image"
	metricsPath string // metrics.PathTemplateRestore, PathSnapshot, PathFork
	dir         string // the image
}

// about: a user's restore waits its turn; the node's own (the pool's
// refills) yield their CPU already.
func (r restoreSource) about(p Plan) about {
	return r.fresh.about(p, r.what, r.dir, r.metricsPath, "sandbox restored", p.Role == "")
}

// start has the runtime restore the image, its lizardToken in its
// environment, and gives the copy of another sandbox its own identity,
// seeds and agent secret in the first request its agent gets: a restored
// agent is waited for in the reseed, which it answers as soon as it is up.
func (r restoreSource) start(ctx context.Context, l *launch) (string, error) {
	spec, err := l.spec(append(slices.Clone(l.env), l.tokenEnv...))
	if err != nil {
		return "its addresses are unusable", err
	}
	if err := trace.Step(ctx, "node.restore", func(ctx context.Context) error { return l.n.restoreImage(ctx, l.p, spec, r.dir) }); err != nil {
		return l.runtimeFailed(), err
	}
	req := l.identity(false)
	if err := trace.Step(ctx, "node.reseed", func(ctx context.Context) error {
		return l.n.agents.wait(ctx, l.sb, &req, l.n.images.imageAuth(r.dir))
	}); err != nil {
		return "giving it its identity failed", err
	}
	return "", nil
}

// restoreImage has the runtime restore spec from image: a fork's copy
// overlapped with its parent's checkpoint where the runtime can
// (sandbox.ForkRestorer), else once the image is made.
func (n *Local) restoreImage(ctx context.Context, p Plan, spec sandbox.Spec, image string) error {
	if p.fork == nil {
		err := n.cfg.Runtime.Restore(ctx, spec, image)
		if errors.Is(err, sandbox.ErrOtherBuild) {
			return otherBuild(err)
		}
		return err
	}
	if fr, ok := n.cfg.Runtime.(sandbox.ForkRestorer); ok {
		return fr.RestoreFork(ctx, spec, p.fork.parent, image, p.fork.wait)
	}
	if err := p.fork.wait(ctx); err != nil {
		return fmt.Errorf("restoring sandbox %s: its image was not made: %w", spec.ID, err)
	}
	// A fork's image is this runtime's own, just made.
	return n.cfg.Runtime.Restore(ctx, spec, image)
}

// otherBuild answers an image another runtime build made (an upgrade
// changed runsc) as a conflict (409) naming the way out: the image is
// intact and kept, and no retry on this server restores it — the request
// is not wrong (400), nor is the server short of anything (503).
func otherBuild(err error) error {
	return &errdefs.Error{Kind: errdefs.ErrConflict, Cause: err, Msg: err.Error() +
		". The image is kept. To keep its sandbox, run the Lizard release that made it (with its runsc) on this data directory, " +
		"resume the sandbox (or create one from the snapshot) there and pause it with memory: false (its files alone, which any runsc boots), " +
		"then upgrade again; or kill it (docs/operations.md#upgrading)"}
}
