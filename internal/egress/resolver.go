package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/lizard-build/lizard/internal/fdbudget"
	"github.com/lizard-build/lizard/internal/netpolicy"
)

// ErrNoName means a name has no IPv4 address.
var ErrNoName = errors.New("no such name")

// answerTTL is the TTL of every answer the resolver gives a sandbox:
// short, so that a sandbox's own cache does not outlive much a policy
// update (the proxy checks names again on every connection anyway).
const answerTTL = 5

// Resolver answers the DNS of sandboxes with a policy: a name the
// sandbox's policy denies is NXDOMAIN, an allowed one is looked up in
// Records or, without Records, forwarded to Upstream (the host's
// resolvers). Every packet to port 53 that leaves such a sandbox is
// redirected here (package netns), whatever resolver it was sent to.
type Resolver struct {
	Table *Table
	// Records, when not nil, are the only names there are: nothing is
	// forwarded (tests: lizard serve --egress-test-hosts).
	Records map[string][]netip.Addr
	// Upstream are host:port of the resolvers allowed names are asked
	// of; HostUpstreams reads them from /etc/resolv.conf.
	Upstream []string
	Logger   *slog.Logger
	// Decided, when set, is told every decision (metrics).
	Decided func(sb Sandbox, d Decision)
	// TCPReadTimeout, when set, is how long a TCP connection may wait for
	// its first query (the DNS server's 2 s when zero): tests that hold
	// connections open longer than a loaded machine takes to open them.
	TCPReadTimeout time.Duration

	udp, tcp *dns.Server
	port     int
}

// HostUpstreams are the host's resolvers (/etc/resolv.conf).
func HostUpstreams() ([]string, error) {
	cc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
	if err != nil {
		return nil, fmt.Errorf("reading the host's resolvers: %w", err)
	}
	var out []string
	for _, s := range cc.Servers {
		out = append(out, net.JoinHostPort(s, cc.Port))
	}
	return out, nil
}

// ParseTestHosts parses "name=IP,name=IP,..." into resolver records.
func ParseTestHosts(s string) (map[string][]netip.Addr, error) {
	out := map[string][]netip.Addr{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		a, err := netip.ParseAddr(strings.TrimSpace(v))
		if !ok || err != nil || !a.Is4() {
			return nil, fmt.Errorf("%q: want name=IPv4", kv)
		}
		name, err := netpolicy.Name(strings.TrimSpace(k))
		if err != nil {
			return nil, err
		}
		out[name] = append(out[name], a)
	}
	return out, nil
}

// Start serves DNS over UDP and TCP on host's port (0: any free one, the
// same for both).
func (r *Resolver) Start(host string, port int) error {
	for try := 0; ; try++ {
		pc, err := net.ListenPacket("udp4", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return fmt.Errorf("listening for DNS: %w", err)
		}
		p := pc.LocalAddr().(*net.UDPAddr).Port
		ln, err := net.Listen("tcp4", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			pc.Close()
			if port == 0 && try < 10 {
				continue // that UDP port's TCP twin is taken
			}
			return fmt.Errorf("listening for DNS over TCP: %w", err)
		}
		r.port = p
		r.udp = &dns.Server{PacketConn: pc, Handler: r}
		r.tcp = &dns.Server{Listener: sandboxListener{Listener: ln, table: r.Table}, Handler: r, ReadTimeout: r.TCPReadTimeout}
		go r.udp.ActivateAndServe()
		go r.tcp.ActivateAndServe()
		return nil
	}
}

// sandboxListener hands the TCP resolver only connections from sandboxes
// with a policy, each counted among the sandbox's MaxConns with its
// connections through the proxy; any other is closed at once. The DNS
// server keeps a connection for up to 128 queries 8 s apart, REFUSED or
// not, each holding one of the node's file descriptors: a sandbox, or
// anyone who could reach the port, could hold them all.
type sandboxListener struct {
	net.Listener
	table *Table
}

func (l sandboxListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		sb, ok := l.table.ByAddr(src.Addr())
		if !ok {
			c.Close()
			continue
		}
		untrack, ok, _, _ := l.table.track(sb.ID, c, fdbudget.Lookup)
		if !ok {
			continue // over MaxConns or the project's budget: reset
		}
		return &trackedConn{Conn: c, untrack: untrack}, nil
	}
}

// trackedConn forgets itself in the table when closed.
type trackedConn struct {
	net.Conn
	once    sync.Once
	untrack func()
}

