package server

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/recipe"
)

// MaxTemplateBody bounds POST /v1/templates: the recipe's files travel in
// it, base64 (recipe.MaxFileBytes decoded).
const MaxTemplateBody = 24 << 20

// templateRoutes registers the custom template calls.
func (s *Server) templateRoutes(mux *http.ServeMux, authed func(http.HandlerFunc) http.Handler) {
	mux.Handle("POST /v1/templates", authed(s.buildTemplate))
	mux.Handle("GET /v1/templates", authed(s.listTemplates))
	mux.Handle("GET /v1/templates/{name}", authed(s.getTemplate))
	mux.Handle("DELETE /v1/templates/{name}", authed(s.deleteTemplate))
}

// buildTemplate checks the request (errors are plain JSON answers), then
// streams the build as NDJSON TemplateBuildEvents ending with done or
// error. The build is bound to the request: a client that goes away
// cancels it, and nothing of it is left.
func (s *Server) buildTemplate(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	var req api.BuildTemplateRequest
	if err := decodeJSONMax(w, r, &req, false, MaxTemplateBody); err != nil {
		s.fail(w, r, err)
		return
	}
	b, err := s.c.Project(project).Templates().Plan(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	send := func(ev api.TemplateBuildEvent) {
		enc.Encode(ev)
		if flusher != nil {
			flusher.Flush()
		}
	}
	t, cached, err := b.Run(r.Context(), send)
	if err != nil {
		ev := api.TemplateBuildEvent{Type: api.BuildEventError}
		var se *recipe.StepError
		if errors.As(err, &se) {
			ev.Code, ev.Name, ev.Log = api.CodeInvalidArgument, se.Step, se.Log
			ev.Message = "the build failed at step \"" + se.Step + "\" (" + se.Err.Error() + "); its output is in log; fix the recipe and build again"
		} else {
			_, ev.Code, ev.Message = classify(err)
			s.log.Error("building a template", "project_id", project, "template", req.Name, "err", err)
		}
		send(ev)
		return
	}
	s.audit(r, "template.build", "template", t.Name, "key", t.Key, "cached", cached)
	send(api.TemplateBuildEvent{Type: api.BuildEventDone, Cached: cached, Template: &t})
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	ts, err := s.c.Project(project).Templates().List(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, api.TemplateList{Templates: ts})
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	t, err := s.c.Project(project).Templates().Get(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, t)
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	if err := s.c.Project(project).Templates().Delete(r.Context(), r.PathValue("name")); err != nil {
		s.fail(w, r, err)
		return
	}
	s.audit(r, "template.delete", "template", r.PathValue("name"))
	w.WriteHeader(http.StatusNoContent)
}
