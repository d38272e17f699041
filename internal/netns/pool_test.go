package netns

import "testing"

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
