package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lizard-build/lizard/client"
)

// Handler serves MCP over streamable HTTP. Each session's tools call the
// API at baseURL (the serving API itself, over loopback) with the bearer
// key of the request that opened the session, so they run with exactly
// that key's project, limits and audit — the same code path as `lizard
// mcp` and every other client. The caller checks the key before Handler
// sees the request; Handler binds each session to its key so that another
// key cannot use a session ID it learns.
func Handler(baseURL, version string, log *slog.Logger) http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		c, err := client.New(client.Config{BaseURL: baseURL, APIKey: bearer(r), MaxStreamLine: maxLine})
		if err != nil {
			// Only a malformed baseURL fails, which Handler's caller made.
			log.Error("mcp: API client", "err", err)
			return nil
		}
		return NewServer(c, version)
	}, &sdk.StreamableHTTPOptions{
		Logger: log,
		// The SDK's DNS-rebinding guard refuses a non-loopback Host on a
		// loopback listener, which is every reverse proxy on the API's
		// host. A rebinding page cannot send the bearer key, without which
		// nothing reaches this handler.
		DisableLocalhostProtection: true,
		SessionTimeout:             sessionIdle,
	})
	// The SDK refuses a session's requests whose TokenInfo.UserID differs
	// from the one that created it; the key's hash stands for the user.
	bind := sdkauth.RequireBearerToken(func(_ context.Context, token string, _ *http.Request) (*sdkauth.TokenInfo, error) {
		sum := sha256.Sum256([]byte(token))
		return &sdkauth.TokenInfo{UserID: hex.EncodeToString(sum[:])}, nil
	}, &sdkauth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	return bind(limitSessions(h))
}

// A key holds at most maxSessions sessions open, and one no request came
// for in sessionIdle is closed: each holds about 90 KB and a goroutine of
// the API process, and before, a key opening sessions at its request rate
// grew the server by 9 MB a second, for good.
const (
	maxSessions = 64
	sessionIdle = 30 * time.Minute
)

// limitSessions refuses a key's new session (a POST without
// Mcp-Session-Id) while it has maxSessions open: those it opened, less
// those it closed (DELETE) or left idle for sessionIdle, as the SDK
// closes them.
func limitSessions(next http.Handler) http.Handler {
	var mu sync.Mutex
	open := map[string]map[string]time.Time{} // key's hash -> session ID -> its last request
	live := func(key string, now time.Time) map[string]time.Time {
		ids := open[key]
		for id, last := range ids {
			if now.Sub(last) >= sessionIdle {
				delete(ids, id)
			}
		}
		return ids
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sum := sha256.Sum256([]byte(bearer(r)))
		key, id, now := hex.EncodeToString(sum[:]), r.Header.Get("Mcp-Session-Id"), time.Now()
		mu.Lock()
		ids := live(key, now)
		if id == "" && r.Method == http.MethodPost && len(ids) >= maxSessions {
			mu.Unlock()
			http.Error(w, fmt.Sprintf("this key has %d MCP sessions open, its most: end one (DELETE with its Mcp-Session-Id); one idle for %v ends by itself",
				maxSessions, sessionIdle), http.StatusTooManyRequests)
			return
		}
		if _, ok := ids[id]; ok {
			ids[id] = now
		}
		mu.Unlock()
		next.ServeHTTP(w, r)
		mu.Lock()
		defer mu.Unlock()
		switch made := w.Header().Get("Mcp-Session-Id"); {
		case id != "" && r.Method == http.MethodDelete:
			delete(open[key], id)
		case id == "" && made != "":
			if open[key] == nil {
				open[key] = map[string]time.Time{}
			}
			open[key][made] = now
		}
	})
}

func bearer(r *http.Request) string {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// maxLine bounds a stream's line in the API process, where every
// session's runs are held: one result longer than the whole run's
// maxRunBytes stops it anyway. The agent's lines are within
// api.MaxExecuteLine, but code in a sandbox (as root) may replace the agent
// and send one as long as it likes; the client ends the stream past it
// (client.ErrLineTooLong) instead of holding the line whole.
const maxLine = maxRunBytes + 1<<20
