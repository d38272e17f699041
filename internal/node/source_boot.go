package node

import (
	"context"
	"slices"

	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/trace"
)

// bootSource boots the plan's template (or a template build's root) cold:
// the source when no image serves, and of the node's own template and
// build sandboxes.
type bootSource struct{ fresh }

// about: a boot yields no restore's CPU burst, so it does not queue.
func (b bootSource) about(p Plan) about {
	return b.fresh.about(p, "boot", "", metrics.PathBoot, "sandbox running", false)
}

// start has the runtime create the sandbox, its identity and lizardToken
// in its environment, and waits for its agent.
func (bootSource) start(ctx context.Context, l *launch) (string, error) {
	spec, err := l.spec(append(slices.Clone(l.env), l.tokenEnv...))
	if err != nil {
		return "its addresses are unusable", err
	}
	if err := trace.Step(ctx, "node.start", func(ctx context.Context) error { return l.n.cfg.Runtime.Create(ctx, spec) }); err != nil {
		return l.runtimeFailed(), err
	}
	if err := trace.Step(ctx, "node.agent_wait", func(ctx context.Context) error { return l.n.agents.wait(ctx, l.sb, nil, "") }); err != nil {
		return "its agent did not answer", err
	}
	return "", nil
}
