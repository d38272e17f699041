package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sandbox/sandboxtest"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/version"
)

type testEnv struct {
	url    string
	key1   string // project p1
	key2   string // project p2
	rt     *sandboxtest.Fake
	c      *control.Control
	n      *node.Local
	agent  *fakeAgent
	broken atomic.Bool // agent address points at a closed port
}

// fakeAgent serves the agent paths the tests use.
type fakeAgent struct {
	srv *httptest.Server
	// release lets /execute write its second line.
	release chan struct{}
	// cancelled receives when a /files/mkdir request's context ends.
	cancelled chan struct{}
	// started receives when a /files/mkdir request arrives.
	started chan struct{}
	// die makes /execute drop its connection mid-stream, as an agent
	// that was killed does.
	die chan struct{}
}

func newFakeAgent(t *testing.T) *fakeAgent {
	a := &fakeAgent{release: make(chan struct{}), cancelled: make(chan struct{}, 1), started: make(chan struct{}, 1), die: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"status":"ok"}`)
	})
	mux.HandleFunc("POST /execute", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		enc.Encode(api.ExecuteEvent{Type: api.EventStdout, Text: "first\n"})
		http.NewResponseController(w).Flush()
		select {
		case <-a.release:
		case <-a.die:
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		case <-r.Context().Done():
			return
		}
		enc.Encode(api.ExecuteEvent{Type: api.EventEnd})
	})
	mux.HandleFunc("POST /files/mkdir", func(w http.ResponseWriter, r *http.Request) {
		a.started <- struct{}{}
		<-r.Context().Done()
		a.cancelled <- struct{}{}
	})
	// /process answers before it has read the request body, as an agent
	// that streams events while the body is still arriving may.
	mux.HandleFunc("POST /process", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "started\n")
		http.NewResponseController(w).Flush()
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "read %d\n", n)
	})
	echo := func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		json.NewEncoder(w).Encode(map[string]any{
			"method": r.Method, "path": r.URL.Path, "rawPath": r.URL.RawPath, "query": r.URL.RawQuery,
			"auth": r.Header.Get("Authorization"), "bytes": n,
		})
	}
	mux.HandleFunc("/files", echo)
	mux.HandleFunc("/contexts/{rest...}", echo)
	// Internal endpoints, which the API must never forward.
	for _, p := range []string{"/reseed", "/ready", "/echo", api.AgentHeapDumpPath, api.AgentHeapWaitPath} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "internal") })
	}
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

// newTestEnv serves p1 and p2 on the fake runtime; mutate changes the
// control plane's configuration (events, webhooks).
func newTestEnv(t *testing.T, mutate ...func(*control.Config)) *testEnv {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &testEnv{rt: sandboxtest.NewFake(), agent: newFakeAgent(t)}
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
	// A port nothing listens on, for the unreachable agent.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	ln.Close()

	logger := slog.New(slog.DiscardHandler)
	pool, _ := netns.NewPool(netns.DefaultPool)
	e.n, err = node.New(node.Config{
		Runtime: e.rt,
		Store:   st,
		Logger:  logger,
		Pool:    pool,
		Artifact: func(context.Context, string) (sandbox.Artifact, error) {
			return sandbox.Artifact{Name: "interpreter", Key: "k", RootFS: "/rootfs"}, nil
		},
		AgentAddr: func(string, string) string {
			if e.broken.Load() {
				return closed
			}
			return e.agent.srv.Listener.Addr().String()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ccfg := control.Config{Node: e.n, Store: st, Logger: logger}
	for _, m := range mutate {
		m(&ccfg)
	}
	e.c, err = control.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Config{Control: e.c, Keys: &auth.Verifier{Store: st, Logger: logger}, Logger: logger}))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

type response struct {
	status int
	body   string
	err    api.Error
}

func (e *testEnv) do(t *testing.T, key, method, path string, body io.Reader) response {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := response{status: resp.StatusCode, body: string(b)}
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(b, &r.err); err != nil || r.err.Code == "" || r.err.Message == "" {
			t.Errorf("%s %s: %d error body %q is not an api.Error", method, path, resp.StatusCode, b)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: error Content-Type %q; want application/json", method, path, ct)
		}
	}
	return r
}

func (e *testEnv) create(t *testing.T, key, body string) api.Sandbox {
	t.Helper()
	r := e.do(t, key, "POST", "/v1/sandboxes", strings.NewReader(body))
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s; want 201", r.status, r.body)
	}
	var sb api.Sandbox
	if err := json.Unmarshal([]byte(r.body), &sb); err != nil {
		t.Fatal(err)
	}
	return sb
}

func TestHealthNeedsNoKey(t *testing.T) {
	e := newTestEnv(t)
	r := e.do(t, "", "GET", "/v1/health", nil)
	if r.status != 200 || !strings.Contains(r.body, `"status":"ok"`) {
		t.Fatalf("health = %d %s; want 200 ok", r.status, r.body)
	}
	// It names the server's version, as `lizard version` does the CLI's.
	if want := `"version":"` + version.Version + `"`; !strings.Contains(r.body, want) {
		t.Errorf("health = %s; want it to hold %s", r.body, want)
	}
}

func TestUnauthenticatedIdentical(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(t, e.key1, `{}`)
	k, _ := auth.Parse(e.key1)
	wrong := auth.Key{ID: k.ID, Secret: strings.Repeat("a", 64)}.String()
	paths := []struct{ method, path, body string }{
		{"POST", "/v1/sandboxes", `{"timeoutMs": "not json at all`}, // auth before body parsing
		{"GET", "/v1/sandboxes", ""},
		{"GET", "/v1/sandboxes/" + sb.SandboxID, ""},
		{"DELETE", "/v1/sandboxes/" + sb.SandboxID, ""},
		{"POST", "/v1/sandboxes/" + sb.SandboxID + "/timeout", `{"timeoutMs":1}`},
		{"POST", "/v1/sandboxes/" + sb.SandboxID + "/execute", `{"code":"1"}`},
		{"GET", "/v1/sandboxes/nonexistent/files?path=x", ""},
	}
	headers := map[string]string{
		"missing":      "",
		"not bearer":   "Basic " + e.key1,
		"malformed":    "Bearer lz_zz",
		"unknown":      "Bearer lz_00000000_" + strings.Repeat("0", 64),
		"wrong secret": "Bearer " + wrong,
	}
	var first string
	for name, h := range headers {
		for _, p := range paths {
			req, _ := http.NewRequest(p.method, e.url+p.path, strings.NewReader(p.body))
			if h != "" {
				req.Header.Set("Authorization", h)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 401 {
				t.Errorf("%s: %s %s = %d; want 401", name, p.method, p.path, resp.StatusCode)
			}
			if first == "" {
				first = string(b)
			}
			if string(b) != first {
				t.Errorf("%s: %s %s body %q differs from %q", name, p.method, p.path, b, first)
			}
		}
	}
	if !strings.Contains(first, `"code":"unauthenticated"`) || !strings.Contains(first, "lizard admin create-project") {
		t.Errorf("401 body = %s", first)
	}
	if !e.rt.IsRunning(sb.SandboxID) {
		t.Error("an unauthenticated DELETE killed the sandbox")
	}
}

func TestLifecycle(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(t, e.key1, `{"timeoutMs": 60000, "metadata": {"user": "u1"}, "envs": {"SECRET": "s"}}`)
	if sb.State != api.StateRunning || sb.ProjectID != "p1" || sb.ExpiresAt == nil || sb.Metadata["user"] != "u1" {
		t.Fatalf("created = %+v", sb)
	}
	r := e.do(t, e.key1, "GET", "/v1/sandboxes/"+sb.SandboxID, nil)
	if r.status != 200 || strings.Contains(r.body, "SECRET") {
		t.Fatalf("get = %d %s; want 200 without envs", r.status, r.body)
	}
	e.create(t, e.key1, `{"metadata": {"user": "u2"}}`)
	r = e.do(t, e.key1, "GET", "/v1/sandboxes?metadata=user=u1&state=running", nil)
	var list api.SandboxList
	json.Unmarshal([]byte(r.body), &list)
	if r.status != 200 || len(list.Sandboxes) != 1 || list.Sandboxes[0].SandboxID != sb.SandboxID {
		t.Fatalf("list = %d %s; want just %s", r.status, r.body, sb.SandboxID)
	}
	if r := e.do(t, e.key1, "GET", "/v1/sandboxes?metadata=nokv", nil); r.status != 400 || !strings.Contains(r.err.Message, "key=value") {
		t.Errorf("list with a bad metadata filter = %d %s; want 400", r.status, r.body)
	}
	if r := e.do(t, e.key2, "GET", "/v1/sandboxes", nil); r.status != 200 || strings.Contains(r.body, sb.SandboxID) {
		t.Errorf("p2's list = %s; want no p1 sandbox", r.body)
	}

	r = e.do(t, e.key1, "POST", "/v1/sandboxes/"+sb.SandboxID+"/timeout", strings.NewReader(`{"timeoutMs": 0}`))
	if r.status != 200 || strings.Contains(r.body, "expiresAt") {
		t.Errorf("set timeout 0 = %d %s; want 200 without expiresAt", r.status, r.body)
	}
	if r := e.do(t, e.key1, "POST", "/v1/sandboxes/"+sb.SandboxID+"/timeout", strings.NewReader(`{}`)); r.status != 400 || !strings.Contains(r.err.Message, "timeoutMs is required") {
		t.Errorf("set timeout without timeoutMs = %d %s; want 400", r.status, r.body)
	}

	if r := e.do(t, e.key1, "DELETE", "/v1/sandboxes/"+sb.SandboxID, nil); r.status != 204 {
		t.Fatalf("delete = %d %s; want 204", r.status, r.body)
	}
	if r := e.do(t, e.key1, "DELETE", "/v1/sandboxes/"+sb.SandboxID, nil); r.status != 204 {
		t.Errorf("second delete = %d %s; want 204", r.status, r.body)
	}
	r = e.do(t, e.key1, "GET", "/v1/sandboxes/"+sb.SandboxID, nil)
	if r.status != 200 || !strings.Contains(r.body, `"state":"killed"`) || !strings.Contains(r.body, "endedAt") {
		t.Errorf("get after kill = %d %s; want 200 killed", r.status, r.body)
	}
	for _, p := range []struct{ method, path, body string }{
		{"POST", "/execute", `{"code":"1"}`},
		{"GET", "/files?path=a", ""},
		{"POST", "/timeout", `{"timeoutMs": 1000}`},
	} {
		r := e.do(t, e.key1, p.method, "/v1/sandboxes/"+sb.SandboxID+p.path, strings.NewReader(p.body))
		if r.status != 410 || r.err.Code != api.CodeGone || !strings.Contains(r.err.Message, "was killed at") || !strings.Contains(r.err.Message, "create a new sandbox") {
			t.Errorf("%s %s after kill = %d %s; want 410 gone", p.method, p.path, r.status, r.body)
		}
	}
}

func TestCrossProjectIsNotFound(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(t, e.key1, `{}`)
	for _, p := range []struct{ method, suffix, body string }{
		{"GET", "", ""},
		{"DELETE", "", ""},
		{"POST", "/timeout", `{"timeoutMs": 5}`},
		{"POST", "/execute", `{"code":"1"}`},
		{"GET", "/files?path=x", ""},
	} {
		other := e.do(t, e.key2, p.method, "/v1/sandboxes/"+sb.SandboxID+p.suffix, strings.NewReader(p.body))
		missing := e.do(t, e.key2, p.method, "/v1/sandboxes/missing"+p.suffix, strings.NewReader(p.body))
		if other.status != 404 || other.err.Code != api.CodeNotFound {
			t.Errorf("%s %s from another project = %d %s; want 404", p.method, p.suffix, other.status, other.body)
		}
		if strings.ReplaceAll(other.body, sb.SandboxID, "X") != strings.ReplaceAll(missing.body, "missing", "X") {
			t.Errorf("%s %s: another project's sandbox %q differs from a missing one %q", p.method, p.suffix, other.body, missing.body)
		}
	}
	if !e.rt.IsRunning(sb.SandboxID) {
		t.Error("another project's DELETE killed the sandbox")
	}
}

func TestBadRequests(t *testing.T) {
	e := newTestEnv(t)
	big := `{"metadata": {"a": "` + strings.Repeat("x", MaxJSONBody) + `"}}`
	tests := []struct {
		name, body string
		status     int
		code, want string
	}{
		{"malformed", `{"timeoutMs": `, 400, api.CodeInvalidArgument, "malformed JSON"},
		{"syntax", `{"timeoutMs": 5,}`, 400, api.CodeInvalidArgument, "malformed JSON at byte"},
		{"string for number", `{"timeoutMs": "5000"}`, 400, api.CodeInvalidArgument, `field "timeoutMs" must be an integer, not a string`},
		{"float for integer", `{"timeoutMs": 1.5}`, 400, api.CodeInvalidArgument, `field "timeoutMs" must be an integer, not the number 1.5`},
		{"number in metadata", `{"metadata": {"a": 1}}`, 400, api.CodeInvalidArgument, `values in field "metadata" must be strings, not a number`},
		{"array for map", `{"envs": []}`, 400, api.CodeInvalidArgument, `field "envs" must be an object of strings, not an array`},
		{"bool for template", `{"template": true}`, 400, api.CodeInvalidArgument, `field "template" must be a string, not a boolean`},
		{"array body", `[1]`, 400, api.CodeInvalidArgument, "must be a JSON object, not an array"},
		{"unknown field", `{"timeout_ms": 5}`, 400, api.CodeInvalidArgument, `unknown field "timeout_ms" in the request body; known fields: template, timeoutMs, envs, metadata, lizardToken`},
		{"two values", `{} {}`, 400, api.CodeInvalidArgument, "more than one JSON value"},
		{"unknown template", `{"template": "x"}`, 404, api.CodeNotFound, `template "x" not found in project p1: build it first`},
		{"template reference", `{"template": "x@0123456789abcdef"}`, 400, api.CodeInvalidArgument, `name "x@0123456789abcdef"`},
		{"empty template", `{"template": ""}`, 400, api.CodeInvalidArgument, "template is empty"},
		{"negative timeout", `{"timeoutMs": -5}`, 400, api.CodeInvalidArgument, "out of range"},
		{"bad env", `{"envs": {"A=B": "c"}}`, 400, api.CodeInvalidArgument, `env name "A=B"`},
		{"oversized", big, 413, api.CodeTooLarge, "1 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(t, e.key1, "POST", "/v1/sandboxes", strings.NewReader(tt.body))
			if r.status != tt.status || r.err.Code != tt.code || !strings.Contains(r.err.Message, tt.want) {
				t.Errorf("got %d %s; want %d %s containing %q", r.status, r.body, tt.status, tt.code, tt.want)
			}
		})
	}
	if n := e.rt.Running(); n != 0 {
		t.Errorf("%d sandboxes started by bad requests", n)
	}
	// An empty body is the defaults.
	e.create(t, e.key1, "")

	if r := e.do(t, e.key1, "PUT", "/v1/sandboxes", nil); r.status != 405 {
		t.Errorf("PUT /v1/sandboxes = %d; want 405", r.status)
	}
	if r := e.do(t, e.key1, "GET", "/v2/nothing", nil); r.status != 404 {
		t.Errorf("GET /v2/nothing = %d; want 404", r.status)
	}
}

