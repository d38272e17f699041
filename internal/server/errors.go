package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/node"
)

// httpError is an error the server itself finds in a request (bad JSON,
// bad query), with its status and code decided where it is found.
type httpError struct {
	status int
	code   string
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{status: http.StatusBadRequest, code: api.CodeInvalidArgument, msg: fmt.Sprintf(format, args...)}
}

// classify maps an error to its one status, code and client message. Only
// messages written for the client (node.Error, httpError) reach it;
// every other cause stays in the log.
func classify(err error) (status int, code, msg string) {
	var he *httpError
	if errors.As(err, &he) {
		return he.status, he.code, he.msg
	}
	msg = node.Message(err)
	switch {
	case errors.Is(err, node.ErrInvalid):
		status, code = http.StatusBadRequest, api.CodeInvalidArgument
	case errors.Is(err, node.ErrNotFound):
		status, code = http.StatusNotFound, api.CodeNotFound
	case errors.Is(err, node.ErrConflict):
		status, code = http.StatusConflict, api.CodeConflict
	case errors.Is(err, node.ErrGone):
		status, code = http.StatusGone, api.CodeGone
	case errors.Is(err, node.ErrUnavailable):
		status, code = http.StatusServiceUnavailable, api.CodeUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Mostly the client went away and will never read this.
		status, code = http.StatusServiceUnavailable, api.CodeUnavailable
		if msg == "" {
			msg = "the request was cancelled before it finished"
		}
	default:
		status, code = http.StatusInternalServerError, api.CodeInternal
		if msg == "" {
			msg = "internal error; the server log has the details"
		}
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return status, code, msg
}

// fail answers r with err, logging the internal cause of server-side
// failures.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if rateLimited(w, err) {
		return
	}
	status, code, msg := classify(err)
	log := s.log.With("method", r.Method, "path", r.URL.Path)
	if id := r.PathValue("id"); id != "" {
		log = log.With("sandbox_id", id)
	}
	if status >= 500 {
		log.Error("request failed", "status", status, "err", err)
	} else {
		log.Debug("request refused", "status", status, "err", err)
	}
	writeError(w, status, code, msg)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, api.Error{Code: code, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
