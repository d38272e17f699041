package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/pykernel"
)

// fakeKernel is a Kernel whose behaviour each test sets with function fields.
type fakeKernel struct {
	cfg     pykernel.Config
	restart func(ctx context.Context) error

	mu       sync.Mutex
	execute  func(ctx context.Context, req pykernel.Request, emit func(api.ExecuteEvent)) error
	restarts int
	closed   bool
}

func (k *fakeKernel) setExecute(f func(ctx context.Context, req pykernel.Request, emit func(api.ExecuteEvent)) error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.execute = f
}

func (k *fakeKernel) Execute(ctx context.Context, req pykernel.Request, emit func(api.ExecuteEvent)) error {
	k.mu.Lock()
	execute := k.execute
	k.mu.Unlock()
	if execute != nil {
		return execute(ctx, req, emit)
	}
	// By default: echo the code to stdout, return it as a result.
	emit(api.ExecuteEvent{Type: api.EventStdout, Text: req.Code})
	emit(api.ExecuteEvent{Type: api.EventResult, Result: &api.Result{Type: api.ResultTypeResult, Mime: "text/plain", Data: "'" + k.cfg.Cwd + "'"}})
	emit(api.ExecuteEvent{Type: api.EventEnd, ExecutionCount: 1})
	return nil
}

func (k *fakeKernel) Restart(ctx context.Context) error {
	k.mu.Lock()
	k.restarts++
	k.mu.Unlock()
	if k.restart != nil {
		return k.restart(ctx)
	}
	return nil
}

func (k *fakeKernel) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	return nil
}

// kernels records the fake kernels an agent started.
type kernels struct {
	mu   sync.Mutex
	all  []*fakeKernel
	make func(cfg pykernel.Config) (*fakeKernel, error) // nil: a default fakeKernel
}

func (ks *kernels) start(ctx context.Context, cfg pykernel.Config) (Kernel, error) {
	k := &fakeKernel{cfg: cfg}
	if ks.make != nil {
		var err error
		if k, err = ks.make(cfg); err != nil {
			return nil, err
		}
	}
	ks.mu.Lock()
	ks.all = append(ks.all, k)
	ks.mu.Unlock()
	return k, nil
}

func (ks *kernels) list() []*fakeKernel {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return append([]*fakeKernel(nil), ks.all...)
}

type testAgent struct {
	*Agent
	url     string
	home    string
	kernels *kernels
}

// newTestAgent serves an agent over a real loopback HTTP server, running
// code as the current user in a temporary home, with fake Python kernels.
func newTestAgent(t *testing.T, edit func(*Config)) *testAgent {
	t.Helper()
	return newTestAgentKernels(t, &kernels{}, edit)
}

