package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/metrics"
)

// With a console, every path outside /v1 is the console's, while unknown
// /v1 paths keep the API's JSON 404; the metrics middleware sees it all.
func TestConsoleAndMetricsWiring(t *testing.T) {
	console := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "console at "+r.URL.Path)
	})
	m := metrics.New()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(New(Config{Keys: &auth.Verifier{Logger: logger}, Logger: logger, Console: console, Metrics: m}))
	defer srv.Close()

	for _, c := range []struct {
		path   string
		status int
		body   string // the body contains it
		json   bool   // the body is the API's JSON error
	}{
		{"/", 200, "console at /", false},
		{"/assets/index-1.js", 200, "console at /assets/index-1.js", false},
		{"/v1/health", 200, `"status":"ok"`, false},
		{"/v1/nope", 404, "no such API path GET /v1/nope", true},
		{"/v1/sandboxes/x/files", 401, "unauthenticated", false},
		// Only the spec's agent paths are proxied: any other is a 404.
		{"/v1/sandboxes/x/y/z", 404, "no such API path GET /v1/sandboxes/x/y/z", true},
	} {
		resp, err := http.Get(srv.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.body) {
			t.Errorf("GET %s = %d %q, want %d containing %q", c.path, resp.StatusCode, b, c.status, c.body)
		}
		if c.json {
			var e api.Error
			if err := json.Unmarshal(b, &e); err != nil || e.Code != api.CodeNotFound {
				t.Errorf("GET %s: body %q, want the API's JSON not_found", c.path, b)
			}
		}
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`lizard_http_requests_total{code="200",method="GET",route="/v1/health"} 1`,
		`lizard_http_requests_total{code="200",method="GET",route="/"} 2`,
		`lizard_http_requests_total{code="404",method="GET",route="/v1/"} 2`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
