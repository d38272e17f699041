package remote

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"path/filepath"
	"strconv"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/cluster/secret"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/trace"
	"github.com/lizard-build/lizard/internal/version"
)

// HandlerConfig says what a node serves.
type HandlerConfig struct {
	// Node runs the sandboxes: the machine's *node.Local, which admits,
	// mints lizardTokens and audits itself.
	Node   node.Node
	Secret string
	Logger *slog.Logger
	// Metrics counts the refusals of the secret (nil: none).
	Metrics *metrics.Metrics
	// DataDir holds the node's images: RemoveImage refuses paths outside.
	DataDir string
	// Peers, when set, finds the address of another node: an agent call
	// for a sandbox moved off this node while it waited (a drain) is
	// passed on to the node it runs on now.
	Peers func(ctx context.Context, name string) (addr string, err error)
	// Templates builds and removes custom templates (nil: none here);
	// Forget drops what the node keeps for a template reference (its
	// warm pool's; nil: nothing).
	Templates Templates
	Forget    func(ctx context.Context, ref string)
	// Version is the Lizard version the node registered as (default
	// version.Version): calls from an api of a version it does not work
	// with are refused, as that api refuses the node (docs/cluster.md).
	Version string
}

// HeaderVersion carries the calling process's Lizard version on every
// call to a node's API. An api of 0.1.0 sends none: it is taken as that.
const HeaderVersion = "X-Lizard-Version"

// Handler returns the node's HTTP handler: GET /v1/health (no secret, for
// probes), the internal node API, and the forwarded agent paths, which
// agentproxy.Proxy passes to the agents: the API has checked the caller
// and that its project owns the sandbox, once; the node does not again.
func Handler(cfg HandlerConfig) http.Handler {
	h := &handler{cfg: cfg, log: cfg.Logger}
	if h.log == nil {
		h.log = slog.Default()
	}
	check := secret.NewChecker(cfg.Secret, "node", h.log, cfg.Metrics)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		api.WriteJSON(w, http.StatusOK, api.Health{Status: "ok"})
	})
	mux.HandleFunc("POST /internal/v1/sandboxes", h.create)
	mux.HandleFunc("POST /internal/v1/sandboxes/{id}/fork", h.fork)
	mux.HandleFunc("DELETE /internal/v1/sandboxes/{id}", h.kill)
	mux.HandleFunc("POST /internal/v1/sandboxes/{id}/timeout", h.setTimeout)
	mux.HandleFunc("POST /internal/v1/sandboxes/{id}/pause", h.pause)
	mux.HandleFunc("GET /internal/v1/sandboxes/{id}/metrics", h.metrics)
	mux.HandleFunc("PUT /internal/v1/sandboxes/{id}/network", h.updateNetwork)
	mux.HandleFunc("GET /internal/v1/sandboxes/{id}/network/log", h.networkLog)
	mux.HandleFunc("POST /internal/v1/sandboxes/{id}/resume", h.resume)
	mux.HandleFunc("POST /internal/v1/sandboxes/{id}/snapshot", h.snapshot)
	mux.HandleFunc("POST /internal/v1/sandboxes/{id}/move", h.move)
	mux.HandleFunc("POST /internal/v1/images/remove", h.removeImage)
	mux.HandleFunc("/internal/v1/sandboxes/{id}/ports/{port}/{mode}/{rest...}", h.port)
	mux.HandleFunc("POST /internal/v1/volumes", h.makeVolume)
	mux.HandleFunc("DELETE /internal/v1/volumes/{id}", h.removeVolume)
	mux.HandleFunc("POST /internal/v1/templates/build", h.buildTemplate)
	mux.HandleFunc("POST /internal/v1/templates/forget", h.forgetTemplate)
	mux.HandleFunc("POST /internal/v1/templates/remove", h.removeTemplate)
	agent := node.NewAgentProxy(cfg.Node, h.log)
	if cfg.Peers != nil {
		agent.Acquire = h.acquireOrPass(NewTransport(cfg.Secret))
	}
	for _, p := range api.AgentPublicPaths {
		mux.Handle("/v1/sandboxes/{id}"+p, agent)
	}
	// The API's span (traceparent) is the parent of this one's, which
	// names the project the API said called.
	traced := trace.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := auth.CallerOf(r.Context()); ok {
			trace.Annotate(r.Context(), trace.Project(c.ProjectID))
		}
		mux.ServeHTTP(w, r)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/health" {
			if err := check.Check(r, presentedSecret(r)); err != nil {
				// The checker logs, at most one line each 10 s.
				w.Header().Set(HeaderSecret, "refused")
				var e *errdefs.Error
				if errors.Is(err, errdefs.ErrRateLimited) && errors.As(err, &e) {
					w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
					api.WriteJSON(w, http.StatusTooManyRequests, wireError{Message: "this is a Lizard node: " + e.Msg})
					return
				}
				api.WriteJSON(w, http.StatusUnauthorized, wireError{Message: "this is a Lizard node: its API is for `lizard api`, with the cluster secret"})
				return
			}
			if msg := versionRefusal(cfg.Version, r.Header.Get(HeaderVersion)); msg != "" {
				// Both shapes in one body: the api's client reads the
				// kind of an internal call's error, and an agent call's
				// is passed on to the caller as the public error (code).
				status, we := encodeError(&errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: msg})
				api.WriteJSON(w, status, struct {
					wireError
					Code string `json:"code"`
				}{we, api.CodeUnavailable})
				return
			}
		}
		traced.ServeHTTP(w, r.WithContext(callerContext(r)))
	})
}