// newTestAgentKernels is newTestAgent with fake kernels made by ks.
func newTestAgentKernels(t *testing.T, ks *kernels, edit func(*Config)) *testAgent {
	t.Helper()
	home := t.TempDir()
	cfg := Config{
		Home:        home,
		RuntimeDir:  t.TempDir(),
		Env:         []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SANDBOX_VAR=from-sandbox", "LIZARD_AGENT_SECRET=x"},
		Python:      "/opt/lizard/venv/bin/python",
		StartKernel: ks.start,
		Version:     "test",
	}
	if edit != nil {
		edit(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() {
		srv.Close()
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &testAgent{Agent: a, url: srv.URL, home: home, kernels: ks}
}

// do sends a request with a JSON body (or raw bytes/reader) and returns the
// status and the whole response body.
func (ta *testAgent) do(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	resp := ta.send(t, context.Background(), method, path, body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp.StatusCode, b
}

func (ta *testAgent) send(t *testing.T, ctx context.Context, method, path string, body any) *http.Response {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	case string:
		r = strings.NewReader(b)
	case io.Reader:
		r = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, ta.url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	switch body.(type) {
	case nil, []byte, string, io.Reader:
	default:
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// getJSON does a request and decodes a 2xx JSON answer into v.
func (ta *testAgent) json(t *testing.T, method, path string, body, v any, wantStatus int) {
	t.Helper()
	status, b := ta.do(t, method, path, body)
	if status != wantStatus {
		t.Fatalf("%s %s: status %d, want %d; body %s", method, path, status, wantStatus, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s %s: decoding %s: %v", method, path, b, err)
		}
	}
}

// execution is an /execute stream folded up the way the SDKs fold it.
type execution struct {
	events  []api.ExecuteEvent
	stdout  string
	stderr  string
	results []api.Result
	err     *api.ExecutionError
	ended   bool
}

func (ta *testAgent) execute(t *testing.T, req api.ExecuteRequest) execution {
	t.Helper()
	resp := ta.send(t, context.Background(), "POST", "/execute", req)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /execute: status %d, body %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("Content-Type = %q, want application/x-ndjson", ct)
	}
	var ex execution
	var out, errOut strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev api.ExecuteEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("decoding event %q: %v", sc.Text(), err)
		}
		if ex.ended {
			t.Errorf("event %+v after end", ev)
		}
		ex.events = append(ex.events, ev)
		switch ev.Type {
		case api.EventStdout:
			out.WriteString(ev.Text)
		case api.EventStderr:
			errOut.WriteString(ev.Text)
		case api.EventResult:
			ex.results = append(ex.results, *ev.Result)
		case api.EventError:
			ex.err = ev.Error
		case api.EventEnd:
			ex.ended = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading stream: %v", err)
	}
	if !ex.ended {
		t.Errorf("stream ended without an end event: %+v", ex.events)
	}
	ex.stdout, ex.stderr = out.String(), errOut.String()
	return ex
}

func i64(n int64) *int64 { return &n }

func TestHealth(t *testing.T) {
	ta := newTestAgent(t, nil)
	var h api.Health
	ta.json(t, "GET", "/health", nil, &h, http.StatusOK)
	if h.Status != "ok" || h.Version != "test" {
		t.Errorf("health = %+v, want status ok, version test", h)
	}
}

func TestBadRequests(t *testing.T) {
	ta := newTestAgent(t, func(c *Config) {
		c.MaxRequestBytes = 1 << 10
		c.MaxFileBytes = 1 << 10
	})
	if err := writeTestFile(ta.home+"/afile", []byte("x")); err != nil {
		t.Fatal(err)
	}
	var ctx api.Context
	ta.json(t, "POST", "/contexts", api.CreateContextRequest{Language: "bash"}, &ctx, http.StatusCreated)

	tests := []struct {
		name         string
		method, path string
		body         any
		status       int
		code         string
		msgPrefix    string
	}{
		{"execute bad json", "POST", "/execute", "{", 400, api.CodeInvalidArgument, "body:"},
		{"execute empty body", "POST", "/execute", nil, 400, api.CodeInvalidArgument, "body:"},
		{"execute wrong type", "POST", "/execute", `{"code": 5}`, 400, api.CodeInvalidArgument, "code:"},
		{"execute unknown language", "POST", "/execute", api.ExecuteRequest{Code: "x", Language: "cobol"}, 400, api.CodeInvalidArgument, "language:"},
		{"execute negative timeout", "POST", "/execute", api.ExecuteRequest{Code: "x", TimeoutMs: i64(-1)}, 400, api.CodeInvalidArgument, "timeoutMs:"},
		{"execute bad env name", "POST", "/execute", api.ExecuteRequest{Code: "x", Envs: map[string]string{"A=B": "c"}}, 400, api.CodeInvalidArgument, "envs:"},
		{"execute unknown context", "POST", "/execute", api.ExecuteRequest{Code: "x", ContextID: "nope"}, 404, api.CodeNotFound, "context"},
		{"execute language mismatch", "POST", "/execute", api.ExecuteRequest{Code: "x", ContextID: ctx.ID, Language: "python"}, 400, api.CodeInvalidArgument, "language:"},
		{"execute too large", "POST", "/execute", api.ExecuteRequest{Code: strings.Repeat("x", 2<<10)}, 413, api.CodeTooLarge, ""},
		{"execute wrong method", "GET", "/execute", nil, 405, api.CodeMethodNotAllowed, "method"},
		{"unknown path", "GET", "/nope", nil, 404, api.CodeNotFound, ""},
		{"context bad language", "POST", "/contexts", api.CreateContextRequest{Language: "cobol"}, 400, api.CodeInvalidArgument, "language:"},
		{"context missing cwd", "POST", "/contexts", api.CreateContextRequest{Cwd: "/does/not/exist"}, 400, api.CodeInvalidArgument, "cwd:"},
		{"context cwd is a file", "POST", "/contexts", api.CreateContextRequest{Cwd: "afile"}, 400, api.CodeInvalidArgument, "cwd:"},
		{"delete unknown context", "DELETE", "/contexts/nope", nil, 404, api.CodeNotFound, ""},
		{"delete default context", "DELETE", "/contexts/default-python", nil, 400, api.CodeInvalidArgument, "id:"},
		{"restart unknown context", "POST", "/contexts/nope/restart", nil, 404, api.CodeNotFound, ""},
		{"restart wrong method", "GET", "/contexts/x/restart", nil, 405, api.CodeMethodNotAllowed, ""},
		{"process no command", "POST", "/process", api.ProcessRequest{}, 400, api.CodeInvalidArgument, "cmd:"},
		{"process both", "POST", "/process", api.ProcessRequest{Cmd: "true", Args: []string{"true"}}, 400, api.CodeInvalidArgument, "cmd:"},
		{"process empty program", "POST", "/process", api.ProcessRequest{Args: []string{""}}, 400, api.CodeInvalidArgument, "args:"},
		{"process missing cwd", "POST", "/process", api.ProcessRequest{Cmd: "true", Cwd: "/does/not/exist"}, 400, api.CodeInvalidArgument, "cwd:"},
		{"process negative timeout", "POST", "/process", api.ProcessRequest{Cmd: "true", TimeoutMs: i64(-5)}, 400, api.CodeInvalidArgument, "timeoutMs:"},
		{"read empty path", "GET", "/files?path=", nil, 400, api.CodeInvalidArgument, "path:"},
		{"read NUL path", "GET", "/files?path=a%00b", nil, 400, api.CodeInvalidArgument, "path:"},
		{"read missing", "GET", "/files?path=missing", nil, 404, api.CodeNotFound, ""},
		{"read directory", "GET", "/files?path=/tmp", nil, 400, api.CodeInvalidArgument, "path:"},
		{"write onto directory", "PUT", "/files?path=/tmp", "x", 400, api.CodeInvalidArgument, "path:"},
		{"write too large", "PUT", "/files?path=big", strings.Repeat("x", 2<<10), 413, api.CodeTooLarge, ""},
		{"write under a file", "PUT", "/files?path=afile/b", "x", 400, api.CodeInvalidArgument, "path:"},
		{"delete missing", "DELETE", "/files?path=missing", nil, 404, api.CodeNotFound, ""},
		{"list missing", "GET", "/files/list?path=missing", nil, 404, api.CodeNotFound, ""},
		{"list a file", "GET", "/files/list?path=afile", nil, 400, api.CodeInvalidArgument, "path:"},
		{"stat missing", "GET", "/files/stat?path=missing", nil, 404, api.CodeNotFound, ""},
		{"mkdir under a file", "POST", "/files/mkdir?path=afile/sub", nil, 400, api.CodeInvalidArgument, "path:"},
		{"files wrong method", "POST", "/files?path=x", nil, 405, api.CodeMethodNotAllowed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, b := ta.do(t, tt.method, tt.path, tt.body)
			if status != tt.status {
				t.Fatalf("status = %d, want %d; body %s", status, tt.status, b)
			}
			var e api.Error
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("body %q is not an api.Error: %v", b, err)
			}
			if e.Code != tt.code || !strings.HasPrefix(e.Message, tt.msgPrefix) {
				t.Errorf("error = %+v, want code %s and message starting %q", e, tt.code, tt.msgPrefix)
			}
		})
	}
	// A failed upload leaves nothing behind.
	var list api.EntryList
	ta.json(t, "GET", "/files/list?path=.", nil, &list, http.StatusOK)
	if len(list.Entries) != 1 || list.Entries[0].Name != "afile" {
		t.Errorf("home holds %+v, want only afile", list.Entries)
	}
}

// defaultKernel waits for the default Python context's fake kernel.
func (ta *testAgent) defaultKernel(t *testing.T) *fakeKernel {
	t.Helper()
	c := ta.contexts[defaultContextID(langPython)]
	k, err := ta.kernel(context.Background(), c)
	if err != nil {
		t.Fatalf("starting default kernel: %v", err)
	}
	return k.(*fakeKernel)
}
