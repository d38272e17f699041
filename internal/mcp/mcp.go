// Package mcp is Lizard's Model Context Protocol server: tools a model can
// call to create sandboxes, run code and commands in them and move files,
// served over stdio by `lizard mcp` and over streamable HTTP under /mcp.
// The tools call the API through the Go client, so the package links no
// server code and the client-only CLI can carry it (internal/cli's
// deps_test.go).
package mcp

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// API is the part of the Go client the tools use; *client.Client is one.
type API interface {
	CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (*api.Sandbox, error)
	ListSandboxes(ctx context.Context, opts client.ListOptions) ([]api.Sandbox, error)
	KillSandbox(ctx context.Context, id string) error
	PauseSandbox(ctx context.Context, id string) (*api.Sandbox, error)
	ResumeSandbox(ctx context.Context, id string, req api.ResumeRequest) (*api.Sandbox, error)
	Snapshot(ctx context.Context, id string) (*api.Snapshot, error)
	Fork(ctx context.Context, id string, req api.ForkRequest) ([]api.Sandbox, error)
	Execute(ctx context.Context, id string, req api.ExecuteRequest, onEvent func(api.ExecuteEvent)) (*client.Execution, error)
	Exec(ctx context.Context, id string, req api.ProcessRequest, onEvent func(api.ProcessEvent)) (*client.ProcessResult, error)
	ReadFile(ctx context.Context, id, path string, opts ...client.FileOption) (io.ReadCloser, error)
	WriteFile(ctx context.Context, id, path string, r io.Reader, opts ...client.FileOption) (*api.EntryInfo, error)
	ListDir(ctx context.Context, id, path string, opts ...client.FileOption) ([]api.EntryInfo, error)
	Desktop() client.Desktop
}

// maxReadBytes bounds what read_file hands a model: more would flood its
// context window, and a model that wants a slice can run a command.
const maxReadBytes = 1 << 20

// maxRunBytes bounds the output and results run_code holds of one run.
// The client keeps every event of a run until its end, and /mcp is served
// in the API's process: code that prints or displays without end (the
// agent bounds stdout and stderr, not results) would grow the server's
// memory until it died. A model could not read more anyway.
const maxRunBytes = 16 << 20

// session is one MCP session's state: its API and the sandbox it pinned.
type session struct {
	api API
	mu  sync.Mutex
	pin string
}

func (s *session) pinned() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pin
}

func (s *session) setPin(id string) {
	s.mu.Lock()
	s.pin = id
	s.mu.Unlock()
}

// sandbox picks the sandbox a call acts on: the one named, else the
// session's pinned one.
func (s *session) sandbox(id string) (string, error) {
	if id != "" {
		return id, nil
	}
	if p := s.pinned(); p != "" {
		return p, nil
	}
	return "", errors.New("sandbox_id: no sandbox given and none pinned; call create_sandbox or use_sandbox first")
}

// NewServer returns an MCP server whose tools call a. One server serves
// one session: it holds the session's pinned sandbox.
func NewServer(a API, version string) *sdk.Server {
	s := &session{api: a}
	srv := sdk.NewServer(&sdk.Implementation{Name: "lizard", Title: "Lizard sandboxes", Version: version}, &sdk.ServerOptions{
		Instructions: "Lizard runs code in isolated sandboxes. Call create_sandbox once (it becomes this session's " +
			"sandbox), then run_code, run_command and the file tools without a sandbox_id. Python keeps its " +
			"variables between run_code calls. Kill the sandbox with kill_sandbox when done.",
	})
	sdk.AddTool(srv, &sdk.Tool{Name: "create_sandbox", Description: "Create a new sandbox (an isolated Linux VM-like " +
		"environment with Python, Node.js and bash) and make it this session's sandbox, so later calls need no sandbox_id. " +
		"Returns its sandbox_id."}, s.createSandbox)
	sdk.AddTool(srv, &sdk.Tool{Name: "use_sandbox", Description: "Make an existing sandbox this session's sandbox: " +
		"later calls without a sandbox_id act on it."}, s.useSandbox)
	sdk.AddTool(srv, &sdk.Tool{Name: "run_code", Description: "Run code in the sandbox, like a Jupyter cell: Python " +
		"keeps variables, imports and files between calls; the last expression's value is returned, charts " +
		"(matplotlib) come back as images. An exception comes back as an error with its traceback."}, s.runCode)
	sdk.AddTool(srv, &sdk.Tool{Name: "run_command", Description: "Run a shell command line in the sandbox (with bash -c) " +
		"and return its stdout, stderr and exit code. A non-zero exit code is an error result."}, s.runCommand)
	sdk.AddTool(srv, &sdk.Tool{Name: "read_file", Description: "Read a text file from the sandbox (up to 1 MiB)."}, s.readFile)
	sdk.AddTool(srv, &sdk.Tool{Name: "write_file", Description: "Write a text file in the sandbox, replacing it and " +
		"creating its parent directories."}, s.writeFile)
	sdk.AddTool(srv, &sdk.Tool{Name: "list_files", Description: "List a directory in the sandbox: one entry a line, " +
		"type, size and path."}, s.listFiles)
	sdk.AddTool(srv, &sdk.Tool{Name: "list_sandboxes", Description: "List the project's sandboxes with their state " +
		"and template; the session's sandbox is marked."}, s.listSandboxes)
	sdk.AddTool(srv, &sdk.Tool{Name: "kill_sandbox", Description: "Kill a sandbox and discard everything in it."}, s.killSandbox)
	sdk.AddTool(srv, &sdk.Tool{Name: "pause_sandbox", Description: "Pause a sandbox: its memory and files are saved " +
		"and it stops costing CPU; resume_sandbox (or any call) brings it back as it was."}, s.pauseSandbox)
	sdk.AddTool(srv, &sdk.Tool{Name: "resume_sandbox", Description: "Resume a paused sandbox."}, s.resumeSandbox)
	sdk.AddTool(srv, &sdk.Tool{Name: "snapshot_sandbox", Description: "Save a snapshot of a running sandbox (memory, " +
		"variables, files); create_sandbox with snapshot_id starts new sandboxes from it."}, s.snapshotSandbox)
	sdk.AddTool(srv, &sdk.Tool{Name: "fork_sandbox", Description: "Fork a sandbox into copies that start from its " +
		"current state (variables, files), e.g. to try alternatives. The session keeps its sandbox."}, s.forkSandbox)
	addDesktopTools(srv, s)
	return srv
}

