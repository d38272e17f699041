package e2b

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
)

// clientID is what E2B's answers call the client (the node, in E2B's
// cloud); the SDKs only carry it.
const clientID = "lizard"

// defaultTimeout is NewSandbox.timeout's default in E2B's spec, in
// seconds. The SDKs always send one (300).
const defaultTimeout = 15

// defaultTimeoutV2 is the v2 routes' default (NewSandboxV2,
// ConnectSandboxV2): the SDKs' connect() sends none unless asked, and a
// sandbox resumed by it on E2B lives 5 minutes, not 15 seconds.
const defaultTimeoutV2 = 300

// v2Default sets *timeout to defaultTimeoutV2 when r is a v2 route's and
// left it out.
func v2Default(r *http.Request, timeout **int64) {
	if *timeout == nil && strings.HasPrefix(r.URL.Path, "/e2b/v2/") {
		t := int64(defaultTimeoutV2)
		*timeout = &t
	}
}

// neverEnds stands in for endAt, which E2B's answers always carry, when a
// sandbox has no timeout.
var neverEnds = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// controlRoutes are E2B's control API (spec/openapi.yml of e2b-dev/E2B),
// each over the Control the native API uses.
func (h *Handler) controlRoutes(mux *http.ServeMux) {
	// The SDKs create and connect through the v2 routes; the v1 ones are
	// E2B's older SDKs'. The bodies are the same but for fields Lizard
	// reads leniently.
	mux.Handle("POST /e2b/sandboxes", h.authed(h.create))
	mux.Handle("POST /e2b/v2/sandboxes", h.authed(h.create))
	mux.Handle("GET /e2b/sandboxes", h.authed(h.listV1))
	mux.Handle("GET /e2b/v2/sandboxes", h.authed(h.listV2))
	mux.Handle("GET /e2b/sandboxes/{id}", h.authed(h.get))
	mux.Handle("DELETE /e2b/sandboxes/{id}", h.authed(h.kill))
	mux.Handle("POST /e2b/sandboxes/{id}/timeout", h.authed(h.setTimeout))
	mux.Handle("POST /e2b/sandboxes/{id}/refreshes", h.authed(h.refresh))
	mux.Handle("POST /e2b/sandboxes/{id}/pause", h.authed(h.pause))
	mux.Handle("POST /e2b/sandboxes/{id}/resume", h.authed(h.resume))
	mux.Handle("POST /e2b/sandboxes/{id}/connect", h.authed(h.connect))
	mux.Handle("POST /e2b/v2/sandboxes/{id}/connect", h.authed(h.connect))
	mux.Handle("GET /e2b/sandboxes/{id}/metrics", h.authed(h.metrics))
	mux.Handle("POST /e2b/sandboxes/{id}/fork", h.authed(h.fork))
	mux.Handle("POST /e2b/sandboxes/{id}/snapshots", h.authed(h.snapshot))
	mux.Handle("GET /e2b/snapshots", h.authed(h.listSnapshots))
	mux.Handle("DELETE /e2b/templates/{id}", h.authed(h.deleteTemplate))
	mux.Handle("PUT /e2b/sandboxes/{id}/network", h.authed(h.updateNetwork))
	unsupported := map[string]string{
		"GET /e2b/sandboxes/{id}/logs":    "sandbox logs",
		"GET /e2b/v2/sandboxes/{id}/logs": "sandbox logs",
		"GET /e2b/sandboxes/metrics":      "metrics of many sandboxes in one call (GET /sandboxes/{id}/metrics is served)",
	}
	for route, feature := range unsupported {
		mux.Handle(route, h.authed(func(w http.ResponseWriter, r *http.Request) {
			h.fail(w, r, notImplemented("%s is not supported by Lizard's E2B surface (docs/e2b.md)", feature))
		}))
	}
	h.templateRoutes(mux)
}

