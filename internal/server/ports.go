package server

// Exposed ports (docs/ports.md): /v1/sandboxes/{id}/ports/{port}/<path>,
// or <port>-<id>.<domain>/<path> when the server has a ports domain, is
// proxied to <path> on port of the sandbox's own address, HTTP and
// WebSocket alike, streaming both ways. The caller shows a key of the
// sandbox's project, or its access token (query, header or the cookie set
// when the query carried it), unless the sandbox's ports are public.
// Lizard's own credentials are taken off the request before it goes in.
//
// What a program serves is untrusted, and a path-based port shares the
// API's and the console's origin: its answers are confined there (a CSP
// sandbox, so no script runs in that origin; no service worker scope; its
// cookies kept under the port's path), see confineResponse.

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/e2b"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
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
	Proxy:                  nil,
	DisableKeepAlives:      true,
	ResponseHeaderTimeout:  0, // a program may take its time to answer
	TLSHandshakeTimeout:    10 * time.Second,
	MaxResponseHeaderBytes: node.MaxPortHeaderBytes,
}

func (s *Server) portRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/v1/sandboxes/{id}/ports/{port}", s.portPath)
	mux.HandleFunc("/v1/sandboxes/{id}/ports/{port}/{rest...}", s.portPath)
}

func (s *Server) portPath(w http.ResponseWriter, r *http.Request) {
	id, rawPort := r.PathValue("id"), r.PathValue("port")
	port, err := strconv.Atoi(rawPort)
	if err != nil || strconv.Itoa(port) != rawPort || port < 1 || port > 65535 {
		s.fail(w, r, errdefs.Invalidf("port %q: want a number from 1 to 65535", rawPort))
		return
	}
	if dest := codeForAPIOrigin(r); dest != "" {
		s.fail(w, r, errdefs.Invalidf("a page of the API's origin may not load a port's content as a %s: open the port's page itself, or use a ports domain", dest))
		return
	}
	prefix := "/v1/sandboxes/" + id + "/ports/" + rawPort
	s.servePort(w, r, id, port, prefix)
}

// codeForAPIOrigin names what r loads when a page of the API's own origin
// asks for a port's content as code (a script, a worker, a stylesheet),
// or is "". No such page should: the console never does, and a port's own
// pages run in an opaque origin, whose requests are cross-site. Refusing
// them keeps the console's CSP ('self') from trusting a sandbox's script,
// should markup ever get into the console, and any service worker script
// off the path form. Browsers without Fetch Metadata send neither header.
func codeForAPIOrigin(r *http.Request) string {
	if r.Header.Get("Sec-Fetch-Site") != "same-origin" {
		return ""
	}
	switch dest := r.Header.Get("Sec-Fetch-Dest"); dest {
	case "script", "worker", "sharedworker", "serviceworker", "style", "audioworklet", "paintworklet", "xslt":
		return dest
	}
	return ""
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
		if strconv.Itoa(port) != m[1] {
			// One name per port: 08000-<id> is not 8000-<id>.
			s.fail(w, r, errdefs.Invalidf("port %q: want a number from 1 to 65535 without leading zeros", m[1]))
			return
		}
		if s.e2b != nil && (m[1] == e2b.EnvdPort || m[1] == e2b.InterpreterPort) {
			// E2B's SDKs without E2B_SANDBOX_URL reach a sandbox's envd
			// and code interpreter at https://<port>-<id>.<domain>: the
			// same calls as through the sandbox URL, where nothing in
			// the sandbox listens on those ports itself.
			s.e2b.ServeHTTP(w, e2bHostCall(r, m[2], m[1]))
			return
		}
		s.servePort(w, r, m[2], port, "")
	})
}

// e2bHostCall is r, a call of E2B's host form to port of sandbox id, as
// the same call to E2B's sandbox URL: the path under /e2b/sandbox and the
// sandbox and port in the headers the SDKs send there.
func e2bHostCall(r *http.Request, id, port string) *http.Request {
	r2 := r.Clone(r.Context())
	r2.Header.Set(e2b.HeaderSandboxID, id)
	r2.Header.Set(e2b.HeaderSandboxPort, port)
	r2.URL.Path = "/e2b/sandbox" + r.URL.Path
	r2.URL.RawPath = ""
	return r2
}