func TestProxy(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(t, e.key1, `{}`)
	base := "/v1/sandboxes/" + sb.SandboxID

	// Path rewritten, query kept, key not passed on, upload not bound by
	// the JSON limit.
	upload := bytes.Repeat([]byte("z"), 3*MaxJSONBody)
	r := e.do(t, e.key1, "PUT", base+"/contexts/a%2Fb?path=x%20y&n=1", bytes.NewReader(upload))
	var echo map[string]any
	json.Unmarshal([]byte(r.body), &echo)
	if r.status != 200 || echo["path"] != "/contexts/a/b" || echo["rawPath"] != "/contexts/a%2Fb" || echo["query"] != "path=x%20y&n=1" ||
		echo["auth"] != "" || echo["bytes"] != float64(len(upload)) || echo["method"] != "PUT" {
		t.Errorf("echo = %d %v; want path /contexts/a/b, query kept, no auth, %d bytes", r.status, echo, len(upload))
	}

	// An unreachable agent is a 502. Connections kept alive from the calls
	// above are dropped first, as a dead agent's would be.
	e.broken.Store(true)
	e.c.Transport().(interface{ CloseIdleConnections() }).CloseIdleConnections()
	r = e.do(t, e.key1, "GET", base+"/files?path=x", nil)
	e.broken.Store(false)
	if r.status != 502 || r.err.Code != api.CodeBadGateway {
		t.Errorf("unreachable agent = %d %s; want 502 bad_gateway", r.status, r.body)
	}

	// Only the agent paths the spec lists are forwarded: the agent's
	// internal endpoints are not part of the API.
	for _, p := range []struct{ method, path string }{
		{"POST", "/reseed"}, {"GET", "/ready"}, {"GET", "/echo"}, {"GET", "/reseed/x"},
		// Sharing the heap: a user who reached it could start a dump
		// (a template's agent) or learn the sandbox shared one.
		{"POST", api.AgentHeapDumpPath}, {"POST", api.AgentHeapWaitPath}, {"GET", "/heap"},
	} {
		if r := e.do(t, e.key1, p.method, base+p.path, nil); r.status != 404 || r.err.Code != api.CodeNotFound {
			t.Errorf("%s %s = %d %s; want 404 not_found", p.method, p.path, r.status, r.body)
		}
	}
}

