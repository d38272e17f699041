package netns

import (
	"net/netip"
	"slices"
	"testing"
)

func TestPoolSlots(t *testing.T) {
	p, err := ParsePool("169.254.128.0/17")
	if err != nil {
		t.Fatal(err)
	}
	// 8192 links less the 64 in 169.254.169.0/24.
	if p.Slots() != 8192-64 {
		t.Errorf("slots = %d; want 8128", p.Slots())
	}
	for _, tt := range []struct {
		n           int
		host, guest string
	}{
		{0, "169.254.128.1", "169.254.128.2"},
		{1, "169.254.128.5", "169.254.128.6"},
		{64, "169.254.129.1", "169.254.129.2"},
		{41*64 - 1, "169.254.168.253", "169.254.168.254"},
		{41 * 64, "169.254.170.1", "169.254.170.2"}, // the metadata /24 is skipped
		{8127, "169.254.255.253", "169.254.255.254"},
	} {
		h, g := p.Addrs(tt.n)
		if h.String() != tt.host || g.String() != tt.guest {
			t.Errorf("slot %d = %s %s; want %s %s", tt.n, h, g, tt.host, tt.guest)
		}
		if hs, gs := p.AddrStrings(tt.n); hs != tt.host || gs != tt.guest {
			t.Errorf("AddrStrings(%d) = %s %s; want %s %s", tt.n, hs, gs, tt.host, tt.guest)
		}
	}
	small, _ := ParsePool("10.0.0.0/24")
	if h, _ := small.Addrs(63); small.Slots() != 64 || h.String() != "10.0.0.253" {
		t.Errorf("10.0.0.0/24: %d slots, slot 63 host %s; want 64, 10.0.0.253", small.Slots(), h)
	}
}

func TestPoolRefusesBadPrefixes(t *testing.T) {
	for _, bad := range []string{"169.254.169.0/24", "169.254.169.128/25", "10.0.0.1/24", "fd00::/64", "10.0.0.0/31", "nonsense"} {
		if _, err := ParsePool(bad); err == nil {
			t.Errorf("ParsePool(%q) succeeded; want an error", bad)
		}
	}
}

// TestPoolSkipsMetadata checks that no slot of a pool around the cloud
// metadata range lands in it.
func TestPoolSkipsMetadata(t *testing.T) {
	wide, err := ParsePool("169.254.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	for n := range wide.Slots() {
		if h, g := wide.Addrs(n); metadataNet.Contains(h) || metadataNet.Contains(g) {
			t.Fatalf("slot %d of %s = %s %s, inside %s", n, wide.Prefix(), h, g, metadataNet)
		}
	}
}

// TestPoolSettling: the slots whose links still have conntrack entries to
// delete are the pool's Settling, by either address of the link, until
// they are forgotten; a link of another pool, or of no slot, is none.
func TestPoolSettling(t *testing.T) {
	p, err := ParsePool("169.254.128.0/17")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		a    string
		slot int
		ok   bool
	}{
		{"169.254.128.1", 0, true},
		{"169.254.128.2", 0, true},
		{"169.254.168.254", 41*64 - 1, true},
		{"169.254.169.5", 0, false}, // the metadata /24
		{"169.254.170.1", 41 * 64, true},
		{"169.254.255.254", 8127, true},
		{"169.254.127.254", 0, false},
		{"10.0.0.1", 0, false},
	} {
		if s, ok := p.slotOf(netip.MustParseAddr(tt.a)); ok != tt.ok || (ok && s != tt.slot) {
			t.Errorf("slotOf(%s) = %d, %v; want %d, %v", tt.a, s, ok, tt.slot, tt.ok)
		}
	}
	// A pool of its own: no other test's release settles in it.
	q, err := ParsePool("10.77.0.0/24")
	if err != nil {
		t.Fatal(err)
	}
	link := func(slot int) netip.Prefix {
		h, _ := q.Addrs(slot)
		return netip.PrefixFrom(h, SlotPrefixLen)
	}
	nets := []netip.Prefix{link(3), link(63), netip.MustParsePrefix("10.9.0.1/30"), netip.MustParsePrefix("10.77.0.1/24")}
	markForgetting(nets)
	got := q.Settling()
	slices.Sort(got)
	if !slices.Equal(got, []int{3, 63}) {
		t.Errorf("Settling = %v; want [3 63] (not another pool's link, nor a wider one)", got)
	}
	forgotten(nets)
	if got := q.Settling(); len(got) != 0 {
		t.Errorf("Settling once forgotten = %v; want none", got)
	}
}
