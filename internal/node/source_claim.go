package node

import (
	"context"
	"errors"

	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/trace"
)

// claimSource hands a running warm-pool sandbox (package warm, restored
// ahead of need in the background) to the plan's project.
type claimSource struct{ fresh }

// errNoWarm: the warm pool had no sandbox to claim.
var errNoWarm = errors.New("no warm sandbox")

// about: restored already, it does not queue.
func (c claimSource) about(p Plan) about {
	return c.fresh.about(p, "warm pool", "", metrics.PathWarmPool, "sandbox claimed from the warm pool", false)
}

// record admits plan p and hands it a warm sandbox's row: errNoWarm if
// the pool has none.
func (c claimSource) record(ctx context.Context, n *Local, p Plan) (store.Sandbox, error) {
	quota, release, err := c.admit(ctx, n, p)
	if err != nil {
		return store.Sandbox{}, err
	}
	defer release()
	sb, err := n.cfg.Store.ClaimWarmAdmitted(ctx, quota, p.Template, p.ProjectID, p.Metadata, p.TimeoutMs, n.clock.now(), n.clock.deadline(p.TimeoutMs))
	var over *store.OverQuota
	if errors.As(err, &over) {
		return sb, Refusal(over)
	}
	if errors.Is(err, store.ErrNotFound) {
		return sb, errNoWarm
	}
	return sb, err
}

// start: restored in the background (sandbox.Spec.Background), it runs
// for its caller from now on. It took fresh seeds at its own restore: its
// claim only gives it its caller's identity.
func (claimSource) start(ctx context.Context, l *launch) (string, error) {
	if pr, ok := l.n.cfg.Runtime.(sandbox.Prioritizer); ok {
		if err := trace.Step(ctx, "node.foreground", func(ctx context.Context) error { return pr.Foreground(ctx, l.sb.ID) }); err != nil {
			return "raising its CPU share failed", err
		}
	}
	req := l.identity(true)
	if err := trace.Step(ctx, "node.reseed", func(ctx context.Context) error { return l.n.agents.Reseed(ctx, req, "") }); err != nil {
		return "giving it its identity failed", err
	}
	return "", nil
}

// markRunning: ClaimWarm recorded it running already.
func (claimSource) markRunning(context.Context, *launch) error { return nil }
