package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/netns"
)

// CheckURL refuses, with errdefs.ErrInvalid saying why, a webhook URL that
// is not http(s), is longer than MaxURL, has no host, or (unless
// allowPrivate) names or resolves to an address that is not public:
// loopback, link-local, private, unspecified, multicast, reserved or
// special-purpose, or this host's own. Deliveries
// check the address they connect to again (refusedDial), so a name that
// later resolves elsewhere (DNS rebinding) is refused then.
func CheckURL(ctx context.Context, raw string, allowPrivate bool, r *net.Resolver) error {
	if len(raw) > MaxURL {
		return errdefs.Invalidf("url: %d bytes, over the %d allowed", len(raw), MaxURL)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errdefs.Invalidf("url %q does not parse: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errdefs.Invalidf("url %q: want an http:// or https:// URL", raw)
	}
	if u.Hostname() == "" {
		return errdefs.Invalidf("url %q has no host", raw)
	}
	if u.User != nil {
		return errdefs.Invalidf("url %q carries a user name or password; authenticate deliveries by their signature instead", raw)
	}
	if allowPrivate {
		return nil
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		if why := refused(a); why != "" {
			return errdefs.Invalidf("url %q: %s is %s; %s", raw, a, why, publicOnly)
		}
		return nil
	}
	// A name's answer is not told: what an internal name resolves to, or
	// whether it resolves at all, is the operator's network, not the key's.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ips, err := r.LookupNetIP(ctx, "ip", host)
	ok := err == nil && len(ips) > 0
	for _, a := range ips {
		ok = ok && refused(a) == ""
	}
	if !ok {
		return errdefs.Invalidf("url %q: the webhook URL's host must resolve to a public address; %s", raw, publicOnly)
	}
	return nil
}

const publicOnly = "webhooks reach public addresses only (the operator may allow others with --webhook-allow-private)"

// refused says what kind of non-public address a is, as "a loopback
// address" ("" for a public one): besides the kinds named, every range a sandbox may never reach
// either (netns.Blocked, netns.SpecialPurpose), and this host's own
// addresses, whatever their range — a receiver there is the host's own
// services listening on all addresses. An IPv6 address that a
// translator or tunnel turns into an IPv4 one (embedded) is refused as
// that IPv4 address would be: http://[2002:7f00:1::]/ is a 6to4 relay's
// way to 127.0.0.1.
func refused(a netip.Addr) string {
	a = a.Unmap()
	if kind := kindOf(a); kind != "" {
		return "a " + kind + " address"
	}
	if nat64Local.Contains(a) {
		// Where the IPv4 address sits depends on the length of the
		// operator's prefix (RFC 6052: /48 to /96), which is not known
		// here; and IANA lists the range as not globally reachable — a
		// translator into the operator's own network, refused whole.
		return "a local-use NAT64 (64:ff9b:1::/48) address"
	}
	for _, v4 := range embedded(a) {
		if kind := kindOf(v4); kind != "" {
			return fmt.Sprintf("an IPv6 address embedding %s, a %s address", v4, kind)
		}
	}
	return ""
}

// kindOf names a's kind of non-public address, "" for a public one.
func kindOf(a netip.Addr) string {
	switch {
	case a.IsLoopback():
		return "loopback"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return "link-local"
	case a.IsPrivate(), cgnat.Contains(a):
		return "private"
	case a.IsUnspecified(), thisNetwork.Contains(a):
		return "unspecified"
	case a.IsMulticast(), a.IsInterfaceLocalMulticast():
		return "multicast"
	case inAny(netns.Blocked, a), inAny(netns.SpecialPurpose, a):
		return "reserved or special-purpose"
	case hostOwn(a):
		return "this host's own"
	}
	return ""
}

var (
	cgnat       = netip.MustParsePrefix("100.64.0.0/10")
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

	// The IPv6 ranges whose addresses carry an IPv4 address that
	// something on the path connects to or tunnels towards.
	v4Compatible = netip.MustParsePrefix("::/96")           // IPv4-compatible, ::a.b.c.d (RFC 4291, deprecated; still routed by some stacks)
	siit         = netip.MustParsePrefix("::ffff:0:0:0/96") // IPv4-translated, ::ffff:0:a.b.c.d (RFC 2765)
	nat64        = netip.MustParsePrefix("64:ff9b::/96")    // well-known NAT64 prefix (RFC 6052)
	nat64Local   = netip.MustParsePrefix("64:ff9b:1::/48")  // local-use NAT64 (RFC 8215), the operator's own prefix, /48 to /96
	sixToFour    = netip.MustParsePrefix("2002::/16")       // 6to4, 2002:aabb:ccdd:: (RFC 3056)
	teredo       = netip.MustParsePrefix("2001::/32")       // Teredo: server in bits 32-63, client inverted in the last 32 (RFC 4380)
)

// embedded returns the IPv4 addresses that a (IPv6) stands for on some
// path: the one a translator or tunnel delivers to, and for Teredo its
// server too. (::ffff:a.b.c.d, IPv4-mapped, is unmapped before.)
func embedded(a netip.Addr) []netip.Addr {
	if !a.Is6() {
		return nil
	}
	b := a.As16()
	v4 := func(off int) netip.Addr { return netip.AddrFrom4([4]byte(b[off : off+4])) }
	switch {
	case v4Compatible.Contains(a), siit.Contains(a), nat64.Contains(a):
		return []netip.Addr{v4(12)}
	case sixToFour.Contains(a):
		return []netip.Addr{v4(2)}
	case teredo.Contains(a):
		c := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
		return []netip.Addr{v4(4), netip.AddrFrom4(c)}
	}
	return nil
}

func inAny(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// hostOwn reports whether a is an address of one of this host's
// interfaces, or whether they cannot be listed (refused, then, rather
// than sent unchecked).
func hostOwn(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
				return true
			}
		}
	}
	return false
}

// errNotPublic is a delivery's refusal. The attempt's error, which the key
// reads, is it alone, naming no address: the host may be a name the key
// made resolve (a CNAME) to an internal one.
var errNotPublic = errors.New("refused: the webhook's host resolved to an address that is not public")

// refusedDial is a net.Dialer's Control: it refuses a connection to an
// address that is not public, whatever name led to it.
func refusedDial(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook address %s: %w", address, err)
	}
	if refused(ap.Addr()) != "" {
		return errNotPublic
	}
	return nil
}
