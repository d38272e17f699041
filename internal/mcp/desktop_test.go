package mcp

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// TestDesktopTools: screenshot answers the PNG as an image; click, type_text
// and press_keys send the desktop API's requests for the named sandbox, and
// its refusals come back as the tools' errors. The API is a server of the
// desktop routes, reached through the real Go client.
func TestDesktopTools(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nfake")
	var mice []api.DesktopMouseRequest
	var keys []api.DesktopKeyboardRequest
	fail := func(w http.ResponseWriter, status int, code, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(api.Error{Code: code, Message: msg})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/desktop/screenshot", func(w http.ResponseWriter, r *http.Request) {
		if id := r.PathValue("id"); id != "sb1" {
			fail(w, http.StatusConflict, api.CodeConflict, "sandbox "+id+" has no desktop")
			return
		}
		w.Header().Set("Content-Type", "image/png")
		w.Write(png)
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/desktop/mouse", func(w http.ResponseWriter, r *http.Request) {
		var req api.DesktopMouseRequest
		json.NewDecoder(r.Body).Decode(&req)
		mice = append(mice, req)
		if *req.X < 0 {
			fail(w, http.StatusBadRequest, api.CodeInvalidArgument, "x -5 is off any screen")
			return
		}
		json.NewEncoder(w).Encode(api.DesktopCursor{X: *req.X, Y: *req.Y})
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/desktop/keyboard", func(w http.ResponseWriter, r *http.Request) {
		var req api.DesktopKeyboardRequest
		json.NewDecoder(r.Body).Decode(&req)
		keys = append(keys, req)
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := client.New(client.Config{BaseURL: srv.URL, APIKey: "lz_test"})
	if err != nil {
		t.Fatal(err)
	}
	cs := connect(t, &fake{desktop: c})

	_, res, err := call(t, cs, "screenshot", map[string]any{"sandbox_id": "sb1"})
	if err != nil || res.IsError || len(res.Content) != 1 {
		t.Fatalf("screenshot: %v, %+v", err, res)
	}
	img, ok := res.Content[0].(*sdk.ImageContent)
	if !ok || img.MIMEType != "image/png" || !bytes.Equal(img.Data, png) {
		t.Errorf("screenshot content = %#v, want the PNG as an image", res.Content[0])
	}
	if out, res, _ := call(t, cs, "screenshot", map[string]any{"sandbox_id": "sb2"}); !res.IsError || !strings.Contains(out, "has no desktop") {
		t.Errorf("screenshot of a sandbox without a desktop: %q, error %v", out, res.IsError)
	}
	if out, res, _ := call(t, cs, "click", map[string]any{"sandbox_id": "sb1", "x": 10, "y": 20, "count": 2}); res.IsError || out != "clicked at (10, 20)" {
		t.Errorf("click: %q", out)
	}
	if out, res, _ := call(t, cs, "click", map[string]any{"sandbox_id": "sb1", "x": -5, "y": 20}); !res.IsError || !strings.Contains(out, "off any screen") {
		t.Errorf("click off the screen: %q", out)
	}
	if len(mice) != 2 || mice[0].Action != "click" || *mice[0].X != 10 || *mice[0].Y != 20 || mice[0].Count != 2 {
		t.Errorf("mouse requests = %+v", mice)
	}
	call(t, cs, "type_text", map[string]any{"sandbox_id": "sb1", "text": "$(id); hi"})
	call(t, cs, "press_keys", map[string]any{"sandbox_id": "sb1", "keys": []string{"ctrl+l", "enter"}})
	if len(keys) != 2 || keys[0].Action != "type" || keys[0].Text != "$(id); hi" || keys[1].Action != "press" || !slices.Equal(keys[1].Keys, []string{"ctrl+l", "enter"}) {
		t.Errorf("keyboard requests = %+v", keys)
	}
}
