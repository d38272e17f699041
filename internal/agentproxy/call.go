package agentproxy

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"
)

// Call is one call to a sandbox's agent, as a node (or the control plane
// in front of it) starts it: where it goes, and the context that ends when
// the sandbox stops.
type Call struct {
	URL *url.URL
	// Ctx carries the call: it ends when the caller's does, or when the
	// sandbox stops, with the stop as its cause (context.Cause), an
	// *errdefs.Error of kind errdefs.ErrGone saying why.
	Ctx context.Context
	// Release ends the call; call it once the response is done.
	Release func()
	// Transport, when set, carries the call instead of the caller's own
	// (a cluster's node, which reaches the sandbox on the caller's behalf).
	Transport http.RoundTripper
	// Outcome, when set (a call to the agent itself, not to another
	// node), is told of a run that ended with a notable error
	// (outcomeBody).
	Outcome func(errorName, message string)
}

// followingKey marks a follower's context (Following).
type followingKey struct{}

// Following marks a call, for a node's Acquire, as one that follows a
// sandbox's process or terminal (its output stream, its WebSocket, a wait
// for its end): such a call may stay open for hours, so a pause does not
// wait for it as it does for other calls, but ends it first, with the
// pause as its cause (409: the client reattaches, which resumes the
// sandbox), as it does connections to exposed ports. Until then it counts
// as a call in flight: the sandbox's runtime is watched, and its end ends
// the call at once. A context value rather than another Acquire: a
// cluster's API forwards the call to the node unchanged, and the node's
// own proxy marks it there.
func Following(ctx context.Context) context.Context {
	return context.WithValue(ctx, followingKey{}, true)
}

// Follows reports whether ctx was marked by Following.
func Follows(ctx context.Context) bool {
	b, _ := ctx.Value(followingKey{}).(bool)
	return b
}

// StopCause is why a call's context ended if its sandbox stopped, or nil.
func StopCause(ctx context.Context) error {
	var e *errdefs.Error
	if cause := context.Cause(ctx); ctx.Err() != nil && errors.As(cause, &e) {
		return cause
	}
	return nil
}

// stopWait bounds how long a stream whose agent connection broke waits
// to learn whether its sandbox has died.
const stopWait = 2 * time.Second

// waitStopCause waits up to d for ctx to end, and returns why if its
// sandbox stopped.
func waitStopCause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return StopCause(ctx)
}
