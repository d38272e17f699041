package control

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/store"
)

// ErrBadSandboxToken means a call to a sandbox through E2B's sandbox URL
// carried no valid access token for it.
var ErrBadSandboxToken = fmt.Errorf("no valid access token for the sandbox: %w", errdefs.ErrUnauthenticated)

// EnvdToken is the access token E2B's SDKs are given for sandbox id
// (envdAccessToken) and present on every call into it. It opens the
// sandbox's agent, which is more than its ports' token opens, so it is
// derived apart from that one: a port URL shared with a viewer does not
// let them run code.
func (c *Control) EnvdToken(id string) string { return c.sandboxToken("lze_", "lizard e2b envd ", id) }

// EnvdProject returns the project of sandbox id when token is its
// EnvdToken, or ErrGone once the sandbox has ended. An unknown sandbox and a wrong token are the same refusal, so
// the existence of a sandbox is not told to strangers.
func (c *Control) EnvdProject(ctx context.Context, id, token string) (string, error) {
	want := c.EnvdToken(id)
	refused := &errdefs.Error{Kind: ErrBadSandboxToken, Msg: fmt.Sprintf("sandbox %s needs its envdAccessToken (X-Access-Token) or its project's API key (X-API-Key)", id)}
	if token == "" || want == "" || !hmac.Equal([]byte(token), []byte(want)) {
		return "", refused
	}
	sb, err := c.cfg.Store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && sb.Role != "") {
		return "", &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("sandbox %s not found", id)}
	}
	if err != nil {
		return "", err
	}
	if !sb.Live() {
		return "", &errdefs.Error{Kind: errdefs.ErrGone, Msg: fmt.Sprintf("sandbox %s has ended (%s)", id, sb.State)}
	}
	return sb.ProjectID, nil
}
