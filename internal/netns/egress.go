package netns

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"

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
	// Names, when set with Internet, is a policy by name (package egress):
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

// ruleset is the nft script that (re)creates sandbox id's table. hostNets
// are the host's own connected subnets and gateways (HostNets), denied
// like Blocked.
//
// With fresh the script fails if the table exists; else it replaces the
// table. A new sandbox's table does not exist, and deleting a table costs
// a kernel grace period (about 16 ms here) a create need not wait for.
func ruleset(id string, l Link, e Egress, hostNets []netip.Prefix, fresh bool) string {
	veth := VethName(id)
	var b strings.Builder
	t := TableName(id)
	if fresh {
		fmt.Fprintf(&b, "create table inet %s\ntable inet %s {\n", t, t)
	} else {
		// Declaring the table before deleting it makes the delete succeed
		// whether or not it existed, in one atomic transaction.
		fmt.Fprintf(&b, "table inet %s {}\ndelete table inet %s\ntable inet %s {\n", t, t, t)
	}

	// Packets from the sandbox to this host, any of its addresses.
	b.WriteString("\tchain input {\n\t\ttype filter hook input priority -10; policy accept;\n")
	fmt.Fprintf(&b, "\t\tiifname %q ct state established,related accept\n", veth)
	if e.APIPort > 0 {
		fmt.Fprintf(&b, "\t\tiifname %q ip saddr %s ip daddr %s tcp dport %d ct state new accept\n", veth, l.GuestAddr, l.HostAddr, e.APIPort)
	}
	names := e.Names
	if !e.Internet {
		names = nil
	}
	if names != nil {
		// After the redirects below: the resolver and the proxy, on the
		// host address the redirect chose.
		fmt.Fprintf(&b, "\t\tiifname %q ip saddr %s ip daddr %s meta l4proto { tcp, udp } th dport %d accept\n", veth, l.GuestAddr, l.HostAddr, names.DNSPort)
		fmt.Fprintf(&b, "\t\tiifname %q ip saddr %s ip daddr %s tcp dport %d accept\n", veth, l.GuestAddr, l.HostAddr, names.ProxyPort)
	}
	fmt.Fprintf(&b, "\t\tiifname %q drop\n\t}\n", veth)

	// Packets through this host, to or from the sandbox.
	b.WriteString("\tchain forward {\n\t\ttype filter hook forward priority -10; policy accept;\n")
	fmt.Fprintf(&b, "\t\toifname %q ct state established,related accept\n", veth)
	fmt.Fprintf(&b, "\t\toifname %q drop\n", veth)
	// Without a resolver, a lookup fails at once rather than timing out.
	fmt.Fprintf(&b, "\t\tiifname %q ip daddr %s reject\n", veth, NameServer)
	if e.Internet {
		// What passes to an open range: the internet, or the policy's
		// address rules.
		pass := "accept"
		if names != nil {
			// A policy update does not cut what is open (unless asked:
			// CutFlows).
			fmt.Fprintf(&b, "\t\tiifname %q ct state established,related accept\n", veth)
			pass = "jump names"
		}
		fmt.Fprintf(&b, "\t\tiifname %q meta nfproto ipv6 drop\n", veth)
		fmt.Fprintf(&b, "\t\tiifname %q ip saddr != %s drop\n", veth, l.GuestAddr)
		fmt.Fprintf(&b, "\t\tiifname %q ip daddr { %s } drop\n", veth, prefixes(merge(append(slices.Clone(Blocked), hostNets...))))
		if open := opened(e.AllowTo); len(open) > 0 {
			fmt.Fprintf(&b, "\t\tiifname %q ip daddr { %s } %s\n", veth, prefixes(open), pass)
		}
		fmt.Fprintf(&b, "\t\tiifname %q ip daddr { %s } drop\n", veth, prefixes(merge(SpecialPurpose)))
		if len(e.AllowTo) > 0 {
			fmt.Fprintf(&b, "\t\tiifname %q ip daddr != { %s } drop\n", veth, prefixes(merge(e.AllowTo)))
		}
		fmt.Fprintf(&b, "\t\tiifname %q %s\n", veth, pass)
	}
	fmt.Fprintf(&b, "\t\tiifname %q drop\n\t}\n", veth)

	if names != nil {
		// The policy's address rules, for what the proxy does not see.
		b.WriteString("\tchain names {\n")
		fmt.Fprintf(&b, "\t\tudp dport { %s } drop\n", ports(names.Ports))
		for _, r := range names.Deny {
			fmt.Fprintf(&b, "\t\t%s drop\n", portPrefix(r))
		}
		for _, r := range names.Allow {
			fmt.Fprintf(&b, "\t\t%s accept\n", portPrefix(r))
		}
		if names.DefaultDeny {
			b.WriteString("\t\tdrop\n\t}\n")
		} else {
			b.WriteString("\t\taccept\n\t}\n")
		}
		// DNS to any resolver goes to the node's; TCP to the proxied
		// ports to its proxy, which reads the name and ignores the
		// address the sandbox asked for.
		b.WriteString("\tchain prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n")
		fmt.Fprintf(&b, "\t\tiifname %q ip saddr %s meta l4proto { tcp, udp } th dport 53 redirect to :%d\n", veth, l.GuestAddr, names.DNSPort)
		fmt.Fprintf(&b, "\t\tiifname %q ip saddr %s tcp dport { %s } redirect to :%d\n\t}\n", veth, l.GuestAddr, ports(names.Ports), names.ProxyPort)
	}

	if e.Internet {
		// The sandbox's link address is not routable outside this host.
		b.WriteString("\tchain postrouting {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n")
		fmt.Fprintf(&b, "\t\tip saddr %s oifname != %q masquerade\n\t}\n", l.GuestAddr, veth)
	}
	b.WriteString("}\n")
	return b.String()
}

