package netns

import (
	"fmt"
	"net/netip"
)

// DefaultPool is the default address pool: link-local, so sandbox addresses
// collide with nothing routed. It contains 169.254.169.0/24, where cloud
// metadata services live; the pool never hands out links in there.
var DefaultPool = netip.MustParsePrefix("169.254.128.0/17")

var metadataNet = netip.MustParsePrefix("169.254.169.0/24")

// SlotPrefixLen is the length of every sandbox's point-to-point link.
const SlotPrefixLen = 30

// Pool splits an IPv4 prefix into /30 links, skipping any inside
// 169.254.169.0/24. Slot n is the n-th usable link; its host address is the
// link's .1 and its guest address the link's .2 (for the default pool, slot
// n is 169.254.128.0 + 4n + 1 and + 2 up to the hole).
type Pool struct {
	prefix netip.Prefix
	// Links [holeStart, holeStart+holeLen) lie in the metadata range.
	holeStart, holeLen int
	links              int
}

// NewPool checks prefix and returns its pool.
func NewPool(prefix netip.Prefix) (Pool, error) {
	switch {
	case !prefix.IsValid() || !prefix.Addr().Is4():
		return Pool{}, fmt.Errorf("address pool %s: want an IPv4 prefix such as %s", prefix, DefaultPool)
	case prefix.Masked() != prefix:
		return Pool{}, fmt.Errorf("address pool %s has host bits set; did you mean %s?", prefix, prefix.Masked())
	case prefix.Bits() > SlotPrefixLen:
		return Pool{}, fmt.Errorf("address pool %s is smaller than one /%d link", prefix, SlotPrefixLen)
	case prefix.Bits() >= metadataNet.Bits() && prefix.Overlaps(metadataNet):
		return Pool{}, fmt.Errorf("address pool %s lies in %s, where cloud metadata services live", prefix, metadataNet)
	}
	// More links than this would only make the free-slot query slower.
	p := Pool{prefix: prefix, links: min(1<<(SlotPrefixLen-prefix.Bits()), 1<<20)}
	if prefix.Overlaps(metadataNet) {
		p.holeStart = int(toUint(metadataNet.Addr())-toUint(prefix.Addr())) / 4
		p.holeLen = 1 << (SlotPrefixLen - metadataNet.Bits())
	}
	return p, nil
}

// ParsePool parses and checks a pool such as "169.254.128.0/17".
func ParsePool(s string) (Pool, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return Pool{}, fmt.Errorf("address pool %q: %w", s, err)
	}
	return NewPool(p)
}

// Prefix returns the pool's prefix.
func (p Pool) Prefix() netip.Prefix { return p.prefix }

// Slots is how many sandboxes the pool can address at once.
func (p Pool) Slots() int {
	if p.holeStart >= p.links {
		return p.links
	}
	return p.links - p.holeLen
}

// Addrs returns the host and guest addresses of slot n.
func (p Pool) Addrs(n int) (host, guest netip.Addr) {
	link := n
	if p.holeLen > 0 && link >= p.holeStart {
		link += p.holeLen
	}
	base := toUint(p.prefix.Addr()) + 4*uint32(link)
	return fromUint(base + 1), fromUint(base + 2)
}

// slotOf returns the slot whose link holds address a (ok false: none of
// the pool's, or in the hole).
func (p Pool) slotOf(a netip.Addr) (int, bool) {
	if !a.Is4() || !p.prefix.Contains(a) {
		return 0, false
	}
	link := int((toUint(a) - toUint(p.prefix.Addr())) / 4)
	switch {
	case link >= p.links:
		return 0, false
	case p.holeLen > 0 && link >= p.holeStart+p.holeLen:
		return link - p.holeLen, true
	case p.holeLen > 0 && link >= p.holeStart:
		return 0, false
	}
	return link, true
}

func toUint(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func fromUint(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// AddrStrings returns slot n's host and guest addresses as strings, as the store
// records them.
func (p Pool) AddrStrings(n int) (string, string) {
	h, g := p.Addrs(n)
	return h.String(), g.String()
}
