package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/store"
)

// HandlerConfig says what a node serves.
type HandlerConfig struct {
	// Node runs the sandboxes: the machine's *node.Local.
	Node node.Node
	// Store is the shared database the node's lizardTokens are minted in.
	Store  *store.Store
	Secret string
	// Agent serves the public agent paths of the node's sandboxes to the
	// API (a server.Server over this node, behind Auth).
	Agent  http.Handler
	Logger *slog.Logger
	// DataDir holds the node's images: RemoveImage refuses paths outside.
	DataDir string
	// MaxLive is how many live sandboxes a project may have (0: no
	// bound), enforced when a sandbox is recorded, under the project's
	// lock in the shared database: the API checks it first, but several
	// API processes at once could pass it together.
	MaxLive int
	// MaxDisk is the disk a project may be promised, its live sandboxes'
	// disk limits and its volumes' sizes added up (0: no bound), enforced
	// like MaxLive: API processes check it, and volume creates take the
	// same lock. DefaultDisk is the disk of rows recorded without a shape.
	MaxDisk     int64
	DefaultDisk int64
}

// Handler returns the node's HTTP handler: GET /v1/health (no secret, for
// probes), the internal node API, and the forwarded agent paths.
func Handler(cfg HandlerConfig) http.Handler {
	h := &handler{cfg: cfg, log: cfg.Logger}
	if h.log == nil {
		h.log = slog.Default()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, api.Health{Status: "ok"})
	})
	mux.HandleFunc("POST /internal/v1/sandboxes", h.create)
	mux.HandleFunc("POST /internal/v1/sandboxes/{id}/fork", h.fork)
	mux.HandleFunc("DELETE /internal/v1/sandboxes/{id}", h.kill)
	mux.HandleFunc("POST /internal/v1/sandboxes/{id}/timeout", h.setTimeout)
	mux.HandleFunc("POST /internal/v1/sandboxes/{id}/pause", h.pause)
	mux.HandleFunc("GET /internal/v1/sandboxes/{id}/metrics", h.metrics)
	mux.HandleFunc("POST /internal/v1/sandboxes/{id}/resume", h.resume)
	mux.HandleFunc("POST /internal/v1/sandboxes/{id}/snapshot", h.snapshot)
	mux.HandleFunc("POST /internal/v1/images/remove", h.removeImage)
	mux.HandleFunc("/internal/v1/sandboxes/{id}/ports/{port}/{mode}/{rest...}", h.port)
	mux.HandleFunc("POST /internal/v1/volumes", h.makeVolume)
	mux.HandleFunc("DELETE /internal/v1/volumes/{id}", h.removeVolume)
	for _, p := range api.AgentPublicPaths {
		mux.Handle("/v1/sandboxes/{id}"+p, cfg.Agent)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/health" && !validSecret(r, cfg.Secret) {
			h.log.Warn("refused a request without the cluster secret", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
			w.Header().Set(HeaderSecret, "refused")
			writeJSON(w, http.StatusUnauthorized, wireError{Message: "this is a Lizard node: its API is for `lizard api`, with the cluster secret"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// Auth authenticates the API's forwarded agent calls: the cluster secret,
// and the caller the API checked, named in headers.
type Auth struct{ Secret string }

// Require implements what server.Config.Keys asks.
func (a Auth) Require(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		project := r.Header.Get(HeaderProject)
		if !validSecret(r, a.Secret) || project == "" {
			auth.Unauthorized(w)
			return
		}
		c := auth.Caller{ProjectID: project, KeyID: r.Header.Get(HeaderKeyID), SandboxID: r.Header.Get(HeaderCallerSandbox)}
		next.ServeHTTP(w, r.WithContext(auth.WithCaller(r.Context(), c)))
	})
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
	sb, err := h.cfg.Node.Create(r.Context(), h.local(in))
	h.answer(w, r, sandboxToWire(sb), err)
}

// local is the node's plan of wire plan w, minting its lizardToken here
// if it asks for one.
func (h *handler) local(w plan) node.Plan {
	p := w.plan()
	if (h.cfg.MaxLive > 0 || h.cfg.MaxDisk > 0) && p.Role == "" {
		p.Admit = h.admit(p.ProjectID, p.Limits.DiskBytes)
	}
	if w.Token {
		p.Key = func(ctx context.Context, sandboxID string) (string, error) {
			k, err := auth.CreateUntil(ctx, h.cfg.Store, p.ProjectID, sandboxID, p.KeyExpires)
			if err != nil {
				return "", fmt.Errorf("minting the sandbox's API key: %w", err)
			}
			h.log.Info("key.create", "key_id", k.ID, "project_id", p.ProjectID, "sandbox_id", sandboxID, "by", "lizardToken")
			return k.String(), nil
		}
	}
	return p
}

// admit is the quota check of a sandbox of projectID, of disk bytes of
// disk, at its record: the project's lock is held from the count to the
// insert (release).
func (h *handler) admit(projectID string, disk int64) func(ctx context.Context, again bool) (func(), error) {
	return func(ctx context.Context, _ bool) (func(), error) {
		release, err := h.cfg.Store.LockProject(ctx, projectID)
		if err != nil {
			return nil, err
		}
		n, err := h.cfg.Store.CountProjectLive(ctx, projectID)
		if err != nil {
			release()
			return nil, err
		}
		if h.cfg.MaxLive > 0 && n >= h.cfg.MaxLive {
			release()
			return nil, &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: time.Second,
				Msg: fmt.Sprintf("project %s already has %d live sandboxes, its maximum; kill some first", projectID, n)}
		}
		if h.cfg.MaxDisk > 0 {
			if disk <= 0 {
				disk = h.cfg.DefaultDisk
			}
			pd, err := h.cfg.Store.PromisedDisk(ctx, projectID, h.cfg.DefaultDisk)
			if err != nil {
				release()
				return nil, err
			}
			if pd.Total()+disk > h.cfg.MaxDisk {
				release()
				return nil, node.OverDisk(projectID, pd, fmt.Sprintf("a sandbox of %d MiB", disk>>20), h.cfg.MaxDisk)
			}
		}
		return release, nil
	}
}

func (h *handler) fork(w http.ResponseWriter, r *http.Request) {
	var in forkRequest
	if !h.decode(w, r, &in) {
		return
	}
	sbs, err := h.cfg.Node.Fork(r.Context(), r.PathValue("id"), h.local(in.Plan), in.Count)
	ws := make([]wireSandbox, len(sbs))
	for i, sb := range sbs {
		ws[i] = sandboxToWire(sb)
	}
	h.answer(w, r, ws, err)
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
	h.answer(w, r, sandboxToWire(sb), err)
}

func (h *handler) metrics(w http.ResponseWriter, r *http.Request) {
	m, err := h.cfg.Node.Metrics(r.Context(), r.PathValue("id"))
	h.answer(w, r, api.SandboxMetrics{Metrics: m}, err)
}

func (h *handler) pause(w http.ResponseWriter, r *http.Request) {
	sb, err := h.cfg.Node.Pause(r.Context(), r.PathValue("id"))
	h.answer(w, r, sandboxToWire(sb), err)
}

func (h *handler) resume(w http.ResponseWriter, r *http.Request) {
	var in timeoutRequest
	if !h.decode(w, r, &in) {
		return
	}
	sb, err := h.cfg.Node.Resume(r.Context(), r.PathValue("id"), in.TimeoutMs)
	h.answer(w, r, sandboxToWire(sb), err)
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
	writeJSON(w, http.StatusOK, v)
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, we := encodeError(err)
	if status == http.StatusInternalServerError && !errors.Is(err, context.Canceled) {
		h.log.Error("internal node request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeJSON(w, status, we)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
