package remote

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// agentNode is a node whose one sandbox's agent is agent: its Acquire
// records the caller it was given and ends the call with whatever cause
// the test gives end.
func agentNode(t *testing.T, agent http.Handler) (fn *fakeNode, callers chan auth.Caller, end chan error) {
	srv := httptest.NewServer(agent)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	callers, end = make(chan auth.Caller, 10), make(chan error, 1)
	fn = &fakeNode{acquire: func(ctx context.Context, id string) (agentproxy.Call, error) {
		c, _ := auth.CallerOf(ctx)
		callers <- c
		cctx, cancel := context.WithCancelCause(ctx)
		go func() {
			select {
			case err := <-end:
				cancel(err)
			case <-cctx.Done():
			}
		}()
		return agentproxy.Call{URL: u, Ctx: cctx, Release: func() { cancel(nil) }}, nil
	}}
	return fn, callers, end
}

// TestForwardedCall: an agent call goes to the node with the caller the
// API checked, reaches the agent without the cluster secret, streams back
// line by line, and ends with the node's abort event when the sandbox
// stops under it; a node that dies under a stream ends the call saying so.
func TestForwardedCall(t *testing.T) {
	// Each stream has its lines of its own: with one channel for all, a
	// stream whose end the agent had not seen yet took the next
	// subtest's line, which then waited for it forever (a loaded run).
	streams := make(chan chan string, 2)
	fn, callers, end := agentNode(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/execute" || r.Header.Get("Authorization") != "" {
			http.Error(w, "want /execute without the secret, got "+r.URL.Path+" "+r.Header.Get("Authorization"), http.StatusBadRequest)
			return
		}
		lines := make(chan string)
		streams <- lines
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.(http.Flusher).Flush()
		for {
			select {
			case l := <-lines:
				fmt.Fprintln(w, l)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	}))
	s := serve(t, fn)
	stream := func(t *testing.T) (agentproxy.Call, *bufio.Reader, chan string) {
		t.Helper()
		ctx := auth.WithCaller(context.Background(), auth.Caller{ProjectID: "p1", KeyID: "k1", SandboxID: "parent"})
		call, err := s.client.Acquire(ctx, "sb-1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(call.Release)
		req, _ := http.NewRequestWithContext(call.Ctx, http.MethodPost, call.URL.String()+"/execute", strings.NewReader(`{"code":"1"}`))
		resp, err := s.client.Transport().RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("forwarded call = %d %s", resp.StatusCode, b)
		}
		if c := <-callers; c.ProjectID != "p1" || c.KeyID != "k1" || c.SandboxID != "parent" {
			t.Errorf("the node acquired the call for %+v; want p1/k1/parent", c)
		}
		return call, bufio.NewReader(resp.Body), <-streams
	}
	read := func(t *testing.T, r *bufio.Reader) string {
		t.Helper()
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		return strings.TrimSpace(l)
	}

	t.Run("sandbox stops", func(t *testing.T) {
		_, r, lines := stream(t)
		// Each line arrives before the next is written: the stream is
		// not buffered on the way.
		for _, l := range []string{`{"n":1}`, `{"n":2}`} {
			lines <- l
			if got := read(t, r); got != l {
				t.Errorf("streamed %s; want %s", got, l)
			}
		}
		end <- &errdefs.Error{Kind: errdefs.ErrGone, Msg: "sandbox sb-1 was killed during the call"}
		var ev struct {
			Type  string
			Abort api.Abort
		}
		if err := json.Unmarshal([]byte(read(t, r)), &ev); err != nil || ev.Type != api.EventAbort ||
			ev.Abort.Status != http.StatusGone || !strings.Contains(ev.Abort.Message, "was killed") {
			t.Errorf("the stream ended with %+v (%v); want the node's abort event, 410 saying it was killed", ev, err)
		}
	})

	t.Run("node dies", func(t *testing.T) {
		call, r, lines := stream(t)
		lines <- `{"n":1}`
		read(t, r)
		s.srv.CloseClientConnections() // the node's connection breaks
		if _, err := io.ReadAll(r); err == nil {
			t.Error("the stream of a node that died ended cleanly")
		}
		cause := context.Cause(call.Ctx)
		if !errors.Is(cause, errdefs.ErrUnavailable) || !errors.Is(cause, ErrUnreachable) || !strings.Contains(errdefs.Message(cause), "stopped answering") {
			t.Errorf("the call ended with %v; want ErrUnavailable saying the node stopped answering", cause)
		}
	})
}