func portPrefix(r PortPrefix) string {
	if r.Port == 0 {
		return "ip daddr " + r.Prefix.Masked().String()
	}
	return fmt.Sprintf("ip daddr %s meta l4proto { tcp, udp } th dport %d", r.Prefix.Masked(), r.Port)
}

func ports(ps []int) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ", ")
}

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

func prefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.Masked().String()
	}
	return strings.Join(s, ", ")
}

// nft runs the nft command with script on its standard input.
func nft(script string, args ...string) error {
	cmd := exec.Command("nft", append(args, "-f", "-")...)
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// CheckEgress reports whether egress policies can be enforced here: the
// nft command must be present and work.
func CheckEgress() error {
	if _, err := exec.LookPath("nft"); err != nil {
		return errors.New("the nft command (package nftables) is needed to enforce sandbox network policies: install it (make deps)")
	}
	if err := nft("list tables\n"); err != nil {
		return fmt.Errorf("nftables does not work here: %w", err)
	}
	return nil
}

// applyEgress installs sandbox id's rules. It runs before the veth
// exists: the rules match interface names, so the sandbox's first packet
// already meets them.
func applyEgress(id string, l Link, e Egress) error {
	var hostNets []netip.Prefix
	if e.Internet {
		var err error
		if hostNets, err = HostNets(); err != nil {
			return fmt.Errorf("installing network policy of sandbox %s: %w", id, err)
		}
	}
	// A table left by a crash makes the fresh script fail; then replace it.
	if nft(ruleset(id, l, e, hostNets, true)) == nil {
		return nil
	}
	if err := nft(ruleset(id, l, e, hostNets, false)); err != nil {
		return fmt.Errorf("installing network policy of sandbox %s: %w", id, err)
	}
	return nil
}

// UpdateEgress replaces the rules of running sandbox id with e's, in one
// transaction: connections already open are kept (Names lets established
// flows through; CutFlows ends them).
func UpdateEgress(id string, l Link, e Egress) error {
	var hostNets []netip.Prefix
	if e.Internet {
		var err error
		if hostNets, err = HostNets(); err != nil {
			return fmt.Errorf("updating network policy of sandbox %s: %w", id, err)
		}
	}
	if err := nft(ruleset(id, l, e, hostNets, false)); err != nil {
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
	t := TableName(id)
	if err := nft(fmt.Sprintf("table inet %s {}\ndelete table inet %s\n", t, t)); err != nil {
		if _, lerr := exec.LookPath("nft"); lerr != nil {
			return nil // without nft no rules were ever made
		}
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
