package node

import (
	"errors"
	"fmt"
	"time"
)

// Sentinels for what went wrong; the API maps each to one HTTP status.
var (
	// ErrNotFound means no sandbox with that ID belongs to the project.
	ErrNotFound = errors.New("sandbox not found")
	// ErrGone means the sandbox has ended (killed, expired or failed).
	ErrGone = errors.New("sandbox has ended")
	// ErrInvalid means the request is wrong; retrying it unchanged fails.
	ErrInvalid = errors.New("invalid argument")
	// ErrConflict means the sandbox is not in a state that allows this now.
	ErrConflict = errors.New("sandbox not in a state that allows this")
	// ErrUnavailable means the server cannot do it now (no free address,
	// template not built); retrying later may work.
	ErrUnavailable = errors.New("unavailable")
	// ErrRateLimited means the project is over one of its limits (live
	// sandboxes, creates per second); retrying later may work.
	ErrRateLimited = errors.New("rate limited")
)

// Error carries a message meant for the API's caller apart from the
// internal cause, which is only logged.
type Error struct {
	Kind  error  // one of the sentinels above, or nil for an internal failure
	Msg   string // safe to show the caller
	Cause error  // for logs; may be nil
	// RetryAfter, for ErrRateLimited, says when trying again may work.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Msg + ": " + e.Cause.Error()
	}
	return e.Msg
}

// Is makes errors.Is(err, ErrNotFound) and the like work.
func (e *Error) Is(target error) bool { return e.Kind != nil && target == e.Kind }

func (e *Error) Unwrap() error { return e.Cause }

// Message returns what the caller may be told about err: the client message
// of the outermost *Error, or "" when err carries none.
func Message(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Msg
	}
	return ""
}

// Invalidf is an ErrInvalid error with message msg.
func Invalidf(format string, args ...any) error {
	return &Error{Kind: ErrInvalid, Msg: fmt.Sprintf(format, args...)}
}
