package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
)

// fakeAgent records what reaches it.
type fakeAgent struct {
	mu      sync.Mutex
	auth    map[string][]string // path → Authorization headers seen
	healthy bool
	reseed  api.ReseedRequest
	env     []byte // GET /env's answer
}

func newClient(t *testing.T, a *fakeAgent) *Client {
	t.Helper()
	a.auth = map[string][]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.auth[r.URL.Path] = append(a.auth[r.URL.Path], r.Header.Get("Authorization"))
		switch r.URL.Path {
		case "/health":
			if !a.healthy {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		case api.AgentReadyPath:
			w.WriteHeader(http.StatusNoContent)
		case api.AgentReseedPath:
			json.NewDecoder(r.Body).Decode(&a.reseed)
			w.WriteHeader(http.StatusNoContent)
		case api.AgentEnvPath:
			w.Write(a.env)
		}
	}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	resolve := func(_ context.Context, id string) (string, error) {
		if id == "gone" {
			return "", errors.New("it has ended")
		}
		return addr, nil
	}
	return New(resolve, func(id string) string { return "secret-of-" + id }, nil)
}

func TestSecretOnEveryRequest(t *testing.T) {
	a := &fakeAgent{healthy: true}
	c := newClient(t, a)
	ctx := context.Background()
	if err := c.Ready(ctx, "sbx"); err != nil {
		t.Fatal(err)
	}
	// A copy's reseed carries its source's secret, and names its own.
	if err := c.Reseed(ctx, api.ReseedRequest{SandboxID: "sbx", Secret: "secret-of-sbx"}, "secret-of-src"); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if got := a.auth[api.AgentReadyPath]; len(got) != 1 || got[0] != "Bearer secret-of-sbx" {
		t.Errorf("ready sent %q; want the sandbox's own secret", got)
	}
	if got := a.auth[api.AgentReseedPath]; len(got) != 1 || got[0] != "Bearer secret-of-src" {
		t.Errorf("reseed sent %q; want the source's secret", got)
	}
	if a.reseed.Secret != "secret-of-sbx" || a.reseed.SandboxID != "sbx" {
		t.Errorf("reseed body = %+v", a.reseed)
	}
}

func TestWait(t *testing.T) {
	t.Run("answers", func(t *testing.T) {
		c := newClient(t, &fakeAgent{healthy: true})
		if err := c.Wait(context.Background(), "sbx", nil); err != nil {
			t.Errorf("Wait = %v", err)
		}
	})
	t.Run("sandbox stops", func(t *testing.T) {
		c := newClient(t, &fakeAgent{})
		stopped := errors.New("its runtime stopped")
		err := c.Wait(context.Background(), "sbx", func(context.Context) error { return stopped })
		if !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "its runtime stopped") {
			t.Errorf("Wait = %v; want ErrStopped naming why", err)
		}
	})
	t.Run("times out", func(t *testing.T) {
		c := newClient(t, &fakeAgent{})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := c.Wait(ctx, "sbx", nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait = %v; want the context's deadline", err)
		}
	})
	t.Run("unknown sandbox", func(t *testing.T) {
		c := newClient(t, &fakeAgent{healthy: true})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := c.Wait(ctx, "gone", nil); err == nil || !strings.Contains(err.Error(), "it has ended") {
			t.Errorf("Wait for an ended sandbox = %v; want the resolver's error", err)
		}
	})
}

// A restored agent is reseeded by the first request that reaches it; the
// ones refused before it listens are sent again, and a sandbox that stops
// ends the wait.
func TestReseedWhenUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens yet
	var got atomic.Int32
	c := New(func(context.Context, string) (string, error) { return addr, nil }, nil, nil)
	go func() {
		time.Sleep(100 * time.Millisecond)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got.Add(1)
			w.WriteHeader(http.StatusNoContent)
		})}
		t.Cleanup(func() { srv.Close() })
		srv.Serve(ln)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ReseedWhenUp(ctx, api.ReseedRequest{SandboxID: "sbx"}, "", nil); err != nil {
		t.Fatalf("ReseedWhenUp = %v", err)
	}
	if n := got.Load(); n != 1 {
		t.Errorf("the agent got %d reseeds; want exactly 1", n)
	}

	dead := New(func(context.Context, string) (string, error) { return "127.0.0.1:1", nil }, nil, nil)
	err = dead.ReseedWhenUp(ctx, api.ReseedRequest{SandboxID: "sbx"}, "", func(context.Context) error { return errors.New("its runtime stopped") })
	if !errors.Is(err, ErrStopped) {
		t.Errorf("ReseedWhenUp to a stopped sandbox = %v; want ErrStopped", err)
	}
}

// TestEnvBounded: the environment a pause keeping the disk alone saves is
// taken from the agent, which the sandbox's code may have replaced: an
// answer past MaxEnvBytes is refused (the pause fails, the sandbox runs
// on), not read whole.
func TestEnvBounded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    []byte
		want    []string
		wantErr bool
	}{
		{"its environment", []byte(`{"env":["A=1","B=2"]}`), []string{"A=1", "B=2"}, false},
		{"past the bound", []byte(`{"env":["A=` + strings.Repeat("x", MaxEnvBytes) + `"]}`), nil, true},
		{"not JSON", []byte("garbage"), nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, &fakeAgent{healthy: true, env: tc.body})
			got, err := c.Env(context.Background(), "sbx")
			if (err != nil) != tc.wantErr || strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("Env = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestAt: a wait under At dials the address its caller gave and never
// asks the resolver, however many attempts it makes (a node starting a
// sandbox read its row back from the store at each before); a request to
// another sandbox under the same context still resolves.
func TestAt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var healthy atomic.Bool
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	var resolved atomic.Int32
	c := New(func(context.Context, string) (string, error) {
		resolved.Add(1)
		return ln.Addr().String(), nil
	}, nil, nil)
	time.AfterFunc(100*time.Millisecond, func() { healthy.Store(true) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	known := At(ctx, "sbx", ln.Addr().String())
	if err := c.Wait(known, "sbx", nil); err != nil {
		t.Fatalf("Wait under At = %v", err)
	}
	c.CloseIdle() // the next request dials again
	if err := c.Wait(known, "sbx", nil); err != nil {
		t.Fatalf("Wait under At = %v", err)
	}
	if n := resolved.Load(); n != 0 {
		t.Errorf("the resolver was asked %d times under At; want 0", n)
	}
	if err := c.Wait(known, "other", nil); err != nil {
		t.Fatalf("Wait for another sandbox = %v", err)
	}
	if n := resolved.Load(); n != 1 {
		t.Errorf("the resolver was asked %d times for another sandbox; want 1", n)
	}
}
