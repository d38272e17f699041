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
	"regexp"
	"strconv"
	"strings"

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

// PortCall is one connection to a sandbox's port and the Host header its
// request carries.
type PortCall struct {
	agentproxy.Call
	// Host is the sandbox's PortsHost for the port; "": the caller's.
	Host string
}

// OpenPort checks that a may reach sandbox id's ports and opens one
// connection to port. Without any credential a sandbox that is not
// public, or does not exist, is ErrNoPortAccess alike: its existence is
// not told to strangers.
func (c *Control) OpenPort(ctx context.Context, a PortAccess, id string, port int) (PortCall, error) {
	sb, err := c.cfg.Store.GetSandbox(ctx, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return PortCall{}, err
	}
	found := err == nil && sb.Role == ""
	// E2B's trafficAccessToken opens the ports as their own token does.
	tokenOK := a.Token != "" && c.accessToken(id) != "" && hmac.Equal([]byte(a.Token), []byte(c.accessToken(id))) || c.IsTrafficToken(id, a.Token)
	switch {
	case a.ProjectID != "" && (!found || sb.ProjectID != a.ProjectID):
		return PortCall{}, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("sandbox %s not found in project %s", id, a.ProjectID)}
	case a.ProjectID != "":
	case !found && a.Token != "":
		return PortCall{}, &errdefs.Error{Kind: ErrNoPortAccess, Msg: "the access token does not open this sandbox's ports: use the accessToken of the sandbox the URL names"}
	case !found:
		return PortCall{}, noAccess(id)
	case tokenOK, sb.Shape.PublicPorts:
	case a.Token != "":
		return PortCall{}, &errdefs.Error{Kind: ErrNoPortAccess, Msg: "the access token does not open this sandbox's ports: use the accessToken of the sandbox the URL names"}
	default:
		return PortCall{}, noAccess(id)
	}
	// With PortsResume a request would resume a paused token child: not
	// past its bound.
	if err := c.pastBound(id, sb.ParentID, c.childBound(node.SandboxOf(sb))); err != nil {
		return PortCall{}, err
	}
	call, err := c.node.OpenPort(ctx, id, port, c.cfg.PortsResume)
	if err != nil {
		return PortCall{}, err
	}
	return PortCall{Call: call, Host: PortsHostFor(sb.Shape.PortsHost, port)}, nil
}

// PortHostVar in a sandbox's PortsHost stands for the port asked for.
const PortHostVar = "${PORT}"

// maxPortsHost bounds a PortsHost, a DNS name's longest and a port.
const maxPortsHost = 255

// portsHostRE is what a PortsHost may hold (api/openapi.yaml's pattern):
// the characters of a host name, an address and a port, and PortHostVar.
// It becomes a header line of every request to the sandbox's ports, so
// nothing that could end the line or start another request; E2B asks for
// a host name with an optional port.
var portsHostRE = regexp.MustCompile(`^([A-Za-z0-9_.:\[\]-]|\$\{PORT\})*$`)

// portsHost checks a sandbox's PortsHost, the Host header its ports'
// requests carry (E2B's maskRequestHost).
func portsHost(h string) (string, error) {
	if len(h) > maxPortsHost || !portsHostRE.MatchString(h) {
		return "", errdefs.Invalidf("portsHost %q is not a host name or address with an optional port: ASCII letters, digits, '.', '-', '_', ':', '[', ']' and %s for the port, at most %d characters",
			h, PortHostVar, maxPortsHost)
	}
	return h, nil
}

// PortsHostFor is PortsHost h for a request to port: the Host header it
// carries ("" for h "": the caller's).
func PortsHostFor(h string, port int) string {
	return strings.ReplaceAll(h, PortHostVar, strconv.Itoa(port))
}

func noAccess(id string) error {
	return &errdefs.Error{Kind: ErrNoPortAccess, Msg: fmt.Sprintf("sandbox %s's ports need its project's API key (Authorization: Bearer) "+
		"or its access token (?lizard_access_token=... or the X-Lizard-Access-Token header), unless it was created with publicPorts", id)}
}
