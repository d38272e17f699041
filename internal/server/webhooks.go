package server

import (
	"net/http"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
)

// webhookRoutes serves a project's webhooks (docs/events.md).
func (s *Server) webhookRoutes(mux *http.ServeMux, authed func(http.HandlerFunc) http.Handler) {
	if s.c == nil || !s.c.WebhooksKept() {
		return
	}
	// A project key only: a webhook outlives the key that made it, and
	// one made by code in a sandbox would go on sending the project's
	// events to the code's server after the sandbox ended and its key
	// was revoked.
	projectKey := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if err := projectKeyOnly(r, "managing webhooks"); err != nil {
				s.fail(w, r, err)
				return
			}
			h(w, r)
		}
	}
	mux.Handle("POST /v1/webhooks", authed(projectKey(s.createWebhook)))
	mux.Handle("GET /v1/webhooks", authed(projectKey(s.listWebhooks)))
	mux.Handle("DELETE /v1/webhooks/{webhook}", authed(projectKey(s.deleteWebhook)))
	mux.Handle("GET /v1/webhooks/{webhook}/deliveries", authed(projectKey(s.webhookDeliveries)))
}

func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	var req api.CreateWebhookRequest
	if err := decodeJSON(w, r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	wh, err := s.c.Project(project).Webhooks().Create(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.audit(r, "webhook.create", "webhook_id", wh.WebhookID, "url", wh.URL)
	api.WriteJSON(w, http.StatusCreated, wh)
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	list, err := s.c.Project(project).Webhooks().List(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, list)
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	if err := s.c.Project(project).Webhooks().Delete(r.Context(), r.PathValue("webhook")); err != nil {
		s.fail(w, r, err)
		return
	}
	s.audit(r, "webhook.delete", "webhook_id", r.PathValue("webhook"))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) webhookDeliveries(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	list, err := s.c.Project(project).Webhooks().Deliveries(r.Context(), r.PathValue("webhook"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, list)
}
