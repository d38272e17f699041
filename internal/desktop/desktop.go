// Package desktop serves a desktop sandbox's screen, mouse, keyboard,
// windows and stream under /v1/sandboxes/{id}/desktop/ (docs/desktop.md).
// Each call is one proxied call to the sandbox's agent (Control.Acquire),
// as the native API's: the agent runs xdotool, scrot or xdg-open there as
// an argument vector, never through a shell, so every SDK stays a thin
// client of these routes. Like envd, it is a client (package client) of
// the agent's API over the agent proxy's transport and keeps no calls of
// its own. The stream's viewers and their tokens are in stream.go.
package desktop

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// Sandboxes starts calls to sandboxes' agents: control.Control.
type Sandboxes interface {
	Acquire(ctx context.Context, projectID, id string) (agentproxy.Call, error)
	Transport() http.RoundTripper
}

// Config says what the desktop routes serve with.
type Config struct {
	Sandboxes Sandboxes
	// ServePort proxies r, a viewer's WebSocket, to port of sandbox id as
	// a request of project's to its ports (the server's port proxy): the
	// project's ownership, the sandbox's state, its end and the ports'
	// bounds are the port proxy's.
	ServePort func(w http.ResponseWriter, r *http.Request, projectID, id string, port int)
	// Fail answers a request with an error by the server's table.
	Fail func(w http.ResponseWriter, r *http.Request, err error)
	// Decode reads a request's JSON body as the server does (unknown
	// fields and nulls refused; empty is {} when allowEmpty).
	Decode func(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) error
	Logger *slog.Logger
}

// Handler serves the desktop routes.
type Handler struct {
	cfg     Config
	log     *slog.Logger
	viewers *viewers
}

// New returns the desktop routes' handler.
func New(cfg Config) *Handler {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Handler{cfg: cfg, log: log, viewers: newViewers(time.Now)}
}

// Routes registers the routes on mux: every one behind authed (a key of
// the sandbox's project) but the stream's WebSocket, which a viewer opens
// with its own token.
func (h *Handler) Routes(mux *http.ServeMux, authed func(http.HandlerFunc) http.Handler) {
	const p = "/v1/sandboxes/{id}/desktop"
	mux.Handle("GET "+p+"/screenshot", authed(h.screenshot))
	mux.Handle("GET "+p+"/screen", authed(h.screen))
	mux.Handle("GET "+p+"/cursor", authed(h.cursor))
	mux.Handle("POST "+p+"/mouse", authed(h.mouse))
	mux.Handle("POST "+p+"/keyboard", authed(h.keyboard))
	mux.Handle("POST "+p+"/open", authed(h.open))
	mux.Handle("POST "+p+"/launch", authed(h.launch))
	mux.Handle("GET "+p+"/windows", authed(h.windows))
	mux.Handle("POST "+p+"/stream", authed(h.startStream))
	mux.Handle("DELETE "+p+"/stream", authed(h.stopStream))
	mux.Handle("DELETE "+p+"/stream/viewers/{viewerId}", authed(h.revokeViewer))
	mux.HandleFunc("GET "+p+"/stream/websocket", h.websocket)
}

// agent is one call to a sandbox's agent.
type agent struct {
	c  *client.Client
	id string
}

// session acquires a call to r's sandbox for the caller's project; done
// ends it.
func (h *Handler) session(r *http.Request) (a *agent, ctx context.Context, done func(), err error) {
	project, _ := auth.ProjectID(r.Context())
	id := r.PathValue("id")
	call, err := h.cfg.Sandboxes.Acquire(r.Context(), project, id)
	if err != nil {
		return nil, nil, nil, err
	}
	tr := &agentproxy.Transport{Call: call, Base: h.cfg.Sandboxes.Transport(), MaxJSON: maxAnswerBytes}
	// The transport keeps the key from the agent; the client will not
	// send a request without one.
	c, err := client.New(client.Config{BaseURL: "http://sandbox", APIKey: "agent-call", HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		call.Release()
		return nil, nil, nil, err
	}
	return &agent{c: c, id: id}, call.Ctx, call.Release, nil
}

// maxAnswerBytes bounds one JSON answer of the agent (a process list):
// code in the sandbox can replace the agent.
const maxAnswerBytes = 4 << 20

// agentError is err with an agent's answer (a *client.Error) as the
// errdefs kind of its status.
func agentError(err error) error {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return err
	}
	return errdefs.OfStatus(ce.Status, ce.Message)
}

