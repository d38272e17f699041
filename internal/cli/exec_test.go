package cli

import (
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

func TestParseExec(t *testing.T) {
	tests := []struct {
		args        []string
		wantSandbox string
		want        api.ProcessRequest
		wantErr     bool
	}{
		{args: []string{"sb_1", "--", "ls", "-l"}, wantSandbox: "sb_1", want: api.ProcessRequest{Args: []string{"ls", "-l"}}},
		{args: []string{"sb_1", "ls", "-l"}, wantSandbox: "sb_1", want: api.ProcessRequest{Args: []string{"ls", "-l"}}},
		{
			args:        []string{"--cwd", "/tmp", "--env", "A=1", "--timeout", "30s", "sb_1", "--", "sh", "-c", "echo $A"},
			wantSandbox: "sb_1",
			want: api.ProcessRequest{Args: []string{"sh", "-c", "echo $A"}, Cwd: "/tmp",
				Envs: map[string]string{"A": "1"}, TimeoutMs: ptr(int64(30000))},
		},
		{args: []string{"sb_1", "--", "--version"}, wantSandbox: "sb_1", want: api.ProcessRequest{Args: []string{"--version"}}},
		{args: []string{"sb_1"}, wantErr: true},
		{args: []string{"sb_1", "--"}, wantErr: true},
		{args: nil, wantErr: true},
		{args: []string{"--timeout", "x", "sb_1", "ls"}, wantErr: true},
	}
	for _, tt := range tests {
		a, err := parseExec(Env{Stdout: io.Discard, Stderr: io.Discard}, tt.args)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseExec(%q) error = %v, want error %v", tt.args, err, tt.wantErr)
			continue
		}
		if err == nil && (a.sandbox != tt.wantSandbox || !reflect.DeepEqual(a.req, tt.want)) {
			t.Errorf("parseExec(%q) = %s %+v, want %s %+v", tt.args, a.sandbox, a.req, tt.wantSandbox, tt.want)
		}
	}
}

func TestExitFor(t *testing.T) {
	tests := []struct {
		code     int
		failure  string
		wantExit int
		wantNil  bool
	}{
		{code: 0, wantNil: true},
		{code: 3, wantExit: 3},
		{code: -1, wantExit: 1},
		{code: -1, failure: "timed out", wantExit: 1},
		{code: 137, failure: "timed out", wantExit: 137},
	}
	for _, tt := range tests {
		err := exitFor(tt.code, tt.failure)
		if tt.wantNil {
			if err != nil {
				t.Errorf("exitFor(%d, %q) = %v, want nil", tt.code, tt.failure, err)
			}
			continue
		}
		if got := ExitCode(err); got != tt.wantExit {
			t.Errorf("exitFor(%d, %q): exit %d, want %d", tt.code, tt.failure, got, tt.wantExit)
		}
		if tt.failure != "" && !strings.Contains(err.Error(), tt.failure) {
			t.Errorf("exitFor(%d, %q) = %v, want the failure in it", tt.code, tt.failure, err)
		}
	}
}

func ndjson(lines ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, l := range lines {
			io.WriteString(w, l+"\n")
			w.(http.Flusher).Flush()
		}
	}
}

func TestExec(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{
		"POST /v1/sandboxes/sb_1/process": ndjson(
			`{"type":"stdout","text":"out1\n"}`,
			`{"type":"stderr","text":"err1\n"}`,
			`{"type":"stdout","text":"out2\n"}`,
			`{"type":"end","exitCode":7}`,
		),
		"POST /v1/sandboxes/sb_cut/process": ndjson(`{"type":"stdout","text":"partial"}`),
	})
	out, errOut, err := lizard(t, "exec", "--cwd", "/tmp", "sb_1", "--", "ls", "-l")
	if out != "out1\nout2\n" || errOut != "err1\n" {
		t.Errorf("stdout %q stderr %q, want the streams apart", out, errOut)
	}
	if ExitCode(err) != 7 {
		t.Errorf("got %v (exit %d), want exit 7", err, ExitCode(err))
	}
	want := map[string]any{"args": []any{"ls", "-l"}, "cwd": "/tmp"}
	if got := f.last().body; !reflect.DeepEqual(got, want) {
		t.Errorf("request body = %v, want %v", got, want)
	}

	old := stdin
	stdin = strings.NewReader("input")
	t.Cleanup(func() { stdin = old })
	if _, _, err := lizard(t, "exec", "--stdin", "sb_1", "--", "cat"); ExitCode(err) != 7 {
		t.Errorf("exec --stdin: got %v, want exit 7", err)
	}
	if got := f.last().body["stdin"]; got != "input" {
		t.Errorf("stdin sent = %v, want %q", got, "input")
	}

	_, _, err = lizard(t, "exec", "sb_cut", "--", "true")
	if !errors.Is(err, client.ErrTruncated) || ExitCode(err) != 1 {
		t.Errorf("cut stream: got %v, want ErrTruncated and exit 1", err)
	}
	_, _, err = lizard(t, "exec", "sb_nope", "--", "true")
	if !errors.Is(err, client.ErrNotFound) {
		t.Errorf("unknown sandbox: got %v, want ErrNotFound", err)
	}
}
