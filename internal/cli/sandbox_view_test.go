package cli

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSandboxView: view mints a viewer and prints the console's URL (or the
// WebSocket's, or the whole viewer), sending control and the TTL; a sandbox
// without a desktop is the server's 409, said as it is.
func TestSandboxView(t *testing.T) {
	viewer := `{"viewerId":"v1","token":"lzv_t","control":true,"expiresAt":"2026-01-01T01:00:00Z",` +
		`"websocketUrl":"ws://h/v1/sandboxes/sb_1/desktop/stream/websocket?token=lzv_t","url":"http://h/#/sandboxes/sb_1/desktop?token=lzv_t"}`
	f := newFakeAPI(t, map[string]http.HandlerFunc{
		"POST /v1/sandboxes/sb_1/desktop/stream": reply(201, viewer),
		"POST /v1/sandboxes/sb_2/desktop/stream": reply(409, `{"code":"conflict","message":"sandbox sb_2 has no desktop (it has no x11vnc or websockify): create it from a desktop template"}`),
	})
	out, _, err := lizard(t, "sandbox", "view", "sb_1", "--control", "--ttl", "10m")
	if err != nil || strings.TrimSpace(out) != "http://h/#/sandboxes/sb_1/desktop?token=lzv_t" {
		t.Fatalf("view: %q (%v)", out, err)
	}
	if b := f.last().body; b["control"] != true || b["ttlSeconds"] != float64(600) {
		t.Errorf("body = %v, want control and ttlSeconds 600", b)
	}
	if out, _, _ := lizard(t, "sandbox", "view", "sb_1", "--websocket"); !strings.HasPrefix(out, "ws://h/v1/sandboxes/sb_1/desktop/stream/websocket?token=") {
		t.Errorf("view --websocket: %q", out)
	}
	if b := f.last().body; len(b) != 1 || b["ttlSeconds"] != float64(3600) {
		t.Errorf("a view-only viewer's body = %v, want ttlSeconds 3600 alone", b)
	}
	if out, _, _ := lizard(t, "sandbox", "view", "sb_1", "--json"); !strings.Contains(out, `"viewerId": "v1"`) {
		t.Errorf("view --json: %q", out)
	}
	if _, _, err := lizard(t, "sandbox", "view", "sb_2"); err == nil || !strings.Contains(err.Error(), "has no desktop") {
		t.Errorf("view of a sandbox without a desktop: %v", err)
	}
	if _, _, err := lizard(t, "sandbox", "view", "sb_1", "--ttl", "25h"); ExitCode(err) != 2 {
		t.Errorf("view --ttl 25h: %v, want a usage error", err)
	}
}

func TestSandboxScreenshot(t *testing.T) {
	png := "\x89PNG\r\n\x1a\nbytes"
	f := newFakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/sandboxes/sb_1/desktop/screenshot": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "image/png")
			w.Write([]byte(png))
		},
	})
	file := filepath.Join(t.TempDir(), "s.png")
	if _, _, err := lizard(t, "sandbox", "screenshot", "sb_1", "-o", file, "--region", "1,2,30,40"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != png {
		t.Errorf("the file holds %q (%v)", b, err)
	}
	if q := f.last().query; q != "height=40&width=30&x=1&y=2" {
		t.Errorf("query = %q", q)
	}
	if out, _, err := lizard(t, "sandbox", "screenshot", "sb_1", "-o", "-"); err != nil || out != png {
		t.Errorf("-o -: %q (%v)", out, err)
	}
	for _, args := range [][]string{{"sandbox", "screenshot", "sb_1"}, {"sandbox", "screenshot", "sb_1", "-o", file, "--region", "1,2"}} {
		if _, _, err := lizard(t, args...); ExitCode(err) != 2 {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
