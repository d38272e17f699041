package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/events"
)

// listEvents serves GET /v1/events: a page of the caller's project's
// lifecycle events, or with follow=1 an NDJSON stream of them as they are
// recorded (from after, or from now), until the client goes.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	q, follow, err := eventQuery(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !follow {
		page, err := s.events.List(r.Context(), project, q)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, page)
		return
	}
	if !r.URL.Query().Has("after") {
		if q.After, err = s.events.Last(r.Context()); err != nil {
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
	err = s.events.Follow(r.Context(), project, q, func(e api.Event) error {
		if err := enc.Encode(e); err != nil {
			return err
		}
		return rc.Flush()
	})
	if err != nil && r.Context().Err() == nil {
		s.log.Warn("following events ended", "project_id", project, "err", err)
	}
}

// eventQuery reads GET /v1/events' parameters: sandbox, type (repeated or
// comma-separated), metadata=key=value (repeated, as on GET
// /v1/sandboxes), after, limit and follow.
func eventQuery(r *http.Request) (events.Query, bool, error) {
	var q events.Query
	v := r.URL.Query()
	if vs, ok := v["sandbox"]; ok {
		if len(vs) > 1 || vs[0] == "" {
			return q, false, errdefs.Invalidf("sandbox filter: give one sandbox ID, such as sandbox=abc123, or leave the parameter out")
		}
		q.SandboxID = vs[0]
	}
	for _, t := range v["type"] {
		for _, typ := range strings.Split(t, ",") {
			if !slices.Contains(events.Types, typ) {
				return q, false, errdefs.Invalidf("type filter %q: want one of %s", typ, strings.Join(events.Types, ", "))
			}
			q.Types = append(q.Types, typ)
		}
	}
	for _, kv := range v["metadata"] {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return q, false, errdefs.Invalidf("metadata filter %q: want key=value, such as metadata=user=alice", kv)
		}
		if q.Metadata == nil {
			q.Metadata = map[string]string{}
		}
		q.Metadata[k] = val
	}
	if v.Has("after") {
		n, err := strconv.ParseInt(v.Get("after"), 10, 64)
		if err != nil || n < 0 {
			return q, false, errdefs.Invalidf("after %q: want an event ID (a whole number, 0 for the oldest kept), such as a page's next", v.Get("after"))
		}
		q.After = n
	}
	if v.Has("limit") {
		n, err := strconv.Atoi(v.Get("limit"))
		if err != nil || n < 1 || n > events.MaxLimit {
			return q, false, errdefs.Invalidf("limit %q: want 1 to %d", v.Get("limit"), events.MaxLimit)
		}
		q.Limit = n
	}
	follow := false
	if v.Has("follow") {
		b, err := strconv.ParseBool(v.Get("follow"))
		if err != nil {
			return q, false, errdefs.Invalidf("follow %q: want 1 or 0 (true or false)", v.Get("follow"))
		}
		follow = b
	}
	return q, follow, nil
}
