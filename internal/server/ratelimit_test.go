package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/inflight"
)

// TestKeyInFlight: a project has at most maxInFlight requests under way,
// all its keys together (each holds the server's file descriptors, a
// stream for hours), whatever their rate allows; one that ends makes
// room, and another project is not counted with it.
func TestKeyInFlight(t *testing.T) {
	l := &keyLimiter{lim: KeyLimits{}, inFlight: inflight.New(maxInFlight)} // no rate bound: only the requests under way
	release := make(chan struct{})
	var started sync.WaitGroup
	h := l.limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			started.Done()
			<-release
		}
	}), refuseNative)
	call := func(project, key, path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r = r.WithContext(auth.WithCaller(r.Context(), auth.Caller{ProjectID: project, KeyID: key}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	var done sync.WaitGroup
	started.Add(maxInFlight)
	for range maxInFlight {
		done.Add(1)
		go func() { defer done.Done(); call("p1", "key-a", "/hold") }()
	}
	started.Wait()
	if w := call("p1", "key-b", "/"); w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), `"code":"rate_limited","message":"project p1 has 1024 requests under way`) || w.Header().Get("Retry-After") == "" {
		t.Errorf("request %d of a project under way, with another of its keys: %d %q; want 429 naming the bound, with Retry-After", maxInFlight+1, w.Code, w.Body.String())
	}
	if w := call("p2", "key-c", "/"); w.Code != http.StatusOK {
		t.Errorf("another project: %d %q; want 200", w.Code, w.Body.String())
	}
	close(release)
	done.Wait()
	if w := call("p1", "key-a", "/"); w.Code != http.StatusOK {
		t.Errorf("once its requests ended: %d %q; want 200", w.Code, w.Body.String())
	}
	if n := l.inFlight.Keys(); n != 0 {
		t.Errorf("projects with requests under way once all ended: %d; want none kept", n)
	}
}
