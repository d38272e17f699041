package mcp

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHandlerSessions: a session opens through a reverse proxy's Host on
// a loopback listener, and answers only the key that opened it.
// Initialize and tools/list call no API, so baseURL goes nowhere.
func TestHandlerSessions(t *testing.T) {
	srv := httptest.NewServer(Handler("http://127.0.0.1:1", "test", slog.New(slog.NewTextHandler(io.Discard, nil))))
	defer srv.Close()
	post := func(key, session, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		req.Host = "lizard.example.com"
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	resp, body := post("key-a", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || session == "" {
		t.Fatalf("initialize with Host lizard.example.com: %d %q", resp.StatusCode, body)
	}
	post("key-a", session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	const list = `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	if resp, body := post("key-a", session, list); resp.StatusCode != http.StatusOK || !strings.Contains(body, "run_code") {
		t.Errorf("tools/list with the session's key: %d %q", resp.StatusCode, body)
	}
	if resp, body := post("key-b", session, list); resp.StatusCode < 400 || strings.Contains(body, "run_code") {
		t.Errorf("tools/list with another key on the session: %d %q, want refused", resp.StatusCode, body)
	}
}
