package netns

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Egress is the network policy of one sandbox. It is enforced with
// nftables in the root namespace, on the sandbox's host veth, because
// gVisor (runsc --network=sandbox) sends its packets through a packet
// socket on eth0, which bypasses the inet hooks of the sandbox's own
// namespace; every packet of the sandbox reaches the host veth, where
// nothing bypasses them.
//
// Whatever the policy, the sandbox never reaches the host (but for
// APIPort on its own host address), the host's own connected subnets (its
// uplink's gateway and neighbours), other sandboxes, nor any IANA
// special-purpose address (private, shared, loopback, link-local and
// metadata, documentation, benchmarking, multicast, reserved), nor
// anything over IPv6; nobody can open a connection to the sandbox but the
// host itself.
type Egress struct {
	// Internet lets the sandbox open connections to public addresses
	// (forwarded and masqueraded). Without it nothing is forwarded.
	Internet bool
	// AllowTo, when not empty, narrows Internet to these destinations. A
	// prefix that lies inside one of SpecialPurpose is the one way to open
	// such a range (tests stand "the internet" up at 203.0.113.1 this way);
	// nothing opens Blocked or the host's subnets.
	AllowTo []netip.Prefix
	// APIPort, when not 0, lets the sandbox open TCP connections to its own
	// host address on this port: the Lizard API, for sandboxes with a
	// lizardToken.
	APIPort int
	// Names, when set with Internet, is a policy by name (package netpolicy, enforced by package egress):
	// the sandbox's DNS and its TCP to the proxied ports are redirected to
	// the node's resolver and proxy, and everything else it sends is
	// narrowed to the policy's address rules.
	Names *Names
}

// Names puts a sandbox in the path of the node's resolver and proxy.
type Names struct {
	// DNSPort (UDP and TCP) and ProxyPort are where the node's resolver
	// and proxy listen, on every host address.
	DNSPort, ProxyPort int
	// Ports are the TCP ports redirected to the proxy; UDP to them (QUIC)
	// is dropped, so that clients fall back to TCP through it.
	Ports []int
	// Allow and Deny are the policy's address rules; with DefaultDeny an
	// address neither names is dropped. Deny wins; nothing here opens
	// Blocked, the host's subnets or a SpecialPurpose range AllowTo has
	// not opened.
	Allow, Deny []PortPrefix
	DefaultDeny bool
}

// PortPrefix is an address rule: a prefix, and one port of it or (0) all.
type PortPrefix struct {
	Prefix netip.Prefix
	Port   int
}

// NameServer is the address a sandbox's /etc/resolv.conf names (the agent
// writes it when the template has none). Every DNS packet of a sandbox
// with Names is redirected to the node's resolver whatever its address;
// for the others this address is refused at once (a lookup fails fast,
// as it did with no resolver at all).
var NameServer = netip.MustParseAddr("169.254.0.53")

// MaxFlows bounds a sandbox's live entries in the host's connection
// tracking table, new flows to the host and through it each: the table
// (nf_conntrack_max) is every sandbox's and the host's own, and once it is
// full the kernel drops every new connection. A UDP packet from a new
// port is an entry for 30 s, a SYN nobody answers for 120 s: a sandbox
// made one per packet and filled the table in seconds. A new flow past
// the bound is dropped. TCP connections that ended (TIME_WAIT) do not
// count.
const MaxFlows = 4096

// MaxQueries bounds the packets a second (and as many at once) a sandbox
// with a policy sends the node's resolver, over UDP and TCP together; the
// rest are dropped
// by the kernel. The resolver runs in the node's process, whose CPU every
// sandbox and the API share and no bound of the sandbox counts: one
// socket sending queries as fast as it could (one flow, which MaxFlows
// does not bound) had it answer 50,000 a second, half a core.
const MaxQueries = 1000

// MaxNewFlows bounds the new flows a second (and as many at once) a
// sandbox opens to the host, and as many through it; the rest are
// dropped (a TCP client sends its SYN again). A TCP connection that ended
// stays in the host's connection-tracking table for two minutes
// (TIME_WAIT), which MaxFlows does not count: a sandbox opening and
// closing connections to the egress proxy as fast as it could left
// thousands a second there. At this rate one sandbox holds at most about
// 24,000 such entries.
const MaxNewFlows = 200

