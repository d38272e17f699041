package node

import (
	"context"

	"github.com/lizard-build/lizard/internal/sandbox"
)

// Sample takes one round of samples (RunSampler's, without its ticker) for
// the tests of package node_test.
func (n *Local) Sample(ctx context.Context, m sandbox.Meter) { n.sample(ctx, m) }
