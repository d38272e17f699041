package node

import (
	"context"

	"github.com/lizard-build/lizard/internal/sandbox"
)

// SampleOnce takes one metrics sample of every running sandbox of n, as
// RunSampler does every SampleEvery.
func SampleOnce(ctx context.Context, n *Local) {
	if m, ok := n.cfg.Runtime.(sandbox.Meter); ok {
		n.sample(ctx, m)
	}
}
