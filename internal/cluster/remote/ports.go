package remote

// Exposed ports across machines: the API checks who may reach a
// sandbox's port (package control) and forwards the request, streaming and
// WebSocket upgrades included, to the sandbox's node, which dials the port.
// The program's own Authorization header goes through untouched: the
// cluster secret travels in HeaderSecret on these calls.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
)

// HeaderSecret carries the cluster secret on forwarded port calls, whose
// Authorization header is the program's.
const HeaderSecret = "X-Lizard-Cluster-Secret"

// portTransport dials ports: no connection kept alive, as the API's own
// (server/ports.go), so that none outlives a pause or is reused for
// another sandbox given the address later.
var portTransport = &http.Transport{DisableKeepAlives: true, TLSHandshakeTimeout: 10 * time.Second,
	MaxResponseHeaderBytes: node.MaxPortHeaderBytes}

// OpenPort implements node.Node: the call is forwarded to the node, which
// opens the port there (resuming a paused sandbox if resume) and proxies
// to it.
func (c *Client) OpenPort(ctx context.Context, id string, port int, resume bool) (agentproxy.Call, error) {
	mode := "no-resume"
	if resume {
		mode = "resume"
	}
	msg := fmt.Sprintf("sandbox %s's node %s stopped answering during the call to port %d (its process or machine went down?); retry shortly", id, c.name, port)
	cctx, release := c.forwarded(ctx, msg, true)
	u := *c.base
	u.Path = fmt.Sprintf("/internal/v1/sandboxes/%s/ports/%d/%s", url.PathEscape(id), port, mode)
	return agentproxy.Call{URL: &u, Ctx: cctx, Release: release, Transport: c.tr}, nil
}

func (h *handler) port(w http.ResponseWriter, r *http.Request) {
	r.Header.Del(HeaderSecret)
	r.Header.Del(HeaderVersion)
	id := r.PathValue("id")
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		writePublic(w, errdefs.Invalidf("port %q: want a number from 1 to 65535", r.PathValue("port")))
		return
	}
	call, err := h.cfg.Node.OpenPort(r.Context(), id, port, r.PathValue("mode") == "resume")
	if err != nil {
		writePublic(w, err)
		return
	}
	defer call.Release()
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
		h.log.Debug("enabling full duplex for a port", "err", err)
	}
	target, rest := call.URL, r.PathValue("rest")
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = target.Scheme, target.Host
			pr.Out.URL.Path, pr.Out.URL.RawPath = "/"+rest, ""
			// As the API set them: the program sees the client's request.
			pr.Out.Host = pr.In.Host
			for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v := pr.In.Header.Values(k); len(v) > 0 {
					pr.Out.Header[k] = v
				}
			}
		},
		Transport:     portTransport,
		FlushInterval: -1,
		// As the API's (server/ports.go): what it logs is the program's
		// doing. Unset, it went to the standard logger, at every level.
		ErrorLog: slog.NewLogLogger(h.log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var e *errdefs.Error
			if cause := context.Cause(call.Ctx); call.Ctx.Err() != nil && errors.As(cause, &e) {
				writePublic(w, cause)
				return
			}
			if r.Context().Err() != nil {
				return
			}
			msg := fmt.Sprintf("port %d of sandbox %s did not answer (%v)", port, id, err)
			if errors.Is(err, syscall.ECONNREFUSED) {
				msg = fmt.Sprintf("nothing listens on port %d in sandbox %s (connection refused): start a server there, listening on 0.0.0.0 (not 127.0.0.1)", port, id)
			}
			writePublic(w, &errdefs.Error{Kind: errdefs.ErrBadGateway, Msg: msg})
		},
	}
	rp.ServeHTTP(w, r.WithContext(call.Ctx))
}

// writePublic answers a forwarded port call with err as the public API
// does (api.Error, by the one table): the API passes the answer on as it
// is.
func writePublic(w http.ResponseWriter, err error) {
	k, msg := errdefs.Classify(err)
	if msg == "" {
		msg = "the sandbox's node failed the call; its log has the details"
	}
	api.WriteJSON(w, k.Status, api.Error{Code: k.Code, Message: msg})
}
