package e2b

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
)

// Forks and snapshots as E2B's SDKs call them, over Control's. A snapshot
// is created from by naming its ID as the template, as in E2B.

// snapshotPrefix starts Lizard's snapshot IDs; a templateID with it is a
// snapshot to create from.
const snapshotPrefix = "snap-"

// forkResult is E2B's SandboxForkResult. Lizard's fork makes all the
// copies or none, so every entry carries a sandbox.
type forkResult struct {
	Sandbox sandboxJSON `json:"sandbox"`
}

func (h *Handler) fork(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout *int64 `json:"timeout"`
		Count   int    `json:"count"`
	}
	if err := decode(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	project, _ := auth.ProjectID(r.Context())
	caller, _ := auth.CallerOf(r.Context())
	id := r.PathValue("id")
	if _, err := h.lookup(r, id); err != nil {
		h.fail(w, r, err)
		return
	}
	freq := api.ForkRequest{Count: req.Count}
	if req.Timeout != nil {
		ms := *req.Timeout * 1000
		freq.TimeoutMs = &ms
	}
	sbs, err := h.cfg.Control.ForkBy(r.Context(), project, caller.SandboxID, id, freq)
	if err != nil {
		h.fail(w, r, notGone(err))
		return
	}
	out := make([]forkResult, 0, len(sbs))
	for _, sb := range sbs {
		h.cfg.Audit(r, "sandbox.create", "sandbox_id", sb.SandboxID, "forked_from", id, "surface", "e2b")
		out = append(out, forkResult{Sandbox: h.sandboxJSON(sb)})
	}
	api.WriteJSON(w, http.StatusCreated, out)
}

// snapshotInfo is E2B's SnapshotInfo: names holds the snapshot's name,
// while it holds one (E2B's are "team/name:tag"; a Lizard name is its
// project's, with no team or tag).
type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func snapshotJSON(sn api.Snapshot) snapshotInfo {
	names := []string{}
	if sn.Name != "" {
		names = append(names, sn.Name)
	}
	return snapshotInfo{SnapshotID: sn.SnapshotID, Names: names}
}

func (h *Handler) snapshot(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"name"`
	}
	if err := decode(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	project, _ := auth.ProjectID(r.Context())
	id := r.PathValue("id")
	if _, err := h.lookup(r, id); err != nil {
		h.fail(w, r, err)
		return
	}
	sn, err := h.cfg.Control.Snapshot(r.Context(), project, id, api.SnapshotRequest{Name: req.Name})
	if err != nil {
		h.fail(w, r, notGone(err))
		return
	}
	api.WriteJSON(w, http.StatusCreated, snapshotJSON(sn))
}

// listSnapshots answers the project's snapshots, of one sandbox with
// ?sandboxID=, the one ?name= names (its name or its ID), in pages of
// ?limit= (at most 100) after ?nextToken= (the last snapshot ID given).
func (h *Handler) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := maxPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPage {
			h.fail(w, r, badRequest("limit must be 1 to %d, not %q", maxPage, v))
			return
		}
		limit = n
	}
	project, _ := auth.ProjectID(r.Context())
	sns, err := h.cfg.Control.Project(project).Snapshots().List(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if sb := q.Get("sandboxID"); sb != "" {
		sns = slices.DeleteFunc(sns, func(s api.Snapshot) bool { return s.SandboxID != sb })
	}
	if name := q.Get("name"); name != "" {
		sns = slices.DeleteFunc(sns, func(s api.Snapshot) bool { return s.SnapshotID != name && s.Name != name })
	}
	if next := q.Get("nextToken"); next != "" {
		i := slices.IndexFunc(sns, func(s api.Snapshot) bool { return s.SnapshotID == next })
		if i < 0 {
			h.fail(w, r, badRequest("nextToken %q is not a snapshot of this list (deleted since?)", next))
			return
		}
		sns = sns[i+1:]
	}
	if len(sns) > limit {
		sns = sns[:limit]
		w.Header().Set("X-Next-Token", sns[limit-1].SnapshotID)
	}
	out := make([]snapshotInfo, 0, len(sns))
	for _, s := range sns {
		out = append(out, snapshotJSON(s))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// deleteTemplate is how E2B's SDKs delete a snapshot, or a template.
func (h *Handler) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !strings.HasPrefix(id, snapshotPrefix) {
		h.deleteCustomTemplate(w, r, id)
		return
	}
	project, _ := auth.ProjectID(r.Context())
	if err := h.cfg.Control.Project(project).Snapshots().Delete(r.Context(), id); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
