package e2b

import "net/http"

// interpreter serves the code interpreter's protocol (port 49999).
func (h *Handler) interpreter(w http.ResponseWriter, r *http.Request) {
	h.fail(w, r, notImplemented("the code interpreter (port 49999) is coming to Lizard's E2B surface"))
}
