package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strings"

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
		c, err := client.New(client.Config{BaseURL: baseURL, APIKey: bearer(r)})
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
	})
	// The SDK refuses a session's requests whose TokenInfo.UserID differs
	// from the one that created it; the key's hash stands for the user.
	bind := sdkauth.RequireBearerToken(func(_ context.Context, token string, _ *http.Request) (*sdkauth.TokenInfo, error) {
		sum := sha256.Sum256([]byte(token))
		return &sdkauth.TokenInfo{UserID: hex.EncodeToString(sum[:])}, nil
	}, &sdkauth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	return bind(h)
}

func bearer(r *http.Request) string {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}
