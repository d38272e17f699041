// Package errdefs is Lizard's one error vocabulary: the kinds of failure a
// caller is told about, an Error that keeps the message meant for the
// caller apart from the internal cause, and the one table that gives each
// kind its HTTP status, its API code (api.Code*) and its name on the
// node's internal API. The server, the node's internal API (cluster/remote)
// and the ports proxy all answer through this table, and client/errors.go
// maps the statuses back, so errors.Is works across both wires.
//
// It is a leaf: the packages that decide (control, node, store) return
// its kinds, and those that answer (server, remote) map them without
// importing the deciders.
package errdefs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/api"
)

// The kinds of failure; each has one row in the table (Kinds). A more
// specific sentinel may wrap one (fmt.Errorf("...: %w", ErrConflict)) and
// stand as an Error's Kind: it then matches both.
var (
	// ErrInvalid means the request is wrong; retrying it unchanged fails.
	ErrInvalid = errors.New("invalid argument")
	// ErrUnauthenticated means the caller did not prove it may do this
	// (such as reaching a sandbox's ports without its token or key).
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden means the caller's key may not do this, whatever the
	// request says: a key minted for a sandbox (lizardToken) asking for
	// what only a project key may (secrets, a wider network policy).
	ErrForbidden = errors.New("forbidden")
	// ErrNotFound means no sandbox (template, volume, ...) with that name
	// belongs to the project.
	ErrNotFound = errors.New("not found")
	// ErrConflict means the thing is not in a state that allows this now.
	ErrConflict = errors.New("not in a state that allows this")
	// ErrGone means the sandbox has ended (killed, expired or failed).
	ErrGone = errors.New("sandbox has ended")
	// ErrTooLarge means the request's body is over its bound.
	ErrTooLarge = errors.New("too large")
	// ErrRateLimited means the project is over one of its limits (live
	// sandboxes, creates per second); retrying later may work.
	ErrRateLimited = errors.New("rate limited")
	// ErrBadGateway means a sandbox's agent did not answer a call that
	// was passed on to it.
	ErrBadGateway = errors.New("bad gateway")
	// ErrUnavailable means the server cannot do it now (no free address,
	// template not built, database unreachable); retrying later may work.
	ErrUnavailable = errors.New("unavailable")
	// ErrDiskFull means the server's disk is full, or nearly (under the
	// free space it keeps so that state changes can always be recorded):
	// what would write to it is refused until space is freed, while
	// running sandboxes go on.
	ErrDiskFull = errors.New("disk full")
)

// Kind is one row of the table: a kind and how it is answered.
type Kind struct {
	Err    error  // the sentinel; nil for an internal failure
	Status int    // the HTTP status of the public API and the node's internal API
	Code   string // the public API's code (api.Error.Code)
	Wire   string // the name on the node's internal API; "" for an internal failure
}

// kinds is the table. Order matters where one error may carry two kinds:
// a full disk may be wrapped in another kind (DiskFull), so it comes first.
var kinds = []Kind{
	{ErrDiskFull, http.StatusInsufficientStorage, api.CodeDiskFull, "disk_full"},
	{ErrInvalid, http.StatusBadRequest, api.CodeInvalidArgument, "invalid"},
	{ErrUnauthenticated, http.StatusUnauthorized, api.CodeUnauthenticated, "unauthenticated"},
	{ErrForbidden, http.StatusForbidden, api.CodeForbidden, "forbidden"},
	{ErrNotFound, http.StatusNotFound, api.CodeNotFound, "not_found"},
	{ErrConflict, http.StatusConflict, api.CodeConflict, "conflict"},
	{ErrGone, http.StatusGone, api.CodeGone, "gone"},
	{ErrTooLarge, http.StatusRequestEntityTooLarge, api.CodeTooLarge, "too_large"},
	{ErrRateLimited, http.StatusTooManyRequests, api.CodeRateLimited, "rate_limited"},
	{ErrBadGateway, http.StatusBadGateway, api.CodeBadGateway, "bad_gateway"},
	{ErrUnavailable, http.StatusServiceUnavailable, api.CodeUnavailable, "unavailable"},
}

