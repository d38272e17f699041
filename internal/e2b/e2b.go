// Package e2b serves E2B's API and sandbox protocols over Lizard's control
// plane (docs/e2b.md), so that code written for E2B's SDKs runs unchanged
// with E2B_API_URL=http://HOST:PORT/e2b and
// E2B_SANDBOX_URL=http://HOST:PORT/e2b/sandbox. It is a second front door
// to the same Control, node and agent as the native API (internal/server):
// E2B's names, JSON fields and statuses here, Lizard's semantics there,
// no copy of the core in either.
//
// Two halves: the control API under /e2b (X-API-Key, E2B's /sandboxes
// routes), and the sandbox router under /e2b/sandbox, which E2B's SDKs
// call for everything inside a sandbox with the headers E2b-Sandbox-Id and
// E2b-Sandbox-Port. Port 49999 is the code interpreter (interpreter.go);
// port 49983 is the sandbox daemon "envd", served by Config.Envd.
package e2b

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/e2b/uploads"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/inflight"
	"github.com/lizard-build/lizard/internal/node"
)

// The ports E2B's SDKs name in E2b-Sandbox-Port.
const (
	EnvdPort        = "49983"
	InterpreterPort = "49999"
)

// Headers E2B's SDKs send on sandbox calls.
const (
	HeaderSandboxID   = "E2b-Sandbox-Id"
	HeaderSandboxPort = "E2b-Sandbox-Port"
	headerAccessToken = "X-Access-Token"
	// HeaderTrafficToken carries the trafficAccessToken: E2B's SDK users
	// send it to a private sandbox's ports, and the code interpreter's
	// context calls carry only this one, not X-Access-Token.
	HeaderTrafficToken = "E2b-Traffic-Access-Token"
	headerAPIKey       = "X-Api-Key"
)

// Config says what the E2B surface serves with.
type Config struct {
	Control *control.Control
	// Keys checks the X-API-Key of control API calls: the native API's
	// verifier, so one key works on both surfaces.
	Keys *auth.Verifier
	// Limit bounds each key's request rate and its project's requests
	// under way as on the native API, answering a request past them with
	// refuse (an errdefs.ErrRateLimited error: E2B's 429 shape, which its
	// SDKs raise as RateLimitException); nil: none.
	Limit func(next http.Handler, refuse func(http.ResponseWriter, *http.Request, error)) http.Handler
	// Rate bounds the sandbox URL's calls by their key's rate, those made
	// with a sandbox's access token by their project's, answering as
	// Limit; it counts no call under way (the router bounds those
	// itself). nil: none.
	Rate func(next http.Handler, refuse func(http.ResponseWriter, *http.Request, error)) http.Handler
	// Audit records an event of the request's key; nil: none.
	Audit func(r *http.Request, msg string, attrs ...any)
	// Envd serves E2B's sandbox daemon protocol (port 49983: process and
	// filesystem Connect-RPC services, /files). It receives the request
	// with /e2b/sandbox taken off its path, after the caller was
	// authenticated: Target(r.Context()) names the sandbox and its project.
	// nil: a 501 naming the feature.
	Envd http.Handler
	// EnvdVersion is the envdVersion sandboxes are answered with: the
	// SDKs gate envd features on it (e2b/envd/versions.py), so it is the
	// version Envd speaks. Default DefaultEnvdVersion.
	EnvdVersion string
	// Observe is told how each runCode ended (agentproxy.Transport);
	// nil: nothing.
	Observe func(agentproxy.Outcome)
	// Dir is where the template builds of E2B's Template SDK keep the
	// files its copy steps upload (uploads.Store, bounded by Uploads) and
	// templates' tags: the data directory's e2b/. "": copies are refused
	// and tags are held in memory.
	Dir     string
	Uploads uploads.Limits // zero: uploads.DefaultLimits
	Logger  *slog.Logger
}

// DefaultEnvdVersion is Config.EnvdVersion's default: one at which the
// SDKs use the default user (0.4.0) and octet-stream uploads (0.5.7).
const DefaultEnvdVersion = "0.5.7"

func (h *Handler) envdVersion() string {
	if h.cfg.EnvdVersion != "" {
		return h.cfg.EnvdVersion
	}
	return DefaultEnvdVersion
}

