package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/lizard-build/lizard/api"
)

// Sentinels for the API's error statuses. An *Error matches the one of its
// status: errors.Is(err, client.ErrNotFound).
var (
	ErrInvalidArgument = errors.New("invalid argument")     // 400
	ErrUnauthenticated = errors.New("unauthenticated")      // 401
	ErrForbidden       = errors.New("forbidden")            // 403
	ErrNotFound        = errors.New("not found")            // 404
	ErrConflict        = errors.New("conflict")             // 409
	ErrGone            = errors.New("gone")                 // 410
	ErrTooLarge        = errors.New("too large")            // 413
	ErrRateLimited     = errors.New("rate limited")         // 429
	ErrDiskFull        = errors.New("server disk full")     // 507; also matches ErrServer
	ErrServer          = errors.New("server error")         // 5xx
	ErrUnreachable     = errors.New("cannot reach Lizard")  // no HTTP response at all
	ErrTruncated       = errors.New("stream ended early")   // an NDJSON stream without its end event
	ErrLineTooLong     = errors.New("stream line too long") // a stream's line past Config.MaxStreamLine (with ErrTruncated)
)

// ErrNoAPIKey is returned, before any request is sent, by calls that need an
// API key when the client has none. It matches ErrUnauthenticated too.
var ErrNoAPIKey error = noKeyError{}

type noKeyError struct{}

func (noKeyError) Error() string        { return "no API key: set LIZARD_API_KEY or pass an API key" }
func (noKeyError) Is(target error) bool { return target == ErrUnauthenticated }

// streamError is an NDJSON stream cut off before its end event. Like the
// SDKs (docs/sdk-errors.md), it counts as a server failure: it matches
// ErrTruncated and ErrServer.
type streamError struct {
	what  string
	cause error // nil when the stream simply ended
}

func (s *streamError) Error() string {
	if s.cause == nil {
		return fmt.Sprintf("reading %s stream: the stream ended before its end event", s.what)
	}
	return fmt.Sprintf("reading %s stream: the stream broke before its end event: %v", s.what, s.cause)
}

func (s *streamError) Unwrap() error { return s.cause }

func (s *streamError) Is(target error) bool { return target == ErrTruncated || target == ErrServer }

// Error is an error response of the API.
type Error struct {
	Status  int    // HTTP status
	Code    string // api.Code*, such as "not_found"
	Message string // for humans
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (HTTP %d %s)", e.Message, e.Status, e.Code)
}

// Is matches the sentinel of e's status; a 507 matches ErrServer too, as
// every 5xx does.
func (e *Error) Is(target error) bool {
	if e.Status == http.StatusInsufficientStorage && target == ErrDiskFull {
		return true
	}
	s := sentinel(e.Status)
	return s != nil && s == target
}

func sentinel(status int) error {
	switch {
	case status == http.StatusBadRequest:
		return ErrInvalidArgument
	case status == http.StatusUnauthorized:
		return ErrUnauthenticated
	case status == http.StatusForbidden:
		return ErrForbidden
	case status == http.StatusNotFound:
		return ErrNotFound
	case status == http.StatusConflict:
		return ErrConflict
	case status == http.StatusGone:
		return ErrGone
	case status == http.StatusRequestEntityTooLarge:
		return ErrTooLarge
	case status == http.StatusTooManyRequests:
		return ErrRateLimited
	case status >= 500 && status <= 599:
		return ErrServer
	}
	return nil
}

// codeFor is the code a server would have sent with status, for bodies that
// are not ours (a proxy's HTML page, an empty body).
func codeFor(status int) string {
	switch status {
	case http.StatusBadRequest:
		return api.CodeInvalidArgument
	case http.StatusUnauthorized:
		return api.CodeUnauthenticated
	case http.StatusForbidden:
		return api.CodeForbidden
	case http.StatusNotFound:
		return api.CodeNotFound
	case http.StatusMethodNotAllowed:
		return api.CodeMethodNotAllowed
	case http.StatusConflict:
		return api.CodeConflict
	case http.StatusGone:
		return api.CodeGone
	case http.StatusRequestEntityTooLarge:
		return api.CodeTooLarge
	case http.StatusTooManyRequests:
		return api.CodeRateLimited
	case http.StatusBadGateway:
		return api.CodeBadGateway
	case http.StatusServiceUnavailable:
		return api.CodeUnavailable
	case http.StatusInsufficientStorage:
		return api.CodeDiskFull
	}
	return api.CodeInternal
}

// readError turns a non-2xx response into an *Error.
func readError(resp *http.Response) *Error {
	e := &Error{Status: resp.StatusCode}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body api.Error
	if err := json.Unmarshal(b, &body); err == nil && body.Code != "" {
		e.Code, e.Message = body.Code, body.Message
	} else {
		e.Code = codeFor(resp.StatusCode)
		e.Message = strings.TrimSpace(string(b))
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	if e.Status == http.StatusUnauthorized {
		e.Message += ": check the API key (LIZARD_API_KEY)"
	}
	return e
}
