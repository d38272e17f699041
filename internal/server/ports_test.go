package server

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/node"
)

func TestDropParam(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"b=2&a=1", "b=2&a=1"},
		{"b=2&lizard_access_token=x&a=%2F", "b=2&a=%2F"},
		{"lizard_access_token=x", ""},
		{"lizard_access_token_2=y&lizard_access_token=x", "lizard_access_token_2=y"},
		// Escaped, the name is still the token's: Go's Query reads it so.
		{"lizard%5Faccess%5Ftoken=x&a=1", "a=1"},
		{"a=1&lizard_access_token", "a=1"},
	} {
		if got := dropParam(tc.in, AccessTokenParam); got != tc.want {
			t.Errorf("dropParam(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestConfineCookie(t *testing.T) {
	const prefix = "/v1/sandboxes/abc/ports/8000"
	for _, tc := range []struct {
		in, prefix, want string
		dropped          bool
	}{
		// Path-based: the Path goes under the port's prefix, Domain goes.
		{"sid=1; Path=/; Domain=127.0.0.1; HttpOnly", prefix, "sid=1; HttpOnly; Path=" + prefix, false},
		{"sid=1", prefix, "sid=1; Path=" + prefix, false},
		{"sid=1; path=/app/; SameSite=Lax", prefix, "sid=1; SameSite=Lax; Path=" + prefix + "/app", false},
		{"sid=1; Path=/../../../v1", prefix, "sid=1; Path=" + prefix + "/v1", false},
		{"sid=1; Path=relative", prefix, "sid=1; Path=" + prefix, false},
		{"sid=1; Path=/a; Path=/", prefix, "sid=1; Path=" + prefix, false},
		{"sid=1; DOMAIN=.example.test; Max-Age=60", prefix, "sid=1; Max-Age=60; Path=" + prefix, false},
		// Host-based: the Path stays, Domain goes.
		{"sid=1; Path=/; Domain=ports.test; Secure", "", "sid=1; Path=/; Secure", false},
		{"sid=1", "", "sid=1", false},
		// Lizard's own cookie is never the program's to set.
		{"lizard_access_token=lzp_x; Path=/", prefix, "", true},
		{" lizard_access_token=lzp_x", "", "", true},
	} {
		got, ok := confineCookie(tc.in, tc.prefix)
		if ok == tc.dropped || got != tc.want {
			t.Errorf("confineCookie(%q, %q) = %q, %v; want %q, %v", tc.in, tc.prefix, got, ok, tc.want, !tc.dropped)
		}
	}
}

func TestConfineResponse(t *testing.T) {
	program := func() http.Header {
		return http.Header{
			"Content-Security-Policy": {"sandbox allow-same-origin allow-scripts", "default-src 'self'"},
			"Service-Worker-Allowed":  {"/"},
			"Clear-Site-Data":         {`"*"`},
			"Set-Cookie":              {"a=1; Path=/; Domain=127.0.0.1", "lizard_access_token=forged; Path=/"},
			"Content-Type":            {"text/html"},
		}
	}
	// Path-based: ours is added, theirs kept (a browser enforces both).
	h := program()
	confineResponse(h, "/v1/sandboxes/abc/ports/8000")
	if got, want := h.Values("Content-Security-Policy"), []string{"sandbox allow-same-origin allow-scripts", "default-src 'self'", portSandboxCSP}; !slices.Equal(got, want) {
		t.Errorf("path-based CSP = %q; want %q", got, want)
	}
	for _, name := range []string{"Service-Worker-Allowed", "Clear-Site-Data"} {
		if v := h.Values(name); v != nil {
			t.Errorf("path-based %s = %q; want it removed", name, v)
		}
	}
	if got, want := h.Values("Set-Cookie"), []string{"a=1; Path=/v1/sandboxes/abc/ports/8000"}; !slices.Equal(got, want) {
		t.Errorf("path-based Set-Cookie = %q; want %q", got, want)
	}
	if h.Get("Content-Type") != "text/html" {
		t.Errorf("Content-Type changed: %q", h.Get("Content-Type"))
	}
	// Host-based: its own origin, so no CSP of ours and its service
	// workers stay; cookies still lose Domain.
	h = program()
	confineResponse(h, "")
	if got := h.Values("Content-Security-Policy"); len(got) != 2 {
		t.Errorf("host-based CSP = %q; want the program's two", got)
	}
	if h.Get("Service-Worker-Allowed") != "/" || h.Get("Clear-Site-Data") != "" {
		t.Errorf("host-based Service-Worker-Allowed %q Clear-Site-Data %q; want kept and removed", h.Get("Service-Worker-Allowed"), h.Get("Clear-Site-Data"))
	}
	if got, want := h.Values("Set-Cookie"), []string{"a=1; Path=/"}; !slices.Equal(got, want) {
		t.Errorf("host-based Set-Cookie = %q; want %q", got, want)
	}
}

func TestNavigation(t *testing.T) {
	for _, tc := range []struct {
		method string
		h      []string
		want   bool
	}{
		{"GET", []string{"Sec-Fetch-Mode", "navigate", "Accept", "text/html"}, true},
		{"HEAD", []string{"Sec-Fetch-Mode", "navigate"}, true},
		{"GET", []string{"Sec-Fetch-Mode", "cors", "Accept", "text/html"}, false},
		{"GET", []string{"Sec-Fetch-Mode", "no-cors"}, false},
		{"GET", []string{"Sec-Fetch-Mode", "websocket", "Upgrade", "websocket"}, false},
		{"GET", []string{"Accept", "text/html,application/xhtml+xml"}, true}, // a browser without Fetch Metadata
		{"GET", []string{"Accept", "*/*"}, false},                            // curl, httpx
		{"GET", nil, false},
		{"POST", []string{"Sec-Fetch-Mode", "navigate"}, false},
	} {
		r, _ := http.NewRequest(tc.method, "http://x/", nil)
		for i := 0; i+1 < len(tc.h); i += 2 {
			r.Header.Set(tc.h[i], tc.h[i+1])
		}
		if got := navigation(r); got != tc.want {
			t.Errorf("navigation(%s %v) = %v; want %v", tc.method, tc.h, got, tc.want)
		}
	}
}

func TestWithoutToken(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/v1/sandboxes/a/ports/8000/x%2Fy?b=1&lizard_access_token=t&c=%20", "/v1/sandboxes/a/ports/8000/x%2Fy?b=1&c=%20"},
		{"/v1/sandboxes/a/ports/8000?lizard_access_token=t", "/v1/sandboxes/a/ports/8000"},
		{"/?lizard_access_token=t", "/"},
		// Under a ports domain the path is the client's: never a host.
		{"//evil.test/x?lizard_access_token=t", "/.//evil.test/x"},
		{"/%5Cevil.test?lizard_access_token=t", "/%5Cevil.test"},
	} {
		u, err := url.ParseRequestURI(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := withoutToken(u); got != tc.want {
			t.Errorf("withoutToken(%s) = %s; want %s", tc.in, got, tc.want)
		}
		if loc, _ := url.Parse("http://api.test/base/page"); loc.ResolveReference(mustParse(t, withoutToken(u))).Host != "api.test" {
			t.Errorf("withoutToken(%s) = %s leaves the host", tc.in, withoutToken(u))
		}
	}
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestDropRefererToken(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"http://h/v1/sandboxes/a/ports/8000/", "http://h/v1/sandboxes/a/ports/8000/"},
		{"http://h/v1/sandboxes/a/ports/8000/?lizard_access_token=lzp_x", "http://h/v1/sandboxes/a/ports/8000/"},
		{"http://8000-a.d/p?x=1&lizard_access_token=lzp_x#f", "http://8000-a.d/p?x=1#f"},
		{"http://h/p?lizard%5Faccess_token=lzp_x", "http://h/p"},
		{"%zz?lizard_access_token=lzp_x", ""},
	} {
		h := http.Header{}
		if tc.in != "" {
			h.Set("Referer", tc.in)
		}
		dropRefererToken(h)
		if got := h.Get("Referer"); got != tc.want {
			t.Errorf("Referer %q became %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestCodeForAPIOrigin(t *testing.T) {
	for _, tc := range []struct{ site, dest, want string }{
		{"same-origin", "script", "script"},
		{"same-origin", "serviceworker", "serviceworker"},
		{"same-origin", "worker", "worker"},
		{"same-origin", "style", "style"},
		{"same-origin", "document", ""}, // a page: served under the CSP sandbox
		{"same-origin", "iframe", ""},
		{"same-origin", "image", ""},
		{"same-origin", "empty", ""}, // fetch: data, not code
		{"cross-site", "script", ""}, // a port's own page (an opaque origin)
		{"", "", ""},                 // curl, the SDKs
	} {
		r, _ := http.NewRequest("GET", "http://x/", nil)
		if tc.site != "" {
			r.Header.Set("Sec-Fetch-Site", tc.site)
			r.Header.Set("Sec-Fetch-Dest", tc.dest)
		}
		if got := codeForAPIOrigin(r); got != tc.want {
			t.Errorf("codeForAPIOrigin(%s, %s) = %q; want %q", tc.site, tc.dest, got, tc.want)
		}
	}
}

// TestPortHeaderBounded: the headers of a program's answer through a port
// are read up to node.MaxPortHeaderBytes, and one past it is a failed
// call. Before, the transport's default held up to 10 MiB of them for
// each of a sandbox's 1024 requests under way (a public port's need no
// key): a program answering each with 10 MiB of headers grew the API
// process by gigabytes.
func TestPortHeaderBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				n, _ := strconv.Atoi(strings.TrimPrefix(req.URL.Path, "/"))
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Big: %s\r\nContent-Length: 2\r\n\r\nok", strings.Repeat("x", n))
			}()
		}
	}()
	for _, tc := range []struct {
		size int
		ok   bool
	}{
		{16 << 10, true},
		{node.MaxPortHeaderBytes + 1, false},
		{4 << 20, false},
	} {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/%d", ln.Addr(), tc.size), nil)
		resp, err := portTransport.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("an answer with a %d-byte header: err %v; want ok %v", tc.size, err, tc.ok)
		}
	}
}
