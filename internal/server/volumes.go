package server

import (
	"net/http"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
)

// volumeRoutes registers the persistent volumes (docs/volumes.md).
func (s *Server) volumeRoutes(mux *http.ServeMux, authed func(http.HandlerFunc) http.Handler) {
	mux.Handle("POST /v1/volumes", authed(s.createVolume))
	mux.Handle("GET /v1/volumes", authed(s.listVolumes))
	mux.Handle("GET /v1/volumes/{name}", authed(s.getVolume))
	mux.Handle("DELETE /v1/volumes/{name}", authed(s.deleteVolume))
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	var req api.CreateVolumeRequest
	if err := decodeJSON(w, r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	v, err := s.c.Project(project).Volumes().Create(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusCreated, v)
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	vs, err := s.c.Project(project).Volumes().List(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, api.VolumeList{Volumes: vs})
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	v, err := s.c.Project(project).Volumes().Get(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, v)
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	if err := s.c.Project(project).Volumes().Delete(r.Context(), r.PathValue("name")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
