package server

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
)

// classify maps an error to its one status, code and client message, by
// the one table (errdefs.Kinds). Only messages written for the client
// (errdefs.Error) reach it; every other cause stays in the log.
func classify(err error) (status int, code, msg string) {
	k, msg := errdefs.Public(err)
	return k.Status, k.Code, msg
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
	api.WriteJSON(w, status, api.Error{Code: code, Message: msg})
}

// notFound answers a request no route took: a JSON 405 with Allow when the
// path is served with other methods (TRACE /v1/health), else a JSON 404. A
// method is allowed when a route registered for that method ("GET /v1/...")
// would take the path; routes for every method are fallbacks like this one.
func notFound(mux *http.ServeMux) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			probe := *r
			probe.Method = m
			if _, pattern := mux.Handler(&probe); strings.HasPrefix(pattern, m+" ") {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			methodNotAllowed(w, r, strings.Join(allow, ", "))
			return
		}
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no such API path "+r.Method+" "+r.URL.Path+"; see api/openapi.yaml")
	}
}

// agentFailed is node.Unanswered as the control plane sees the sandbox,
// which is every node's in a cluster.
func (s *Server) agentFailed(ctx context.Context, project, id string) error {
	return node.Unanswered(ctx, id, func(ctx context.Context) (*time.Time, error) {
		sb, err := s.c.Get(ctx, project, id)
		if err == nil {
			err = s.c.CheckRunning(ctx, project, id) // gone (410) or not running (409), with the control plane's message
		}
		return sb.ExpiresAt, err
	})
}