// newSandbox is E2B's NewSandbox. Fields Lizard has no counterpart for
// are read to refuse them by name rather than ignore them.
type newSandbox struct {
	TemplateID      string `json:"templateID"`
	Timeout         *int64 `json:"timeout"`
	AutoPause       bool   `json:"autoPause"`
	AutoPauseMemory *bool  `json:"autoPauseMemory"`
	AutoResume      *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	// Secure is ignored: every call into a Lizard sandbox needs its token.
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *networkConfig    `json:"network"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	MCP                 json.RawMessage   `json:"mcp"`
	IAM                 json.RawMessage   `json:"iam"`
	VolumeMounts        []api.VolumeMount `json:"volumeMounts"`
}

// networkConfig is E2B's SandboxNetworkConfig.
type networkConfig struct {
	egressRules
	AllowPublicTraffic *bool   `json:"allowPublicTraffic"`
	MaskRequestHost    *string `json:"maskRequestHost"`
	HTTPSPorts         []int   `json:"httpsPorts"`
}

// sandboxJSON is E2B's Sandbox: the answer of create, resume and connect.
type sandboxJSON struct {
	TemplateID      string `json:"templateID"`
	SandboxID       string `json:"sandboxID"`
	ClientID        string `json:"clientID"`
	EnvdVersion     string `json:"envdVersion"`
	Alias           string `json:"alias,omitempty"`
	EnvdAccessToken string `json:"envdAccessToken,omitempty"`
	// TrafficAccessToken opens the sandbox's ports and the code
	// interpreter's context calls (which carry only this header), not envd
	// nor /execute: control.TrafficToken.
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// listedSandbox is E2B's ListedSandbox; sandboxDetail its SandboxDetail.
type listedSandbox struct {
	TemplateID   string            `json:"templateID"`
	Alias        string            `json:"alias,omitempty"`
	SandboxID    string            `json:"sandboxID"`
	ClientID     string            `json:"clientID"`
	StartedAt    time.Time         `json:"startedAt"`
	EndAt        time.Time         `json:"endAt"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int64             `json:"memoryMB"`
	DiskSizeMB   int64             `json:"diskSizeMB"`
	State        string            `json:"state"`
	EnvdVersion  string            `json:"envdVersion"`
	Metadata     map[string]string `json:"metadata"`
	VolumeMounts []api.VolumeMount `json:"volumeMounts,omitempty"`
}

type sandboxDetail struct {
	listedSandbox
	EnvdAccessToken string       `json:"envdAccessToken,omitempty"`
	Domain          *string      `json:"domain"`
	Network         *networkInfo `json:"network"`
}

// AutoResumeKey is the metadata pair ("true") that records E2B's
// lifecycle auto_resume (autoResume.enabled) on a sandbox: calls through
// the sandbox URL resume such a sandbox when it is paused, as E2B's proxy
// resumes it on traffic, and answer 502 for any other paused sandbox.
// Lizard's own API shows it; the E2B surface hides it.
const AutoResumeKey = "e2b.autoResume"

// autoResumes says whether calls into sb resume it when paused.
func autoResumes(sb api.Sandbox) bool { return sb.Metadata[AutoResumeKey] == "true" }

// templateName maps E2B's template IDs onto Lizard's templates: E2B's
// code interpreter and base images are Lizard's interpreter template;
// any other name is a template of the project's (or a built-in) by name.
func templateName(e2bID string) string {
	switch e2bID {
	case "", "base", "code-interpreter-v1", "code-interpreter", "code-interpreter-stateful":
		return "interpreter"
	}
	return e2bID
}