// The proxy keeps forwarding the request body after the agent's response
// has begun (full duplex); otherwise the agent connection is cut mid-stream.
func TestProxyFullDuplex(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(t, e.key1, `{}`)
	body := bytes.Repeat([]byte("b"), 4<<20)
	for range 5 {
		r := e.do(t, e.key1, "POST", "/v1/sandboxes/"+sb.SandboxID+"/process", bytes.NewReader(body))
		if want := fmt.Sprintf("started\nread %d\n", len(body)); r.status != 200 || r.body != want {
			t.Fatalf("early answer = %d %q; want 200 %q", r.status, r.body, want)
		}
	}
}

func TestProxyStreams(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(t, e.key1, `{}`)
	resp := e.postExecute(t, sb.SandboxID)
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("Content-Type = %q; want application/x-ndjson", ct)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// The agent holds its last line until the test has the first: a
	// buffering proxy would stall here.
	select {
	case l := <-lines:
		if !strings.Contains(l, `"first\n"`) {
			t.Fatalf("first line = %q", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("first NDJSON line not received before the last was sent: the proxy buffers")
	}
	close(e.agent.release)
	if l := <-lines; !strings.Contains(l, `"type":"end"`) {
		t.Errorf("second line = %q; want the end event", l)
	}
}

func TestProxyClientDisconnectCancelsAgent(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(t, e.key1, `{}`)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/sandboxes/"+sb.SandboxID+"/files/mkdir", nil)
	req.Header.Set("Authorization", "Bearer "+e.key1)
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case <-e.agent.started:
	case <-time.After(5 * time.Second):
		t.Fatal("request never reached the agent")
	}
	cancel()
	select {
	case <-e.agent.cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the agent's request was not cancelled when the client went away")
	}
	<-done
}

func TestRunShutsDownWithoutKilling(t *testing.T) {
	e := newTestEnv(t)
	e.create(t, e.key1, `{}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, ln, New(Config{Control: e.c, Keys: &auth.Verifier{}, Logger: slog.New(slog.DiscardHandler)}), slog.New(slog.DiscardHandler))
	}()
	resp, err := http.Get(fmt.Sprintf("http://%s/v1/health", ln.Addr()))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health on Run's listener: %v", err)
	}
	resp.Body.Close()
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("Run = %v; want nil after a graceful shutdown", err)
		}
	case <-time.After(ShutdownTimeout + 5*time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if n := e.rt.Kills(); n != 0 {
		t.Errorf("shutdown killed %d sandboxes; want none", n)
	}
}

// TestTemplateRequests checks the template calls' answers that need no
// build: the request's rules, and a server without a builder.
func TestTemplateRequests(t *testing.T) {
	e := newTestEnv(t)
	tests := []struct {
		name, method, path, body string
		status                   int
		code, want               string
	}{
		{"no recipe", "POST", "/v1/templates", `{"name": "a"}`, 400, api.CodeInvalidArgument, "recipe is required"},
		{"empty workdir", "POST", "/v1/templates", `{"name": "a", "recipe": {"workdir": ""}}`, 400, api.CodeInvalidArgument, "recipe.workdir is empty"},
		{"empty user", "POST", "/v1/templates", `{"name": "a", "recipe": {"run": [{"cmd": "x", "user": ""}]}}`, 400, api.CodeInvalidArgument, "recipe.run[0].user is empty"},
		{"step of two kinds, one empty", "POST", "/v1/templates", `{"name": "a", "recipe": {"steps": [{"run": {"cmd": "x"}, "user": ""}]}}`, 400, api.CodeInvalidArgument, "recipe.steps[0] has 2 kinds"},
		{"step of no kind", "POST", "/v1/templates", `{"name": "a", "recipe": {"steps": [{"workdir": "/a"}, {}]}}`, 400, api.CodeInvalidArgument, "recipe.steps[1] has 0 kinds"},
		{"empty step run user", "POST", "/v1/templates", `{"name": "a", "recipe": {"steps": [{"run": {"cmd": "x", "user": ""}}]}}`, 400, api.CodeInvalidArgument, "recipe.steps[0].run.user is empty"},
		{"step user not Lizard's", "POST", "/v1/templates", `{"name": "a", "recipe": {"steps": [{"user": "www-data"}]}}`, 400, api.CodeInvalidArgument, `recipe.steps[0].user "www-data"`},
		{"bad name", "POST", "/v1/templates", `{"name": "A_b", "recipe": {}}`, 400, api.CodeInvalidArgument, `name "A_b"`},
		{"unknown field", "POST", "/v1/templates", `{"name": "a", "recipe": {"pips": []}}`, 400, api.CodeInvalidArgument, `unknown field "pips"`},
		{"no builder", "POST", "/v1/templates", `{"name": "a", "recipe": {}}`, 503, api.CodeUnavailable, "builds no custom templates"},
		{"get unknown", "GET", "/v1/templates/nope", ``, 404, api.CodeNotFound, `template "nope" not found in project p1`},
		{"delete unknown", "DELETE", "/v1/templates/nope", ``, 404, api.CodeNotFound, `template "nope" not found`},
		{"wrong method", "PUT", "/v1/templates", `{}`, 405, api.CodeMethodNotAllowed, "PUT is not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(t, e.key1, tt.method, tt.path, strings.NewReader(tt.body))
			if r.status != tt.status || r.err.Code != tt.code || !strings.Contains(r.err.Message, tt.want) {
				t.Errorf("%s %s = %d %s; want %d %s containing %q", tt.method, tt.path, r.status, r.body, tt.status, tt.code, tt.want)
			}
		})
	}
	r := e.do(t, e.key1, "GET", "/v1/templates", nil)
	if r.status != 200 || strings.TrimSpace(r.body) != `{"templates":[]}` {
		t.Errorf("GET /v1/templates = %d %s; want an empty list", r.status, r.body)
	}
}
