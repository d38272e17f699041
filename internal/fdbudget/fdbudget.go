// Package fdbudget bounds the file descriptors a node holds on behalf of
// its tenants. A sandbox's code makes the node hold descriptors — each
// connection through the egress proxy, each DNS query the resolver
// forwards, each call, stream, terminal, process follower and watch to its
// agent, each request to an exposed port — and the descriptors are the
// node's, shared with its own API, store, restores and webhook deliveries.
// Bounded per sandbox only, four sandboxes of one project holding idle
// proxied connections took all 20,000 of a node's descriptors: every
// other project's creates failed and nothing could be accepted (issue 33).
//
// So every such hold is counted here, in descriptors, against one budget
// per project and one for all tenants together, which leaves the node a
// reserve of its own: past either bound the next hold is refused (the
// proxy resets the sandbox's connection, a call is answered 429 naming the
// bound), and the refusal is counted in a metric.
package fdbudget

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/internal/errdefs"
)

// Kind is what a hold is for; each costs the descriptors it was measured
// to hold on the node.
type Kind string

const (
	// Egress is a connection through the egress proxy: the sandbox's
	// socket and the upstream's, and while bytes are spliced each way a
	// pipe of two descriptors per direction (Go's io.Copy between TCP
	// connections splices through a pooled pipe it holds while it waits
	// for data): 6, which is what the red-team measured, 20,000
	// descriptors for about 4,100 idle connections.
	Egress Kind = "egress"
	// Lookup is a DNS query forwarded upstream: its UDP socket.
	Lookup Kind = "dns"
	// Call is a call to a sandbox's agent through the node (runCode, a
	// file transfer, a process's output stream, a terminal's WebSocket, a
	// watch): the caller's connection and the one to the agent.
	Call Kind = "call"
	// Port is a request to an exposed port: the caller's connection and
	// the one to the sandbox's program.
	Port Kind = "port"
	// Request is an API request under way (an event stream, an MCP
	// session, any call): the caller's connection to the API. A call
	// into a sandbox on `lizard serve` counts it and the Call, one more
	// than it holds; on `lizard api` and `lizard node` each counts its
	// own process's descriptors.
	Request Kind = "request"
)

// Cost is the descriptors one hold of kind k takes on the node.
func (k Kind) Cost() int {
	if k == Egress {
		return 6
	}
	if k == Lookup || k == Request {
		return 1
	}
	return 2
}

// DefaultReserve is what the node keeps for itself at least: its API's
// listeners and clients, the store, images being restored, webhook
// deliveries, runsc's own files. An eighth of the limit when that is more.
const DefaultReserve = 8192

// Budget counts holds per project and in all. Its zero value is not
// usable; a nil *Budget allows everything (tests, tools without a node).
type Budget struct {
	// Node is what all tenants together may hold: the process's
	// descriptor limit less the reserve.
	Node int
	// Project is what one project may hold.
	Project int
	// Refused, when set, is told each refusal (metrics): the kind and the
	// bound met, "project" or "node".
	Refused func(k Kind, bound string)
	Logger  *slog.Logger

	mu       sync.Mutex
	total    int
	projects map[string]int
	warned   map[string]time.Time // per project, one line a minute
}

// New returns a budget of node descriptors for all tenants and project
// for each.
func New(node, project int, log *slog.Logger) *Budget {
	if log == nil {
		log = slog.Default()
	}
	return &Budget{Node: node, Project: min(project, node), Logger: log,
		projects: map[string]int{}, warned: map[string]time.Time{}}
}

// Take counts one hold of kind k for project. It returns the function
// that gives it back (safe to call more than once), or an error of kind
// errdefs.ErrRateLimited naming the bound met.
func (b *Budget) Take(project string, k Kind) (release func(), err error) {
	if b == nil {
		return func() {}, nil
	}
	n := k.Cost()
	b.mu.Lock()
	held := b.projects[project]
	bound := ""
	switch {
	case held+n > b.Project:
		bound = "project"
	case b.total+n > b.Node:
		bound = "node"
	}
	if bound != "" {
		warn := time.Since(b.warned[project]) > time.Minute
		if warn {
			b.warned[project] = time.Now()
		}
		total := b.total
		b.mu.Unlock()
		if b.Refused != nil {
			b.Refused(k, bound)
		}
		if warn {
			b.Logger.Warn("a project holds the most of the node's descriptors it may; what it opens next is refused",
				"project_id", project, "kind", string(k), "bound", bound, "project_held", held, "project_max", b.Project, "node_held", total, "node_max", b.Node)
		}
		if bound == "project" {
			return nil, &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: time.Second, Msg: fmt.Sprintf(
				"project %s holds %d of the node's file descriptors, its most (--max-descriptors-per-project %d): close some of its sandboxes' connections, streams, terminals or watches, then retry", project, held, b.Project)}
		}
		return nil, &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: time.Second, Msg: fmt.Sprintf(
			"the node's sandboxes hold %d of its file descriptors, the most they may (the rest is the node's own): retry later or on another node", total)}
	}
	b.projects[project] = held + n
	b.total += n
	b.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.total -= n
			if b.projects[project] -= n; b.projects[project] <= 0 {
				delete(b.projects, project)
				delete(b.warned, project)
			}
		})
	}, nil
}

// Held returns what project holds and what all tenants hold.
func (b *Budget) Held(project string) (projectHeld, total int) {
	if b == nil {
		return 0, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.projects[project], b.total
}

// RaiseLimit raises the process's descriptor limit, soft and hard, to the
// most the kernel allows a process (fs.nr_open, at most 1<<20), and returns
// it. Go raises only the soft limit to the hard one at start; the hard
// limit a service manager or a shell gives (often 4096 or 524288) is not
// the host's. Without the right to raise it (not root), the soft limit is
// raised to the hard one and that is returned.
func RaiseLimit() (int, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("reading the descriptor limit: %w", err)
	}
	want := uint64(1 << 20)
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && v < want {
			want = v
		}
	}
	if want > lim.Max {
		raised := unix.Rlimit{Cur: want, Max: want}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &raised); err == nil {
			return int(want), nil
		}
	}
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("raising the descriptor limit: %w", err)
	}
	return int(lim.Cur), nil
}

// Split returns, for a process limit of limit descriptors, what the
// tenants may hold together (the limit less the node's reserve: an eighth,
// at least DefaultReserve, or half of a limit under twice that) and the default per project: a quarter of that,
// at most 65,536 (about 10,900 proxied connections), so that one project
// never holds more than a part of what the others need.
func Split(limit int) (node, project int) {
	reserve := max(limit/8, min(DefaultReserve, limit/2))
	node = max(limit-reserve, 0)
	return node, min(node/4, 65536)
}
