package server

import (
	"net/http"
	"slices"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
)

// snapshotRoutes registers pause, resume, snapshots and fork.
func (s *Server) snapshotRoutes(mux *http.ServeMux, authed func(http.HandlerFunc) http.Handler) {
	mux.Handle("POST /v1/sandboxes/{id}/pause", authed(s.pause))
	mux.Handle("POST /v1/sandboxes/{id}/resume", authed(s.resume))
	mux.Handle("POST /v1/sandboxes/{id}/snapshots", authed(s.snapshot))
	mux.Handle("POST /v1/sandboxes/{id}/fork", authed(s.fork))
	mux.Handle("GET /v1/snapshots", authed(s.listSnapshots))
	mux.Handle("GET /v1/snapshots/{snapshotId}", authed(s.getSnapshot))
	mux.Handle("DELETE /v1/snapshots/{snapshotId}", authed(s.deleteSnapshot))
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	var req api.PauseRequest
	if err := decodeJSON(w, r, &req, true); err != nil {
		s.fail(w, r, err)
		return
	}
	sb, err := s.c.Pause(r.Context(), project, r.PathValue("id"), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, sb)
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	var req api.ResumeRequest
	if err := decodeJSON(w, r, &req, true); err != nil {
		s.fail(w, r, err)
		return
	}
	sb, err := s.c.Resume(r.Context(), project, r.PathValue("id"), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, sb)
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	var req api.SnapshotRequest
	if err := decodeJSON(w, r, &req, true); err != nil {
		s.fail(w, r, err)
		return
	}
	sn, err := s.c.Snapshot(r.Context(), project, r.PathValue("id"), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusCreated, sn)
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	var req api.ForkRequest
	if err := decodeJSON(w, r, &req, true); err != nil {
		s.fail(w, r, err)
		return
	}
	caller, _ := auth.CallerOf(r.Context())
	sbs, err := s.c.ForkBy(r.Context(), project, caller.SandboxID, r.PathValue("id"), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusCreated, api.SandboxList{Sandboxes: sbs})
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	sns, err := s.c.Project(project).Snapshots().List(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if name := r.URL.Query().Get("name"); name != "" {
		sns = slices.DeleteFunc(sns, func(sn api.Snapshot) bool { return sn.Name != name })
	}
	api.WriteJSON(w, http.StatusOK, api.SnapshotList{Snapshots: sns})
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	sn, err := s.c.Project(project).Snapshots().Get(r.Context(), r.PathValue("snapshotId"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, sn)
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	if err := s.c.Project(project).Snapshots().Delete(r.Context(), r.PathValue("snapshotId")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