// display is the desktop template's X display.
var display = map[string]string{"DISPLAY": ":0"}

// run runs args in the sandbox and returns its output. A program that is
// not there, or an X server that does not answer, is the sandbox having
// no desktop: a 409 that says so.
func (a *agent) run(ctx context.Context, args []string, timeout time.Duration) (string, error) {
	res, err := a.result(ctx, args, timeout)
	if err != nil {
		return "", err
	}
	return res.Stdout, nil
}

// result is run's, with what the program wrote to stderr.
func (a *agent) result(ctx context.Context, args []string, timeout time.Duration) (*client.ProcessResult, error) {
	ms := timeout.Milliseconds()
	res, err := a.c.Exec(ctx, a.id, api.ProcessRequest{Args: args, Envs: display, TimeoutMs: &ms}, nil)
	if err != nil {
		return nil, agentError(err)
	}
	switch {
	case res.ExitCode == -1 && strings.Contains(res.Error, "not found"):
		return nil, noDesktop(a.id, fmt.Sprintf("it has no %s", args[0]))
	case slices.ContainsFunc(noDisplay, func(s string) bool { return strings.Contains(res.Stderr, s) }):
		return nil, noDesktop(a.id, "no X server answers on its display :0")
	case res.ExitCode != 0:
		msg := strings.TrimSpace(res.Stderr + " " + res.Error)
		if len(msg) > 500 {
			msg = msg[:500] + "..."
		}
		return nil, &errdefs.Error{Kind: errdefs.ErrBadGateway, Msg: fmt.Sprintf("%s failed in sandbox %s (exit code %d): %s", args[0], a.id, res.ExitCode, msg)}
	}
	return res, nil
}

// noDisplay are what xdotool, scrot, xrandr and x11vnc say when no X
// server answers.
var noDisplay = []string{"Can't open display", "Cannot open display", "Failed creating new xdo instance", "Can't open X display", "unable to open display"}

// noDesktop is the answer for a sandbox whose template runs no desktop.
func noDesktop(id, why string) error {
	return &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf(
		"sandbox %s has no desktop (%s): create it from a desktop template, built from templates/desktop/recipe.yaml (docs/desktop.md)", id, why)}
}

// serve runs fn with a call to r's sandbox and answers its error.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, fn func(ctx context.Context, a *agent) error) {
	a, ctx, done, err := h.session(r)
	if err != nil {
		h.cfg.Fail(w, r, err)
		return
	}
	defer done()
	if err := fn(ctx, a); err != nil {
		h.cfg.Fail(w, r, err)
	}
}

func (a *agent) screen(ctx context.Context) (api.DesktopScreen, error) {
	out, err := a.run(ctx, screenArgs, callTimeout)
	if err != nil {
		return api.DesktopScreen{}, err
	}
	return parseScreen(out)
}

func (h *Handler) screen(w http.ResponseWriter, r *http.Request) {
	h.serve(w, r, func(ctx context.Context, a *agent) error {
		s, err := a.screen(ctx)
		if err == nil {
			api.WriteJSON(w, http.StatusOK, s)
		}
		return err
	})
}

func (h *Handler) cursor(w http.ResponseWriter, r *http.Request) {
	h.serve(w, r, func(ctx context.Context, a *agent) error {
		out, err := a.run(ctx, cursorArgs, callTimeout)
		if err != nil {
			return err
		}
		c, err := parseCursor(out)
		if err == nil {
			api.WriteJSON(w, http.StatusOK, c)
		}
		return err
	})
}

