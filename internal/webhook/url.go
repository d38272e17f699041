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
			return errdefs.Invalidf("url %q: %s is a %s address; %s", raw, a, why, publicOnly)
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

// refused says what kind of non-public address a is ("" for a public
// one): besides the kinds named, every range a sandbox may never reach
// either (netns.Blocked, netns.SpecialPurpose), and this host's own
// addresses, whatever their range — a receiver there is the host's own
// services listening on all addresses.
func refused(a netip.Addr) string {
	a = a.Unmap()
	if nat64.Contains(a) {
		// A NAT64 gateway connects to the IPv4 address in the last 32 bits.
		b := a.As16()
		a = netip.AddrFrom4([4]byte(b[12:]))
	}
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
	nat64       = netip.MustParsePrefix("64:ff9b::/96")
)

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
