package cli

import (
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
)

func TestParseRun(t *testing.T) {
	tests := []struct {
		args        []string
		wantSandbox string
		want        api.ExecuteRequest
		wantErr     bool
	}{
		{args: []string{"sb_1", "1+1"}, wantSandbox: "sb_1", want: api.ExecuteRequest{Code: "1+1", Language: "python"}},
		{
			args:        []string{"--language", "bash", "--timeout", "0", "--env", "A=1", "sb_1", "echo $A"},
			wantSandbox: "sb_1",
			want:        api.ExecuteRequest{Code: "echo $A", Language: "bash", TimeoutMs: ptr(int64(0)), Envs: map[string]string{"A": "1"}},
		},
		// A context decides its own language unless one is asked for.
		{args: []string{"--context", "ctx_1", "sb_1", "x"}, wantSandbox: "sb_1", want: api.ExecuteRequest{Code: "x", ContextID: "ctx_1"}},
		{args: []string{"sb_1", "-1"}, wantSandbox: "sb_1", want: api.ExecuteRequest{Code: "-1", Language: "python"}},
		{args: []string{"sb_1", "--", "-1"}, wantSandbox: "sb_1", want: api.ExecuteRequest{Code: "-1", Language: "python"}},
		{args: []string{"sb_1", "-"}, wantSandbox: "sb_1", want: api.ExecuteRequest{Code: "-", Language: "python"}},
		{args: []string{"--language", "ruby", "sb_1", "x"}, wantErr: true},
		{args: []string{"sb_1"}, wantErr: true},
		{args: []string{"sb_1", "a", "b"}, wantErr: true},
	}
	for _, tt := range tests {
		a, err := parseRun(Env{Stdout: io.Discard, Stderr: io.Discard}, tt.args)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseRun(%q) error = %v, want error %v", tt.args, err, tt.wantErr)
			continue
		}
		if err == nil && (a.sandbox != tt.wantSandbox || !reflect.DeepEqual(a.req, tt.want)) {
			t.Errorf("parseRun(%q) = %s %+v, want %s %+v", tt.args, a.sandbox, a.req, tt.wantSandbox, tt.want)
		}
	}
}

func TestRun(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{
		"POST /v1/sandboxes/sb_1/execute": ndjson(
			`{"type":"stdout","text":"hello\n"}`,
			`{"type":"stderr","text":"careful\n"}`,
			`{"type":"result","result":{"type":"display","mime":"image/png","data":"iVBORw0K"}}`,
			`{"type":"result","result":{"type":"result","mime":"text/plain","data":"np.int64(6)"}}`,
			`{"type":"end","executionCount":2}`,
		),
		"POST /v1/sandboxes/sb_err/execute": ndjson(
			`{"type":"error","error":{"name":"ZeroDivisionError","message":"division by zero","traceback":"Traceback...\nZeroDivisionError: division by zero"}}`,
			`{"type":"end"}`,
		),
	})
	out, errOut, err := lizard(t, "run", "sb_1", "df.x.sum()")
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if out != "hello\nnp.int64(6)\n" {
		t.Errorf("stdout = %q, want the output then the text result", out)
	}
	if !strings.Contains(errOut, "careful\n") || !strings.Contains(errOut, "image/png") || strings.Contains(errOut, "iVBOR") {
		t.Errorf("stderr = %q, want stderr and a note about the image, not its base64", errOut)
	}
	if got := f.last().body; !reflect.DeepEqual(got, map[string]any{"code": "df.x.sum()", "language": "python"}) {
		t.Errorf("request body = %v", got)
	}

	_, errOut, err = lizard(t, "run", "sb_err", "1/0")
	if ExitCode(err) != 1 || !strings.Contains(err.Error(), "ZeroDivisionError") {
		t.Errorf("code error: got %v (exit %d), want exit 1 naming ZeroDivisionError", err, ExitCode(err))
	}
	if !strings.Contains(errOut, "Traceback") {
		t.Errorf("stderr = %q, want the traceback", errOut)
	}

	old := stdin
	stdin = strings.NewReader("print('from stdin')")
	t.Cleanup(func() { stdin = old })
	if _, _, err := lizard(t, "run", "--language", "python", "sb_1", "-"); err != nil {
		t.Fatalf("run -: %v", err)
	}
	if got := f.last().body["code"]; got != "print('from stdin')" {
		t.Errorf("code = %v, want what stdin held", got)
	}
}
