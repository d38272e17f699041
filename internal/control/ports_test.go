package control

import (
	"errors"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/errdefs"
)

// TestPortsHost: a sandbox's portsHost (E2B's maskRequestHost) becomes a
// header line of every request to its ports: the characters of a host
// name or address with an optional port, ${PORT} the port asked for, and
// nothing that could end the line or start another request.
func TestPortsHost(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ok   bool
		want string // for port 8000
	}{
		{"", true, ""},
		{"localhost", true, "localhost"},
		{"localhost:${PORT}", true, "localhost:8000"},
		{"app.example.test:443", true, "app.example.test:443"},
		{"${PORT}-app.test", true, "8000-app.test"},
		{"10.0.0.1:${PORT}", true, "10.0.0.1:8000"},
		{"[::1]:${PORT}", true, "[::1]:8000"},
		{"a\r\nX-Evil: 1", false, ""},
		{"a b", false, ""},
		{"a/b", false, ""},
		{"a@b", false, ""},
		{"ünï.test", false, ""},
		{"a:${HOST}", false, ""},
		{"a:{PORT}", false, ""},
		{"a:$PORT", false, ""},
		{strings.Repeat("a", 255), true, strings.Repeat("a", 255)},
		{strings.Repeat("a", 256), false, ""},
	} {
		got, err := portsHost(tc.in)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, errdefs.ErrInvalid)) {
			t.Errorf("portsHost(%q): %v; want ok %v (else ErrInvalid)", tc.in, err, tc.ok)
			continue
		}
		if tc.ok && PortsHostFor(got, 8000) != tc.want {
			t.Errorf("PortsHostFor(%q, 8000) = %q; want %q", got, PortsHostFor(got, 8000), tc.want)
		}
	}
}