// Blocked are the destinations a sandbox may never reach, even with
// Internet and whatever AllowTo says: the IANA special-purpose ranges
// (RFC 6890 and the IANA IPv4 Special-Purpose Address Registry) where real
// networks live — this host, other sandboxes, private networks, carrier
// NAT, cloud metadata services (169.254.169.254) — and the ranges no
// unicast connection may go to.
var Blocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network" (RFC 791)
	netip.MustParsePrefix("10.0.0.0/8"),     // private (RFC 1918)
	netip.MustParsePrefix("100.64.0.0/10"),  // shared address space, carrier NAT (RFC 6598)
	netip.MustParsePrefix("127.0.0.0/8"),    // loopback (RFC 1122)
	netip.MustParsePrefix("169.254.0.0/16"), // link-local: metadata services, every sandbox's link (RFC 3927)
	netip.MustParsePrefix("172.16.0.0/12"),  // private (RFC 1918)
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments, DS-Lite, NAT64 discovery (RFC 6890)
	netip.MustParsePrefix("192.168.0.0/16"), // private (RFC 1918)
	netip.MustParsePrefix("224.0.0.0/4"),    // multicast (RFC 5771)
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved (RFC 1112), with the limited broadcast 255.255.255.255
}

// SpecialPurpose are the other IANA special-purpose ranges: no one's
// network by assignment (documentation, benchmarking, anycast relays and
// sinks), so not the internet either. A sandbox reaches none of them
// unless AllowTo names a prefix inside one.
var SpecialPurpose = []netip.Prefix{
	netip.MustParsePrefix("192.0.2.0/24"),    // TEST-NET-1, documentation (RFC 5737)
	netip.MustParsePrefix("192.31.196.0/24"), // AS112-v4 (RFC 7535)
	netip.MustParsePrefix("192.52.193.0/24"), // AMT (RFC 7450)
	netip.MustParsePrefix("192.88.99.0/24"),  // deprecated 6to4 relay anycast (RFC 7526)
	netip.MustParsePrefix("192.175.48.0/24"), // direct delegation AS112 service (RFC 7534)
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking (RFC 2544)
	netip.MustParsePrefix("198.51.100.0/24"), // TEST-NET-2, documentation (RFC 5737)
	netip.MustParsePrefix("203.0.113.0/24"),  // TEST-NET-3, documentation (RFC 5737)
}

// TableName is the nftables table (family inet) holding sandbox id's
// rules.
func TableName(id string) string { return "lizard-" + id }

// opened are the prefixes of allow that lie inside a SpecialPurpose range:
// the operator named them, so they are let through that range's drop.
func opened(allow []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, a := range allow {
		a = a.Masked()
		for _, s := range SpecialPurpose {
			if s.Bits() <= a.Bits() && s.Contains(a.Addr()) {
				out = append(out, a)
				break
			}
		}
	}
	return merge(out)
}

