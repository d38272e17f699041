package envd

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/e2b/envd/proto/filesystem"
	"github.com/lizard-build/lizard/internal/e2b/envd/proto/filesystem/filesystemconnect"
)

// TestAgentAnswerBounded: an agent replaced by code in the sandbox that
// answers a list or an upload without end is read up to maxAnswerBytes,
// then the call ends with an error saying the sandbox's answer was too
// large (UNAVAILABLE on the RPC, 502 on /files), not held whole; an
// answer within the bound is read as before.
func TestAgentAnswerBounded(t *testing.T) {
	sent := make(chan int64, 1) // bytes of an endless answer the agent got out
	endless := func(w http.ResponseWriter, head, item string) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, head)
		chunk := []byte(strings.Repeat(item, 64<<10/len(item)))
		n := int64(len(head))
		// Past 4× the bound the reader is holding it: stop, so that the
		// test fails rather than the machine.
		for n < 4*maxAnswerBytes {
			m, err := w.Write(chunk)
			n += int64(m)
			if err != nil {
				break
			}
		}
		sent <- n
	}
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/files/list" && r.URL.Query().Get("path") == "/small":
			json.NewEncoder(w).Encode(api.EntryList{Entries: []api.EntryInfo{fileEntry("/small/a", "file")}})
		case r.URL.Path == "/files/list":
			endless(w, `{"entries":[`, `{"name":"a","path":"/a","type":"file"},`)
		case r.URL.Path == "/files" && r.Method == http.MethodPut:
			io.Copy(io.Discard, r.Body)
			endless(w, `{"name":"`, "a")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(agent.Close)
	base, _ := url.Parse(agent.URL)
	open := func(ctx context.Context) (*session, error) {
		return &session{sandbox: "sb1", project: "p1", ctx: ctx, release: func() {},
			agent: overAgent(ctx, base, agent)}, nil
	}
	srv := httptest.NewServer(newHandler(open, slog.New(slog.DiscardHandler), 1<<20))
	t.Cleanup(srv.Close)
	fs := filesystemconnect.NewFilesystemClient(http.DefaultClient, srv.URL)
	ctx := context.Background()

	// The agent's handler may still be writing into the closed
	// connection when the call returns: its count comes when it stops.
	bounded := func(what string) {
		t.Helper()
		// The loopback's socket buffers hold a few MiB more.
		if n := <-sent; n > maxAnswerBytes+16<<20 {
			t.Errorf("%s: the agent got %d bytes of its answer out; want at most the bound %d and the socket buffers", what, n, maxAnswerBytes)
		}
	}

	small, err := fs.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: "/small"}))
	if err != nil || len(small.Msg.GetEntries()) != 1 || small.Msg.GetEntries()[0].GetPath() != "/small/a" {
		t.Fatalf("list of a small directory = %v, %v", small, err)
	}

	_, err = fs.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: "/big"}))
	if codeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "answer to GET /files/list was too large: over 64 MiB") {
		t.Errorf("list answered without end: %v; want unavailable, the answer too large", err)
	}
	bounded("list")

	resp, err := http.Post(srv.URL+"/files?path=/x", "application/octet-stream", strings.NewReader("1"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e envdError
	if resp.StatusCode != http.StatusBadGateway || json.Unmarshal(body, &e) != nil || e.Code != http.StatusBadGateway ||
		!strings.Contains(e.Message, "answer to an upload was too large") {
		t.Errorf("upload answered without end: %d %s; want 502, the answer too large", resp.StatusCode, body)
	}
	bounded("upload")
}

// TestAgentResolvesSymlinks: envd's Stat and List ask the agent to
// describe symlinks as envd does (resolveSymlinks), and only they: a
// download or a watch names the path as given.
func TestAgentResolvesSymlinks(t *testing.T) {
	asked := map[string]string{}
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked[r.URL.Path] = r.URL.Query().Get("resolveSymlinks")
		switch r.URL.Path {
		case "/files/list":
			json.NewEncoder(w).Encode(api.EntryList{})
		default:
			json.NewEncoder(w).Encode(fileEntry("/x", "file"))
		}
	}))
	t.Cleanup(agent.Close)
	base, _ := url.Parse(agent.URL)
	ctx := context.Background()
	a := overAgent(ctx, base, agent)
	if _, err := a.Stat(ctx, "", "/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.List(ctx, "root", "/"); err != nil {
		t.Fatal(err)
	}
	if asked["/files/stat"] != "true" || asked["/files/list"] != "true" {
		t.Errorf("resolveSymlinks asked of stat %q, list %q; want true and true", asked["/files/stat"], asked["/files/list"])
	}
}

// overAgent is envd's agent of sandbox sb1 over the agent proxy's
// transport to a fake agent at base.
func overAgent(ctx context.Context, base *url.URL, agent *httptest.Server) Agent {
	return newAgent("sb1", &agentproxy.Transport{Call: agentproxy.Call{URL: base, Ctx: ctx}, Base: agent.Client().Transport, MaxJSON: maxAnswerBytes})
}
