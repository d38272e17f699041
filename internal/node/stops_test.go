package node_test

import (
	"context"
	"os"
	"testing"

	"github.com/lizard-build/lizard/internal/node/nodetest"
)

// stopsEnv, when set (by internal/arch's TestRunCodeStops, on a test
// binary built with -covermode=count -coverpkg=.../internal/node), leaves
// out all but one Acquire: "base" does the setting alone, "running" adds a
// running sandbox's Acquire, "resume" a paused one's. The difference of
// the counters is a real trace of the functions of node that one runCode's
// Acquire passes through. Unset, the test does everything.
const stopsEnv = "LIZARD_STOPS"

// TestAcquireRunningAndPaused: a runCode's Acquire of a running sandbox,
// and of a paused one, which it resumes first; both give a call that
// works and releases.
func TestAcquireRunningAndPaused(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(60_000))
	only := os.Getenv(stopsEnv)
	acquire := func(phase string) {
		t.Helper()
		if only != "" && phase != "warm" && phase != only {
			return
		}
		call, err := e.Node.Acquire(ctx, sb.ID)
		if err != nil {
			t.Fatalf("Acquire (%s): %v", phase, err)
		}
		if call.URL == nil || call.Ctx.Err() != nil {
			t.Errorf("Acquire (%s) = %+v; want a live call to the agent", phase, call)
		}
		call.Release()
		if !e.Runtime.IsRunning(sb.ID) {
			t.Errorf("after Acquire (%s): not running", phase)
		}
	}
	acquire("warm") // the first call's one-time work (the watcher's start, lazy state) is not every runCode's
	acquire("running")
	if _, err := e.Node.Pause(ctx, sb.ID); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	acquire("resume")
	if rs := e.Runtime.Restores(); (only == "" || only == "resume") && len(rs) != 1 {
		t.Errorf("restores = %d; want 1, the Acquire's resume", len(rs))
	}
}
