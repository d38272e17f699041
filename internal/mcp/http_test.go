package mcp

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lizard-build/lizard/client"
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

// TestRunCodeLineBounded: the API process's sessions read a run's stream
// with a client whose MaxStreamLine is maxLine, which fails a line past it
// instead of holding it: the run is stopped as one past maxRunBytes is,
// and the rest of the line is never read. Before, the client's decoder held the whole line (up to
// the kernel's 256 MiB frame, from code that replaced the agent) and only
// then counted it.
func TestRunCodeLineBounded(t *testing.T) {
	const line = 4 * maxLine
	sent := make(chan int, 1)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		io.WriteString(w, `{"type":"result","result":{"type":"display_data","mime":"image/png","data":"`)
		chunk := strings.Repeat("A", 64<<10)
		n := 0
		for ; n < line; n += len(chunk) {
			if _, err := io.WriteString(w, chunk); err != nil {
				break // the reader closed the stream
			}
		}
		io.WriteString(w, `"}}`+"\n"+`{"type":"end"}`+"\n")
		sent <- n
	}))
	defer api.Close()
	c, err := client.New(client.Config{BaseURL: api.URL, APIKey: "lz_test_key", MaxStreamLine: maxLine})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, ct := sdk.NewInMemoryTransports()
	ss, err := NewServer(c, "test").Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	text, res, err := call(t, cs, "run_code", map[string]any{"code": "display(huge)", "sandbox_id": "sb_1"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(text, "passed 16 MiB") {
		t.Errorf("run_code of one huge result = %.200q (error %v); want an error naming the 16 MiB bound", text, res.IsError)
	}
	select {
	case n := <-sent:
		if n >= line {
			t.Errorf("the API wrote all %d bytes of the line; want the stream closed under it", n)
		}
	case <-time.After(10 * time.Second):
		t.Error("the API's stream was not closed")
	}
}