// TestForwardedCallRefused: a forwarded call the node refuses for the
// cluster secret ends saying so, never blaming the caller's key.
func TestForwardedCallRefused(t *testing.T) {
	fn, _, _ := agentNode(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("a call with the wrong secret reached the agent")
	}))
	s := serve(t, fn)
	bad := NewClient("n1", s.srv.Listener.Addr().String(), NewTransport("another-secret-0123456789abcdef-0123456789"))
	call, err := bad.Acquire(auth.WithProjectID(context.Background(), "p1"), "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	defer call.Release()
	req, _ := http.NewRequestWithContext(call.Ctx, http.MethodGet, call.URL.String()+"/health", nil)
	if _, err := bad.Transport().RoundTrip(req); err == nil {
		t.Error("a forwarded call with the wrong secret went through")
	}
	if cause := context.Cause(call.Ctx); !errors.Is(cause, errdefs.ErrUnavailable) || !strings.Contains(errdefs.Message(cause), "LIZARD_CLUSTER_SECRET") {
		t.Errorf("the call ended with %v; want ErrUnavailable naming LIZARD_CLUSTER_SECRET", cause)
	}
}

// TestPorts: a request to an exposed port reaches the sandbox's port on the
// node with the program's own headers and without the cluster secret, and
// the node's refusals arrive as the public API's errors.
func TestPorts(t *testing.T) {
	port := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/private" {
			w.WriteHeader(http.StatusUnauthorized) // the program's own 401
			return
		}
		fmt.Fprintf(w, "%s %s?%s auth=%q secret=%q fwd=%q", r.Method, r.URL.Path, r.URL.RawQuery,
			r.Header.Get("Authorization"), r.Header.Get(HeaderSecret), r.Header.Get("X-Forwarded-Host"))
	}))
	defer port.Close()
	refused := httptest.NewServer(http.NotFoundHandler())
	refusedURL, _ := url.Parse(refused.URL)
	refused.Close()
	portURL, _ := url.Parse(port.URL)

	var opened []string
	released := make(chan struct{}, 10)
	fn := &fakeNode{openPort: func(ctx context.Context, id string, p int, resume bool) (agentproxy.Call, error) {
		opened = append(opened, fmt.Sprintf("%s:%d resume=%v", id, p, resume))
		switch id {
		case "paused":
			return agentproxy.Call{}, &errdefs.Error{Kind: errdefs.ErrConflict, Msg: "sandbox paused is paused"}
		case "deaf":
			return agentproxy.Call{URL: refusedURL, Ctx: ctx, Release: func() { released <- struct{}{} }}, nil
		}
		return agentproxy.Call{URL: portURL, Ctx: ctx, Release: func() { released <- struct{}{} }}, nil
	}}
	s := serve(t, fn)

	do := func(id string, resume bool, path string) (int, string) {
		t.Helper()
		call, err := s.client.OpenPort(context.Background(), id, 8080, resume)
		if err != nil {
			t.Fatal(err)
		}
		defer call.Release()
		req, _ := http.NewRequestWithContext(call.Ctx, http.MethodGet, call.URL.String()+path, nil)
		req.Header.Set("Authorization", "Bearer program-token")
		req.Header.Set("X-Forwarded-Host", "8080-sb-1.example.test")
		resp, err := call.Transport.RoundTrip(req)
		if err != nil {
			t.Fatalf("port call %s%s: %v", id, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	status, body := do("sb-1", true, "/a/b?q=1")
	if want := `GET /a/b?q=1 auth="Bearer program-token" secret="" fwd="8080-sb-1.example.test"`; status != http.StatusOK || body != want {
		t.Errorf("port call = %d %s; want 200 %s", status, body, want)
	}
	if status, _ := do("sb-1", false, "/private"); status != http.StatusUnauthorized {
		t.Errorf("the program's own 401 arrived as %d", status)
	}
	status, body = do("paused", false, "/")
	if status != http.StatusConflict || !strings.Contains(body, `"code":"`+api.CodeConflict+`"`) || !strings.Contains(body, "is paused") {
		t.Errorf("port of a paused sandbox = %d %s; want 409 with the node's message", status, body)
	}
	status, body = do("deaf", false, "/")
	if status != http.StatusBadGateway || !strings.Contains(body, "nothing listens on port 8080") {
		t.Errorf("port nothing listens on = %d %s; want 502 saying nothing listens", status, body)
	}
	want := []string{"sb-1:8080 resume=true", "sb-1:8080 resume=false", "paused:8080 resume=false", "deaf:8080 resume=false"}
	if fmt.Sprint(opened) != fmt.Sprint(want) {
		t.Errorf("the node opened %q; want %q", opened, want)
	}
	// Released on the node once each call is done, which may be just
	// after its answer arrived here.
	for i := range 3 {
		select {
		case <-released:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d port calls released; want the 3 that opened", i)
		}
	}
}
