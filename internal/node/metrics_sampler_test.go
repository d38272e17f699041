package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/node/nodetest"
	"github.com/lizard-build/lizard/internal/sandbox"
)

// idleMeter says every sandbox has used 1 s of CPU, always: idle, so a
// disk figure once had holds (the node's clock stands still too).
type idleMeter struct{}

func (idleMeter) Usage(context.Context, string) (sandbox.Usage, error) {
	return sandbox.Usage{CPU: time.Second, MemoryBytes: 1 << 20}, nil
}

// TestSampleSlowAgent: a sandbox whose agent does not answer its disk
// probe (code in it stopped the agent) does not hold up the other
// sandboxes' samples, nor is asked again while the probe is out; the
// probe's answer, when it comes, is its sandbox's next figure. Before,
// the node probed one sandbox after another, each for up to 2 s, and its
// client gave up on the held probe.
func TestSampleSlowAgent(t *testing.T) {
	e := nodetest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ids := map[string]bool{e.Create(t, nodetest.Plan(0)).ID: true, e.Create(t, nodetest.Plan(0)).ID: true}
	e.Agent.DiskUsed.Store(10)
	held, release := e.Agent.HoldDisk()
	lastDisk := func(id string) int64 {
		ms, err := e.Node.Metrics(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			return -1
		}
		return ms[len(ms)-1].DiskUsed
	}

	var slow, other string
	nodetest.WaitFor(t, "the other sandbox's sample while one's disk probe is held", func() bool {
		e.Node.Sample(ctx, idleMeter{})
		if slow == "" {
			select {
			case slow = <-held:
				for id := range ids {
					if id != slow {
						other = id
					}
				}
			default:
				return false
			}
		}
		return lastDisk(other) == 10
	})
	if got := e.Agent.Requests(api.AgentDiskPath); got != 2 {
		t.Errorf("%d disk probes, want 2: one each, none again while the held one is out", got)
	}
	release <- 20
	nodetest.WaitFor(t, "the held probe's answer in its sandbox's sample", func() bool {
		e.Node.Sample(ctx, idleMeter{})
		return lastDisk(slow) == 20
	})
}
