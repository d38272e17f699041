package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
)

// fake is an API server that records the last request and answers with a
// fixed status and body.
type fake struct {
	status      int
	contentType string
	body        string

	// What the last request was.
	method, path, query, auth, reqType string
	reqBody                            []byte
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.method, f.path, f.query = r.Method, r.URL.EscapedPath(), r.URL.RawQuery
	f.auth, f.reqType = r.Header.Get("Authorization"), r.Header.Get("Content-Type")
	f.reqBody, _ = io.ReadAll(r.Body)
	ct := f.contentType
	if ct == "" {
		ct = "application/json"
	}
	w.Header().Set("Content-Type", ct)
	status := f.status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	io.WriteString(w, f.body)
}

func newFake(t *testing.T, f *fake) *Client {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL, APIKey: "key_test"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func ptr[T any](v T) *T { return &v }

const sandboxJSON = `{"sandboxId":"sb_1","projectId":"proj_1","template":"interpreter","state":"running",
"timeoutMs":300000,"metadata":{"a":"1"},"createdAt":"2026-01-02T03:04:05Z","expiresAt":"2026-01-02T03:09:05Z"}`

func wantSandbox() *api.Sandbox {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return &api.Sandbox{
		SandboxID: "sb_1", ProjectID: "proj_1", Template: "interpreter", State: "running",
		TimeoutMs: 300000, Metadata: map[string]string{"a": "1"}, CreatedAt: created,
		ExpiresAt: ptr(created.Add(5 * time.Minute)),
	}
}

const entryJSON = `{"name":"a.txt","path":"/home/user/a.txt","type":"file","size":3,"mode":420,"modTime":"2026-01-02T03:04:05Z"}`

func wantEntry() *api.EntryInfo {
	return &api.EntryInfo{Name: "a.txt", Path: "/home/user/a.txt", Type: "file", Size: 3, Mode: 420,
		ModTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// TestMethods checks each method's request (method, path, query, body) and
// how it parses the response.
func TestMethods(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		status    int
		resp      string
		call      func(c *Client) (any, error)
		method    string
		path      string
		query     string
		body      string // JSON the request must carry ("" for none)
		want      any
		wantNoKey bool // the call needs no API key
	}{
		{
			name: "Health", resp: `{"status":"ok","version":"v1"}`,
			call:   func(c *Client) (any, error) { return c.Health(ctx) },
			method: "GET", path: "/v1/health",
			want: &api.Health{Status: "ok", Version: "v1"}, wantNoKey: true,
		},
		{
			name: "CreateSandbox", status: 201, resp: sandboxJSON,
			call: func(c *Client) (any, error) {
				return c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "interpreter", TimeoutMs: ptr(int64(0)),
					Envs: map[string]string{"K": "V"}, Metadata: map[string]string{"a": "1"}})
			},
			method: "POST", path: "/v1/sandboxes",
			body: `{"template":"interpreter","timeoutMs":0,"envs":{"K":"V"},"metadata":{"a":"1"}}`,
			want: wantSandbox(),
		},
		{
			name: "GetSandbox", resp: sandboxJSON,
			call:   func(c *Client) (any, error) { return c.GetSandbox(ctx, "sb_1") },
			method: "GET", path: "/v1/sandboxes/sb_1", want: wantSandbox(),
		},
		{
			name: "GetSandbox escapes the id", resp: sandboxJSON,
			call:   func(c *Client) (any, error) { return c.GetSandbox(ctx, "a/b c") },
			method: "GET", path: "/v1/sandboxes/a%2Fb%20c", want: wantSandbox(),
		},
		{
			name: "ListSandboxes", resp: `{"sandboxes":[` + sandboxJSON + `]}`,
			call: func(c *Client) (any, error) {
				return c.ListSandboxes(ctx, ListOptions{Metadata: map[string]string{"b": "2", "a": "x=y"}, State: "running"})
			},
			method: "GET", path: "/v1/sandboxes", query: "metadata=a%3Dx%3Dy&metadata=b%3D2&state=running",
			want: []api.Sandbox{*wantSandbox()},
		},
		{
			name: "ListSandboxes empty", resp: `{"sandboxes":null}`,
			call:   func(c *Client) (any, error) { return c.ListSandboxes(ctx, ListOptions{}) },
			method: "GET", path: "/v1/sandboxes", want: []api.Sandbox{},
		},
		{
			name: "KillSandbox", status: 204,
			call:   func(c *Client) (any, error) { return nil, c.KillSandbox(ctx, "sb_1") },
			method: "DELETE", path: "/v1/sandboxes/sb_1",
		},
		{
			name: "SetTimeout", resp: sandboxJSON,
			call:   func(c *Client) (any, error) { return c.SetTimeout(ctx, "sb_1", 0) },
			method: "POST", path: "/v1/sandboxes/sb_1/timeout", body: `{"timeoutMs":0}`, want: wantSandbox(),
		},
		{
			name: "AgentHealth", resp: `{"status":"ok"}`,
			call:   func(c *Client) (any, error) { return c.AgentHealth(ctx, "sb_1") },
			method: "GET", path: "/v1/sandboxes/sb_1/health", want: &api.Health{Status: "ok"},
		},
		{
			name: "CreateContext", status: 201, resp: `{"id":"ctx_1","language":"python","cwd":"/tmp"}`,
			call: func(c *Client) (any, error) {
				return c.CreateContext(ctx, "sb_1", api.CreateContextRequest{Language: "python", Cwd: "/tmp"})
			},
			method: "POST", path: "/v1/sandboxes/sb_1/contexts", body: `{"language":"python","cwd":"/tmp"}`,
			want: &api.Context{ID: "ctx_1", Language: "python", Cwd: "/tmp"},
		},
		{
			name: "ListContexts", resp: `{"contexts":[{"id":"ctx_1","language":"python","cwd":"/home/user"}]}`,
			call:   func(c *Client) (any, error) { return c.ListContexts(ctx, "sb_1") },
			method: "GET", path: "/v1/sandboxes/sb_1/contexts",
			want: []api.Context{{ID: "ctx_1", Language: "python", Cwd: "/home/user"}},
		},
		{
			name: "RestartContext", resp: `{"id":"ctx_1","language":"python","cwd":"/home/user"}`,
			call:   func(c *Client) (any, error) { return c.RestartContext(ctx, "sb_1", "ctx_1") },
			method: "POST", path: "/v1/sandboxes/sb_1/contexts/ctx_1/restart",
			want: &api.Context{ID: "ctx_1", Language: "python", Cwd: "/home/user"},
		},
		{
			name: "DeleteContext", status: 204,
			call:   func(c *Client) (any, error) { return nil, c.DeleteContext(ctx, "sb_1", "ctx_1") },
			method: "DELETE", path: "/v1/sandboxes/sb_1/contexts/ctx_1",
		},
		{
			name: "ListDir", resp: `{"entries":[` + entryJSON + `]}`,
			call:   func(c *Client) (any, error) { return c.ListDir(ctx, "sb_1", "dir with space") },
			method: "GET", path: "/v1/sandboxes/sb_1/files/list", query: "path=dir+with+space",
			want: []api.EntryInfo{*wantEntry()},
		},
		{
			name: "Stat", resp: entryJSON,
			call:   func(c *Client) (any, error) { return c.Stat(ctx, "sb_1", "/home/user/a.txt") },
			method: "GET", path: "/v1/sandboxes/sb_1/files/stat", query: "path=%2Fhome%2Fuser%2Fa.txt",
			want: wantEntry(),
		},
		{
			name: "Remove", status: 204,
			call:   func(c *Client) (any, error) { return nil, c.Remove(ctx, "sb_1", "a.txt") },
			method: "DELETE", path: "/v1/sandboxes/sb_1/files", query: "path=a.txt",
		},
		{
			name: "MakeDir", resp: entryJSON,
			call:   func(c *Client) (any, error) { return c.MakeDir(ctx, "sb_1", "d/e") },
			method: "POST", path: "/v1/sandboxes/sb_1/files/mkdir", query: "path=d%2Fe", want: wantEntry(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fake{status: tt.status, body: tt.resp}
			c := newFake(t, f)
			got, err := tt.call(c)
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if f.method != tt.method || f.path != tt.path || f.query != tt.query {
				t.Errorf("request = %s %s?%s, want %s %s?%s", f.method, f.path, f.query, tt.method, tt.path, tt.query)
			}
			if f.auth != "Bearer key_test" {
				t.Errorf("Authorization = %q, want %q", f.auth, "Bearer key_test")
			}
			if tt.body == "" && len(f.reqBody) != 0 {
				t.Errorf("request body = %s, want none", f.reqBody)
			}
			if tt.body != "" {
				if f.reqType != "application/json" {
					t.Errorf("Content-Type = %q, want application/json", f.reqType)
				}
				if !jsonEqual(t, f.reqBody, tt.body) {
					t.Errorf("request body = %s, want %s", f.reqBody, tt.body)
				}
			}
			if tt.want != nil && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func jsonEqual(t *testing.T, got []byte, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("request body %q is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad test JSON %q: %v", want, err)
	}
	return reflect.DeepEqual(g, w)
}

func TestReadWriteFile(t *testing.T) {
	ctx := context.Background()
	f := &fake{body: entryJSON}
	c := newFake(t, f)
	info, err := c.WriteFile(ctx, "sb_1", "a.txt", strings.NewReader("hi\n"))
	if err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	if f.method != "PUT" || f.path != "/v1/sandboxes/sb_1/files" || f.query != "path=a.txt" {
		t.Errorf("request = %s %s?%s, want PUT /v1/sandboxes/sb_1/files?path=a.txt", f.method, f.path, f.query)
	}
	if string(f.reqBody) != "hi\n" || f.reqType != "application/octet-stream" {
		t.Errorf("request body = %q (%s), want %q (application/octet-stream)", f.reqBody, f.reqType, "hi\n")
	}
	if !reflect.DeepEqual(info, wantEntry()) {
		t.Errorf("WriteFile = %+v, want %+v", info, wantEntry())
	}

	f.body, f.contentType = "raw\x00bytes", "application/octet-stream"
	rc, err := c.ReadFile(ctx, "sb_1", "a.txt")
	if err != nil {
		t.Fatalf("ReadFile: %v", err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != "raw\x00bytes" {
		t.Errorf("ReadFile read %q, %v; want %q", b, err, "raw\x00bytes")
	}
	if f.method != "GET" || f.path != "/v1/sandboxes/sb_1/files" || f.query != "path=a.txt" {
		t.Errorf("request = %s %s?%s, want GET /v1/sandboxes/sb_1/files?path=a.txt", f.method, f.path, f.query)
	}

	f.status, f.body, f.contentType = 404, `{"code":"not_found","message":"no such file"}`, ""
	if _, err := c.ReadFile(ctx, "sb_1", "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("ReadFile of a missing file: got %v, want ErrNotFound", err)
	}
}

func TestExecute(t *testing.T) {
	ctx := context.Background()
	stream := `{"type":"stdout","text":"a\n"}
{"type":"stderr","text":"warn\n"}
{"type":"stdout","text":"b\n"}
{"type":"result","result":{"type":"result","mime":"text/plain","data":"np.int64(6)"}}
{"type":"result","result":{"type":"display","mime":"image/png","data":"iVBO"}}
{"type":"error","error":{"name":"ZeroDivisionError","message":"division by zero","traceback":"tb"}}
{"type":"end","executionCount":3}
{"type":"stdout","text":"after the end: ignored"}
`
	f := &fake{body: stream, contentType: "application/x-ndjson"}
	c := newFake(t, f)
	var seen []string
	x, err := c.Execute(ctx, "sb_1", api.ExecuteRequest{Code: "1/0", Language: "python", TimeoutMs: ptr(int64(30000))},
		func(ev api.ExecuteEvent) { seen = append(seen, ev.Type) })
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if f.method != "POST" || f.path != "/v1/sandboxes/sb_1/execute" {
		t.Errorf("request = %s %s, want POST /v1/sandboxes/sb_1/execute", f.method, f.path)
	}
	if !jsonEqual(t, f.reqBody, `{"code":"1/0","language":"python","timeoutMs":30000}`) {
		t.Errorf("request body = %s", f.reqBody)
	}
	want := &Execution{
		Results: []api.Result{
			{Type: "result", Mime: "text/plain", Data: "np.int64(6)"},
			{Type: "display", Mime: "image/png", Data: "iVBO"},
		},
		Stdout: "a\nb\n", Stderr: "warn\n",
		Error:          &api.ExecutionError{Name: "ZeroDivisionError", Message: "division by zero", Traceback: "tb"},
		ExecutionCount: 3,
	}
	if !reflect.DeepEqual(x, want) {
		t.Errorf("Execute = %+v, want %+v", x, want)
	}
	wantSeen := []string{"stdout", "stderr", "stdout", "result", "result", "error", "end"}
	if !reflect.DeepEqual(seen, wantSeen) {
		t.Errorf("onEvent saw %v, want %v", seen, wantSeen)
	}
}

func TestExecuteNoResults(t *testing.T) {
	c := newFake(t, &fake{body: `{"type":"end"}` + "\n"})
	x, err := c.Execute(context.Background(), "sb_1", api.ExecuteRequest{Code: "pass"}, nil)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if x.Results == nil || len(x.Results) != 0 || x.Error != nil {
		t.Errorf("Execute = %+v, want empty non-nil Results and no Error", x)
	}
}

// TestExecuteStreamsLive checks that onEvent sees events before the stream
// ends, not after.
func TestExecuteStreamsLive(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"type":"stdout","text":"first"}`+"\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, `{"type":"end"}`+"\n")
	}))
	defer srv.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	c, _ := New(Config{BaseURL: srv.URL, APIKey: "k"})
	x, err := c.Execute(context.Background(), "sb_1", api.ExecuteRequest{Code: "x"}, func(ev api.ExecuteEvent) {
		if ev.Type == "stdout" {
			close(release) // the server holds the end event until the first one arrived
		}
	})
	if err != nil || x.Stdout != "first" {
		t.Errorf("Execute = %+v, %v; want stdout %q", x, err, "first")
	}
}

func TestStreamsWithoutEndFail(t *testing.T) {
	tests := []struct {
		name, body string
	}{
		{"empty", ""},
		{"no end event", `{"type":"stdout","text":"a"}` + "\n"},
		{"cut mid-line", `{"type":"stdout","text":"a"}` + "\n" + `{"type":"end","exe`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newFake(t, &fake{body: tt.body})
			x, err := c.Execute(context.Background(), "sb_1", api.ExecuteRequest{Code: "x"}, nil)
			if !errors.Is(err, ErrTruncated) || !errors.Is(err, ErrServer) {
				t.Errorf("Execute = %+v, %v; want ErrTruncated and ErrServer", x, err)
			}
			p, err := c.Exec(context.Background(), "sb_1", api.ProcessRequest{Cmd: "x"}, nil)
			if !errors.Is(err, ErrTruncated) {
				t.Errorf("Exec = %+v, %v; want ErrTruncated", p, err)
			}
		})
	}
}

// TestStreamLineBounded: a stream's line of api.MaxExecuteLine bytes, the
// longest the server sends, is read; one a byte longer, and one without
// end (an agent replaced by code in the sandbox), end the stream with an
// error naming the bound instead of growing the decoder's buffer.
func TestStreamLineBounded(t *testing.T) {
	const head = `{"type":"stdout","text":"`
	tests := []struct {
		name string
		text int // bytes of the line's text; -1: without end
		ok   bool
	}{
		{"at the bound", api.MaxExecuteLine - len(head) - 2, true},
		{"a byte past it", api.MaxExecuteLine - len(head) - 1, false},
		{"without end", -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sent := make(chan int, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/x-ndjson")
				n, _ := io.WriteString(w, head)
				chunk := []byte(strings.Repeat("a", 64<<10))
				// Past 4× the bound the client is holding it: stop, so
				// that the test fails rather than the machine.
				for left := tt.text; n < 4*api.MaxExecuteLine && left != 0; {
					c := chunk
					if left > 0 {
						c = c[:min(left, len(c))]
						left -= len(c)
					}
					m, err := w.Write(c)
					n += m
					if err != nil {
						break
					}
				}
				m, _ := io.WriteString(w, `"}`+"\n"+`{"type":"end"}`+"\n")
				sent <- n + m
			}))
			defer srv.Close()
			c, _ := New(Config{BaseURL: srv.URL, APIKey: "k"})
			x, err := c.Execute(context.Background(), "sb_1", api.ExecuteRequest{Code: "x"}, nil)
			if tt.ok {
				if err != nil || len(x.Stdout) != tt.text {
					t.Fatalf("Execute = %d bytes of stdout, %v; want %d", len(x.Stdout), err, tt.text)
				}
				return
			}
			if !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "a line of the stream is over 34603008 bytes (api.MaxExecuteLine)") {
				t.Errorf("Execute = %v; want ErrTruncated naming the bound", err)
			}
			// The loopback's socket buffers hold a few MiB more.
			if n := <-sent; n > api.MaxExecuteLine+16<<20 {
				t.Errorf("the server got %d bytes out; want at most the bound %d and the socket buffers", n, api.MaxExecuteLine)
			}
		})
	}
}