type sandboxArg struct {
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to act on; default the session's sandbox (the last created or used)"`
}

type none struct{}

func text(format string, args ...any) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

type createArgs struct {
	Template       string `json:"template,omitempty" jsonschema:"template to boot; default interpreter (Python with pandas, numpy, matplotlib; Node.js; bash)"`
	TimeoutSeconds *int64 `json:"timeout_seconds,omitempty" jsonschema:"seconds until the sandbox is killed; default 300, 0 never"`
	AllowInternet  *bool  `json:"allow_internet,omitempty" jsonschema:"false cuts all network access; default what the server allows"`
	SnapshotID     string `json:"snapshot_id,omitempty" jsonschema:"start from this snapshot instead of the template"`
}

func (s *session) createSandbox(ctx context.Context, _ *sdk.CallToolRequest, in createArgs) (*sdk.CallToolResult, any, error) {
	req := api.CreateSandboxRequest{Template: in.Template, AllowInternet: in.AllowInternet, SnapshotID: in.SnapshotID}
	ms, err := timeoutMs(in.TimeoutSeconds)
	if err != nil {
		return nil, nil, err
	}
	req.TimeoutMs = ms
	sb, err := s.api.CreateSandbox(ctx, req)
	if err != nil {
		return nil, nil, fmt.Errorf("creating sandbox: %w", err)
	}
	s.setPin(sb.SandboxID)
	return text("sandbox_id: %s (template %s, now this session's sandbox)", sb.SandboxID, sb.Template), nil, nil
}

// timeoutMs is a timeout_seconds argument in the API's milliseconds; nil
// stays nil (the API's default).
func timeoutMs(seconds *int64) (*int64, error) {
	if seconds == nil {
		return nil, nil
	}
	if *seconds < 0 {
		return nil, errors.New("timeout_seconds: must not be negative")
	}
	ms := *seconds * 1000
	return &ms, nil
}

type useArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox later calls act on"`
}

func (s *session) useSandbox(_ context.Context, _ *sdk.CallToolRequest, in useArgs) (*sdk.CallToolResult, any, error) {
	if in.SandboxID == "" {
		return nil, nil, errors.New("sandbox_id: required")
	}
	s.setPin(in.SandboxID)
	return text("session sandbox: %s", in.SandboxID), nil, nil
}

type runCodeArgs struct {
	Code           string `json:"code" jsonschema:"the code to run"`
	Language       string `json:"language,omitempty" jsonschema:"python (default), javascript or bash"`
	SandboxID      string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to run in; default the session's sandbox"`
	TimeoutSeconds *int64 `json:"timeout_seconds,omitempty" jsonschema:"seconds before the run is stopped; default 60"`
}

