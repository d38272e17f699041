package server

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestSocketKey(t *testing.T) {
	for _, tc := range []struct {
		name      string
		upgrade   string
		auth      string
		protocols []string
		wantAuth  string
		wantProto string
	}{
		{"key as a subprotocol", "websocket", "", []string{"lizard, lizard.bearer.lz_k_s"}, "Bearer lz_k_s", "lizard"},
		{"on two header lines", "websocket", "", []string{"lizard", "lizard.bearer.lz_k_s"}, "Bearer lz_k_s", "lizard"},
		{"the header wins, the key is still removed", "websocket", "Bearer lz_a_b", []string{"lizard.bearer.lz_k_s", "lizard"}, "Bearer lz_a_b", "lizard"},
		{"only the key offered", "WebSocket", "", []string{"lizard.bearer.lz_k_s"}, "Bearer lz_k_s", ""},
		{"other protocols pass", "websocket", "", []string{"graphql-ws"}, "", "graphql-ws"},
		{"not an upgrade", "", "", []string{"lizard.bearer.lz_k_s"}, "", "lizard.bearer.lz_k_s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got *http.Request
			h := socketKey(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r }))
			r := httptest.NewRequest("GET", "/v1/sandboxes/x/processes/1/ws", nil)
			if tc.upgrade != "" {
				r.Header.Set("Upgrade", tc.upgrade)
			}
			if tc.auth != "" {
				r.Header.Set("Authorization", tc.auth)
			}
			for _, p := range tc.protocols {
				r.Header.Add("Sec-WebSocket-Protocol", p)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			if a := got.Header.Get("Authorization"); a != tc.wantAuth {
				t.Errorf("Authorization %q, want %q", a, tc.wantAuth)
			}
			if p := got.Header.Values("Sec-WebSocket-Protocol"); len(p) > 1 || (len(p) == 1) != (tc.wantProto != "") || (len(p) == 1 && p[0] != tc.wantProto) {
				t.Errorf("Sec-WebSocket-Protocol %q passed on, want %q", p, tc.wantProto)
			}
		})
	}
}
