package cluster

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
)

// AdminHandler serves the operators' node API of `lizard api`:
// POST /v1/nodes/{name}/drain and /undrain. Its credential is the
// cluster secret (Authorization: Bearer $LIZARD_CLUSTER_SECRET), which
// every node and API process holds and which already commands every
// sandbox; a project's API key is refused.
func (r *Router) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/nodes/{name}/drain", func(w http.ResponseWriter, req *http.Request) {
		d, err := r.Drain(req.Context(), req.PathValue("name"))
		r.answer(w, req, d, err)
	})
	mux.HandleFunc("POST /v1/nodes/{name}/undrain", func(w http.ResponseWriter, req *http.Request) {
		s, err := r.Undrain(req.Context(), req.PathValue("name"))
		r.answer(w, req, s, err)
	})
	mux.HandleFunc("/v1/nodes/", func(w http.ResponseWriter, req *http.Request) {
		r.answer(w, req, nil, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: "no such node request: POST /v1/nodes/{name}/drain or /undrain"})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !r.operator(req) {
			r.log.Warn("refused a node request without the cluster secret", "method", req.Method, "path", req.URL.Path, "remote", req.RemoteAddr)
			r.answer(w, req, nil, &errdefs.Error{Kind: errdefs.ErrUnauthenticated,
				Msg: "draining nodes takes the cluster secret: send Authorization: Bearer $LIZARD_CLUSTER_SECRET (a project's API key is not enough)"})
			return
		}
		mux.ServeHTTP(w, req)
	})
}

// operator reports whether req carries the cluster secret.
func (r *Router) operator(req *http.Request) bool {
	key, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(key), []byte(r.cfg.Secret)) == 1
}

func (r *Router) answer(w http.ResponseWriter, req *http.Request, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		status, code, msg := node.Classify(err)
		if status >= 500 {
			r.log.Error("node request failed", "method", req.Method, "path", req.URL.Path, "err", err)
		}
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(api.Error{Code: code, Message: msg})
		return
	}
	json.NewEncoder(w).Encode(v)
}