func (h *Handler) mouse(w http.ResponseWriter, r *http.Request) {
	var req api.DesktopMouseRequest
	if err := h.cfg.Decode(w, r, &req, false); err != nil {
		h.cfg.Fail(w, r, err)
		return
	}
	args, err := mouseArgs(req)
	if err != nil {
		h.cfg.Fail(w, r, err)
		return
	}
	h.serve(w, r, func(ctx context.Context, a *agent) error {
		out, err := a.run(ctx, args, callTimeout)
		if err != nil {
			return err
		}
		c, err := parseCursor(out)
		if err != nil {
			return err
		}
		if want, ok := mouseTarget(req); ok {
			c = settle(ctx, c, want, func() (api.DesktopCursor, error) {
				out, err := a.run(ctx, cursorArgs, callTimeout)
				if err != nil {
					return api.DesktopCursor{}, err
				}
				return parseCursor(out)
			})
		}
		api.WriteJSON(w, http.StatusOK, c)
		return nil
	})
}

// Settling: xdotool's move is XTest input, which the X server queues and
// applies after the query that follows it in the same command may already
// have answered, so a move's answer could name where the pointer was.
const (
	settleReads = 5
	settleGap   = 20 * time.Millisecond
)

// mouseTarget is where req leaves the pointer, if it names a place.
func mouseTarget(req api.DesktopMouseRequest) (api.DesktopCursor, bool) {
	x, y := req.X, req.Y
	if req.Action == api.MouseDrag {
		x, y = req.ToX, req.ToY
	}
	if x == nil || y == nil {
		return api.DesktopCursor{}, false
	}
	return api.DesktopCursor{X: *x, Y: *y}, true
}

// settle reads the pointer again, a few times and briefly, until it is at
// want. It gives up quietly with the last reading: a place off the screen
// is clamped to its edge and never reached, and an application may move
// the pointer itself.
func settle(ctx context.Context, got, want api.DesktopCursor, read func() (api.DesktopCursor, error)) api.DesktopCursor {
	for i := 0; i < settleReads && got != want; i++ {
		select {
		case <-ctx.Done():
			return got
		case <-time.After(settleGap):
		}
		c, err := read()
		if err != nil {
			return got
		}
		got = c
	}
	return got
}

