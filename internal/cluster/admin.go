package cluster

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/cluster/secret"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// AdminHandler serves the operators' node API of `lizard api`:
// GET /v1/nodes, POST /v1/nodes/{name}/drain and /undrain. Its credential is the
// cluster secret (Authorization: Bearer $LIZARD_CLUSTER_SECRET), which
// every node and API process holds and which already commands every
// sandbox; a project's API key is refused. Failed checks are throttled
// per source address (package secret).
func (r *Router) AdminHandler() http.Handler {
	check := secret.NewChecker(r.cfg.Secret, "api", r.log, r.cfg.Metrics)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, req *http.Request) {
		l, err := r.Nodes(req.Context())
		r.answer(w, req, l, err)
	})
	mux.HandleFunc("POST /v1/nodes/{name}/drain", func(w http.ResponseWriter, req *http.Request) {
		d, err := r.Drain(req.Context(), req.PathValue("name"))
		r.answer(w, req, d, err)
	})
	mux.HandleFunc("POST /v1/nodes/{name}/undrain", func(w http.ResponseWriter, req *http.Request) {
		s, err := r.Undrain(req.Context(), req.PathValue("name"))
		r.answer(w, req, s, err)
	})
	mux.HandleFunc("/v1/nodes/", func(w http.ResponseWriter, req *http.Request) {
		r.answer(w, req, nil, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: "no such node request: GET /v1/nodes, POST /v1/nodes/{name}/drain or /undrain"})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		key, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		if !ok {
			key = ""
		}
		if err := check.Check(req, key); err != nil {
			// The checker logs, at most one line each 10 s.
			var e *errdefs.Error
			if errors.Is(err, errdefs.ErrRateLimited) && errors.As(err, &e) {
				w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
				r.answer(w, req, nil, err)
				return
			}
			r.answer(w, req, nil, &errdefs.Error{Kind: errdefs.ErrUnauthenticated,
				Msg: "listing and draining nodes takes the cluster secret: send Authorization: Bearer $LIZARD_CLUSTER_SECRET (a project's API key is not enough)"})
			return
		}
		mux.ServeHTTP(w, req)
	})
}

func (r *Router) answer(w http.ResponseWriter, req *http.Request, v any, err error) {
	if err != nil {
		status, code, msg := agentproxy.Classify(err)
		if status >= 500 {
			r.log.Error("node request failed", "method", req.Method, "path", req.URL.Path, "err", err)
		}
		api.WriteJSON(w, status, api.Error{Code: code, Message: msg})
		return
	}
	api.WriteJSON(w, http.StatusOK, v)
}
