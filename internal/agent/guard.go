package agent

import (
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/lizard-build/lizard/api"
)

// guard keeps the agent's door: only the server, from outside the sandbox,
// may use the agent. Code inside the sandbox runs as an unprivileged user,
// but the agent runs as root and would write /etc/passwd for anyone who
// asks; and any local user of the host can open a connection to a
// sandbox's address. So every request must
//   - come from outside: not from loopback nor from the sandbox's own
//     address (code inside connecting to its agent), and
//   - carry the sandbox's agent secret as a Bearer token (all but
//     /health), a secret the server derives per sandbox and the agent
//     reads from its own environment, which the sandbox user cannot read
//     and no code is given.
//
// A restored copy starts with its source's secret in memory; the server's
// /reseed, authenticated with that one, gives it its own.
//
// An agent started without a secret (its own unit tests, a local run by
// hand) lets everyone in: the server always gives one.
type guard struct {
	mu     sync.RWMutex
	secret string
}

func (g *guard) set(secret string) {
	g.mu.Lock()
	g.secret = secret
	g.mu.Unlock()
}

func (g *guard) check(r *http.Request) (status int, msg string) {
	g.mu.RLock()
	secret := g.secret
	g.mu.RUnlock()
	if secret == "" {
		return 0, ""
	}
	if fromInside(r) {
		return http.StatusUnauthorized, "the agent answers the Lizard server only, not code inside the sandbox; use the API (lizardToken)"
	}
	if r.URL.Path == "/health" {
		return 0, ""
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(secret)) != 1 {
		return http.StatusUnauthorized, "the agent answers the Lizard server only; call it through the API"
	}
	return 0, ""
}

// fromInside reports whether r came from the sandbox itself: over
// loopback, or from the address it was sent to.
func fromInside(r *http.Request) bool {
	remote, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(remote)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if host, _, err := net.SplitHostPort(local.String()); err == nil && net.ParseIP(host).Equal(ip) {
			return true
		}
	}
	return false
}

// guarded serves next to requests the guard lets in.
func (a *Agent) guarded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status, msg := a.guard.check(r); status != 0 {
			a.log.Warn("refused a request", "remote", r.RemoteAddr, "path", r.URL.Path, "status", status)
			writeError(w, status, api.CodeUnauthenticated, "%s", msg)
			return
		}
		next.ServeHTTP(w, r)
	})
}
