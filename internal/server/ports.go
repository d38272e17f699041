package server

// Exposed ports (docs/ports.md): /v1/sandboxes/{id}/ports/{port}/<path>,
// or <port>-<id>.<domain>/<path> when the server has a ports domain, is
// proxied to <path> on port of the sandbox's own address, HTTP and
// WebSocket alike, streaming both ways. The caller shows a key of the
// sandbox's project, or its access token (query, header or the cookie set
// when the query carried it), unless the sandbox's ports are public.
// Lizard's own credentials are taken off the request before it goes in.

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/control"
)

// The names a port's access token travels under.
const (
	AccessTokenParam  = "lizard_access_token"
	AccessTokenHeader = "X-Lizard-Access-Token"
	accessTokenCookie = "lizard_access_token"
)

// portTransport dials sandboxes' ports. No connection is kept alive: each
// proxied request is its own, ended with the request (or with the sandbox),
// so that none outlives a pause into a checkpoint image, nor is reused for
// another sandbox given the same address later.
var portTransport = &http.Transport{
	Proxy:                 nil,
	DisableKeepAlives:     true,
	ResponseHeaderTimeout: 0, // a program may take its time to answer
	TLSHandshakeTimeout:   10 * time.Second,
}

func (s *Server) portRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/v1/sandboxes/{id}/ports/{port}", s.portPath)
	mux.HandleFunc("/v1/sandboxes/{id}/ports/{port}/{rest...}", s.portPath)
}

func (s *Server) portPath(w http.ResponseWriter, r *http.Request) {
	id, rawPort := r.PathValue("id"), r.PathValue("port")
	port, err := strconv.Atoi(rawPort)
	if err != nil || strconv.Itoa(port) != rawPort || port < 1 || port > 65535 {
		s.fail(w, r, badRequest("port %q: want a number from 1 to 65535", rawPort))
		return
	}
	prefix := "/v1/sandboxes/" + id + "/ports/" + rawPort
	s.servePort(w, r, id, port, prefix)
}

// portHost matches <port>-<sandboxId>, the first label of a host under
// the ports domain.
var portHost = regexp.MustCompile(`^([0-9]{1,5})-([a-z0-9]{1,40})$`)

// hostPorts serves requests whose Host is under the ports domain as ports;
// everything else goes to next.
func (s *Server) hostPorts(next http.Handler) http.Handler {
	if s.portsDomain == "" {
		return next
	}
	suffix := "." + strings.ToLower(s.portsDomain)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := strings.ToLower(r.Host)
		if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
			host = host[:i]
		}
		label, ok := strings.CutSuffix(host, suffix)
		m := portHost.FindStringSubmatch(label)
		if !ok || m == nil {
			next.ServeHTTP(w, r)
			return
		}
		port, _ := strconv.Atoi(m[1])
		s.servePort(w, r, m[2], port, "")
	})
}