// servePort proxies r, whose path is prefix + the path in the sandbox, to
// port of sandbox id.
func (s *Server) servePort(w http.ResponseWriter, r *http.Request, id string, port int, prefix string) {
	a, keyed, ok := s.portAccess(w, r)
	if !ok {
		return
	}
	s.proxyPort(w, r, a, keyed, id, port, prefix)
}

// viewerPort proxies r, a desktop stream viewer's WebSocket (package
// desktop, which checked the viewer's token), to port of sandbox id as a
// request of project's.
func (s *Server) viewerPort(w http.ResponseWriter, r *http.Request, project, id string, port int) {
	s.proxyPort(w, r, control.PortAccess{ProjectID: project}, true, id, port, "")
}

// proxyPort proxies r to port of sandbox id for a caller with access a
// (keyed: a's project came from the request's key, which goes no further).
func (s *Server) proxyPort(w http.ResponseWriter, r *http.Request, a control.PortAccess, keyed bool, id string, port int, prefix string) {
	q := r.URL.Query()
	fromQuery := q.Get(AccessTokenParam) != ""
	call, err := s.c.OpenPort(r.Context(), a, id, port)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer call.Release()
	leave, ok := s.portsInFlight.Enter(id)
	if !ok {
		writeRateLimited(w, time.Second, fmt.Sprintf("sandbox %s has %d requests to its ports under way, its most: end some (streams, WebSockets) first", id, maxPortsInFlight))
		return
	}
	defer leave()
	// The cookie covers the prefix itself and everything under it (a
	// cookie path of /a/b matches /a/b and /a/b/..., not /a/bc).
	cookiePath := prefix
	if prefix == "" {
		cookiePath = "/"
	}
	tokenCookie := &http.Cookie{Name: accessTokenCookie, Value: a.Token, Path: cookiePath, HttpOnly: true, SameSite: http.SameSiteLaxMode}
	if fromQuery && navigation(r) {
		// A page opened with the token in its URL would send that URL as
		// Referer with its next requests, to the program and beyond: the
		// browser gets the cookie and the same URL without the token.
		http.SetCookie(w, tokenCookie)
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Location", withoutToken(r.URL))
		w.WriteHeader(http.StatusSeeOther)
		return
	}
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
		s.log.Debug("enabling full duplex for a port", "err", err)
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
			} else {
				pr.Out.Header.Del("X-Forwarded-Prefix") // the client's, not ours
			}
			// The program keeps the Host it was asked for, as behind
			// any reverse proxy, unless its sandbox names another (E2B's
			// maskRequestHost: the caller's is then X-Forwarded-Host
			// alone); Lizard's credentials stay out.
			pr.Out.Host = pr.In.Host
			if call.Host != "" {
				pr.Out.Host = call.Host
			}
			pr.Out.Header.Del(AccessTokenHeader)
			pr.Out.Header.Del(e2b.HeaderTrafficToken)
			if keyed {
				pr.Out.Header.Del("Authorization")
			}
			dropCookie(pr.Out, accessTokenCookie)
			dropRefererToken(pr.Out.Header)
		},
		Transport:     transport,
		FlushInterval: -1,
		// What it logs (an answer broken off) is the program's doing,
		// at its clients' request rate, which no key bounds on a public
		// port: at debug level, not the server's default.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ModifyResponse: func(resp *http.Response) error {
			confineResponse(resp.Header, prefix)
			if fromQuery {
				// A client that sent the token in the URL keeps it for
				// its other requests under the same prefix.
				resp.Header.Add("Set-Cookie", tokenCookie.String())
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if cause := agentproxy.StopCause(call.Ctx); cause != nil {
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

// maxPortsInFlight bounds one sandbox's requests to its ports under way:
// no key's bounds cover them (a token or public ports open them), and
// each holds file descriptors of the server, which every project shares,
// for as long as the program keeps it (a stream, a WebSocket).
const maxPortsInFlight = 1024

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
		// E2B's trafficAccessToken, as its SDK's users send it to a
		// private sandbox's ports.
		a.Token = r.Header.Get(e2b.HeaderTrafficToken)
	}
	if a.Token == "" {
		if c, err := r.Cookie(accessTokenCookie); err == nil {
			a.Token = c.Value
		}
	}
	return a, keyed, true
}