// versionRefusal says why a node of version own (default this build's)
// refuses a call from a process of version caller ("" from an api older
// than the header: 0.1.0), or "" when the two work together. The api of
// this build and later refuses the node first; this is the node's side,
// for an api that did not check (0.1.0's).
func versionRefusal(own, caller string) string {
	own, caller = cmp.Or(own, version.Version), cmp.Or(caller, version.Unreported)
	if version.Compatible(own, caller) {
		return ""
	}
	return fmt.Sprintf("this node runs Lizard %s, which the calling lizard api (Lizard %s) cannot work with "+
		"(the same major, and for 0.x the same minor: docs/cluster.md#versions); call a lizard api of version %s, or upgrade the node to %s",
		own, caller, version.Span(own), version.Span(caller))
}

// callerContext is r's context carrying the API's caller named in its
// headers, if any: who asked, for the node's audit trail.
func callerContext(r *http.Request) context.Context {
	project := r.Header.Get(HeaderProject)
	if project == "" {
		return r.Context()
	}
	return auth.WithCaller(r.Context(), auth.Caller{ProjectID: project, KeyID: r.Header.Get(HeaderKeyID),
		SandboxID: r.Header.Get(HeaderCallerSandbox), Remote: r.Header.Get(HeaderRemote)})
}

type handler struct {
	cfg HandlerConfig
	log *slog.Logger
}

func (h *handler) create(w http.ResponseWriter, r *http.Request) {
	var in plan
	if !h.decode(w, r, &in) {
		return
	}
	sb, err := h.cfg.Node.Create(r.Context(), in.plan())
	h.answer(w, r, sb, err)
}

func (h *handler) fork(w http.ResponseWriter, r *http.Request) {
	var in forkRequest
	if !h.decode(w, r, &in) {
		return
	}
	sbs, err := h.cfg.Node.Fork(r.Context(), r.PathValue("id"), in.Plan.plan(), in.Count)
	h.answer(w, r, sbs, err)
}

// acquireOrPass acquires a call on this node, or, for a sandbox that
// moved to another node while the call waited for it, on that node,
// through its internal API: the caller sees a stall, not an error.
func (h *handler) acquireOrPass(tr *Transport) func(ctx context.Context, id string) (agentproxy.Call, error) {
	return func(ctx context.Context, id string) (agentproxy.Call, error) {
		call, err := h.cfg.Node.Acquire(ctx, id)
		var moved *node.MovedTo
		if !errors.As(err, &moved) {
			return call, err
		}
		addr, perr := h.cfg.Peers(ctx, moved.To)
		if perr != nil {
			h.log.Warn("finding the node a sandbox moved to", "sandbox_id", id, "node", moved.To, "err", perr)
			return call, err
		}
		call, err = NewClient(moved.To, addr, tr).Acquire(ctx, id)
		call.Transport = tr
		return call, err
	}
}

type mover interface {
	MoveOut(ctx context.Context, id, to string) (node.Move, error)
}

func (h *handler) move(w http.ResponseWriter, r *http.Request) {
	var in moveRequest
	if !h.decode(w, r, &in) {
		return
	}
	m, ok := h.cfg.Node.(mover)
	if !ok || in.To == "" {
		h.fail(w, r, errdefs.Invalidf("to: want the node the sandbox moves to"))
		return
	}
	mv, err := m.MoveOut(r.Context(), r.PathValue("id"), in.To)
	h.answer(w, r, moveResponse{Sandbox: mv.Sandbox, Paused: mv.Paused}, err)
}