func (h *Handler) keyboard(w http.ResponseWriter, r *http.Request) {
	var req api.DesktopKeyboardRequest
	if err := h.cfg.Decode(w, r, &req, false); err != nil {
		h.cfg.Fail(w, r, err)
		return
	}
	args, timeout, err := keyboardArgs(req)
	if err != nil {
		h.cfg.Fail(w, r, err)
		return
	}
	h.serve(w, r, func(ctx context.Context, a *agent) error {
		// X's key autorepeat turns a key held past 660 ms into repeats:
		// xdotool descheduled between a press and its release (a loaded
		// machine) typed "$4(" for "$(". Off for the whole display, as
		// nothing here holds a key on purpose.
		if _, err := a.run(ctx, []string{"xset", "r", "off"}, callTimeout); err != nil {
			return err
		}
		res, err := a.result(ctx, args, timeout)
		if err != nil {
			return err
		}
		// xdotool skips a key it does not know, says so and succeeds.
		if i := strings.Index(res.Stderr, "No such key name"); i >= 0 {
			line, _, _ := strings.Cut(res.Stderr[i:], "\n")
			return errdefs.Invalidf("xdotool knows no such key: %s", line)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// start runs args in the background: an application outlives the call.
func (a *agent) start(ctx context.Context, args []string, tag string) error {
	// Missing programs and a missing X server are told by a first call,
	// since a background process's failure comes after the answer.
	if _, err := a.run(ctx, []string{"xdotool", "getdisplaygeometry"}, callTimeout); err != nil {
		return err
	}
	_, err := a.c.StartProcess(ctx, a.id, api.ProcessStartRequest{Args: args, Envs: display, Tag: tag})
	return agentError(err)
}

func (h *Handler) open(w http.ResponseWriter, r *http.Request) {
	var req api.DesktopOpenRequest
	if err := h.cfg.Decode(w, r, &req, false); err != nil {
		h.cfg.Fail(w, r, err)
		return
	}
	args, err := openArgs(req.Target)
	if err != nil {
		h.cfg.Fail(w, r, err)
		return
	}
	h.serve(w, r, func(ctx context.Context, a *agent) error {
		if err := a.start(ctx, args, "lizard-desktop-open"); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

func (h *Handler) launch(w http.ResponseWriter, r *http.Request) {
	var req api.DesktopLaunchRequest
	if err := h.cfg.Decode(w, r, &req, false); err != nil {
		h.cfg.Fail(w, r, err)
		return
	}
	args, err := launchArgs(req.App)
	if err != nil {
		h.cfg.Fail(w, r, err)
		return
	}
	h.serve(w, r, func(ctx context.Context, a *agent) error {
		if err := a.start(ctx, args, "lizard-desktop-launch"); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

func (h *Handler) windows(w http.ResponseWriter, r *http.Request) {
	h.serve(w, r, func(ctx context.Context, a *agent) error {
		// The script's own programs are checked first: bash would only
		// say "command not found" for each.
		if _, err := a.run(ctx, cursorArgs, callTimeout); err != nil {
			return err
		}
		out, err := a.run(ctx, windowsArgs, callTimeout)
		if err != nil {
			return err
		}
		list, err := parseWindows(out)
		if err == nil {
			api.WriteJSON(w, http.StatusOK, list)
		}
		return err
	})
}

// maxScreenshotBytes bounds a screenshot read from the sandbox: a PNG of
// the largest screen (16384 pixels square) with nothing to compress would
// pass it, and a sandbox's scrot replaced by its code could send forever.
const maxScreenshotBytes = 256 << 20

var pngMagic = []byte("\x89PNG\r\n\x1a\n")

func (h *Handler) screenshot(w http.ResponseWriter, r *http.Request) {
	reg, err := regionOf(r)
	if err != nil {
		h.cfg.Fail(w, r, err)
		return
	}
	h.serve(w, r, func(ctx context.Context, a *agent) error {
		if reg != nil {
			s, err := a.screen(ctx)
			if err != nil {
				return err
			}
			if err := checkRegion(*reg, s); err != nil {
				return err
			}
		}
		var nonce [8]byte
		rand.Read(nonce[:])
		path := "/tmp/lizard-screenshot-" + hex.EncodeToString(nonce[:]) + ".png"
		defer func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			a.c.Remove(ctx, a.id, path)
		}()
		if _, err := a.run(ctx, screenshotArgs(path, reg), callTimeout); err != nil {
			return err
		}
		body, err := a.c.ReadFile(ctx, a.id, path)
		if err != nil {
			return agentError(err)
		}
		defer body.Close()
		head := make([]byte, len(pngMagic))
		if _, err := io.ReadFull(body, head); err != nil || !bytes.Equal(head, pngMagic) {
			return badAnswer("scrot", string(head))
		}
		w.Header().Set("Content-Type", "image/png")
		// The sandbox's bytes, on the API's origin: never sniffed as
		// anything else, never a document that runs script.
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; sandbox")
		w.WriteHeader(http.StatusOK)
		w.Write(head)
		if _, err := io.Copy(w, io.LimitReader(body, maxScreenshotBytes)); err != nil {
			h.log.Debug("sending a screenshot", "sandbox_id", a.id, "err", err)
		}
		return nil
	})
}

// regionOf reads a screenshot's ?x=&y=&width=&height=: all four, or none.
func regionOf(r *http.Request) (*region, error) {
	q := r.URL.Query()
	names := []string{"x", "y", "width", "height"}
	var v [4]int
	given := 0
	for i, n := range names {
		s := q.Get(n)
		if s == "" {
			continue
		}
		given++
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > api.MaxDesktopCoordinate+1 {
			return nil, errdefs.Invalidf("%s %q: want a number of pixels from 0 to %d", names[i], s, api.MaxDesktopCoordinate+1)
		}
		v[i] = n
	}
	switch given {
	case 0:
		return nil, nil
	case 4:
		return &region{x: v[0], y: v[1], w: v[2], h: v[3]}, nil
	}
	return nil, errdefs.Invalidf("a region needs all of x, y, width and height (or none, for the whole screen)")
}