// portSandboxCSP is added to every answer of a path-based port. Without
// allow-same-origin, a page (or SVG, or anything rendered as a document)
// runs in an opaque origin, not the API's: it can register no service
// worker, read no storage or cookie of the API's origin and make no
// same-origin request to the API, the console or another sandbox's port.
// Scripts, forms, popups and downloads still work, within that origin.
const portSandboxCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// confineResponse keeps a program's answer to what it may do. The
// program's CSP stays (policies add up: a browser enforces each, so the
// program can only narrow ours); Clear-Site-Data goes (it would clear the
// console's storage or, by registrable domain, other sandboxes' cookies);
// its cookies lose Domain (no cookie for sibling hosts) and never carry
// Lizard's name. Under a path prefix (the API's origin) it also gets the
// CSP sandbox, loses Service-Worker-Allowed, and its cookies' Path is put
// under the prefix.
func confineResponse(h http.Header, prefix string) {
	h.Del("Clear-Site-Data")
	if prefix != "" {
		h.Add("Content-Security-Policy", portSandboxCSP)
		h.Del("Service-Worker-Allowed")
	}
	cookies := h.Values("Set-Cookie")
	if len(cookies) == 0 {
		return
	}
	h.Del("Set-Cookie")
	for _, c := range cookies {
		if c, ok := confineCookie(c, prefix); ok {
			h.Add("Set-Cookie", c)
		}
	}
}

// confineCookie rewrites a program's Set-Cookie value: no Domain
// attribute (the cookie is its host's only), and under a prefix a Path
// inside it (the program's own Path, cleaned, appended to the prefix).
// Other attributes stay as sent. A cookie named as Lizard's is dropped:
// it would shadow the access token.
func confineCookie(v, prefix string) (string, bool) {
	attrs := strings.Split(v, ";")
	name, _, _ := strings.Cut(attrs[0], "=")
	if strings.TrimSpace(name) == accessTokenCookie {
		return "", false
	}
	kept := []string{strings.TrimSpace(attrs[0])}
	p := "/"
	for _, a := range attrs[1:] {
		a = strings.TrimSpace(a)
		k, val, _ := strings.Cut(a, "=")
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "domain":
			continue
		case "path":
			if prefix == "" {
				break
			}
			// RFC 6265: a Path that does not start with / means the
			// default; cleaned, so no browser could take it above the prefix.
			if val = strings.TrimSpace(val); strings.HasPrefix(val, "/") {
				p = path.Clean(val)
			}
			continue
		}
		if a != "" {
			kept = append(kept, a)
		}
	}
	if prefix != "" {
		cp := prefix
		if p != "/" {
			cp += p
		}
		kept = append(kept, "Path="+cp)
	}
	return strings.Join(kept, "; "), true
}

// navigation says whether r is a browser opening a page (not a fetch, an
// image or a WebSocket, nor a client such as curl or an SDK): only a page's
// URL becomes the Referer of later requests.
func navigation(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if r.Header.Get("Upgrade") != "" {
		return false
	}
	if mode := r.Header.Get("Sec-Fetch-Mode"); mode != "" {
		return mode == "navigate"
	}
	// A browser too old to send Fetch Metadata asks pages for HTML.
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// withoutToken is u's path and query, as sent, without the access token:
// a Location on the same host. A path starting with // (possible under a
// ports domain) is written /.//... so that no browser reads it as a host.
func withoutToken(u *url.URL) string {
	loc := u.EscapedPath()
	if loc == "" {
		loc = "/"
	}
	if strings.HasPrefix(loc, "//") {
		loc = "/." + loc
	}
	if q := dropParam(u.RawQuery, AccessTokenParam); q != "" {
		loc += "?" + q
	}
	return loc
}

// dropRefererToken removes the access token from the query of the
// Referer (a page opened with the token by an older client, or by a
// fetch): the program never sees it.
func dropRefererToken(h http.Header) {
	ref := h.Get("Referer")
	if ref == "" {
		return
	}
	u, err := url.Parse(ref)
	if err != nil {
		if strings.Contains(ref, AccessTokenParam) {
			h.Del("Referer")
		}
		return
	}
	if q := dropParam(u.RawQuery, AccessTokenParam); q != u.RawQuery {
		u.RawQuery = q
		h.Set("Referer", u.String())
	}
}

// dropParam removes parameter name from a raw query, leaving the rest as
// sent (order and escapes). Names are compared unescaped, as the query
// is read (lizard%5Faccess_token is the token too).
func dropParam(rawQuery, name string) string {
	parts := strings.Split(rawQuery, "&")
	kept := parts[:0]
	for _, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
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
