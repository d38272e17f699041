package server

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/secrets"
)

// secretRoutes registers the project's secrets (docs/secrets.md): write
// only, so no route returns a value.
func (s *Server) secretRoutes(mux *http.ServeMux, authed func(http.HandlerFunc) http.Handler) {
	mux.Handle("GET /v1/secrets", authed(s.listSecrets))
	mux.Handle("PUT /v1/secrets/{name}", authed(s.setSecret))
	mux.Handle("DELETE /v1/secrets/{name}", authed(s.deleteSecret))
}

// projectKeyOnly refuses a key minted for a sandbox (lizardToken, and its
// children's), which code in a sandbox holds, for what only a project key
// may do: code may use the project's secrets through its policy but
// never set, list or remove them — setting one with a host of its own
// would send it there — nor set the project's default policy, nor
// manage webhooks.
func projectKeyOnly(r *http.Request, what string) error {
	c, _ := auth.CallerOf(r.Context())
	if c.SandboxID == "" {
		return nil
	}
	return &errdefs.Error{Kind: errdefs.ErrForbidden, Msg: fmt.Sprintf(
		"this key was minted for sandbox %s (lizardToken), and %s needs a project key: code in a sandbox uses the project's secrets, network and events only as its own key lets it", c.SandboxID, what)}
}

func (s *Server) setSecret(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	if err := projectKeyOnly(r, "setting a secret"); err != nil {
		s.fail(w, r, err)
		return
	}
	name := r.PathValue("name")
	if err := secrets.CheckName(name); err != nil {
		s.fail(w, r, err)
		return
	}
	var req api.SetSecretRequest
	if err := decodeJSON(w, r, &req, false); err != nil {
		if errors.Is(err, errdefs.ErrTooLarge) {
			// Whatever its size, an oversized secret is one answer.
			err = errdefs.Invalidf("value is over %d bytes, the most a secret may hold (64 KiB)", secrets.MaxValueBytes)
		}
		s.fail(w, r, err)
		return
	}
	sec, err := s.c.Project(project).Secrets().Set(r.Context(), name, req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.audit(r, "secret.set", "secret", name)
	api.WriteJSON(w, http.StatusOK, sec)
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	if err := projectKeyOnly(r, "listing secrets"); err != nil {
		s.fail(w, r, err)
		return
	}
	list, err := s.c.Project(project).Secrets().List(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, list)
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	if err := projectKeyOnly(r, "removing a secret"); err != nil {
		s.fail(w, r, err)
		return
	}
	name := r.PathValue("name")
	if err := s.c.Project(project).Secrets().Delete(r.Context(), name); err != nil {
		s.fail(w, r, err)
		return
	}
	s.audit(r, "secret.delete", "secret", name)
	w.WriteHeader(http.StatusNoContent)
}
