package node

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/internal/store"
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
	// ErrDiskFull means the server's disk is full, or nearly (under the
	// free space it keeps so that state changes can always be recorded):
	// what would write to it is refused until space is freed, while
	// running sandboxes go on.
	ErrDiskFull = errors.New("disk full")
)

// DiskFullAdvice is what a caller refused for a full disk is told to do.
const DiskFullAdvice = "running sandboxes keep running and calls to them still work, but nothing that needs more disk can be done " +
	"until space is freed: ask the operator to free disk space on the server (kill paused sandboxes, delete snapshots, volumes " +
	"and templates no longer needed, or grow the disk), then retry; no restart is needed"

// DiskFull returns err as an ErrDiskFull error when it says a disk is full
// (ENOSPC or EDQUOT, the database's store.ErrDiskFull, or a tool's "no
// space left on device"), unless it is a refusal of the request itself
// (invalid, not found, conflict, gone, rate limited); otherwise err as it
// is. The tables that map kinds to statuses call it first, so that a full
// disk met on any path is a 507, not a 500.
func DiskFull(err error) error {
	if err == nil || errors.Is(err, ErrDiskFull) || !diskFull(err) {
		return err
	}
	for _, refusal := range []error{ErrInvalid, ErrNotFound, ErrConflict, ErrGone, ErrRateLimited} {
		if errors.Is(err, refusal) {
			return err
		}
	}
	return &Error{Kind: ErrDiskFull, Msg: "the server's disk is full: " + DiskFullAdvice, Cause: err}
}

func diskFull(err error) bool {
	if errors.Is(err, store.ErrDiskFull) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	// runsc, mkfs and the like report it in words.
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "no space left on device") || strings.Contains(s, "disk quota exceeded")
}

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