func (s *session) runCode(ctx context.Context, _ *sdk.CallToolRequest, in runCodeArgs) (*sdk.CallToolResult, any, error) {
	switch in.Language {
	case "", "python", "javascript", "bash":
	default:
		return nil, nil, fmt.Errorf("language: %q is not one of python, javascript, bash", in.Language)
	}
	if in.Code == "" {
		return nil, nil, errors.New("code: required")
	}
	id, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	ms, err := timeoutMs(in.TimeoutSeconds)
	if err != nil {
		return nil, nil, err
	}
	req := api.ExecuteRequest{Code: in.Code, Language: in.Language, TimeoutMs: ms}
	over := fmt.Errorf("its output and results passed %d MiB, more than a model can read, and the run was stopped: write them to a file and read a part of it", maxRunBytes>>20)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	held := 0
	x, err := s.api.Execute(ctx, id, req, func(ev api.ExecuteEvent) {
		held += len(ev.Text)
		if ev.Result != nil {
			held += len(ev.Result.Data)
		}
		if held > maxRunBytes {
			cancel(over)
		}
	})
	if errors.Is(context.Cause(ctx), over) || errors.Is(err, client.ErrLineTooLong) {
		err = over
	}
	if err != nil {
		return nil, nil, fmt.Errorf("running code in %s: %w", id, err)
	}
	return executionResult(x), nil, nil
}

// executionResult turns an execution into MCP content: stdout and stderr
// as text, each result as text or, for an image, as image content, and
// the error's traceback marking the result as an error the model can read.
func executionResult(x *client.Execution) *sdk.CallToolResult {
	r := &sdk.CallToolResult{}
	add := func(label, s string) {
		if s != "" {
			r.Content = append(r.Content, &sdk.TextContent{Text: label + s})
		}
	}
	add("stdout:\n", x.Stdout)
	add("stderr:\n", x.Stderr)
	for _, res := range x.Results {
		if strings.HasPrefix(res.Mime, "image/") && res.Mime != "image/svg+xml" {
			if b, err := base64.StdEncoding.DecodeString(res.Data); err == nil {
				r.Content = append(r.Content, &sdk.ImageContent{Data: b, MIMEType: res.Mime})
				continue
			}
		}
		add("", res.Data)
	}
	if x.Error != nil {
		r.IsError = true
		add("", fmt.Sprintf("%s: %s\n%s", x.Error.Name, x.Error.Message, x.Error.Traceback))
	}
	if len(r.Content) == 0 {
		add("", "(no output)")
	}
	return r
}

type runCommandArgs struct {
	Command        string `json:"command" jsonschema:"the shell command line, run with bash -c"`
	Cwd            string `json:"cwd,omitempty" jsonschema:"working directory; default the sandbox user's home"`
	SandboxID      string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to run in; default the session's sandbox"`
	TimeoutSeconds *int64 `json:"timeout_seconds,omitempty" jsonschema:"seconds before the command is stopped; default 60"`
}

func (s *session) runCommand(ctx context.Context, _ *sdk.CallToolRequest, in runCommandArgs) (*sdk.CallToolResult, any, error) {
	if in.Command == "" {
		return nil, nil, errors.New("command: required")
	}
	id, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	ms, err := timeoutMs(in.TimeoutSeconds)
	if err != nil {
		return nil, nil, err
	}
	if ms == nil {
		// A command a model starts should not outlive its turn by default.
		ms = new(int64)
		*ms = 60000
	}
	res, err := s.api.Exec(ctx, id, api.ProcessRequest{Cmd: in.Command, Cwd: in.Cwd, TimeoutMs: ms}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("running command in %s: %w", id, err)
	}
	r := text("exit code: %d\nstdout:\n%s\nstderr:\n%s", res.ExitCode, res.Stdout, res.Stderr)
	if res.Error != "" {
		r = text("exit code: %d (%s)\nstdout:\n%s\nstderr:\n%s", res.ExitCode, res.Error, res.Stdout, res.Stderr)
	}
	r.IsError = res.ExitCode != 0 || res.Error != ""
	return r, nil, nil
}

type pathArgs struct {
	Path      string `json:"path" jsonschema:"the file's path in the sandbox, absolute or relative to the user's home"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"default the session's sandbox"`
}

func (s *session) readFile(ctx context.Context, _ *sdk.CallToolRequest, in pathArgs) (*sdk.CallToolResult, any, error) {
	if in.Path == "" {
		return nil, nil, errors.New("path: required")
	}
	id, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	rc, err := s.api.ReadFile(ctx, id, in.Path)
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", in.Path, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxReadBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", in.Path, err)
	}
	if len(b) > maxReadBytes {
		return text("%s\n[truncated at %d bytes]", b[:maxReadBytes], maxReadBytes), nil, nil
	}
	return text("%s", b), nil, nil
}

