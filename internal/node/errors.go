package node

import "github.com/lizard-build/lizard/internal/errdefs"

// The error vocabulary lives in package errdefs. These names stay only
// while the last callers that spell them node.X move to errdefs.X; they
// go then. Do not add new uses.
var (
	ErrNotFound    = errdefs.ErrNotFound
	ErrGone        = errdefs.ErrGone
	ErrInvalid     = errdefs.ErrInvalid
	ErrConflict    = errdefs.ErrConflict
	ErrUnavailable = errdefs.ErrUnavailable
	ErrRateLimited = errdefs.ErrRateLimited
	ErrDiskFull    = errdefs.ErrDiskFull
)

// Error is errdefs.Error; see the note above.
type Error = errdefs.Error

// DiskFullAdvice is errdefs.DiskFullAdvice; see the note above.
const DiskFullAdvice = errdefs.DiskFullAdvice

// DiskFull is errdefs.DiskFull; see the note above.
func DiskFull(err error) error { return errdefs.DiskFull(err) }

// Message is errdefs.Message; see the note above.
func Message(err error) string { return errdefs.Message(err) }

// Invalidf is errdefs.Invalidf; see the note above.
func Invalidf(format string, args ...any) error { return errdefs.Invalidf(format, args...) }