// merge returns ps masked, sorted, without duplicates and without any
// prefix that another one holds: an nft interval set refuses overlapping
// elements, and two CIDR prefixes either nest or are disjoint.
func merge(ps []netip.Prefix) []netip.Prefix {
	s := make([]netip.Prefix, len(ps))
	for i, p := range ps {
		s[i] = p.Masked()
	}
	// Shorter prefixes first among equal addresses, so a holder comes
	// before everything it holds.
	slices.SortFunc(s, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	var out []netip.Prefix
	for _, p := range s {
		if n := len(out); n > 0 && out[n-1].Bits() <= p.Bits() && out[n-1].Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// HostNets are the host's own connected IPv4 subnets — the prefix of every
// address on every interface of this (the root) namespace — and the
// gateway of every route, as /32s: the uplink's gateway and its neighbours,
// which a sandbox must not reach even when they are public addresses.
//
// They are read once, when a sandbox's network is made (create, restore,
// resume, fork), and fixed in its rules for its life: an address or route
// the host gains later is denied to sandboxes made after it, not to those
// already running (pausing and resuming one rebuilds its rules). Watching
// netlink and rewriting every sandbox's table would close that window at
// the cost of a moving rule set; the fixed IANA lists already cover every
// private uplink, so only a host renumbered onto new public addresses
// while sandboxes run is exposed, to those sandboxes, until they end.
func HostNets() ([]netip.Prefix, error) {
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return nil, fmt.Errorf("listing the host's addresses: %w", err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IPNet.IP.To4())
		if !ok {
			continue
		}
		bits, _ := a.IPNet.Mask.Size()
		out = append(out, netip.PrefixFrom(ip, bits))
	}
	routes, err := retryDump(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, fmt.Errorf("listing the host's routes: %w", err)
	}
	for _, r := range routes {
		gws := []net.IP{r.Gw}
		for _, nh := range r.MultiPath {
			gws = append(gws, nh.Gw)
		}
		for _, gw := range gws {
			if ip, ok := netip.AddrFromSlice(gw.To4()); ok {
				out = append(out, netip.PrefixFrom(ip, 32))
			}
		}
	}
	return merge(out), nil
}

// CheckEgress reports whether egress policies can be enforced here:
// nftables must answer over netlink.
func CheckEgress() error {
	c, err := nftables.New()
	if err == nil {
		_, err = c.ListTablesOfFamily(nftables.TableFamilyINet)
	}
	if err != nil {
		return fmt.Errorf("nftables does not answer over netlink (%w): sandbox network policies need a kernel with nf_tables (modprobe nf_tables) and a server running as root", err)
	}
	return nil
}

// flush sends the batch queue fills in one transaction.
func flush(queue func(c *nftables.Conn) error) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	if err := queue(c); err != nil {
		return err
	}
	return c.Flush()
}

// hostNetsFor returns the host's subnets a sandbox with e must be denied:
// HostNets when it reaches out at all, else none (nothing is forwarded).
func hostNetsFor(e Egress) ([]netip.Prefix, error) {
	if !e.Internet {
		return nil, nil
	}
	return HostNets()
}

// applyEgress installs sandbox id's rules. It runs before the veth
// exists: the rules match interface names, so the sandbox's first packet
// already meets them.
func applyEgress(id string, l Link, e Egress) error {
	hostNets, err := hostNetsFor(e)
	if err != nil {
		return fmt.Errorf("installing network policy of sandbox %s: %w", id, err)
	}
	// A table left by a crash makes the fresh batch fail; then replace it.
	if flush(func(c *nftables.Conn) error { return addRules(c, id, l, e, hostNets, true) }) == nil {
		return nil
	}
	if err := flush(func(c *nftables.Conn) error { return addRules(c, id, l, e, hostNets, false) }); err != nil {
		return fmt.Errorf("installing network policy of sandbox %s: %w", id, err)
	}
	return nil
}

// UpdateEgress replaces the rules of running sandbox id with e's, in one
// transaction: connections already open are kept (Names lets established
// flows through; CutFlows ends them).
func UpdateEgress(id string, l Link, e Egress) error {
	hostNets, err := hostNetsFor(e)
	if err != nil {
		return fmt.Errorf("updating network policy of sandbox %s: %w", id, err)
	}
	if err := flush(func(c *nftables.Conn) error { return addRules(c, id, l, e, hostNets, false) }); err != nil {
		return fmt.Errorf("updating network policy of sandbox %s: %w", id, err)
	}
	return nil
}

// CutFlows forgets the connections sandbox l opened (its conntrack
// entries), so that their next packets meet its rules as new ones.
func CutFlows(l Link) error {
	f := &netlink.ConntrackFilter{}
	if err := f.AddIP(netlink.ConntrackOrigSrcIP, l.GuestAddr.AsSlice()); err != nil {
		return err
	}
	if _, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
		return fmt.Errorf("cutting the connections of %s: %w", l.GuestAddr, err)
	}
	return nil
}

// removeEgress deletes sandbox id's rules; gone rules are not an error.
func removeEgress(id string) error {
	err := flush(func(c *nftables.Conn) error {
		queueDelete(c, id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("removing network policy of sandbox %s: %w", id, err)
	}
	return nil
}

// routeOut gives the namespace a default route through the host side of
// the link, and lets the host forward what arrives on the host veth (this
// interface only: the host's global forwarding setting is left alone).
func routeOut(id string, l Link, ns netns.NsHandle) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("opening netlink in namespace %s: %w", Name(id), err)
	}
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("finding eth0 in %s: %w", Name(id), err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: l.HostAddr.AsSlice()}); err != nil {
		return fmt.Errorf("adding default route via %s in %s: %w", l.HostAddr, Name(id), err)
	}
	p := "/proc/sys/net/ipv4/conf/" + VethName(id) + "/forwarding"
	if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enabling forwarding on %s: %w", VethName(id), err)
	}
	return nil
}

// Reachable reports whether a sandbox with Internet and AllowTo allow may
// reach a, by the same rules as its forward chain: never Blocked or one of
// hostNets, a SpecialPurpose range only where allow opens it, and only
// inside allow when it is not empty. The egress proxy connects only to
// such addresses.
func Reachable(a netip.Addr, allow, hostNets []netip.Prefix) bool {
	a = a.Unmap()
	if !a.Is4() {
		return false
	}
	in := func(ps []netip.Prefix) bool {
		for _, p := range ps {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	if in(Blocked) || in(hostNets) {
		return false
	}
	if in(opened(allow)) {
		return true
	}
	if in(SpecialPurpose) {
		return false
	}
	return len(allow) == 0 || in(allow)
}
