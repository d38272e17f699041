package egress

import (
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/lizard-build/lizard/internal/fdbudget"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/netpolicy"
)

// Enforcer is a node's resolver and proxy with the table they share.
type Enforcer struct {
	Table    *Table
	Resolver *Resolver
	Proxy    *Proxy
}

// Config says how a node enforces policies by name.
type Config struct {
	// Records, when not nil, are the only names the resolver knows and
	// nothing is forwarded (lizard serve --egress-test-hosts); otherwise
	// names are asked of the host's resolvers.
	Records map[string][]netip.Addr
	// AllowTo is the server's --egress-allow: the proxy connects only
	// where a sandbox's own packets may go.
	AllowTo     []netip.Prefix
	Interceptor Interceptor
	Logger      *slog.Logger
	Metrics     *metrics.Metrics
	// Budget counts the node's descriptors each project's proxied
	// connections and forwarded queries hold (Table.Budget).
	Budget *fdbudget.Budget
}

// Start serves the resolver and the proxy on free ports of every host
// address (the sandboxes' rules redirect to them; a connection from any
// other address is refused, and a query REFUSED).
func Start(cfg Config) (*Enforcer, error) {
	hostNets, err := netns.HostNets()
	if err != nil {
		return nil, err
	}
	t := &Table{Budget: cfg.Budget}
	decided := func(sb Sandbox, d Decision) {
		cfg.Metrics.EgressDecision(d.Kind, d.Allowed, d.BytesOut, d.BytesIn)
	}
	r := &Resolver{Table: t, Records: cfg.Records, Logger: cfg.Logger, Decided: decided}
	if r.Records == nil {
		if r.Upstream, err = HostUpstreams(); err != nil {
			return nil, err
		}
	}
	if err := r.Start("0.0.0.0", 0); err != nil {
		return nil, err
	}
	allowTo := cfg.AllowTo
	p := &Proxy{Table: t, Resolver: r, Interceptor: cfg.Interceptor, Logger: cfg.Logger, Decided: decided,
		Reachable: func(a netip.Addr) bool { return netns.Reachable(a, allowTo, hostNets) }}
	if err := p.Start("0.0.0.0:0"); err != nil {
		r.Close()
		return nil, err
	}
	cfg.Logger.Info("egress resolver and proxy serving", "dns_port", r.Port(), "proxy_port", p.Port(), "test_records", cfg.Records != nil)
	return &Enforcer{Table: t, Resolver: r, Proxy: p}, nil
}

// Close stops the resolver and the proxy.
func (e *Enforcer) Close() error {
	e.Resolver.Close()
	if err := e.Proxy.Close(); err != nil {
		return fmt.Errorf("closing the egress proxy: %w", err)
	}
	return nil
}

// Names are the rules that put a sandbox with policy p in the path of e.
func (e *Enforcer) Names(p *netpolicy.Policy) *netns.Names {
	n := &netns.Names{DNSPort: e.Resolver.Port(), ProxyPort: e.Proxy.Port(), Ports: p.ProxyPorts(), DefaultDeny: p.Default == netpolicy.Deny}
	allow, deny := p.NetRules()
	for _, r := range allow {
		n.Allow = append(n.Allow, netns.PortPrefix(r))
	}
	for _, r := range deny {
		n.Deny = append(n.Deny, netns.PortPrefix(r))
	}
	return n
}