// Handler serves /e2b/... on the API listener.
type Handler struct {
	cfg Config
	log *slog.Logger
	mux *http.ServeMux

	// inFlight counts each project's calls under way through the sandbox
	// URL, which no key's bounds cover (an access token opens them).
	inFlight *inflight.Limit
	// unrouted bounds the server's signed file URLs that name no
	// sandbox (signed.go).
	unrouted *rate.Limiter

	// Template builds (templates.go): the builds requested, the copy
	// steps' uploads and the key their URLs are signed with, the tags.
	builds    templateBuilds
	uploads   *uploads.Store
	uploadKey []byte
	tags      *tagStore
}

// maxInFlight bounds one project's calls under way through the sandbox
// URL, as they are bounded on the control API: each holds file
// descriptors of the server, which every project shares, and a stream (a
// command followed, a watch) may last hours.
const maxInFlight = 1024

// New returns the E2B surface's handler; mount it at /e2b/.
func New(cfg Config) *Handler {
	h := &Handler{cfg: cfg, log: cfg.Logger, inFlight: inflight.New(maxInFlight), unrouted: rate.NewLimiter(unroutedRate, unroutedBurst)}
	if h.log == nil {
		h.log = slog.Default()
	}
	none := func(next http.Handler, _ func(http.ResponseWriter, *http.Request, error)) http.Handler { return next }
	if h.cfg.Limit == nil {
		h.cfg.Limit = none
	}
	if h.cfg.Rate == nil {
		h.cfg.Rate = none
	}
	if h.cfg.Audit == nil {
		h.cfg.Audit = func(*http.Request, string, ...any) {}
	}
	h.openTemplates()
	mux := http.NewServeMux()
	mux.Handle("/e2b/sandbox/", http.HandlerFunc(h.sandbox))
	mux.Handle("/e2b/sandbox", http.HandlerFunc(h.sandbox))
	h.controlRoutes(mux)
	mux.HandleFunc("/e2b/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, r.Method+" "+strings.TrimPrefix(r.URL.Path, "/e2b")+" is not part of E2B's API that Lizard serves (docs/e2b.md lists what is)")
	})
	h.mux = mux
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// authed serves next to control API calls with a valid X-API-Key, within
// the key's rate.
func (h *Handler) authed(next http.HandlerFunc) http.Handler {
	return h.cfg.Keys.RequireWith(apiKey, refuse, h.cfg.Limit(next, h.fail))
}

// refuse answers a request whose key was not accepted, naming E2B's
// header rather than the native API's.
func refuse(w http.ResponseWriter, status int, msg string) {
	if status == http.StatusUnauthorized {
		msg = msgBadKey
	}
	writeError(w, status, msg)
}

func apiKey(r *http.Request) (string, error) {
	k := lizardKey(strings.TrimSpace(r.Header.Get(headerAPIKey)))
	if k == "" {
		return "", errNoKey
	}
	return k, nil
}

// e2bKeyPrefix starts a Lizard key in the form E2B's SDKs 2.25 to 2.45
// accept: they refuse, before sending anything, a key that is not "e2b_"
// and lowercase hex (Python from 2.25.0, JavaScript from 2.27.0; only
// from Python 2.29.1 and JavaScript 2.30.1 can E2B_VALIDATE_API_KEY=false
// turn that off). A Lizard key lz_<id>_<secret> is all hex but its
// prefix and separator, so e2b_<id><secret> says the same key.
const e2bKeyPrefix = "e2b_"

// lizardKey is the Lizard key k says: k itself, or the lz_ form of a key
// in the e2b_ form (e2bKeyPrefix). Anything else is left for the
// verifier to refuse.
func lizardKey(k string) string {
	hex, ok := strings.CutPrefix(k, e2bKeyPrefix)
	if !ok || len(hex) != e2bKeyIDLen+e2bKeySecretLen {
		return k
	}
	return auth.Prefix + hex[:e2bKeyIDLen] + "_" + hex[e2bKeyIDLen:]
}

// The lengths of a Lizard key's ID and secret, in hex characters
// (auth.Parse checks them, and that they are hex).
const (
	e2bKeyIDLen     = 8
	e2bKeySecretLen = 64
)

// targetKey carries the sandbox a sandbox call is for.
type targetKey struct{}

// Target is the sandbox a call to the sandbox URL is for, and its project,
// as the sandbox router authenticated them.
type TargetSandbox struct {
	ProjectID string
	SandboxID string
}

// Target returns the sandbox of a call the sandbox router passed on.
func Target(ctx context.Context) (TargetSandbox, bool) {
	t, ok := ctx.Value(targetKey{}).(TargetSandbox)
	return t, ok
}

