package desktop

// The stream: a VNC server on the sandbox's X display, and websockify in
// front of it, both inside the sandbox, reached only through the server's
// port proxy (never on a host address) by a viewer with a token of its
// own. There are two pairs: view-only (x11vnc -viewonly, which ignores a
// client's input whatever the client sends) and control; a viewer's token
// opens the one it was minted for. Each POST /desktop/stream mints a new
// viewer, at most maxViewers per sandbox; DELETE /desktop/stream revokes
// them all, ends their connections and stops the servers.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// Bounds of the stream.
const (
	// maxViewers bounds one sandbox's viewer tokens alive at once.
	maxViewers = 8
	// maxConnsPerViewer bounds one token's WebSockets open at once (a
	// page reloaded while its old socket closes).
	maxConnsPerViewer = 2
	// maxViewersTotal bounds the viewers this process keeps, over every
	// sandbox and project.
	maxViewersTotal = 10_000
	defaultTTL      = time.Hour
	maxTTL          = 24 * time.Hour
	// frameMs is x11vnc's -defer and -wait: at most one update per 66 ms
	// to each viewer, about 15 frames a second, whatever changes.
	frameMs = "66"
)

// ViewerTokenHeader carries a viewer's token where a URL cannot (a client
// that sets headers); browsers' WebSockets send it as ?token=.
const ViewerTokenHeader = "X-Lizard-Viewer-Token"

// pair is one VNC server and its websockify: ports inside the sandbox.
type pair struct {
	tag      string // the agent's tag of the background process
	vnc, ws  int
	viewOnly bool
}

var (
	viewPair    = pair{tag: "lizard-desktop-stream-view", vnc: 5910, ws: 6090, viewOnly: true}
	controlPair = pair{tag: "lizard-desktop-stream-control", vnc: 5911, ws: 6091}
)

// pairScript runs a pair as one background process: x11vnc on the
// display, listening on the sandbox's loopback alone, and websockify on
// the sandbox's address in front of it; when either ends, both do.
const pairScript = `x11vnc -display :0 -localhost -rfbport "$1" -shared -forever -nopw -norc -quiet -defer "$3" -wait "$3" -noxdamage $4 &
websockify "0.0.0.0:$2" "127.0.0.1:$1" &
wait -n
kill 0`

// readyScript waits until both of a pair's ports listen.
const readyScript = `for i in $(seq 150); do
	netstat -tln 2>/dev/null | grep -q "127.0.0.1:$1 " && netstat -tln 2>/dev/null | grep -q ":$2 " && exit 0
	sleep 0.1
done
echo "the stream's servers did not listen on ports $1 and $2 within 15 s" >&2
exit 1`

func (p pair) args() []string {
	flag := ""
	if p.viewOnly {
		flag = "-viewonly"
	}
	return []string{"/bin/bash", "-c", pairScript, "lizard-stream", strconv.Itoa(p.vnc), strconv.Itoa(p.ws), frameMs, flag}
}

// ensure starts p unless it runs, and waits until it listens.
func (a *agent) ensure(ctx context.Context, p pair) error {
	if _, err := a.run(ctx, []string{"/bin/bash", "-c", `command -v x11vnc >/dev/null && command -v websockify >/dev/null || { echo "not found" >&2; exit 3; }`}, callTimeout); err != nil {
		if strings.Contains(err.Error(), "not found") {
			return noDesktop(a.id, "it has no x11vnc or websockify")
		}
		return err
	}
	if _, err := a.run(ctx, screenArgs, callTimeout); err != nil {
		return err
	}
	list, err := a.c.ListProcesses(ctx, a.id)
	if err != nil {
		return agentError(err)
	}
	running := false
	for _, p2 := range list {
		running = running || p2.Tag == p.tag && p2.Running
	}
	if !running {
		if _, err := a.c.StartProcess(ctx, a.id, api.ProcessStartRequest{Args: p.args(), Envs: display, Tag: p.tag}); err != nil {
			return agentError(err)
		}
	}
	_, err = a.run(ctx, []string{"/bin/bash", "-c", readyScript, "lizard-stream", strconv.Itoa(p.vnc), strconv.Itoa(p.ws)}, 20*time.Second)
	return err
}

// stop ends the stream's servers.
func (a *agent) stop(ctx context.Context) error {
	list, err := a.c.ListProcesses(ctx, a.id)
	if err != nil {
		return agentError(err)
	}
	for _, p := range list {
		if p.Running && (p.Tag == viewPair.tag || p.Tag == controlPair.tag) {
			if err := a.c.Signal(ctx, a.id, p.Pid, "SIGKILL"); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return agentError(err)
			}
		}
	}
	return nil
}

