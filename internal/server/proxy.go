package server

import (
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strings"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
)

// proxy passes /v1/sandboxes/{id}/<agent path> to the sandbox's agent as
// <agent path>, for the public agent paths only (api.AgentPublicPaths): the
// agent's internal endpoints are never reachable through the API. Bodies stream both ways unbuffered: uploads are not bound
// by the JSON limit, and NDJSON events reach the client as the agent writes
// them. The outgoing request carries the incoming one's context, so a client
// that disconnects cancels the agent's work too.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	id := r.PathValue("id")
	// Acquire resumes a paused sandbox, and holds off a pause until the
	// call has ended.
	target, release, err := s.c.Acquire(r.Context(), project, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer release()
	// Without full duplex, net/http consumes what is left of the request
	// body when the response headers go out; the transport may still be
	// forwarding that body to the agent, and would then fail the write and
	// close the agent connection under the streaming response.
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
		s.log.Warn("enabling full duplex for the proxy", "err", err)
	}
	prefix := "/v1/sandboxes/" + id
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = target.Scheme
			pr.Out.URL.Host = target.Host
			pr.Out.URL.Path = strings.TrimPrefix(pr.In.URL.Path, prefix)
			if pr.In.URL.RawPath != "" {
				pr.Out.URL.RawPath = strings.TrimPrefix(pr.In.URL.RawPath, prefix)
			}
			pr.Out.Host = target.Host
			// The agent is not to see the caller's key.
			pr.Out.Header.Del("Authorization")
		},
		Transport:     s.c.Transport(),
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log := s.log.With("sandbox_id", id, "project_id", project, "method", r.Method, "path", r.URL.Path)
			if r.Context().Err() != nil {
				log.Debug("client went away during a proxied request", "err", err)
				return
			}
			log.Warn("agent did not answer", "err", err)
			writeError(w, http.StatusBadGateway, api.CodeBadGateway,
				"sandbox "+id+"'s agent did not answer; retry shortly, and if it persists kill the sandbox and create a new one")
		},
	}
	rp.ServeHTTP(w, r)
}
