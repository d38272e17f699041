package agentproxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestUnreadBodyClosesTheConnection: a call answered before its request's
// body was read (the sandbox's node did not answer, so the body was never
// sent) says Connection: close. In full duplex the server closes such a
// connection without saying so, and the client's next request on it, a
// create or a call of another sandbox, failed without a status ("server
// closed idle connection": bench/fleet's lost nodes, 964 such calls). A
// call without a body keeps its connection.
func TestUnreadBodyClosesTheConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead, _ := url.Parse("http://" + ln.Addr().String())
	ln.Close() // nothing answers there
	p := &Proxy{
		Acquire: func(ctx context.Context, id string) (Call, error) {
			return Call{URL: dead, Ctx: ctx, Release: func() {}}, nil
		},
		Transport: http.DefaultTransport,
		Fail: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		},
		Unanswered: func(context.Context, string) error { return io.ErrUnexpectedEOF },
		Log:        slog.New(slog.DiscardHandler),
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/sandboxes/{id}/", p)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, tc := range []struct {
		method string
		body   io.Reader
		close  bool
	}{
		{http.MethodPost, strings.NewReader(`{"code":"1+1"}`), true},
		{http.MethodGet, nil, false},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+"/v1/sandboxes/sb1/execute", tc.body)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Close != tc.close {
			t.Errorf("%s to a node not answering: %d, Connection: close %v; want 503, %v", tc.method, resp.StatusCode, resp.Close, tc.close)
		}
	}
}
