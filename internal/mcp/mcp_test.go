package mcp

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// fake is an API whose calls are its function fields; a nil field is a
// call the test does not expect.
type fake struct {
	create  func(api.CreateSandboxRequest) (*api.Sandbox, error)
	list    func() ([]api.Sandbox, error)
	kill    func(id string) error
	pause   func(id string) (*api.Sandbox, error)
	resume  func(id string) (*api.Sandbox, error)
	snap    func(id string) (*api.Snapshot, error)
	fork    func(id string, req api.ForkRequest) ([]api.Sandbox, error)
	execute func(id string, req api.ExecuteRequest) (*client.Execution, error)
	// stream, when set, is Execute as the client runs it: each event
	// handed to onEvent as it comes, until ctx ends.
	stream  func(ctx context.Context, onEvent func(api.ExecuteEvent)) (*client.Execution, error)
	exec    func(id string, req api.ProcessRequest) (*client.ProcessResult, error)
	read    func(id, path string) (io.ReadCloser, error)
	write   func(id, path, content string) (*api.EntryInfo, error)
	listDir func(id, path string) ([]api.EntryInfo, error)
	// desktop answers the desktop routes (desktop_test.go).
	desktop *client.Client
}

func (f *fake) CreateSandbox(_ context.Context, req api.CreateSandboxRequest) (*api.Sandbox, error) {
	return f.create(req)
}
func (f *fake) ListSandboxes(context.Context, client.ListOptions) ([]api.Sandbox, error) {
	return f.list()
}
func (f *fake) KillSandbox(_ context.Context, id string) error { return f.kill(id) }
func (f *fake) PauseSandbox(_ context.Context, id string) (*api.Sandbox, error) {
	return f.pause(id)
}
func (f *fake) ResumeSandbox(_ context.Context, id string, _ api.ResumeRequest) (*api.Sandbox, error) {
	return f.resume(id)
}
func (f *fake) Snapshot(_ context.Context, id string) (*api.Snapshot, error) { return f.snap(id) }
func (f *fake) Fork(_ context.Context, id string, req api.ForkRequest) ([]api.Sandbox, error) {
	return f.fork(id, req)
}
func (f *fake) Execute(ctx context.Context, id string, req api.ExecuteRequest, onEvent func(api.ExecuteEvent)) (*client.Execution, error) {
	if f.stream != nil {
		if onEvent == nil {
			onEvent = func(api.ExecuteEvent) {}
		}
		return f.stream(ctx, onEvent)
	}
	return f.execute(id, req)
}
func (f *fake) Exec(_ context.Context, id string, req api.ProcessRequest, _ func(api.ProcessEvent)) (*client.ProcessResult, error) {
	return f.exec(id, req)
}
func (f *fake) ReadFile(_ context.Context, id, path string, _ ...client.FileOption) (io.ReadCloser, error) {
	return f.read(id, path)
}
func (f *fake) WriteFile(_ context.Context, id, path string, r io.Reader, _ ...client.FileOption) (*api.EntryInfo, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	return f.write(id, path, string(b))
}
func (f *fake) ListDir(_ context.Context, id, path string, _ ...client.FileOption) ([]api.EntryInfo, error) {
	return f.listDir(id, path)
}

func (f *fake) Desktop() client.Desktop { return f.desktop.Desktop() }

// connect serves NewServer(f) to an in-memory client session.
func connect(t *testing.T, f *fake) *sdk.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := sdk.NewInMemoryTransports()
	ss, err := NewServer(f, "test").Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and returns its text content joined, whether it is an
// error result, and a protocol error.
func call(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (string, *sdk.CallToolResult, error) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return "", nil, err
	}
	var texts []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			texts = append(texts, tc.Text)
		}
	}
	return strings.Join(texts, "\n"), res, nil
}

func TestToolsListed(t *testing.T) {
	cs := connect(t, &fake{})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, tool := range res.Tools {
		if tool.Description == "" || tool.InputSchema == nil {
			t.Errorf("tool %s has no description or input schema", tool.Name)
		}
		got[tool.Name] = true
	}
	for _, want := range []string{"create_sandbox", "use_sandbox", "run_code", "run_command", "read_file", "write_file",
		"list_files", "list_sandboxes", "kill_sandbox", "pause_sandbox", "resume_sandbox", "snapshot_sandbox", "fork_sandbox",
		"screenshot", "click", "type_text", "press_keys"} {
		if !got[want] {
			t.Errorf("tool %s missing from %v", want, got)
		}
	}
}

