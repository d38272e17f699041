package server

import (
	"encoding/json"
	"net/http"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/control"
)

// listEvents serves GET /v1/events: a page of the caller's project's
// lifecycle events, or with follow=1 an NDJSON stream of them as they are
// recorded (from after, or from now), until the client goes.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	evs := s.c.Project(project).Events()
	q, follow, err := control.EventQuery(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !follow {
		page, err := evs.List(r.Context(), q)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		api.WriteJSON(w, http.StatusOK, page)
		return
	}
	if !r.URL.Query().Has("after") {
		if q.After, err = evs.Last(r.Context()); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	// The headers go now: a client that has them is following, and sees
	// every event from here on.
	rc := http.NewResponseController(w)
	rc.Flush()
	enc := json.NewEncoder(w)
	err = evs.Follow(r.Context(), q, func(e api.Event) error {
		if err := enc.Encode(e); err != nil {
			return err
		}
		return rc.Flush()
	})
	if err != nil && r.Context().Err() == nil {
		s.log.Warn("following events ended", "project_id", project, "err", err)
	}
}
