package server

import (
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
)

// TestStreamEndsWithAbortWhenAgentDies checks that a stream whose agent
// connection breaks a moment before its sandbox's death is noticed (the
// agent killed: its socket closes first) still ends with the abort event
// naming the end, not cut off (found by the chaos suite).
func TestStreamEndsWithAbortWhenAgentDies(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(t, e.key1, `{}`)
	lines := e.openStream(t, sb.SandboxID)
	begin := time.Now()
	close(e.agent.die)
	time.AfterFunc(300*time.Millisecond, func() { e.rt.Stop(sb.SandboxID) })
	last := lastEvent(t, lines)
	if took := time.Since(begin); took > 3*time.Second {
		t.Errorf("the stream ended %s after the agent died; want within moments", took)
	}
	if last.Type != api.EventAbort || last.Abort == nil || last.Abort.Status != 410 || !strings.Contains(last.Abort.Message, "runtime stopped") {
		t.Errorf("last event = %+v (abort %+v); want abort 410 saying the runtime stopped", last, last.Abort)
	}
}
