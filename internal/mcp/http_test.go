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

// TestHandlerSessionBound: a key holds at most maxSessions sessions; one
// it ends makes room, and another key is not counted with it.
func TestHandlerSessionBound(t *testing.T) {
	srv := httptest.NewServer(Handler("http://127.0.0.1:1", "test", slog.New(slog.NewTextHandler(io.Discard, nil))))
	defer srv.Close()
	do := func(method, key, session string) (int, string) {
		t.Helper()
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		}
		req, _ := http.NewRequest(method, srv.URL, body)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return resp.StatusCode, resp.Header.Get("Mcp-Session-Id")
		}
		return resp.StatusCode, string(b)
	}
	var first string
	for i := range maxSessions {
		status, id := do(http.MethodPost, "key-a", "")
		if status != http.StatusOK || id == "" {
			t.Fatalf("session %d: %d %q", i+1, status, id)
		}
		if i == 0 {
			first = id
		}
	}
	if status, msg := do(http.MethodPost, "key-a", ""); status != http.StatusTooManyRequests || !strings.Contains(msg, "64 MCP sessions open") {
		t.Errorf("session %d of a key: %d %q; want 429 naming the bound", maxSessions+1, status, msg)
	}
	if status, _ := do(http.MethodPost, "key-b", ""); status != http.StatusOK {
		t.Errorf("another key's first session: %d; want 200", status)
	}
	if status, _ := do(http.MethodDelete, "key-a", first); status >= 300 {
		t.Fatalf("DELETE of a session: %d", status)
	}
	if status, _ := do(http.MethodPost, "key-a", ""); status != http.StatusOK {
		t.Errorf("a session once one ended: %d; want 200", status)
	}
}
