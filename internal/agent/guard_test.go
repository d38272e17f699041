package agent

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestGuard(t *testing.T) {
	const secret = "s3cret"
	local := &net.TCPAddr{IP: net.ParseIP("169.254.9.2"), Port: 49983}
	tests := []struct {
		name, remote, path, auth string
		secret                   string
		want                     int
	}{
		{"server with the secret", "169.254.9.1:40000", "/files", "Bearer " + secret, secret, 0},
		{"server, health needs none", "169.254.9.1:40000", "/health", "", secret, 0},
		{"no secret", "169.254.9.1:40000", "/files", "", secret, 401},
		{"wrong secret", "169.254.9.1:40000", "/files", "Bearer nope", secret, 401},
		{"not bearer", "169.254.9.1:40000", "/files", secret, secret, 401},
		{"inside over loopback", "127.0.0.1:40000", "/files", "Bearer " + secret, secret, 401},
		{"inside over its own address", "169.254.9.2:40000", "/files", "Bearer " + secret, secret, 401},
		{"inside, even health", "127.0.0.1:40000", "/health", "", secret, 401},
		{"agent without a secret", "127.0.0.1:40000", "/files", "", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g guard
			g.set(tt.secret)
			r := httptest.NewRequest("GET", "http://agent"+tt.path, nil)
			r.RemoteAddr = tt.remote
			r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, net.Addr(local)))
			if tt.auth != "" {
				r.Header.Set("Authorization", tt.auth)
			}
			if got, msg := g.check(r); got != tt.want {
				t.Errorf("check = %d %q; want %d", got, msg, tt.want)
			}
		})
	}
}

// A copy's /reseed, authenticated with its source's secret, gives it its
// own: the source's no longer opens it.
func TestReseedReplacesSecret(t *testing.T) {
	ta := newTestAgent(t, func(c *Config) { c.Secret = "source" })
	call := func(method, path, secret, body string) int {
		r := httptest.NewRequest(method, "http://agent"+path, strings.NewReader(body))
		r.RemoteAddr = "169.254.9.1:40000" // the server, on the host side of the link
		r.Header.Set("Authorization", "Bearer "+secret)
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		ta.Handler().ServeHTTP(w, r)
		return w.Code
	}
	if got := call("GET", "/contexts", "source", ""); got != 200 {
		t.Fatalf("with the source's secret = %d; want 200", got)
	}
	if got := call("POST", "/reseed", "source", `{"sandboxId":"copy","secret":"copy-secret","keepSeeds":true}`); got != 204 {
		t.Fatalf("reseed = %d; want 204", got)
	}
	if got := call("GET", "/contexts", "source", ""); got != 401 {
		t.Errorf("source's secret after the reseed = %d; want 401", got)
	}
	if got := call("GET", "/contexts", "copy-secret", ""); got != 200 {
		t.Errorf("copy's own secret = %d; want 200", got)
	}
}