// TestPinnedSandbox: create_sandbox pins its sandbox, so run_code needs no
// ID; use_sandbox moves the pin; kill_sandbox of the pinned one drops it.
func TestPinnedSandbox(t *testing.T) {
	var ran []string
	f := &fake{
		create: func(req api.CreateSandboxRequest) (*api.Sandbox, error) {
			if req.Template != "tpl" || req.TimeoutMs == nil || *req.TimeoutMs != 30000 || req.AllowInternet == nil || *req.AllowInternet {
				t.Errorf("create request %+v", req)
			}
			return &api.Sandbox{SandboxID: "sb1", Template: "tpl"}, nil
		},
		execute: func(id string, req api.ExecuteRequest) (*client.Execution, error) {
			ran = append(ran, id)
			return &client.Execution{Results: []api.Result{{Type: "result", Mime: "text/plain", Data: "np.int64(6)"}}}, nil
		},
		kill: func(id string) error { return nil },
	}
	cs := connect(t, f)
	out, res, err := call(t, cs, "create_sandbox", map[string]any{"template": "tpl", "timeout_seconds": 30, "allow_internet": false})
	if err != nil || res.IsError || !strings.Contains(out, "sb1") {
		t.Fatalf("create_sandbox: %q %v %v", out, res, err)
	}
	if out, res, err := call(t, cs, "run_code", map[string]any{"code": "x"}); err != nil || res.IsError || out != "np.int64(6)" {
		t.Fatalf("run_code: %q %+v %v", out, res, err)
	}
	if _, _, err := call(t, cs, "use_sandbox", map[string]any{"sandbox_id": "sb2"}); err != nil {
		t.Fatal(err)
	}
	call(t, cs, "run_code", map[string]any{"code": "x"})
	call(t, cs, "run_code", map[string]any{"code": "x", "sandbox_id": "sb3"})
	if strings.Join(ran, " ") != "sb1 sb2 sb3" {
		t.Errorf("ran in %v, want sb1 sb2 sb3", ran)
	}
	call(t, cs, "kill_sandbox", nil)
	out, res, err = call(t, cs, "run_code", map[string]any{"code": "x"})
	if err != nil || !res.IsError || !strings.Contains(out, "sandbox_id") {
		t.Errorf("run_code after the pinned sandbox was killed: %q %+v %v", out, res, err)
	}
}

func TestRunCodeResults(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nfake")
	x := &client.Execution{
		Stdout: "hello\n",
		Results: []api.Result{
			{Type: "display", Mime: "image/png", Data: base64.StdEncoding.EncodeToString(png)},
		},
		Error: &api.ExecutionError{Name: "ZeroDivisionError", Message: "division by zero", Traceback: "Traceback (most recent call last):\n  1/0"},
	}
	cs := connect(t, &fake{execute: func(string, api.ExecuteRequest) (*client.Execution, error) { return x, nil }})
	out, res, err := call(t, cs, "run_code", map[string]any{"code": "x", "sandbox_id": "sb", "language": "python"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(out, "hello") || !strings.Contains(out, "ZeroDivisionError: division by zero") ||
		!strings.Contains(out, "Traceback (most recent call last)") {
		t.Errorf("run_code: error %v, text %q", res.IsError, out)
	}
	var img *sdk.ImageContent
	for _, c := range res.Content {
		if ic, ok := c.(*sdk.ImageContent); ok {
			img = ic
		}
	}
	if img == nil || img.MIMEType != "image/png" || string(img.Data) != string(png) {
		t.Errorf("image content %+v, want the PNG", img)
	}
}

// TestBadArguments: a missing or wrong-typed argument is an error naming
// it, and the session goes on.
func TestBadArguments(t *testing.T) {
	f := &fake{list: func() ([]api.Sandbox, error) { return []api.Sandbox{{SandboxID: "sb1", State: "running"}}, nil }}
	cs := connect(t, f)
	for _, tc := range []struct {
		tool string
		args map[string]any
		arg  string
	}{
		{"run_code", map[string]any{"sandbox_id": "sb"}, "code"},
		{"run_code", map[string]any{"code": 5, "sandbox_id": "sb"}, "code"},
		{"run_code", map[string]any{"code": "1", "language": "cobol", "sandbox_id": "sb"}, "language"},
		{"run_code", map[string]any{"code": "1"}, "sandbox_id"},
		{"create_sandbox", map[string]any{"timeout_seconds": "soon"}, "timeout_seconds"},
		{"create_sandbox", map[string]any{"timeout_seconds": -1}, "timeout_seconds"},
		{"run_command", map[string]any{"sandbox_id": "sb"}, "command"},
		{"run_code", map[string]any{"code": "1", "timeout_seconds": -5, "sandbox_id": "sb"}, "timeout_seconds"},
		{"run_command", map[string]any{"command": "true", "timeout_seconds": -5, "sandbox_id": "sb"}, "timeout_seconds"},
		{"read_file", map[string]any{"sandbox_id": "sb"}, "path"},
		{"write_file", map[string]any{"path": "a", "content": []int{1}, "sandbox_id": "sb"}, "content"},
		{"use_sandbox", map[string]any{}, "sandbox_id"},
		{"fork_sandbox", map[string]any{"count": "two", "sandbox_id": "sb"}, "count"},
	} {
		out, res, err := call(t, cs, tc.tool, tc.args)
		msg := out
		if err != nil {
			msg = err.Error()
		} else if !res.IsError {
			t.Errorf("%s %v: not an error: %q", tc.tool, tc.args, out)
		}
		if !strings.Contains(msg, tc.arg) {
			t.Errorf("%s %v: error %q does not name %s", tc.tool, tc.args, msg, tc.arg)
		}
	}
	if out, res, err := call(t, cs, "list_sandboxes", nil); err != nil || res.IsError || !strings.Contains(out, "sb1\trunning") {
		t.Errorf("list_sandboxes after the bad calls: %q %v", out, err)
	}
}

func TestAPIErrors(t *testing.T) {
	cs := connect(t, &fake{
		kill: func(id string) error { return client.ErrUnauthenticated },
		exec: func(id string, req api.ProcessRequest) (*client.ProcessResult, error) {
			if req.Cmd != "false" || len(req.Args) != 0 {
				t.Errorf("exec %+v", req)
			}
			return &client.ProcessResult{ExitCode: 1, Stderr: "boom"}, nil
		},
		read: func(id, path string) (io.ReadCloser, error) { return nil, errors.New("no such file") },
	})
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"kill_sandbox", map[string]any{"sandbox_id": "sb"}, "killing sb"},
		{"run_command", map[string]any{"command": "false", "sandbox_id": "sb"}, "exit code: 1"},
		{"read_file", map[string]any{"path": "/x", "sandbox_id": "sb"}, "no such file"},
	} {
		out, res, err := call(t, cs, tc.tool, tc.args)
		if err != nil || !res.IsError || !strings.Contains(out, tc.want) {
			t.Errorf("%s: %q %v %v, want an error result with %q", tc.tool, out, res, err, tc.want)
		}
	}
}

