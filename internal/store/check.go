package store

import (
	"fmt"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// Want is what an operation needs of a sandbox; Check says whether the
// sandbox is so, and if not, what its caller is told.
type Want int

const (
	// WantLive: not ended, in any state (starting, running, paused).
	WantLive Want = iota
	// WantRunning: running. A paused sandbox is refused with ErrPaused,
	// which a caller that may resume it resumes instead.
	WantRunning
)

// ErrPaused is the Kind of Check's refusal of a paused sandbox: a
// conflict (409), told apart so that a caller can resume it instead.
var ErrPaused = fmt.Errorf("%w: paused", errdefs.ErrConflict)

// Check is the one place that decides whether a sandbox is live and
// running (a test keeps its messages single): nil when sb is as want
// needs; else ErrGone (410) naming how it ended, ErrPaused (409) or
// ErrConflict (409) for one starting.
func (sb Sandbox) Check(want Want) error {
	switch {
	case !sb.Live():
		return sb.gone()
	case want == WantLive || sb.State == api.StateRunning:
		return nil
	}
	kind := errdefs.ErrConflict
	if sb.State == api.StatePaused {
		kind = ErrPaused
	}
	return &errdefs.Error{Kind: kind, Msg: fmt.Sprintf("sandbox %s is %s, not running; wait until it runs", sb.ID, sb.State)}
}

// NotFound is the error for a sandbox that does not exist, or is not the
// caller's to see.
func NotFound(id string) error {
	return &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("sandbox %s not found", id)}
}

// gone is the error for using an ended sandbox: how and when it ended,
// and what to do.
func (sb Sandbox) gone() error {
	at := ""
	if sb.EndedAt != nil {
		at = " at " + sb.EndedAt.Format(time.RFC3339)
	}
	var how string
	switch sb.State {
	case api.StateKilled:
		how = "was killed" + at
	case api.StateExpired:
		how = "expired" + at + " (its timeout passed; extend it with setTimeout next time)"
	default:
		how = "failed" + at
		if sb.EndReason != "" {
			how += ": " + sb.EndReason
		}
	}
	return &errdefs.Error{Kind: errdefs.ErrGone, Msg: fmt.Sprintf("sandbox %s %s; create a new sandbox", sb.ID, how)}
}
