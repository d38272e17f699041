package server

import (
	"net/http"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
)

// projectNetworkRoutes registers the key's project's default network
// policy (docs/network.md).
func (s *Server) projectNetworkRoutes(mux *http.ServeMux, authed func(http.HandlerFunc) http.Handler) {
	mux.Handle("GET /v1/network/default", authed(s.getProjectNetwork))
	mux.Handle("PUT /v1/network/default", authed(s.setProjectNetwork))
	mux.Handle("DELETE /v1/network/default", authed(s.clearProjectNetwork))
}

func (s *Server) getProjectNetwork(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	pol, err := s.c.Project(project).Network().Get(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, pol)
}

func (s *Server) setProjectNetwork(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	// It is the policy of the project's sandboxes made without one, by
	// any key: a sandbox's own key would widen its children's through it.
	if err := projectKeyOnly(r, "setting the project's default network policy"); err != nil {
		s.fail(w, r, err)
		return
	}
	var req api.NetworkPolicy
	if err := decodeJSON(w, r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	pol, err := s.c.Project(project).Network().Set(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.audit(r, "network.default.set")
	api.WriteJSON(w, http.StatusOK, pol)
}

func (s *Server) clearProjectNetwork(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	if err := projectKeyOnly(r, "clearing the project's default network policy"); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.c.Project(project).Network().Clear(r.Context()); err != nil {
		s.fail(w, r, err)
		return
	}
	s.audit(r, "network.default.clear")
	w.WriteHeader(http.StatusNoContent)
}