func TestExec(t *testing.T) {
	stream := `{"type":"stdout","text":"out"}
{"type":"stderr","text":"err"}
{"type":"end","exitCode":3}
`
	f := &fake{body: stream}
	c := newFake(t, f)
	var n int
	res, err := c.Exec(context.Background(), "sb_1", api.ProcessRequest{Args: []string{"ls", "-l"}, Cwd: "/tmp",
		Envs: map[string]string{"A": "b"}, TimeoutMs: ptr(int64(5000))}, func(api.ProcessEvent) { n++ })
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if f.method != "POST" || f.path != "/v1/sandboxes/sb_1/process" {
		t.Errorf("request = %s %s, want POST /v1/sandboxes/sb_1/process", f.method, f.path)
	}
	if !jsonEqual(t, f.reqBody, `{"args":["ls","-l"],"cwd":"/tmp","envs":{"A":"b"},"timeoutMs":5000}`) {
		t.Errorf("request body = %s", f.reqBody)
	}
	want := &ProcessResult{Stdout: "out", Stderr: "err", ExitCode: 3}
	if !reflect.DeepEqual(res, want) || n != 3 {
		t.Errorf("Exec = %+v with %d events, want %+v with 3", res, n, want)
	}

	f.body = `{"type":"end","error":"executable file not found"}` + "\n"
	res, err = c.Exec(context.Background(), "sb_1", api.ProcessRequest{Args: []string{"nope"}}, nil)
	if err != nil || res.ExitCode != -1 || res.Error != "executable file not found" {
		t.Errorf("Exec of a missing program = %+v, %v; want ExitCode -1 and its Error", res, err)
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		status   int
		body     string
		want     error
		wantCode string
	}{
		{400, `{"code":"invalid_argument","message":"bad timeout"}`, ErrInvalidArgument, "invalid_argument"},
		{401, `{"code":"unauthenticated","message":"bad key"}`, ErrUnauthenticated, "unauthenticated"},
		{404, `{"code":"not_found","message":"no sandbox"}`, ErrNotFound, "not_found"},
		{409, `{"code":"conflict","message":"paused"}`, ErrConflict, "conflict"},
		{410, `{"code":"gone","message":"ended"}`, ErrGone, "gone"},
		{413, `{"code":"too_large","message":"big"}`, ErrTooLarge, "too_large"},
		{429, `{"code":"rate_limited","message":"slow down"}`, ErrRateLimited, "rate_limited"},
		{500, `{"code":"internal","message":"oops"}`, ErrServer, "internal"},
		{502, `{"code":"bad_gateway","message":"agent"}`, ErrServer, "bad_gateway"},
		{503, `{"code":"unavailable","message":"later"}`, ErrServer, "unavailable"},
		// Bodies that are not ours still map by status.
		{404, `404 page not found`, ErrNotFound, "not_found"},
		{502, ``, ErrServer, "bad_gateway"},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			c := newFake(t, &fake{status: tt.status, body: tt.body})
			_, err := c.GetSandbox(context.Background(), "sb_1")
			if !errors.Is(err, tt.want) {
				t.Errorf("error %v does not match %v", err, tt.want)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not *Error", err)
			}
			if e.Status != tt.status || e.Code != tt.wantCode || e.Message == "" {
				t.Errorf("got %+v, want status %d code %q and a message", e, tt.status, tt.wantCode)
			}
			for _, other := range []error{ErrInvalidArgument, ErrNotFound, ErrGone, ErrServer} {
				if other != tt.want && errors.Is(err, other) {
					t.Errorf("error %v also matches %v", err, other)
				}
			}
		})
	}
}