func (h *Handler) startStream(w http.ResponseWriter, r *http.Request) {
	var req api.DesktopStreamRequest
	if err := h.cfg.Decode(w, r, &req, true); err != nil {
		h.cfg.Fail(w, r, err)
		return
	}
	ttl := defaultTTL
	if req.TTLSeconds != 0 {
		if req.TTLSeconds < 1 || time.Duration(req.TTLSeconds)*time.Second > maxTTL {
			h.cfg.Fail(w, r, errdefs.Invalidf("ttlSeconds %d: want 1 to %d", req.TTLSeconds, int(maxTTL/time.Second)))
			return
		}
		ttl = time.Duration(req.TTLSeconds) * time.Second
	}
	project, _ := auth.ProjectID(r.Context())
	id := r.PathValue("id")
	h.serve(w, r, func(ctx context.Context, a *agent) error {
		// The place is taken first, so that two calls at once cannot both
		// pass the bound; it is given back if the stream does not start.
		v, token, err := h.viewers.mint(project, id, req.Control, ttl)
		if err != nil {
			return err
		}
		p := viewPair
		if req.Control {
			p = controlPair
		}
		if err := a.ensure(ctx, p); err != nil {
			h.viewers.revoke(id, v.id)
			return err
		}
		api.WriteJSON(w, http.StatusCreated, viewerAnswer(r, v, token))
		return nil
	})
}

// viewerAnswer is v as the API shows it, its URLs on the origin r came to.
func viewerAnswer(r *http.Request, v *viewer, token string) api.DesktopViewer {
	scheme, ws := "http", "ws"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme, ws = "https", "wss"
	}
	q := url.Values{"token": {token}}
	return api.DesktopViewer{
		ViewerID:     v.id,
		Token:        token,
		Control:      v.control,
		ExpiresAt:    v.expires.UTC(),
		WebSocketURL: ws + "://" + r.Host + "/v1/sandboxes/" + v.sandbox + "/desktop/stream/websocket?" + q.Encode(),
		// In the fragment, the token never leaves the browser but in the
		// console's own WebSocket.
		URL: scheme + "://" + r.Host + "/#/sandboxes/" + v.sandbox + "/desktop?" + q.Encode(),
	}
}

