package control

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
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

// TrafficToken is the trafficAccessToken E2B's SDKs are given for
// sandbox id: E2B's credential for a sandbox's ports alone (its SDK's
// users send it as e2b-traffic-access-token to a private sandbox's
// ports). It opens the sandbox's exposed ports, as its port access token
// does, and the code interpreter's context calls, which E2B's SDKs send
// with it alone; never envd (commands, files: root) nor the interpreter's
// /execute. Derived apart from both other tokens, so it opens neither's
// doors.
func (c *Control) TrafficToken(id string) string {
	return c.sandboxToken("lzt_", "lizard e2b traffic ", id)
}

// IsTrafficToken reports whether token is sandbox id's TrafficToken.
func (c *Control) IsTrafficToken(id, token string) bool {
	want := c.TrafficToken(id)
	return token != "" && want != "" && hmac.Equal([]byte(token), []byte(want))
}

// EnvdProject returns the project of sandbox id when token is its
// EnvdToken, or ErrGone once the sandbox has ended. An unknown sandbox and a wrong token are the same refusal, so
// the existence of a sandbox is not told to strangers.
func (c *Control) EnvdProject(ctx context.Context, id, token string) (string, error) {
	want := c.EnvdToken(id)
	if token == "" || want == "" || !hmac.Equal([]byte(token), []byte(want)) {
		return "", &errdefs.Error{Kind: ErrBadSandboxToken, Msg: fmt.Sprintf("sandbox %s needs its envdAccessToken (X-Access-Token) or its project's API key (X-API-Key)", id)}
	}
	return c.tokenProject(ctx, id)
}

// TrafficProject is EnvdProject for sandbox id's TrafficToken.
func (c *Control) TrafficProject(ctx context.Context, id, token string) (string, error) {
	if !c.IsTrafficToken(id, token) {
		return "", &errdefs.Error{Kind: ErrBadSandboxToken, Msg: fmt.Sprintf("sandbox %s needs its trafficAccessToken (E2B-Traffic-Access-Token), its envdAccessToken (X-Access-Token) or its project's API key (X-API-Key)", id)}
	}
	return c.tokenProject(ctx, id)
}

// tokenProject is the project of live sandbox id, whose token the caller
// has shown.
func (c *Control) tokenProject(ctx context.Context, id string) (string, error) {
	sb, err := c.cfg.Store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && sb.Role != "") {
		return "", node.NotFound(id)
	}
	if err == nil {
		err = node.SandboxOf(sb).Check(node.WantLive)
	}
	if err != nil {
		return "", err
	}
	return sb.ProjectID, nil
}

// MaxSignatureCandidates bounds the live sandboxes SignedSandbox tries:
// each costs two hashes, and the call carries no credential but the
// signature, so its work must not grow without end with the server.
const MaxSignatureCandidates = 10_000

// SignedSandbox returns the live sandbox (and its project) whose
// EnvdToken makes signature by sign: E2B's signed file URLs, made from
// E2B_SANDBOX_URL's host alone, name no sandbox but are signed with its
// token (docs/e2b.md). Every candidate is tried, with a constant-time
// compare and no early end, so the time a call takes tells nothing of
// the signature but the number of live sandboxes; a signature no live
// sandbox's token makes is ErrBadSandboxToken, however close it came.
// Past MaxSignatureCandidates live sandboxes the newest are not tried.
func (c *Control) SignedSandbox(ctx context.Context, signature string, sign func(token string) string) (id, projectID string, err error) {
	sbs, err := c.cfg.Store.ListSandboxes(ctx, store.Filter{LiveOnly: true})
	if err != nil {
		return "", "", err
	}
	tried := 0
	for _, sb := range sbs {
		if sb.Role != "" { // a warm pool's or a build's: no E2B caller has its token
			continue
		}
		if tried++; tried > MaxSignatureCandidates {
			break
		}
		want := c.EnvdToken(sb.ID)
		if want != "" && hmac.Equal([]byte(signature), []byte(sign(want))) && id == "" {
			id, projectID = sb.ID, sb.ProjectID
		}
	}
	if id == "" {
		return "", "", &errdefs.Error{Kind: ErrBadSandboxToken, Msg: "the file URL's signature is not that of any running sandbox for this path, operation, user and expiry: " +
			"sign it with the sandbox's envdAccessToken (the SDK's upload_url/download_url), before it expires"}
	}
	return id, projectID, nil
}