// TestDiskFull: a 507 is ErrDiskFull, and ErrServer as every 5xx is, so
// callers that retry server errors keep doing so.
func TestDiskFull(t *testing.T) {
	for body, code := range map[string]string{`{"code":"disk_full","message":"the server's disk is full"}`: "disk_full", ``: "disk_full"} {
		c := newFake(t, &fake{status: 507, body: body})
		_, err := c.GetSandbox(context.Background(), "sb_1")
		var e *Error
		if !errors.Is(err, ErrDiskFull) || !errors.Is(err, ErrServer) || errors.Is(err, ErrConflict) || !errors.As(err, &e) || e.Code != code {
			t.Errorf("507 %q = %v; want ErrDiskFull and ErrServer, code %s", body, err, code)
		}
	}
}

func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + l.Addr().String()
	l.Close() // nothing listens there now
	c, _ := New(Config{BaseURL: addr, APIKey: "k"})
	_, err = c.ListSandboxes(context.Background(), ListOptions{})
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("got %v, want ErrUnreachable", err)
	}
	if err == nil || !strings.Contains(err.Error(), "cannot reach Lizard at "+addr+": is `lizard serve` running?") {
		t.Errorf("error %q does not name the URL and the fix", err)
	}
}

func TestCancelledIsNotUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer srv.Close()
	c, _ := New(Config{BaseURL: srv.URL, APIKey: "k", Timeout: 50 * time.Millisecond})
	_, err := c.GetSandbox(context.Background(), "sb_1")
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnreachable) {
		t.Errorf("got %v, want context.DeadlineExceeded and not ErrUnreachable", err)
	}
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name             string
		cfg              Config
		envURL, envKey   string
		wantURL, wantKey string
		wantErr          bool
	}{
		{name: "defaults", wantURL: DefaultBaseURL},
		{name: "env", envURL: "http://h:1", envKey: "ek", wantURL: "http://h:1", wantKey: "ek"},
		{name: "explicit wins", cfg: Config{BaseURL: "http://x:2/", APIKey: "k"}, envURL: "http://h:1", envKey: "ek",
			wantURL: "http://x:2", wantKey: "k"},
		{name: "with /v1", cfg: Config{BaseURL: "https://x/v1/"}, wantURL: "https://x"},
		{name: "bad URL", cfg: Config{BaseURL: "localhost:8080"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvAPIURL, tt.envURL)
			t.Setenv(EnvAPIKey, tt.envKey)
			c, err := New(tt.cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("New error = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if c.BaseURL() != tt.wantURL || c.apiKey != tt.wantKey {
				t.Errorf("got URL %q key %q, want %q %q", c.BaseURL(), c.apiKey, tt.wantURL, tt.wantKey)
			}
		})
	}
}

func TestMissingAPIKey(t *testing.T) {
	t.Setenv(EnvAPIKey, "")
	f := &fake{body: `{"status":"ok"}`}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c, err := New(Config{BaseURL: srv.URL})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if _, err := c.ListSandboxes(context.Background(), ListOptions{}); !errors.Is(err, ErrNoAPIKey) ||
		!errors.Is(err, ErrUnauthenticated) ||
		!strings.Contains(err.Error(), "set LIZARD_API_KEY or pass an API key") {
		t.Errorf("ListSandboxes without a key: got %v, want ErrNoAPIKey", err)
	}
	if f.method != "" {
		t.Errorf("a request was sent without a key: %s %s", f.method, f.path)
	}
	if _, err := c.Health(context.Background()); err != nil {
		t.Errorf("Health without a key: %v, want it to work", err)
	}
}