// sandbox routes a call to the sandbox URL by E2b-Sandbox-Port, once the
// caller has shown the sandbox's access token (or its project's key).
func (h *Handler) sandbox(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get(HeaderSandboxID)
	port := r.Header.Get(HeaderSandboxPort)
	if id == "" || port == "" {
		writeError(w, http.StatusBadRequest, "calls to the sandbox URL need the headers E2b-Sandbox-Id and E2b-Sandbox-Port, as E2B's SDKs send them when E2B_SANDBOX_URL is set")
		return
	}
	t, keyID, traffic, err := h.sandboxCaller(r, id)
	if err == nil && traffic && !trafficOpens(port, r) {
		// The trafficAccessToken is E2B's credential for the ports: it
		// must not run commands as root or write files through envd, nor
		// run code through the interpreter.
		err = &errdefs.Error{Kind: control.ErrBadSandboxToken, Msg: fmt.Sprintf("the trafficAccessToken (E2B-Traffic-Access-Token) opens sandbox %s's ports and its code interpreter's contexts only: "+
			"envd (port 49983: commands, files) and run_code (/execute) need its envdAccessToken in X-Access-Token, or its project's key in X-API-Key", id)}
	}
	if errors.Is(err, errdefs.ErrGone) || errors.Is(err, errdefs.ErrNotFound) {
		notRunning(w, id, errdefs.Message(err))
		return
	}
	if err == nil {
		err = h.notPaused(r.Context(), t)
	}
	if errors.Is(err, errPaused) || errors.Is(err, errdefs.ErrGone) || errors.Is(err, errdefs.ErrNotFound) {
		notRunning(w, id, errdefs.Message(err))
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ctx := context.WithValue(r.Context(), targetKey{}, t)
	ctx = auth.WithCaller(ctx, auth.Caller{ProjectID: t.ProjectID, KeyID: keyID})
	h.cfg.Rate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.route(w, r, port) }), h.fail).ServeHTTP(w, r.WithContext(ctx))
}

// errPaused marks a call into a paused sandbox that does not resume on
// traffic.
var errPaused = errors.New("sandbox paused")

// notPaused refuses a call into t's sandbox while it is paused, unless it
// was created with E2B's auto_resume: E2B's proxy answers such a call 502
// (the sandbox is not found among those running), which the SDKs read as
// not running — is_running() False after pause() — and Sandbox.connect()
// resumes it. Passed on, the call would resume it (Control.Acquire), as
// calls do on Lizard's own API.
func (h *Handler) notPaused(ctx context.Context, t TargetSandbox) error {
	sb, err := h.cfg.Control.Get(ctx, t.ProjectID, t.SandboxID)
	if err != nil {
		return err
	}
	if sb, err = h.settled(ctx, t.ProjectID, sb); err != nil {
		return err
	}
	switch err := control.Check(sb, node.WantRunning); {
	case errors.Is(err, errdefs.ErrGone):
		return &errdefs.Error{Kind: errdefs.ErrGone, Msg: fmt.Sprintf("it has ended (%s)", sb.State)}
	case !errors.Is(err, node.ErrPaused):
		return nil
	}
	if !autoResumes(sb) {
		return &errdefs.Error{Kind: errPaused, Msg: "it is paused: Sandbox.connect() resumes it (calls resume a sandbox created with lifecycle auto_resume)"}
	}
	// Resumed as any call resumes it, so that calls no call reaches the
	// agent for (envd's /health) resume it too, as on E2B.
	call, err := h.cfg.Control.Acquire(ctx, t.ProjectID, t.SandboxID)
	if err != nil {
		return err
	}
	call.Release()
	return nil
}

// notRunning answers a call into a sandbox that is not running as E2B's
// proxy does: 502, its message saying the sandbox "was not found", which
// the SDKs read as not running (is_running() False; SandboxNotRunning-
// Exception). The SDKs' probe after a dropped connection (e2b 2.63's
// check_sandbox_health) takes a 502 without those words for a sandbox
// running with envd unreachable.
func notRunning(w http.ResponseWriter, id, why string) {
	msg := "sandbox " + id + " was not found"
	why = strings.TrimPrefix(why, "sandbox "+id+" ")
	if why != "" {
		msg += ": " + why
	}
	writeError(w, http.StatusBadGateway, msg)
}

