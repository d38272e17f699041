package api

import (
	"encoding/json"
	"net/http"
)

// WriteJSON answers w with status and v as a JSON body. It is how every
// server of Lizard's writes one — the API, the agent, E2B's API and envd,
// the node's internal API, the desktop — so that each answers alike: the
// content type set, the status, then the body (errors are Error bodies).
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// An encoding that fails here failed to write: the client has gone,
	// and there is no one left to tell.
	_ = json.NewEncoder(w).Encode(v)
}
