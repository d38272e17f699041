package server

import (
	"net/http"
	"strings"
)

// A browser's WebSocket cannot send an Authorization header, so a
// process's WebSocket (GET /v1/sandboxes/{id}/processes/{pid}/ws) also
// takes the key as a subprotocol: the client offers SocketProtocol and
// SocketKeyPrefix+key, and the server answers with SocketProtocol. The key
// so travels in a request header, as it does in Authorization, and never
// in a URL that proxies and access logs keep; nothing is stored, so it
// works the same on every API process of a cluster.
const (
	SocketProtocol  = "lizard"
	SocketKeyPrefix = "lizard.bearer."
)

// socketKey turns a key offered as a WebSocket subprotocol into the
// request's Authorization header (one already there wins), and removes it
// from the offered protocols so that nothing behind the API (node, agent)
// sees it, as the proxy removes Authorization.
func socketKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		offered := r.Header.Values("Sec-WebSocket-Protocol")
		if len(offered) == 0 || !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			next.ServeHTTP(w, r)
			return
		}
		var key string
		var keep []string
		for _, v := range offered {
			for _, p := range strings.Split(v, ",") {
				p = strings.TrimSpace(p)
				if k, ok := strings.CutPrefix(p, SocketKeyPrefix); ok {
					key = k
					continue
				}
				if p != "" {
					keep = append(keep, p)
				}
			}
		}
		if key == "" {
			next.ServeHTTP(w, r)
			return
		}
		r = r.Clone(r.Context())
		r.Header.Del("Sec-WebSocket-Protocol")
		if len(keep) > 0 {
			r.Header.Set("Sec-WebSocket-Protocol", strings.Join(keep, ", "))
		}
		if r.Header.Get("Authorization") == "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		next.ServeHTTP(w, r)
	})
}

// offersSocketProtocol says whether a WebSocket upgrade offered
// SocketProtocol, which the answer must then name: a browser fails a
// handshake that offered subprotocols and got none back.
func offersSocketProtocol(h http.Header) bool {
	for _, v := range h.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			if strings.TrimSpace(p) == SocketProtocol {
				return true
			}
		}
	}
	return false
}