// route serves a sandbox call the router authenticated, within its
// project's calls under way, by port.
func (h *Handler) route(w http.ResponseWriter, r *http.Request, port string) {
	t, _ := Target(r.Context())
	leave, ok := h.inFlight.Enter(t.ProjectID)
	if !ok {
		h.fail(w, r, &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: time.Second,
			Msg: fmt.Sprintf("project %s has %d calls under way through the sandbox URL, its most: end some (commands followed, watches) first", t.ProjectID, maxInFlight)})
		return
	}
	defer leave()
	// Path as the sandbox's own server would see it.
	r.URL.Path = strings.TrimPrefix(r.URL.Path, "/e2b/sandbox")
	if r.URL.Path == "" {
		r.URL.Path = "/"
	}
	r.URL.RawPath = ""
	switch port {
	case InterpreterPort:
		h.interpreter(w, r)
	case EnvdPort:
		if h.cfg.Envd == nil {
			writeError(w, http.StatusNotImplemented, "the sandbox daemon's protocol (port 49983: commands, files, PTY) is not served by this Lizard yet; run_code and contexts (port 49999) are")
			return
		}
		h.cfg.Envd.ServeHTTP(w, r)
	default:
		writeError(w, http.StatusNotImplemented, "port "+port+" of a sandbox is not served through E2B_SANDBOX_URL: only 49983 (envd) and 49999 (code interpreter) are; "+
			"reach a sandbox's own servers through Lizard's exposed ports (docs/ports.md)")
	}
}

// trafficOpens reports whether a call to port authenticated by the
// trafficAccessToken alone may go on: the code interpreter's context
// calls and health, which E2B's SDKs send with it alone. Not envd, not
// /execute.
func trafficOpens(port string, r *http.Request) bool {
	p := strings.TrimPrefix(r.URL.Path, "/e2b/sandbox")
	return port == InterpreterPort && (p == "/contexts" || strings.HasPrefix(p, "/contexts/") || p == "/health")
}

// sandboxCaller authenticates a sandbox call: the sandbox's
// envdAccessToken in X-Access-Token, E2B's signature of it on a file URL
// (signed.go), or a key of its project in X-API-Key, whose ID it returns
// (none for a token) — or its trafficAccessToken in
// E2B-Traffic-Access-Token, which opens less (traffic: trafficOpens). The
// envdAccessToken there is taken as itself: sandboxes created before the
// two differed hold it as their trafficAccessToken.
func (h *Handler) sandboxCaller(r *http.Request, id string) (t TargetSandbox, keyID string, traffic bool, err error) {
	if tok := r.Header.Get(headerAccessToken); tok != "" {
		project, err := h.cfg.Control.EnvdProject(r.Context(), id, tok)
		if err != nil {
			return TargetSandbox{}, "", false, err
		}
		return TargetSandbox{ProjectID: project, SandboxID: id}, "", false, nil
	}
	if tok := r.Header.Get(HeaderTrafficToken); tok != "" {
		if !h.cfg.Control.IsTrafficToken(id, tok) {
			project, err := h.cfg.Control.EnvdProject(r.Context(), id, tok)
			if err != nil {
				return TargetSandbox{}, "", false, err
			}
			return TargetSandbox{ProjectID: project, SandboxID: id}, "", false, nil
		}
		project, err := h.cfg.Control.TrafficProject(r.Context(), id, tok)
		if err != nil {
			return TargetSandbox{}, "", false, err
		}
		return TargetSandbox{ProjectID: project, SandboxID: id}, "", true, nil
	}
	if signedFileCall(r, r.Header.Get(HeaderSandboxPort)) {
		if err := h.checkSignature(r, id); err != nil {
			return TargetSandbox{}, "", false, err
		}
		project, err := h.cfg.Control.EnvdProject(r.Context(), id, h.cfg.Control.EnvdToken(id))
		if err != nil {
			return TargetSandbox{}, "", false, err
		}
		return TargetSandbox{ProjectID: project, SandboxID: id}, "", false, nil
	}
	if key := lizardKey(strings.TrimSpace(r.Header.Get(headerAPIKey))); key != "" {
		project, err := h.cfg.Keys.Verify(r.Context(), key)
		if err != nil {
			return TargetSandbox{}, "", false, err
		}
		// Handlers trust the target: another project's sandbox is not
		// found here, as on the native API.
		sb, err := h.cfg.Control.Get(r.Context(), project, id)
		if err != nil {
			return TargetSandbox{}, "", false, err
		}
		if ended(sb) {
			return TargetSandbox{}, "", false, gone(sb)
		}
		k, _ := auth.Parse(key) // Verify parsed it
		return TargetSandbox{ProjectID: project, SandboxID: id}, k.ID, false, nil
	}
	return TargetSandbox{}, "", false, errNoToken
}

// apiError is E2B's error body.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	api.WriteJSON(w, status, apiError{Code: status, Message: msg})
}
