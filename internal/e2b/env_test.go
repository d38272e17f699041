package e2b_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/e2b"
	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sandbox/sandboxtest"
	"github.com/lizard-build/lizard/internal/server"
	"github.com/lizard-build/lizard/internal/store"
)

// env is a server with the E2B surface over a fake runtime, whose
// sandboxes' agent is agent (a fake the test writes).
type env struct {
	url  string
	key1 string // project p1
	key2 string // project p2
	c    *control.Control
	st   *store.Store
	n    *node.Local // its Reap stands in for the reaper, which no test runs
}

func newEnv(t *testing.T, agent http.Handler, envd http.Handler) *env {
	t.Helper()
	return newEnvLimits(t, agent, envd, server.KeyLimits{})
}

// newEnvLimits is newEnv with each key's request rate bounded by lim.
func newEnvLimits(t *testing.T, agent http.Handler, envd http.Handler, lim server.KeyLimits, opts ...envOption) *env {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{st: st}
	for i, p := range []string{"p1", "p2"} {
		if err := st.CreateProject(ctx, p, time.Now()); err != nil {
			t.Fatal(err)
		}
		k, err := auth.Create(ctx, st, p, "")
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			e.key1 = k.String()
		} else {
			e.key2 = k.String()
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"status":"ok"}`) })
	// A fork's or a snapshot's copy is given its identity.
	mux.HandleFunc("POST "+api.AgentReseedPath, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	if agent != nil {
		mux.Handle("/", agent)
	}
	as := httptest.NewServer(mux)
	t.Cleanup(as.Close)
	logger := slog.New(slog.DiscardHandler)
	pool, _ := netns.NewPool(netns.DefaultPool)
	n, err := node.New(node.Config{
		Runtime: sandboxtest.NewFake(), Store: st, Logger: logger, Pool: pool, DataDir: t.TempDir(),
		Artifact: func(_ context.Context, name string) (sandbox.Artifact, error) {
			return sandbox.Artifact{Name: name, Key: "k", RootFS: "/rootfs"}, nil
		},
		AgentAddr: func(string, string) string { return as.Listener.Addr().String() },
	})
	if err != nil {
		t.Fatal(err)
	}
	e.n = n
	cc, ec := control.Config{Node: n, Store: st, Logger: logger, PortsKey: []byte("test ports key")}, e2b.Config{Envd: envd}
	for _, o := range opts {
		o(&cc, &ec)
	}
	e.c, err = control.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.New(server.Config{Control: e.c, Keys: &auth.Verifier{Store: st, Logger: logger}, Logger: logger,
		KeyLimits: lim, E2B: &ec}))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

// envOption sets what a test needs of the control plane or the E2B
// surface.
type envOption func(*control.Config, *e2b.Config)

type response struct {
	status int
	header http.Header
	body   string
}

// do sends a request with headers (name, value, ...) and reads the
// answer; an error answer must be E2B's {code, message} with code the
// status.
func (e *env) do(t *testing.T, method, path, body string, headers ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 {
		var er struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(b, &er); err != nil || er.Code != resp.StatusCode || er.Message == "" {
			t.Errorf("%s %s: %d error body %q is not E2B's {code, message}", method, path, resp.StatusCode, b)
		}
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// createNative makes a sandbox through the native API.
func (e *env) createNative(t *testing.T, key string) api.Sandbox {
	t.Helper()
	req, _ := http.NewRequest("POST", e.url+"/v1/sandboxes", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb api.Sandbox
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	json.NewDecoder(resp.Body).Decode(&sb)
	return sb
}
