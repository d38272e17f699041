package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

func get(t *testing.T, h http.Handler, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	if got := rec.Header().Get("Content-Security-Policy"); got != CSP {
		t.Errorf("%s %s: CSP %q, want %q", method, path, got, CSP)
	}
	return rec
}

func TestHandler(t *testing.T) {
	built := handler(fstest.MapFS{
		"dist/.gitignore":       {Data: []byte("*\n")},
		"dist/index.html":       {Data: []byte("<!doctype html><title>Lizard</title>")},
		"dist/assets/app-1a.js": {Data: []byte("console.log(1)")},
		"dist/favicon.svg":      {Data: []byte("<svg/>")},
	})
	bare := handler(fstest.MapFS{"dist/.gitignore": {Data: []byte("*\n")}})
	for _, c := range []struct {
		name         string
		h            http.Handler
		method, path string
		status       int
		body, ctype  string
	}{
		{"index", built, "GET", "/", 200, "<title>Lizard</title>", "text/html"},
		{"asset", built, "GET", "/assets/app-1a.js", 200, "console.log(1)", "text/javascript"},
		{"public file", built, "GET", "/favicon.svg", 200, "<svg/>", "image/svg+xml"},
		{"missing asset", built, "GET", "/assets/nope.js", 404, "no such console file", "text/plain"},
		{"dot file", built, "GET", "/.gitignore", 404, "", "text/plain"},
		{"climb out", built, "GET", "/../console.go", 404, "no such console file /console.go", "text/plain"},
		{"post", built, "POST", "/", 405, "only GET and HEAD", "text/plain"},
		{"not built", bare, "GET", "/", 200, "console not built: run make build", "text/html"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := get(t, c.h, c.method, c.path)
			if rec.Code != c.status {
				t.Fatalf("status %d, want %d (body %q)", rec.Code, c.status, rec.Body)
			}
			if !strings.Contains(rec.Body.String(), c.body) {
				t.Errorf("body %q, want it to contain %q", rec.Body, c.body)
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, c.ctype) {
				t.Errorf("Content-Type %q, want %s", ct, c.ctype)
			}
		})
	}
}

// The embedded copy always has dist/.gitignore, so Handler works in a
// fresh clone whether or not the console was built.
func TestEmbedded(t *testing.T) {
	rec := get(t, Handler(), "GET", "/")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "Lizard") {
		t.Fatalf("GET / = %d %q, want 200 with the console or the not-built page", rec.Code, rec.Body)
	}
}