// internal is the row of an error of no kind: a failure of the server's
// own, whose cause stays in its log.
var internal = Kind{Status: http.StatusInternalServerError, Code: api.CodeInternal}

// Kinds returns the table, in the order errors are matched against it.
func Kinds() []Kind { return append([]Kind(nil), kinds...) }

// Classify returns the row of err's kind (after DiskFull; Kind.Err is nil
// for an internal failure) and the message its caller may be shown, ""
// when err carries none. A cancelled request counts as unavailable:
// mostly its caller went away and never reads the answer.
func Classify(err error) (Kind, string) {
	err = DiskFull(err)
	msg := Message(err)
	for _, k := range kinds {
		if errors.Is(err, k.Err) {
			return k, msg
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if msg == "" {
			msg = "the request was cancelled before it finished"
		}
		return kindOf(ErrUnavailable), msg
	}
	return internal, msg
}

// Public is Classify with the message a client is always shown: err's
// own; else, for a failure of the server's own, a pointer to its log
// (the cause stays there); else the status's text.
func Public(err error) (Kind, string) {
	k, msg := Classify(err)
	switch {
	case msg != "":
	case k.Err == nil:
		msg = "internal error; the server log has the details"
	default:
		msg = http.StatusText(k.Status)
	}
	return k, msg
}

// ByWire returns the row named name on the node's internal API.
func ByWire(name string) (Kind, bool) {
	for _, k := range kinds {
		if k.Wire == name {
			return k, true
		}
	}
	return internal, false
}

func kindOf(sentinel error) Kind {
	for _, k := range kinds {
		if k.Err == sentinel {
			return k
		}
	}
	return internal
}

// Error carries a message meant for the API's caller apart from the
// internal cause, which is only logged.
type Error struct {
	Kind  error  // one of the kinds above (or a sentinel wrapping one), or nil for an internal failure
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

// Is makes errors.Is(err, ErrNotFound) and the like work, for the Kind
// and for any kind the Kind wraps.
func (e *Error) Is(target error) bool { return e.Kind != nil && errors.Is(e.Kind, target) }

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

// DiskFullAdvice is what a caller refused for a full disk is told to do.
const DiskFullAdvice = "running sandboxes keep running and calls to them still work, but nothing that needs more disk can be done " +
	"until space is freed: ask the operator to free disk space on the server (kill paused sandboxes, delete snapshots, volumes " +
	"and templates no longer needed, or grow the disk), then retry; no restart is needed"

// refusals are the kinds that say the request itself is wrong: a full
// disk met on the way does not change that answer.
var refusals = []error{ErrInvalid, ErrUnauthenticated, ErrNotFound, ErrConflict, ErrGone, ErrTooLarge, ErrRateLimited}

// DiskFull returns err as an ErrDiskFull error when it says a disk is full
// (ENOSPC or EDQUOT, a store error of kind ErrDiskFull, or a tool's "no
// space left on device"), unless it is a refusal of the request itself
// (invalid, not found, conflict, gone, rate limited) or its outermost
// message already says so; otherwise err as it is. Classify calls it
// first, so that a full disk met on any path is a 507, not a 500, with a
// message that says what to free.
func DiskFull(err error) error {
	if err == nil || !diskFull(err) {
		return err
	}
	var e *Error
	if errors.As(err, &e) && e.Kind != nil && errors.Is(e.Kind, ErrDiskFull) {
		return err
	}
	for _, refusal := range refusals {
		if errors.Is(err, refusal) {
			return err
		}
	}
	return &Error{Kind: ErrDiskFull, Msg: "the server's disk is full: " + DiskFullAdvice, Cause: err}
}

func diskFull(err error) bool {
	if errors.Is(err, ErrDiskFull) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	// runsc, mkfs and the like report it in words.
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "no space left on device") || strings.Contains(s, "disk quota exceeded")
}

// OfStatus is an answer of status with message msg, from another Lizard
// API (an agent's, read by a surface that calls it as a client), as an
// Error of the kind the table gives that status.
func OfStatus(status int, msg string) error {
	for _, k := range kinds {
		if k.Err != nil && k.Status == status {
			return &Error{Kind: k.Err, Msg: msg}
		}
	}
	return &Error{Msg: msg, Cause: fmt.Errorf("answered %d", status)}
}