func (h *handler) kill(w http.ResponseWriter, r *http.Request) {
	h.answer(w, r, struct{}{}, h.cfg.Node.Kill(r.Context(), r.PathValue("id")))
}

func (h *handler) setTimeout(w http.ResponseWriter, r *http.Request) {
	var in timeoutRequest
	if !h.decode(w, r, &in) {
		return
	}
	if in.TimeoutMs == nil {
		h.fail(w, r, errdefs.Invalidf("timeoutMs is missing"))
		return
	}
	sb, err := h.cfg.Node.SetTimeout(r.Context(), r.PathValue("id"), *in.TimeoutMs)
	h.answer(w, r, sb, err)
}

func (h *handler) updateNetwork(w http.ResponseWriter, r *http.Request) {
	var in networkRequest
	if !h.decode(w, r, &in) {
		return
	}
	if in.Network == nil {
		h.fail(w, r, errdefs.Invalidf("network is missing"))
		return
	}
	sb, err := h.cfg.Node.UpdateNetwork(r.Context(), r.PathValue("id"), in.Network, in.Cut)
	h.answer(w, r, sb, err)
}

func (h *handler) networkLog(w http.ResponseWriter, r *http.Request) {
	log, err := h.cfg.Node.NetworkLog(r.Context(), r.PathValue("id"))
	h.answer(w, r, log, err)
}

func (h *handler) metrics(w http.ResponseWriter, r *http.Request) {
	m, err := h.cfg.Node.Metrics(r.Context(), r.PathValue("id"))
	h.answer(w, r, api.SandboxMetrics{Metrics: m}, err)
}

func (h *handler) pause(w http.ResponseWriter, r *http.Request) {
	sb, err := h.cfg.Node.Pause(r.Context(), r.PathValue("id"))
	h.answer(w, r, sb, err)
}

func (h *handler) resume(w http.ResponseWriter, r *http.Request) {
	var in timeoutRequest
	if !h.decode(w, r, &in) {
		return
	}
	sb, err := h.cfg.Node.Resume(r.Context(), r.PathValue("id"), in.TimeoutMs)
	h.answer(w, r, sb, err)
}

func (h *handler) snapshot(w http.ResponseWriter, r *http.Request) {
	var in snapshotRequest
	if !h.decode(w, r, &in) {
		return
	}
	image, size, err := h.cfg.Node.Snapshot(r.Context(), r.PathValue("id"), in.SnapshotID)
	h.answer(w, r, snapshotResponse{Image: image, SizeBytes: size}, err)
}

func (h *handler) removeImage(w http.ResponseWriter, r *http.Request) {
	var in imageRequest
	if !h.decode(w, r, &in) {
		return
	}
	// Only the node's own images: the secret's holder is trusted, but a
	// path is still checked before it is removed.
	rel, err := filepath.Rel(h.cfg.DataDir, filepath.Clean(in.Image))
	if h.cfg.DataDir == "" || err != nil || !filepath.IsLocal(rel) {
		h.fail(w, r, errdefs.Invalidf("image %q is not in the node's data directory", in.Image))
		return
	}
	h.answer(w, r, struct{}{}, h.cfg.Node.RemoveImage(r.Context(), in.Image))
}

func (h *handler) makeVolume(w http.ResponseWriter, r *http.Request) {
	var in volumeRequest
	if !h.decode(w, r, &in) {
		return
	}
	h.answer(w, r, struct{}{}, h.cfg.Node.MakeVolume(r.Context(), in.ID, in.SizeBytes))
}

func (h *handler) removeVolume(w http.ResponseWriter, r *http.Request) {
	h.answer(w, r, struct{}{}, h.cfg.Node.RemoveVolume(r.Context(), r.PathValue("id")))
}

func (h *handler) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<20)).Decode(v); err != nil {
		h.fail(w, r, errdefs.Invalidf("decoding the request: %v", err))
		return false
	}
	return true
}

func (h *handler) answer(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err != nil {
		h.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, v)
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, we := encodeError(err)
	if status == http.StatusInternalServerError && !errors.Is(err, context.Canceled) {
		h.log.Error("internal node request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	api.WriteJSON(w, status, we)
}