func (c *trackedConn) Close() error {
	c.once.Do(c.untrack)
	return c.Conn.Close()
}

// Port is the port Start serves on.
func (r *Resolver) Port() int { return r.port }

// Close stops serving.
func (r *Resolver) Close() {
	if r.udp != nil {
		r.udp.Shutdown()
		r.tcp.Shutdown()
	}
}

// ServeDNS answers one query.
func (r *Resolver) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	defer func() { _ = w.WriteMsg(m) }()
	src, _ := netip.ParseAddrPort(w.RemoteAddr().String())
	sb, ok := r.Table.ByAddr(src.Addr())
	if !ok || len(req.Question) != 1 || req.Question[0].Qclass != dns.ClassINET {
		m.Rcode = dns.RcodeRefused
		return
	}
	q := req.Question[0]
	name, err := netpolicy.Name(q.Name)
	d := Decision{Time: time.Now(), Kind: KindDNS, Name: strings.TrimSuffix(strings.ToLower(q.Name), ".")}
	if err == nil {
		d.Name = name
	}
	switch {
	case err != nil:
		d.Reason = "not a domain name"
	case !sb.Policy.AllowName(name):
		d.Reason = "denied by policy"
	}
	if d.Reason != "" {
		m.Rcode = dns.RcodeNameError
		r.decided(sb, d)
		return
	}
	if r.Records == nil && q.Qtype != dns.TypeAAAA {
		done, ok := r.Table.lookup(sb.ID)
		if !ok {
			m.Rcode = dns.RcodeServerFailure
			d.Reason = "too many lookups at once"
			r.decided(sb, d)
			return
		}
		defer done()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	switch q.Qtype {
	case dns.TypeA:
		addrs, err := r.LookupA(ctx, name)
		if errors.Is(err, ErrNoName) {
			m.Rcode = dns.RcodeNameError
			d.Reason = "no such name"
			break
		}
		if err != nil {
			m.Rcode = dns.RcodeServerFailure
			d.Reason = "lookup failed"
			if dropped, ok := r.Table.logLine(sb.ID, time.Now()); ok {
				r.Logger.Warn("resolving for a sandbox", "sandbox_id", sb.ID, "name", name, "err", err, "dropped", dropped)
			}
			break
		}
		d.Allowed = true
		for _, a := range addrs {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: answerTTL}, A: a.AsSlice()})
		}
		if len(addrs) > 0 {
			d.Addr = addrs[0].String()
		}
	case dns.TypeAAAA:
		// Nothing leaves a sandbox over IPv6: no AAAA, so that clients
		// go to the IPv4 address at once.
		d.Allowed = true
	default:
		d.Allowed = true
		if r.Records != nil {
			break
		}
		resp, err := r.exchange(ctx, req)
		if err != nil {
			m.Rcode = dns.RcodeServerFailure
			break
		}
		resp.Id = req.Id
		*m = *resp
	}
	r.decided(sb, d)
}

func (r *Resolver) decided(sb Sandbox, d Decision) {
	r.Table.Record(sb.ID, d)
	if r.Decided != nil {
		r.Decided(sb, d)
	}
}

// LookupA returns the IPv4 addresses of name (as Name returns it).
func (r *Resolver) LookupA(ctx context.Context, name string) ([]netip.Addr, error) {
	if r.Records != nil {
		if a := r.Records[name]; len(a) > 0 {
			return a, nil
		}
		return nil, fmt.Errorf("%s: %w", name, ErrNoName)
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	resp, err := r.exchange(ctx, q)
	if err != nil {
		return nil, err
	}
	if resp.Rcode == dns.RcodeNameError {
		return nil, fmt.Errorf("%s: %w", name, ErrNoName)
	}
	if resp.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("resolving %s: %s", name, dns.RcodeToString[resp.Rcode])
	}
	var out []netip.Addr
	for _, rr := range resp.Answer {
		if a, ok := rr.(*dns.A); ok {
			if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
				out = append(out, ip)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: %w", name, ErrNoName)
	}
	return out, nil
}

func (r *Resolver) exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
	if len(r.Upstream) == 0 {
		return nil, errors.New("no upstream resolver")
	}
	c := &dns.Client{Timeout: 3 * time.Second}
	var err error
	for _, up := range r.Upstream {
		var resp *dns.Msg
		if resp, _, err = c.ExchangeContext(ctx, q, up); err == nil {
			return resp, nil
		}
	}
	return nil, fmt.Errorf("asking the host's resolvers: %w", err)
}
