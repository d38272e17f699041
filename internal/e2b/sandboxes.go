package e2b

import "net/http"

// controlRoutes are E2B's control API (spec/openapi.yml of e2b-dev/E2B),
// each over the Control the native API uses.
func (h *Handler) controlRoutes(mux *http.ServeMux) {
	todo := func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, notImplemented("%s %s is coming to Lizard's E2B surface", r.Method, r.URL.Path))
	}
	for _, p := range []string{"POST /e2b/sandboxes", "GET /e2b/sandboxes", "GET /e2b/v2/sandboxes", "GET /e2b/sandboxes/{id}", "DELETE /e2b/sandboxes/{id}"} {
		mux.Handle(p, h.authed(todo))
	}
}