// createRequest maps E2B's NewSandbox onto Lizard's create, refusing
// what Lizard cannot do by name.
func createRequest(n newSandbox) (api.CreateSandboxRequest, error) {
	req := api.CreateSandboxRequest{
		Template: templateName(n.TemplateID), Metadata: n.Metadata, Envs: n.EnvVars,
		AllowInternet: n.AllowInternetAccess, Volumes: n.VolumeMounts,
	}
	if strings.HasPrefix(n.TemplateID, snapshotPrefix) {
		// A snapshot's ID as the template: E2B's way to start from one.
		req.Template, req.SnapshotID = "", n.TemplateID
	}
	timeout := int64(defaultTimeout)
	if n.Timeout != nil {
		timeout = *n.Timeout
	}
	if timeout <= 0 {
		return req, badRequest("timeout must be a positive number of seconds, not %d", timeout)
	}
	ms := timeout * 1000
	req.TimeoutMs = &ms
	if n.AutoPause {
		req.OnTimeout = "pause"
	}
	if n.AutoPauseMemory != nil && !*n.AutoPauseMemory {
		// on_timeout {"mode": "filesystem"} (keep_memory: False): its
		// auto-pause keeps the disk alone.
		req.PauseMemory = n.AutoPauseMemory
	}
	if n.AutoResume != nil && n.AutoResume.Enabled && !n.AutoPause {
		return req, badRequest("autoResume needs autoPause: only a sandbox paused at its timeout can be resumed")
	}
	if _, ok := n.Metadata[AutoResumeKey]; ok {
		return req, badRequest("metadata key %s is Lizard's record of lifecycle auto_resume; set auto_resume instead", AutoResumeKey)
	}
	if n.AutoResume != nil && n.AutoResume.Enabled {
		meta := make(map[string]string, len(n.Metadata)+1)
		for k, v := range n.Metadata {
			meta[k] = v
		}
		meta[AutoResumeKey] = "true"
		req.Metadata = meta
	}
	if len(n.MCP) > 0 && string(n.MCP) != "null" {
		return req, notImplemented("MCP servers in a sandbox (mcp) are not supported by Lizard's E2B surface; Lizard's own MCP server is `lizard mcp`")
	}
	if len(n.IAM) > 0 && string(n.IAM) != "null" {
		return req, notImplemented("workload identity (iam) is not supported by Lizard's E2B surface")
	}
	if nw := n.Network; nw != nil {
		if nw.MaskRequestHost != nil {
			// The Host E2B's proxy gives requests into the sandbox's
			// ports ("${PORT}" the port): Lizard's ports proxy does the
			// same with portsHost, which checks it.
			req.PortsHost = *nw.MaskRequestHost
		}
		if len(nw.HTTPSPorts) > 0 {
			return req, notImplemented("network.httpsPorts is not supported by Lizard's E2B surface: its ports proxy plain HTTP to the sandbox")
		}
		if err := nw.unsupported(); err != nil {
			return req, err
		}
		inject, err := nw.inject()
		if err != nil {
			return req, err
		}
		if nw.given() || len(inject) > 0 {
			// allow_internet_access=false is denyOut 0.0.0.0/0 to E2B: with
			// rules it makes them an allow list rather than take all
			// egress away.
			noInternet := n.AllowInternetAccess != nil && !*n.AllowInternetAccess
			pol, err := nw.policy(noInternet)
			if err != nil {
				return req, err
			}
			pol.Inject = inject
			req.Network, req.AllowInternet = pol, nil
		}
		if nw.AllowPublicTraffic != nil {
			req.PublicPorts = *nw.AllowPublicTraffic
		}
	}
	return req, nil
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	var n newSandbox
	if err := decode(r, &n); err != nil {
		h.fail(w, r, err)
		return
	}
	v2Default(r, &n.Timeout)
	project, _ := auth.ProjectID(r.Context())
	if name, _ := splitName(n.TemplateID); name != n.TemplateID && !strings.HasPrefix(n.TemplateID, snapshotPrefix) {
		// E2B's name:tag: the template, while the tag names its build.
		if !builtIn(name) {
			var err error
			if name, err = h.resolveTemplate(r.Context(), project, n.TemplateID); err != nil {
				h.fail(w, r, err)
				return
			}
		}
		n.TemplateID = name
	}
	req, err := createRequest(n)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	caller, _ := auth.CallerOf(r.Context())
	if req.SnapshotID == "" && n.TemplateID != "" {
		// A snapshot's name as the template, as on E2B, where a named
		// snapshot is a template: it comes before a template of that name.
		if sn, err := h.cfg.Control.Project(project).Snapshots().Get(r.Context(), n.TemplateID); err == nil {
			req.Template, req.SnapshotID = "", sn.SnapshotID
		}
	}
	sb, err := h.cfg.Control.CreateBy(r.Context(), project, caller.SandboxID, req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.cfg.Audit(r, "sandbox.create", "sandbox_id", sb.SandboxID, "template", sb.Template, "surface", "e2b")
	api.WriteJSON(w, http.StatusCreated, h.sandboxJSON(sb))
}

func (h *Handler) sandboxJSON(sb api.Sandbox) sandboxJSON {
	traffic := h.cfg.Control.TrafficToken(sb.SandboxID)
	return sandboxJSON{
		TemplateID: sb.Template, Alias: sb.Template, SandboxID: sb.SandboxID, ClientID: clientID,
		EnvdVersion: h.envdVersion(), EnvdAccessToken: h.cfg.Control.EnvdToken(sb.SandboxID), TrafficAccessToken: &traffic, Domain: domain(sb),
	}
}

// domain is where the SDKs reach a sandbox's ports without
// E2B_SANDBOX_URL, https://{port}-{sandboxID}.{domain}: Lizard's
// --ports-domain serves exactly that form.
func domain(sb api.Sandbox) *string {
	if sb.PortsDomain == "" {
		return nil
	}
	return &sb.PortsDomain
}

func (h *Handler) listed(sb api.Sandbox) listedSandbox {
	end := neverEnds
	if sb.ExpiresAt != nil {
		end = *sb.ExpiresAt
	}
	var mounts []api.VolumeMount
	for _, v := range sb.Volumes {
		mounts = append(mounts, api.VolumeMount{Name: v.Name, Path: v.Path})
	}
	meta := map[string]string{}
	for k, v := range sb.Metadata {
		if k != AutoResumeKey {
			meta[k] = v
		}
	}
	return listedSandbox{
		TemplateID: sb.Template, Alias: sb.Template, SandboxID: sb.SandboxID, ClientID: clientID,
		StartedAt: sb.CreatedAt, EndAt: end,
		CPUCount: max(1, int(math.Ceil(sb.Cpus))), MemoryMB: sb.MemoryMb, DiskSizeMB: sb.DiskMb,
		State: e2bState(sb.State), EnvdVersion: h.envdVersion(), Metadata: meta, VolumeMounts: mounts,
	}
}

// e2bState is a live sandbox's state in E2B's two: running or paused.
func e2bState(s string) string {
	if s == api.StatePaused {
		return "paused"
	}
	return "running"
}

// settleWait bounds how long a call waits for the end of a sandbox whose
// time is up: the reaper takes it within its second, and a pause then
// takes 1 to 3 s under load.
const settleWait = 10 * time.Second

// settled returns sb once what its timeout does has been done. A sandbox
// still running past its end is being paused or killed by the reaper;
// E2B's API shows such a one as paused (pausing) or not found (killing)
// at once, while Lizard's record says so when the reaper is done: the E2B
// surface waits for that, polling, up to settleWait, so that get_info and
// is_running() just after a timeout are E2B's answers, and connect()
// resumes the paused sandbox rather than find one about to be paused.
func (h *Handler) settled(ctx context.Context, project string, sb api.Sandbox) (api.Sandbox, error) {
	give := time.Now().Add(settleWait)
	for !ended(sb) && !paused(sb) && sb.ExpiresAt != nil &&
		time.Now().After(*sb.ExpiresAt) && time.Now().Before(give) {
		select {
		case <-ctx.Done():
			return sb, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		next, err := h.cfg.Control.Get(ctx, project, sb.SandboxID)
		if err != nil {
			return sb, err
		}
		sb = next
	}
	return sb, nil
}

// ended says whether a sandbox is over: E2B's API no longer knows it.
func ended(sb api.Sandbox) bool {
	return errors.Is(control.Check(sb, node.WantLive), errdefs.ErrGone)
}

// paused says whether a live sandbox is paused.
func paused(sb api.Sandbox) bool {
	return errors.Is(control.Check(sb, node.WantRunning), node.ErrPaused)
}

// lookup returns the caller's live sandbox id; an ended one is not found,
// as in E2B.
func (h *Handler) lookup(r *http.Request, id string) (api.Sandbox, error) {
	project, _ := auth.ProjectID(r.Context())
	sb, err := h.cfg.Control.Get(r.Context(), project, id)
	if err != nil {
		return sb, err
	}
	if ended(sb) {
		return sb, gone(sb)
	}
	return sb, nil
}

// lookupSettled is lookup of a sandbox once what its timeout does is
// done (settled).
func (h *Handler) lookupSettled(r *http.Request, id string) (api.Sandbox, error) {
	sb, err := h.lookup(r, id)
	if err != nil {
		return sb, err
	}
	project, _ := auth.ProjectID(r.Context())
	if sb, err = h.settled(r.Context(), project, sb); err != nil {
		return sb, err
	}
	if ended(sb) {
		return sb, gone(sb)
	}
	return sb, nil
}

// gone is E2B's answer for a sandbox that has ended: not found.
func gone(sb api.Sandbox) error {
	return &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("sandbox %s not found: it has ended (%s)", sb.SandboxID, sb.State)}
}

// notGone turns the core's "ended" answer into E2B's not found.
func notGone(err error) error {
	if errors.Is(err, errdefs.ErrGone) {
		return &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: errdefs.Message(err), Cause: err}
	}
	return err
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	sb, err := h.lookupSettled(r, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// A pause under way (its timeout's is waited for above) is paused to
	// E2B's API, as in its list.
	if s, err := h.cfg.Control.Settling(r.Context(), sb); err != nil {
		h.fail(w, r, err)
		return
	} else if s == control.SettlingPause {
		sb.State = api.StatePaused
	}
	api.WriteJSON(w, http.StatusOK, sandboxDetail{listedSandbox: h.listed(sb), EnvdAccessToken: h.cfg.Control.EnvdToken(sb.SandboxID), Domain: domain(sb), Network: networkOf(sb)})
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	id := r.PathValue("id")
	if _, err := h.lookup(r, id); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := h.cfg.Control.Kill(r.Context(), project, id); err != nil {
		h.fail(w, r, notGone(err))
		return
	}
	h.cfg.Audit(r, "sandbox.kill", "sandbox_id", id, "surface", "e2b")
	w.WriteHeader(http.StatusNoContent)
}

// timeoutRequest is E2B's SandboxTimeoutRequest and the timeout of
// ResumedSandbox and ConnectSandbox, in seconds.
type timeoutRequest struct {
	Timeout *int64 `json:"timeout"`
	// AutoPause is ResumedSandbox's; Lizard keeps the sandbox's own.
	AutoPause *bool `json:"autoPause"`
	// Memory false (the SDKs' on_resume="reboot") asks a paused sandbox
	// to boot from its disk alone (api.ResumeRequest.Memory).
	Memory *bool `json:"memory"`
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request) {
	var req timeoutRequest
	if err := decode(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	if req.Timeout == nil || *req.Timeout < 0 {
		h.fail(w, r, badRequest("timeout is required: seconds from now"))
		return
	}
	ms := *req.Timeout * 1000
	if ms == 0 {
		// E2B's set_timeout(0) ends the sandbox's time now (its
		// on_timeout: killed, or paused); Lizard's 0 is "never".
		ms = 1
	}
	h.extend(w, r, ms)
}

// refresh is E2B's keep-alive: the sandbox lives duration seconds from
// now.
func (h *Handler) refresh(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Duration *int64 `json:"duration"`
	}
	if err := decode(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	secs := int64(defaultTimeout)
	if req.Duration != nil {
		secs = *req.Duration
	}
	if secs < 0 {
		h.fail(w, r, badRequest("duration must be seconds from now, not %d", secs))
		return
	}
	h.extend(w, r, secs*1000)
}

func (h *Handler) extend(w http.ResponseWriter, r *http.Request, ms int64) {
	project, _ := auth.ProjectID(r.Context())
	id := r.PathValue("id")
	if _, err := h.lookup(r, id); err != nil {
		h.fail(w, r, err)
		return
	}
	if _, err := h.cfg.Control.SetTimeout(r.Context(), project, id, ms); err != nil {
		h.fail(w, r, notGone(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// pauseRequest is E2B's SandboxPauseRequest. Memory false (the SDKs'
// mode="filesystem", keep_memory=False) asks for a pause that keeps the
// disk alone (api.PauseRequest.Memory).
type pauseRequest struct {
	Memory *bool `json:"memory"`
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	id := r.PathValue("id")
	sb, err := h.lookup(r, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var req pauseRequest
	if err := decode(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	if paused(sb) {
		// E2B says so with a 409, which the SDKs' pause() reads as false.
		h.fail(w, r, &httpError{status: http.StatusConflict, msg: fmt.Sprintf("sandbox %s is already paused", id)})
		return
	}
	if _, err := h.cfg.Control.Pause(r.Context(), project, id, api.PauseRequest{Memory: req.Memory}); err != nil {
		h.fail(w, r, notGone(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) resume(w http.ResponseWriter, r *http.Request) {
	var req timeoutRequest
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
	secs := int64(defaultTimeout)
	if req.Timeout != nil {
		secs = *req.Timeout
	}
	ms := secs * 1000
	sb, err := h.cfg.Control.Resume(r.Context(), project, id, api.ResumeRequest{TimeoutMs: &ms, Memory: req.Memory})
	if err != nil {
		h.fail(w, r, notGone(err))
		return
	}
	api.WriteJSON(w, http.StatusCreated, h.sandboxJSON(sb))
}

// connect answers a sandbox's details, resuming it if paused (201), else
// only lengthening its life to timeout seconds from now if that is
// longer (200). Without a timeout the v2 route's is 5 minutes, as E2B's;
// on the v1 route (where E2B requires one) a resumed sandbox gets
// E2B's create default and a running one keeps its own.
func (h *Handler) connect(w http.ResponseWriter, r *http.Request) {
	var req timeoutRequest
	if err := decode(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	v2Default(r, &req.Timeout)
	if req.Timeout != nil && *req.Timeout < 0 {
		h.fail(w, r, badRequest("timeout must be seconds from now, not %d", *req.Timeout))
		return
	}
	project, _ := auth.ProjectID(r.Context())
	id := r.PathValue("id")
	sb, err := h.lookupSettled(r, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	secs := int64(defaultTimeout)
	if req.Timeout != nil {
		secs = *req.Timeout
	}
	ms := secs * 1000
	if paused(sb) {
		sb, err = h.cfg.Control.Resume(r.Context(), project, id, api.ResumeRequest{TimeoutMs: &ms, Memory: req.Memory})
		if err != nil {
			h.fail(w, r, notGone(err))
			return
		}
		api.WriteJSON(w, http.StatusCreated, h.sandboxJSON(sb))
		return
	}
	if req.Timeout != nil && sb.ExpiresAt != nil && time.Now().Add(time.Duration(ms)*time.Millisecond).After(*sb.ExpiresAt) {
		if sb, err = h.cfg.Control.SetTimeout(r.Context(), project, id, ms); err != nil {
			h.fail(w, r, notGone(err))
			return
		}
	}
	api.WriteJSON(w, http.StatusOK, h.sandboxJSON(sb))
}

// sandboxMetric is E2B's SandboxMetric.
type sandboxMetric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// metrics answers the samples Lizard keeps (the last 5 minutes), within
// [start, end] when given (Unix seconds).
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	id := r.PathValue("id")
	var bounds [2]*time.Time
	for i, name := range []string{"start", "end"} {
		if v := r.URL.Query().Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				h.fail(w, r, badRequest("%s must be a Unix time in seconds, not %q", name, v))
				return
			}
			t := time.Unix(n, 0)
			bounds[i] = &t
		}
	}
	if _, err := h.lookup(r, id); err != nil {
		h.fail(w, r, err)
		return
	}
	m, err := h.cfg.Control.Metrics(r.Context(), project, id)
	if err != nil {
		h.fail(w, r, notGone(err))
		return
	}
	out := []sandboxMetric{}
	for _, s := range m.Metrics {
		if (bounds[0] != nil && s.Timestamp.Before(*bounds[0])) || (bounds[1] != nil && s.Timestamp.After(*bounds[1])) {
			continue
		}
		out = append(out, sandboxMetric{
			Timestamp: s.Timestamp, TimestampUnix: s.Timestamp.Unix(), CPUCount: max(1, int(math.Ceil(s.CPUCount))),
			CPUUsedPct: s.CPUUsedPct, MemUsed: s.MemUsed, MemTotal: s.MemTotal, DiskUsed: s.DiskUsed, DiskTotal: s.DiskTotal,
		})
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// listQuery is a list's filters and page, read from E2B's query.
type listQuery struct {
	filter control.ListFilter
	// states are the E2B states asked for (running, paused; none: both),
	// as E2B shows them: a pausing sandbox is paused.
	states       []string
	template     string
	startedAfter *time.Time
	asc          bool
	limit        int
	next         string
}

// maxPage is E2B's paginationLimit maximum and default.
const maxPage = 100

// parseList reads a list's query: metadata is one parameter holding
// "k=v&k2=v2" with each key and value URL-encoded again, state a comma
// list of running and paused.
func parseList(q url.Values) (listQuery, error) {
	lq := listQuery{limit: maxPage, next: q.Get("nextToken"), template: q.Get("template")}
	if m := q.Get("metadata"); m != "" {
		pairs, err := url.ParseQuery(m)
		if err != nil {
			return lq, badRequest("metadata %q: want key=value pairs joined by &, each URL-encoded, such as user=abc&app=prod", m)
		}
		lq.filter.Metadata = map[string]string{}
		for k, vs := range pairs {
			key, err1 := url.QueryUnescape(k)
			val, err2 := url.QueryUnescape(vs[len(vs)-1])
			if err1 != nil || err2 != nil || key == "" {
				return lq, badRequest("metadata %q: want key=value pairs joined by &, each URL-encoded", m)
			}
			lq.filter.Metadata[key] = val
		}
	}
	for _, list := range q["state"] {
		for _, s := range strings.Split(list, ",") {
			switch s {
			case "running":
				lq.filter.States = append(lq.filter.States, api.StateStarting, api.StateRunning)
			case "paused":
				// A sandbox being paused is still running to Lizard.
				lq.filter.States = append(lq.filter.States, api.StatePaused, api.StateStarting, api.StateRunning)
			default:
				return lq, badRequest("state %q: E2B's states are running and paused", s)
			}
			if !slices.Contains(lq.states, s) {
				lq.states = append(lq.states, s)
			}
		}
	}
	slices.Sort(lq.filter.States)
	lq.filter.States = slices.Compact(lq.filter.States)
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPage {
			return lq, badRequest("limit must be 1 to %d, not %q", maxPage, v)
		}
		lq.limit = n
	}
	switch o := q.Get("order"); o {
	case "", "desc":
	case "asc":
		lq.asc = true
	default:
		return lq, badRequest("order must be asc or desc, not %q", o)
	}
	if v := q.Get("startedAfter"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return lq, badRequest("startedAfter must be an RFC 3339 time, not %q", v)
		}
		lq.startedAfter = &t
	}
	return lq, nil
}

// page selects lq's page of sbs (newest first, as Control.List answers)
// and the token of the next one ("" when it is the last). The token names
// the last sandbox given, so that a page does not shift when sandboxes
// before it end.
func page(sbs []api.Sandbox, lq listQuery) ([]api.Sandbox, string, error) {
	var sel []api.Sandbox
	for _, sb := range sbs {
		if lq.template != "" && sb.Template != templateName(lq.template) {
			continue
		}
		if lq.startedAfter != nil && sb.CreatedAt.Before(*lq.startedAfter) {
			continue
		}
		sel = append(sel, sb)
	}
	if lq.asc {
		slices.Reverse(sel)
	}
	if lq.next != "" {
		b, err := base64.RawURLEncoding.DecodeString(lq.next)
		nanos, id, ok := strings.Cut(string(b), ":")
		n, err2 := strconv.ParseInt(nanos, 10, 64)
		if err != nil || !ok || err2 != nil {
			return nil, "", badRequest("nextToken %q is not one this server gave", lq.next)
		}
		at := time.Unix(0, n)
		i := slices.IndexFunc(sel, func(sb api.Sandbox) bool { return sb.SandboxID == id })
		if i < 0 {
			// That sandbox has ended since: start at the first one past
			// its time.
			i = slices.IndexFunc(sel, func(sb api.Sandbox) bool {
				if lq.asc {
					return sb.CreatedAt.After(at)
				}
				return sb.CreatedAt.Before(at)
			}) - 1
			if i < -1 {
				i = len(sel) - 1
			}
		}
		sel = sel[i+1:]
	}
	if len(sel) <= lq.limit {
		return sel, "", nil
	}
	sel = sel[:lq.limit]
	last := sel[len(sel)-1]
	return sel, base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("%d:%s", last.CreatedAt.UnixNano(), last.SandboxID))), nil
}

func (h *Handler) listV2(w http.ResponseWriter, r *http.Request) {
	lq, err := parseList(r.URL.Query())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.list(w, r, lq)
}

// listV1 is the deprecated list: running sandboxes, metadata filter only,
// one page.
func (h *Handler) listV1(w http.ResponseWriter, r *http.Request) {
	q := url.Values{"metadata": r.URL.Query()["metadata"], "state": {"running"}}
	lq, err := parseList(q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	lq.limit = math.MaxInt
	h.list(w, r, lq)
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request, lq listQuery) {
	project, _ := auth.ProjectID(r.Context())
	all, err := h.cfg.Control.List(r.Context(), project, lq.filter)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// As E2B's API lists them: a sandbox being paused (explicitly or at
	// its timeout) is paused, one the reaper is killing is gone.
	sbs := all[:0]
	for _, sb := range all {
		switch s, err := h.cfg.Control.Settling(r.Context(), sb); {
		case err != nil:
			h.fail(w, r, err)
			return
		case s == control.SettlingKill:
			continue
		case s == control.SettlingPause:
			sb.State = api.StatePaused
		}
		if len(lq.states) == 0 || slices.Contains(lq.states, e2bState(sb.State)) {
			sbs = append(sbs, sb)
		}
	}
	sel, next, err := page(sbs, lq)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := make([]listedSandbox, 0, len(sel))
	for _, sb := range sel {
		out = append(out, h.listed(sb))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// maxBody bounds a control API request's JSON.
const maxBody = 1 << 20

// decode reads r's JSON body into v; an empty body leaves v as it is.
// Unknown fields are accepted: E2B's SDKs add fields as E2B grows.
func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return badRequest("reading the request body: %v", err)
	}
	if len(b) > maxBody {
		return &httpError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("the request body is over %d bytes", maxBody)}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return badRequest("the request body is not the JSON expected: %v", err)
	}
	return nil
}
