// Package console serves Lizard's web console (docs/console.md): the
// TypeScript app in web/console, built by `make build` into dist/ and
// embedded into the binary, so that `lizard serve` needs no other files and
// the browser fetches nothing from anywhere but the server itself.
package console

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// dist holds the built app. Only dist/.gitignore is committed, so that a
// fresh clone compiles; `all:` lets that dot file satisfy the pattern.
//
//go:embed all:dist
var dist embed.FS

// CSP is the Content-Security-Policy of every console response. Scripts,
// stylesheets and API calls come only from the server; no script is
// inlined. HTML and SVG made by sandboxed code are shown in iframes with an
// empty sandbox attribute (opaque origin, no scripts), which inherit this
// policy too. Inline styles are allowed because xterm.js (the terminal)
// writes its own: <style> elements it generates for its theme, fonts and
// row layout, and style attributes for 24-bit colours. The console never
// parses untrusted text as markup, so no one else can add any, and a style
// can load nothing from another origin (default-src 'none').
const CSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; " +
	"connect-src 'self'; frame-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// notBuilt is served when the binary was built without the console.
const notBuilt = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Lizard console not built</title></head>
<body><main><h1>Lizard: console not built: run make build</h1>
<p>This lizard binary was built without the web console. Run <code>make build</code>
(it builds web/console with npm, then the binary) and start <code>lizard serve</code> again.</p>
<p>The API is served under <code>/v1</code> all the same.</p></main></body></html>
`

// Handler serves the console: index.html at /, the built assets by path.
// Paths it does not have are a plain 404; the API's own paths (/v1/...)
// must be routed elsewhere before it.
func Handler() http.Handler { return handler(dist) }

func handler(fsys fs.FS) http.Handler {
	sub, err := fs.Sub(fsys, "dist")
	if err != nil {
		panic(err) // dist is a literal directory of the embed
	}
	index, err := fs.ReadFile(sub, "index.html")
	built := err == nil
	start := time.Now()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "the console serves only GET and HEAD; the API is under /v1", http.StatusMethodNotAllowed)
			return
		}
		p := path.Clean("/" + r.URL.Path)
		if p == "/" || p == "/index.html" {
			h.Set("Cache-Control", "no-cache")
			if !built {
				h.Set("Content-Type", "text/html; charset=utf-8")
				w.WriteHeader(http.StatusOK)
				w.Write([]byte(notBuilt))
				return
			}
			http.ServeContent(w, r, "index.html", start, bytes.NewReader(index))
			return
		}
		name := strings.TrimPrefix(p, "/")
		if strings.HasPrefix(path.Base(name), ".") {
			http.NotFound(w, r)
			return
		}
		b, err := fs.ReadFile(sub, name)
		if err != nil {
			http.Error(w, "no such console file "+p+"; the console is at /", http.StatusNotFound)
			return
		}
		if strings.HasPrefix(name, "assets/") {
			// Vite names assets by content hash.
			h.Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			h.Set("Cache-Control", "no-cache")
		}
		http.ServeContent(w, r, name, start, bytes.NewReader(b))
	})
}