func (h *Handler) stopStream(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	h.serve(w, r, func(ctx context.Context, a *agent) error {
		// The tokens go first: no viewer comes back while the servers end.
		h.viewers.stop(id)
		if err := a.stop(ctx); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

func (h *Handler) revokeViewer(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	id, vid := r.PathValue("id"), r.PathValue("viewerId")
	if !h.viewers.revokeOf(project, id, vid) {
		h.cfg.Fail(w, r, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("sandbox %s has no viewer %s (revoked, expired, or never minted here)", id, vid)})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// websocket is a viewer's stream: its token alone opens it, for the
// sandbox it was minted for, to the pair it was minted for.
func (h *Handler) websocket(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	token := r.URL.Query().Get("token")
	if token == "" {
		token = r.Header.Get(ViewerTokenHeader)
	}
	v, ctx, done, err := h.viewers.open(r.Context(), token, id)
	if err != nil {
		h.cfg.Fail(w, r, err)
		return
	}
	defer done()
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		h.cfg.Fail(w, r, errdefs.Invalidf("the stream is a WebSocket (RFB over WebSocket, as noVNC speaks it): connect with one"))
		return
	}
	p := viewPair
	if v.control {
		p = controlPair
	}
	in := r.Clone(ctx)
	in.URL.Path, in.URL.RawPath, in.URL.RawQuery = "/", "", ""
	// Nothing of Lizard's goes in: the token, keys and cookies are the
	// API's, not websockify's.
	in.Header.Del(ViewerTokenHeader)
	in.Header.Del("Authorization")
	in.Header.Del("Cookie")
	h.cfg.ServePort(w, in, v.project, id, p.ws)
}

// viewers are the stream tokens this process minted. They are kept in
// memory, stored nowhere: a restart of the server revokes them all (a
// viewer asks for a new one), and in a cluster a token opens the stream
// through the lizard api that minted it.
type viewers struct {
	now func() time.Time

	mu sync.Mutex
	// byToken: by the token's SHA-256, so that no token is kept or
	// compared as it is.
	byToken   map[[32]byte]*viewer
	bySandbox map[string]map[string]*viewer // sandbox → viewer ID → viewer
}

type viewer struct {
	id, sandbox, project string
	control              bool
	expires              time.Time
	hash                 [32]byte
	// conns end the viewer's open WebSockets (under viewers.mu).
	conns map[*context.CancelCauseFunc]struct{}
}

func newViewers(now func() time.Time) *viewers {
	return &viewers{now: now, byToken: map[[32]byte]*viewer{}, bySandbox: map[string]map[string]*viewer{}}
}

// errRevoked ends a revoked viewer's connections.
var errRevoked = errors.New("the viewer's token was revoked")

func unknownToken(id string) error {
	return &errdefs.Error{Kind: errdefs.ErrUnauthenticated, Msg: fmt.Sprintf(
		"no valid viewer token for sandbox %s's stream (missing, expired, revoked, or another sandbox's): ask for one with POST /v1/sandboxes/%s/desktop/stream", id, id)}
}

func (vs *viewers) mint(project, id string, control bool, ttl time.Duration) (*viewer, string, error) {
	var raw [32]byte
	rand.Read(raw[:])
	token := "lzv_" + base64.RawURLEncoding.EncodeToString(raw[:])
	var vid [9]byte
	rand.Read(vid[:])
	v := &viewer{id: "v" + base64.RawURLEncoding.EncodeToString(vid[:]), sandbox: id, project: project, control: control,
		expires: vs.now().Add(ttl), hash: sha256.Sum256([]byte(token)), conns: map[*context.CancelCauseFunc]struct{}{}}
	vs.mu.Lock()
	defer vs.mu.Unlock()
	vs.pruneLocked(id)
	if n := len(vs.bySandbox[id]); n >= maxViewers {
		return nil, "", &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf(
			"sandbox %s has %d viewers of its stream, its most: revoke one (DELETE /v1/sandboxes/%s/desktop/stream/viewers/{viewerId}) or stop the stream (DELETE /v1/sandboxes/%s/desktop/stream)", id, n, id, id)}
	}
	if len(vs.byToken) >= maxViewersTotal {
		vs.pruneAllLocked()
		if len(vs.byToken) >= maxViewersTotal {
			return nil, "", &errdefs.Error{Kind: errdefs.ErrRateLimited, Msg: fmt.Sprintf("this server keeps %d stream viewers, its most: retry later", maxViewersTotal)}
		}
	}
	if vs.bySandbox[id] == nil {
		vs.bySandbox[id] = map[string]*viewer{}
	}
	vs.bySandbox[id][v.id] = v
	vs.byToken[v.hash] = v
	return v, token, nil
}

// open admits one connection of token to sandbox id's stream: ctx ends
// when the viewer is revoked, done when the connection ends.
func (vs *viewers) open(parent context.Context, token, id string) (v *viewer, ctx context.Context, done func(), err error) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	v = vs.byToken[sha256.Sum256([]byte(token))]
	if token == "" || v == nil || v.sandbox != id {
		return nil, nil, nil, unknownToken(id)
	}
	if !vs.now().Before(v.expires) {
		vs.removeLocked(v)
		return nil, nil, nil, unknownToken(id)
	}
	if len(v.conns) >= maxConnsPerViewer {
		return nil, nil, nil, &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf(
			"viewer %s has %d connections to the stream open, its most: close one, or ask for another viewer", v.id, len(v.conns))}
	}
	ctx, cancel := context.WithCancelCause(parent)
	v.conns[&cancel] = struct{}{}
	return v, ctx, func() {
		vs.mu.Lock()
		delete(v.conns, &cancel)
		vs.mu.Unlock()
		cancel(nil)
	}, nil
}

// removeLocked forgets v and ends its connections.
func (vs *viewers) removeLocked(v *viewer) {
	delete(vs.byToken, v.hash)
	if m := vs.bySandbox[v.sandbox]; m != nil {
		delete(m, v.id)
		if len(m) == 0 {
			delete(vs.bySandbox, v.sandbox)
		}
	}
	for c := range v.conns {
		(*c)(errRevoked)
	}
}

func (vs *viewers) revoke(id, vid string) bool { return vs.revokeOf("", id, vid) }

// revokeOf revokes viewer vid of sandbox id, if project's ("" any).
func (vs *viewers) revokeOf(project, id, vid string) bool {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	v := vs.bySandbox[id][vid]
	if v == nil || project != "" && v.project != project {
		return false
	}
	vs.removeLocked(v)
	return true
}

// stop revokes every viewer of sandbox id.
func (vs *viewers) stop(id string) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	for _, v := range vs.bySandbox[id] {
		vs.removeLocked(v)
	}
}

func (vs *viewers) pruneLocked(id string) {
	now := vs.now()
	for _, v := range vs.bySandbox[id] {
		if !now.Before(v.expires) {
			vs.removeLocked(v)
		}
	}
}

func (vs *viewers) pruneAllLocked() {
	for id := range vs.bySandbox {
		vs.pruneLocked(id)
	}
}