// servePort proxies r, whose path is prefix + the path in the sandbox, to
// port of sandbox id.
func (s *Server) servePort(w http.ResponseWriter, r *http.Request, id string, port int, prefix string) {
	a, keyed, ok := s.portAccess(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	fromQuery := q.Get(AccessTokenParam) != ""
	call, err := s.c.OpenPort(r.Context(), a, id, port)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer call.Release()
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
		s.log.Debug("enabling full duplex for a port", "err", err)
	}
	cookiePath := prefix + "/"
	if prefix == "" {
		cookiePath = "/"
	}
	target := call.URL
	log := s.log.With("sandbox_id", id, "port", port)
	transport := call.Transport
	if transport == nil {
		transport = portTransport
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = target.Scheme, target.Host
			// target.Path is "" for the port itself, or the port's path on
			// the node that runs the sandbox (a cluster).
			pr.Out.URL.Path = target.Path + "/" + strings.TrimPrefix(strings.TrimPrefix(pr.In.URL.Path, prefix), "/")
			pr.Out.URL.RawPath = ""
			if raw := pr.In.URL.RawPath; raw != "" {
				// Escapes the program may rely on (%2F) stay as sent.
				pr.Out.URL.RawPath = "/" + strings.TrimPrefix(strings.TrimPrefix(raw, prefix), "/")
			}
			pr.Out.URL.RawQuery = dropParam(pr.In.URL.RawQuery, AccessTokenParam)
			pr.SetXForwarded()
			if prefix != "" {
				pr.Out.Header.Set("X-Forwarded-Prefix", prefix)
			}
			// The program keeps the Host it was asked for, as behind
			// any reverse proxy; Lizard's credentials stay out.
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del(AccessTokenHeader)
			if keyed {
				pr.Out.Header.Del("Authorization")
			}
			dropCookie(pr.Out, accessTokenCookie)
		},
		Transport:     transport,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ModifyResponse: func(resp *http.Response) error {
			if fromQuery {
				// A browser that opened the URL with the token keeps it
				// for the page's other requests under the same prefix.
				c := &http.Cookie{Name: accessTokenCookie, Value: a.Token, Path: cookiePath, HttpOnly: true, SameSite: http.SameSiteLaxMode}
				resp.Header.Add("Set-Cookie", c.String())
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if cause := stopCause(call.Ctx); cause != nil {
				s.fail(w, r, cause)
				return
			}
			if r.Context().Err() != nil {
				return
			}
			log.Debug("port did not answer", "err", err)
			msg := fmt.Sprintf("port %d of sandbox %s did not answer (%v)", port, id, err)
			if errors.Is(err, syscall.ECONNREFUSED) {
				msg = fmt.Sprintf("nothing listens on port %d in sandbox %s (connection refused): start a server there, listening on 0.0.0.0 (not 127.0.0.1)", port, id)
			}
			writeError(w, http.StatusBadGateway, api.CodeBadGateway, msg)
		},
	}
	rp.ServeHTTP(w, r.WithContext(call.Ctx))
}

// portAccess reads the credentials of a request to a port. A Bearer key
// that Lizard would accept must be valid (a wrong one is a 401); a Bearer
// token that is not a Lizard key belongs to the program and is passed on.
func (s *Server) portAccess(w http.ResponseWriter, r *http.Request) (a control.PortAccess, keyed, ok bool) {
	if scheme, tok, found := strings.Cut(r.Header.Get("Authorization"), " "); found && strings.EqualFold(scheme, "Bearer") {
		if _, err := auth.Parse(strings.TrimSpace(tok)); err == nil && s.keys != nil {
			project, err := s.keys.Verify(r.Context(), strings.TrimSpace(tok))
			switch {
			case errors.Is(err, auth.ErrUnauthenticated):
				auth.Unauthorized(w)
				return a, false, false
			case err != nil:
				s.fail(w, r, err)
				return a, false, false
			}
			a.ProjectID, keyed = project, true
		}
	}
	a.Token = r.URL.Query().Get(AccessTokenParam)
	if a.Token == "" {
		a.Token = r.Header.Get(AccessTokenHeader)
	}
	if a.Token == "" {
		if c, err := r.Cookie(accessTokenCookie); err == nil {
			a.Token = c.Value
		}
	}
	return a, keyed, true
}

// dropParam removes parameter name from a raw query, leaving the rest as
// sent (order and escapes).
func dropParam(rawQuery, name string) string {
	if !strings.Contains(rawQuery, name) {
		return rawQuery
	}
	parts := strings.Split(rawQuery, "&")
	kept := parts[:0]
	for _, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		if k != name {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, "&")
}

// dropCookie removes cookie name from r's Cookie headers.
func dropCookie(r *http.Request, name string) {
	cs := r.Cookies()
	r.Header.Del("Cookie")
	for _, c := range cs {
		if c.Name != name {
			r.AddCookie(c)
		}
	}
}