type writeArgs struct {
	Path      string `json:"path" jsonschema:"the file's path in the sandbox"`
	Content   string `json:"content" jsonschema:"the file's whole new content"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"default the session's sandbox"`
}

func (s *session) writeFile(ctx context.Context, _ *sdk.CallToolRequest, in writeArgs) (*sdk.CallToolResult, any, error) {
	if in.Path == "" {
		return nil, nil, errors.New("path: required")
	}
	id, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	info, err := s.api.WriteFile(ctx, id, in.Path, strings.NewReader(in.Content))
	if err != nil {
		return nil, nil, fmt.Errorf("writing %s: %w", in.Path, err)
	}
	return text("wrote %d bytes to %s", info.Size, info.Path), nil, nil
}

type listArgs struct {
	Path      string `json:"path,omitempty" jsonschema:"the directory; default the user's home"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"default the session's sandbox"`
}

func (s *session) listFiles(ctx context.Context, _ *sdk.CallToolRequest, in listArgs) (*sdk.CallToolResult, any, error) {
	id, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	p := in.Path
	if p == "" {
		p = "."
	}
	entries, err := s.api.ListDir(ctx, id, p)
	if err != nil {
		return nil, nil, fmt.Errorf("listing %s: %w", p, err)
	}
	var b strings.Builder
	for _, e := range entries {
		fmt.Fprintf(&b, "%s\t%d\t%s\n", e.Type, e.Size, e.Path)
	}
	if b.Len() == 0 {
		b.WriteString("(empty)")
	}
	return text("%s", b.String()), nil, nil
}

func (s *session) listSandboxes(ctx context.Context, _ *sdk.CallToolRequest, _ none) (*sdk.CallToolResult, any, error) {
	list, err := s.api.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	pin := s.pinned()
	var b strings.Builder
	for _, sb := range list {
		mark := ""
		if sb.SandboxID == pin {
			mark = "\t(this session's)"
		}
		fmt.Fprintf(&b, "%s\t%s\t%s%s\n", sb.SandboxID, sb.State, sb.Template, mark)
	}
	if b.Len() == 0 {
		b.WriteString("(no sandboxes)")
	}
	return text("%s", b.String()), nil, nil
}

func (s *session) killSandbox(ctx context.Context, _ *sdk.CallToolRequest, in sandboxArg) (*sdk.CallToolResult, any, error) {
	id, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	if err := s.api.KillSandbox(ctx, id); err != nil {
		return nil, nil, fmt.Errorf("killing %s: %w", id, err)
	}
	s.mu.Lock()
	if s.pin == id {
		s.pin = ""
	}
	s.mu.Unlock()
	return text("killed %s", id), nil, nil
}

func (s *session) pauseSandbox(ctx context.Context, _ *sdk.CallToolRequest, in sandboxArg) (*sdk.CallToolResult, any, error) {
	id, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	sb, err := s.api.PauseSandbox(ctx, id)
	if err != nil {
		return nil, nil, fmt.Errorf("pausing %s: %w", id, err)
	}
	return text("%s %s", sb.SandboxID, sb.State), nil, nil
}

func (s *session) resumeSandbox(ctx context.Context, _ *sdk.CallToolRequest, in sandboxArg) (*sdk.CallToolResult, any, error) {
	id, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	sb, err := s.api.ResumeSandbox(ctx, id, api.ResumeRequest{})
	if err != nil {
		return nil, nil, fmt.Errorf("resuming %s: %w", id, err)
	}
	return text("%s %s", sb.SandboxID, sb.State), nil, nil
}

func (s *session) snapshotSandbox(ctx context.Context, _ *sdk.CallToolRequest, in sandboxArg) (*sdk.CallToolResult, any, error) {
	id, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	snap, err := s.api.Snapshot(ctx, id)
	if err != nil {
		return nil, nil, fmt.Errorf("snapshotting %s: %w", id, err)
	}
	return text("snapshot_id: %s", snap.SnapshotID), nil, nil
}

type forkArgs struct {
	Count     int    `json:"count,omitempty" jsonschema:"how many copies; default 1"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to fork; default the session's sandbox"`
}

func (s *session) forkSandbox(ctx context.Context, _ *sdk.CallToolRequest, in forkArgs) (*sdk.CallToolResult, any, error) {
	if in.Count < 0 {
		return nil, nil, errors.New("count: must not be negative")
	}
	id, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	forks, err := s.api.Fork(ctx, id, api.ForkRequest{Count: in.Count})
	if err != nil {
		return nil, nil, fmt.Errorf("forking %s: %w", id, err)
	}
	ids := make([]string, len(forks))
	for i, f := range forks {
		ids[i] = f.SandboxID
	}
	return text("forks: %s", strings.Join(ids, " ")), nil, nil
}
