package node

// Exposed ports: connections the API proxies to a port a program in the
// sandbox listens on (docs/ports.md). They are counted apart from agent
// calls: a pause does not wait for them (a WebSocket may stay open for
// hours) but cuts them before its checkpoint, so that no image holds them,
// and a sandbox that stops ends them at once.

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/fdbudget"
)

// MaxPortHeaderBytes bounds the headers of a program's answer through a
// port, which the proxy holds whole before passing them on; one past it
// is a failed call (502). The transport's default, 10 MiB, for each of
// a sandbox's 1024 requests under way (a public port's need no key) let a
// program grow the proxying process by gigabytes.
const MaxPortHeaderBytes = 256 << 10

// OpenPort implements Node.
func (n *Local) OpenPort(ctx context.Context, id string, port int, resume bool) (agentproxy.Call, error) {
	if port < 1 || port > 65535 {
		return agentproxy.Call{}, errdefs.Invalidf("port %d is out of range: want 1 to 65535", port)
	}
	if port == api.AgentPort {
		return agentproxy.Call{}, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("port %d is the Lizard agent's, internal to Lizard and never exposed; serve your program on another port", port)}
	}
	unlock := n.locks.Lock(id)
	defer unlock()
	sb, err := n.reachable(ctx, id, resume, fmt.Sprintf("sandbox %s is paused: resume it (POST /v1/sandboxes/%s/resume) to reach its ports", id, id))
	if err != nil {
		return agentproxy.Call{}, err
	}
	held, err := n.cfg.Descriptors.Take(sb.ProjectID, fdbudget.Port)
	if err != nil {
		return agentproxy.Call{}, err
	}
	cctx, cancel := context.WithCancelCause(ctx)
	n.ports.add(id, &cancel, false)
	var once sync.Once
	release := func() {
		once.Do(func() {
			n.ports.remove(id, &cancel)
			cancel(nil)
			held()
		})
	}
	u := &url.URL{Scheme: "http", Host: net.JoinHostPort(sb.GuestAddr, strconv.Itoa(port))}
	return agentproxy.Call{URL: u, Ctx: cctx, Release: release}, nil
}