func TestFileTools(t *testing.T) {
	cs := connect(t, &fake{
		write: func(id, path, content string) (*api.EntryInfo, error) {
			return &api.EntryInfo{Path: "/home/user/" + path, Size: int64(len(content))}, nil
		},
		read: func(id, path string) (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("data")), nil },
		listDir: func(id, path string) ([]api.EntryInfo, error) {
			return []api.EntryInfo{{Type: "file", Size: 4, Path: "/home/user/a"}}, nil
		},
	})
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"write_file", map[string]any{"path": "a", "content": "data", "sandbox_id": "sb"}, "wrote 4 bytes to /home/user/a"},
		{"read_file", map[string]any{"path": "a", "sandbox_id": "sb"}, "data"},
		{"list_files", map[string]any{"sandbox_id": "sb"}, "file\t4\t/home/user/a"},
	} {
		out, res, err := call(t, cs, tc.tool, tc.args)
		if err != nil || res.IsError || !strings.Contains(out, tc.want) {
			t.Errorf("%s: %q %v, want %q", tc.tool, out, err, tc.want)
		}
	}
}

// Code that displays results without end is stopped once they pass
// maxRunBytes: the API process that serves /mcp holds each run's events
// until its end.
func TestRunCodeBounded(t *testing.T) {
	sent := 0
	cs := connect(t, &fake{stream: func(ctx context.Context, onEvent func(api.ExecuteEvent)) (*client.Execution, error) {
		x := &client.Execution{}
		for ctx.Err() == nil {
			if sent > 4*maxRunBytes {
				return x, nil // unbounded: the test fails below
			}
			r := api.Result{Type: "display_data", Mime: "text/plain", Data: strings.Repeat("x", 1<<20)}
			x.Results = append(x.Results, r)
			sent += len(r.Data)
			onEvent(api.ExecuteEvent{Type: api.EventResult, Result: &r})
		}
		return nil, ctx.Err()
	}})
	text, res, err := call(t, cs, "run_code", map[string]any{"code": "while True: display(...)", "sandbox_id": "sb_1"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(text, "passed 16 MiB") {
		t.Errorf("run_code of endless results = %.200q (error %v); want an error naming the 16 MiB bound", text, res.IsError)
	}
	if sent > maxRunBytes+1<<20 {
		t.Errorf("the run went on to %d bytes; want it stopped past %d", sent, maxRunBytes)
	}
}
