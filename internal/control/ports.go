package control

// Who may reach a sandbox's exposed ports (docs/ports.md): a key of its
// project, the sandbox's access token, or anyone if it was created with
// publicPorts. The token is derived from a key the server keeps (like the
// agent's secret), so nothing about it is stored, and it is good for one
// sandbox's ports alone.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/store"
)

// ErrNoPortAccess means the request to a port carried neither a key of the
// sandbox's project nor its access token, and its ports are not public.
// It is of kind errdefs.ErrUnauthenticated: a 401.
var ErrNoPortAccess = fmt.Errorf("no access to the sandbox's ports: %w", errdefs.ErrUnauthenticated)

// PortAccess is what a request to a port presented: the project of the
// API key it carried ("" without one), and an access token ("" without).
type PortAccess struct {
	ProjectID string
	Token     string
}

// accessToken is sandbox id's port access token; "" without a PortsKey.
func (c *Control) accessToken(id string) string { return c.sandboxToken("lzp_", "lizard ports ", id) }

// sandboxToken derives a token good for one sandbox and one purpose from
// the PortsKey: tokens of different purposes never open each other's
// doors. "" without a PortsKey.
func (c *Control) sandboxToken(prefix, purpose, id string) string {
	if len(c.cfg.PortsKey) == 0 {
		return ""
	}
	m := hmac.New(sha256.New, c.cfg.PortsKey)
	m.Write([]byte(purpose + id))
	return prefix + hex.EncodeToString(m.Sum(nil))[:40]
}

// OpenPort checks that a may reach sandbox id's ports and opens one
// connection to port. Without any credential a sandbox that is not
// public, or does not exist, is ErrNoPortAccess alike: its existence is
// not told to strangers.
func (c *Control) OpenPort(ctx context.Context, a PortAccess, id string, port int) (agentproxy.Call, error) {
	sb, err := c.cfg.Store.GetSandbox(ctx, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return agentproxy.Call{}, err
	}
	found := err == nil && sb.Role == ""
	// E2B's trafficAccessToken opens the ports as their own token does.
	tokenOK := a.Token != "" && c.accessToken(id) != "" && hmac.Equal([]byte(a.Token), []byte(c.accessToken(id))) || c.IsTrafficToken(id, a.Token)
	switch {
	case a.ProjectID != "" && (!found || sb.ProjectID != a.ProjectID):
		return agentproxy.Call{}, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("sandbox %s not found in project %s", id, a.ProjectID)}
	case a.ProjectID != "":
	case !found && a.Token != "":
		return agentproxy.Call{}, &errdefs.Error{Kind: ErrNoPortAccess, Msg: "the access token does not open this sandbox's ports: use the accessToken of the sandbox the URL names"}
	case !found:
		return agentproxy.Call{}, noAccess(id)
	case tokenOK, sb.Shape.PublicPorts:
	case a.Token != "":
		return agentproxy.Call{}, &errdefs.Error{Kind: ErrNoPortAccess, Msg: "the access token does not open this sandbox's ports: use the accessToken of the sandbox the URL names"}
	default:
		return agentproxy.Call{}, noAccess(id)
	}
	// With PortsResume a request would resume a paused token child: not
	// past its bound.
	if err := c.pastBound(id, sb.ParentID, c.childBound(node.SandboxOf(sb))); err != nil {
		return agentproxy.Call{}, err
	}
	return c.node.OpenPort(ctx, id, port, c.cfg.PortsResume)
}

func noAccess(id string) error {
	return &errdefs.Error{Kind: ErrNoPortAccess, Msg: fmt.Sprintf("sandbox %s's ports need its project's API key (Authorization: Bearer) "+
		"or its access token (?lizard_access_token=... or the X-Lizard-Access-Token header), unless it was created with publicPorts", id)}
}
