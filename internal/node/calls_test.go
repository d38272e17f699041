package node

import (
	"context"
	"errors"
	"testing"
)

// TestFollowers: a pause waits for calls but not for followers
// (agentproxy.Following), and ends only the followers.
func TestFollowers(t *testing.T) {
	var f inflight
	call := func(follower bool) (context.Context, *context.CancelCauseFunc) {
		ctx, cancel := context.WithCancelCause(context.Background())
		f.add("sb", &cancel, follower)
		return ctx, &cancel
	}
	exec, _ := call(false)
	out, _ := call(true)
	ws, wsCancel := call(true)
	if got := f.count("sb"); got != 3 {
		t.Errorf("count = %d, want 3 (followers are calls in flight: the runtime is watched for them)", got)
	}
	if got := f.waited("sb"); got != 1 {
		t.Errorf("waited = %d, want 1 (a pause waits for the exec only)", got)
	}
	paused := errors.New("paused")
	f.cancelFollowers("sb", paused)
	for name, ctx := range map[string]context.Context{"output": out, "ws": ws} {
		if !errors.Is(context.Cause(ctx), paused) {
			t.Errorf("%s follower: cause %v, want the pause", name, context.Cause(ctx))
		}
	}
	if exec.Err() != nil {
		t.Errorf("the exec call was ended (%v); a pause waits for it", context.Cause(exec))
	}
	f.remove("sb", wsCancel)
	if got := f.count("sb"); got != 2 {
		t.Errorf("count after a release = %d, want 2", got)
	}
}
