package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/version"
)

// fakeAPI is a Lizard API on loopback: routes map "METHOD /path" to a
// handler, and every request is recorded.
type fakeAPI struct {
	t      *testing.T
	url    string
	routes map[string]http.HandlerFunc

	mu       sync.Mutex
	requests []recorded
}

type recorded struct {
	method, path, query, auth string
	body                      map[string]any
}

func newFakeAPI(t *testing.T, routes map[string]http.HandlerFunc) *fakeAPI {
	t.Helper()
	f := &fakeAPI{t: t, routes: routes}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	// The environment must not leak into tests: flags or these say where to go.
	t.Setenv("LIZARD_API_URL", srv.URL)
	t.Setenv("LIZARD_API_KEY", "key_test")
	return f
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := recorded{method: r.Method, path: r.URL.EscapedPath(), query: r.URL.RawQuery, auth: r.Header.Get("Authorization")}
	b, _ := io.ReadAll(r.Body)
	if len(b) > 0 {
		_ = json.Unmarshal(b, &rec.body)
	}
	f.mu.Lock()
	f.requests = append(f.requests, rec)
	f.mu.Unlock()
	h, ok := f.routes[r.Method+" "+r.URL.Path]
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"code":"not_found","message":"no route `+r.Method+" "+r.URL.Path+`"}`)
		return
	}
	h(w, r)
}

func (f *fakeAPI) last() recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		f.t.Fatal("no request reached the fake API")
	}
	return f.requests[len(f.requests)-1]
}

func reply(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// lizard runs the CLI and returns its stdout, stderr and error.
func lizard(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := Run(ctx, args, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

func TestKVFlag(t *testing.T) {
	tests := []struct {
		in      []string
		want    kvFlag
		wantErr bool
	}{
		{in: []string{"a=1", "b=x=y", "c="}, want: kvFlag{"a": "1", "b": "x=y", "c": ""}},
		{in: []string{"a=1", "a=2"}, want: kvFlag{"a": "2"}},
		{in: []string{"novalue"}, wantErr: true},
		{in: []string{"=v"}, wantErr: true},
	}
	for _, tt := range tests {
		kv := kvFlag{}
		var err error
		for _, s := range tt.in {
			if err = kv.Set(s); err != nil {
				break
			}
		}
		if (err != nil) != tt.wantErr {
			t.Errorf("Set(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if !tt.wantErr && !reflect.DeepEqual(kv, tt.want) {
			t.Errorf("Set(%q) = %v, want %v", tt.in, kv, tt.want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{in: "0", want: 0},
		{in: "5m", want: 5 * time.Minute},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "250ms", want: 250 * time.Millisecond},
		{in: "300", wantErr: true}, // a unit is needed: seconds or milliseconds?
		{in: "-1s", wantErr: true},
		{in: "1us", wantErr: true},
		{in: "soon", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseDuration(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseInterspersed(t *testing.T) {
	tests := []struct {
		args     []string
		wantPos  []string
		wantJSON bool
	}{
		{args: []string{"a", "--json", "b"}, wantPos: []string{"a", "b"}, wantJSON: true},
		{args: []string{"--json", "a"}, wantPos: []string{"a"}, wantJSON: true},
		{args: []string{"a", "--", "--json"}, wantPos: []string{"a", "--json"}},
		{args: nil, wantPos: nil},
	}
	for _, tt := range tests {
		fs := NewFlags(Env{Stdout: io.Discard, Stderr: io.Discard}, "test")
		asJSON := fs.Bool("json", false, "")
		pos, err := ParseInterspersed(fs, tt.args)
		if err != nil || !reflect.DeepEqual(pos, tt.wantPos) || *asJSON != tt.wantJSON {
			t.Errorf("ParseInterspersed(%q) = %q json=%v err=%v; want %q json=%v", tt.args, pos, *asJSON, err, tt.wantPos, tt.wantJSON)
		}
	}
}

func TestClientFlagsWinOverEnv(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/sandboxes": reply(200, `{"sandboxes":[]}`)})
	t.Setenv("LIZARD_API_URL", "http://127.0.0.1:1") // wrong on purpose: the flag must win
	t.Setenv("LIZARD_API_KEY", "env_key")
	if _, _, err := lizard(t, "sandbox", "list", "--api-url", f.url, "--api-key", "flag_key"); err != nil {
		t.Fatalf("sandbox list: %v", err)
	}
	if got := f.last().auth; got != "Bearer flag_key" {
		t.Errorf("Authorization = %q, want %q", got, "Bearer flag_key")
	}
}

func TestMissingKeyAndUnreachable(t *testing.T) {
	t.Setenv("LIZARD_API_URL", "http://127.0.0.1:1")
	t.Setenv("LIZARD_API_KEY", "")
	_, _, err := lizard(t, "sandbox", "list")
	if err == nil || !strings.Contains(err.Error(), "pass --api-key or set LIZARD_API_KEY") || ExitCode(err) != 2 {
		t.Errorf("without a key: got %v (exit %d), want a usage error naming --api-key and LIZARD_API_KEY", err, ExitCode(err))
	}
	_, _, err = lizard(t, "sandbox", "list", "--api-key", "k")
	if err == nil || !strings.Contains(err.Error(), "cannot reach Lizard at http://127.0.0.1:1") {
		t.Errorf("unreachable: got %v, want the cannot-reach message", err)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"-v"}, {"--version"}} {
		var out, errb bytes.Buffer
		if err := Run(context.Background(), args, &out, &errb); err != nil {
			t.Fatalf("lizard %v: %v", args, err)
		}
		if want := "lizard " + version.Version + " ("; !strings.HasPrefix(out.String(), want) {
			t.Errorf("lizard %v printed %q, want it to start %q", args, out.String(), want)
		}
	}
	var out, errb bytes.Buffer
	if err := Run(context.Background(), []string{"version", "x"}, &out, &errb); ExitCode(err) != 2 {
		t.Errorf("lizard version x: %v, want a usage error", err)
	}
}
