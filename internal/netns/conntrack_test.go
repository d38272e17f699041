package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/lizard-build/lizard/internal/testenv"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// tcpEstablished is the kernel's TCP_CONNTRACK_ESTABLISHED.
const tcpEstablished = 3

// flow is an established TCP entry from src to dst, as a sandbox's
// connection leaves it: its reply comes back to src (no translation).
func flow(src netip.AddrPort, dst netip.AddrPort) *netlink.ConntrackFlow {
	return &netlink.ConntrackFlow{
		FamilyType: unix.AF_INET,
		Forward: netlink.IPTuple{SrcIP: net.IP(src.Addr().AsSlice()), DstIP: net.IP(dst.Addr().AsSlice()),
			SrcPort: src.Port(), DstPort: dst.Port(), Protocol: unix.IPPROTO_TCP},
		Reverse: netlink.IPTuple{SrcIP: net.IP(dst.Addr().AsSlice()), DstIP: net.IP(src.Addr().AsSlice()),
			SrcPort: dst.Port(), DstPort: src.Port(), Protocol: unix.IPPROTO_TCP},
		TimeOut:   600,
		ProtoInfo: &netlink.ProtoInfoTCP{State: tcpEstablished},
	}
}

// insertFlows adds flows to h's table (nil: the host's) — entries only,
// no packet is sent — and, for the host's, deletes them at the end.
func insertFlows(t testing.TB, h *netlink.Handle, flows ...*netlink.ConntrackFlow) {
	t.Helper()
	hh := h
	if hh == nil {
		hh = &netlink.Handle{}
	}
	for _, f := range flows {
		if err := hh.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET, f); err != nil && !errors.Is(err, fs.ErrExist) {
			t.Fatalf("inserting conntrack entry %s: %v", f, err)
		}
	}
	if h == nil {
		t.Cleanup(func() {
			for _, f := range flows {
				ff := &netlink.ConntrackFilter{}
				_ = ff.AddIP(netlink.ConntrackOrigSrcIP, f.Forward.SrcIP)
				_ = ff.AddIP(netlink.ConntrackOrigDstIP, f.Forward.DstIP)
				_, _ = netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, ff)
			}
		})
	}
}

// tracked reports whether the host's table holds an entry whose original
// direction is f's.
func tracked(t *testing.T, f *netlink.ConntrackFlow) bool {
	t.Helper()
	flows, err := retryDump(func() ([]*netlink.ConntrackFlow, error) {
		return netlink.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	})
	if err != nil {
		t.Fatalf("listing conntrack entries: %v", err)
	}
	for _, g := range flows {
		if g.Forward.SrcIP.Equal(f.Forward.SrcIP) && g.Forward.DstIP.Equal(f.Forward.DstIP) &&
			g.Forward.SrcPort == f.Forward.SrcPort && g.Forward.DstPort == f.Forward.DstPort {
			return true
		}
	}
	return false
}

// TestRecycledAddressForgetsFlows: a sandbox's connections do not pass to
// the next owner of its address. An established entry of the first owner
// — to an address outside (203.0.113.21:80, the kind a test run left 6003
// of) and the host's to it — is gone when the address is taken again,
// released in the background or removed at once; an entry of another
// address stays.
func TestRecycledAddressForgetsFlows(t *testing.T) {
	testenv.RequiresRoot(t)
	l := Link{netip.MustParseAddr("169.254.251.225"), netip.MustParseAddr("169.254.251.226"), 30}
	ids := []string{"nsct-a", "nsct-b", "nsct-c"}
	t.Cleanup(func() {
		for _, id := range ids {
			_ = Remove(id)
		}
	})
	guest := func(port uint16) netip.AddrPort { return netip.AddrPortFrom(l.GuestAddr, port) }
	out := netip.MustParseAddrPort("203.0.113.21:80")
	other := flow(netip.MustParseAddrPort("169.254.251.250:40000"), out)
	insertFlows(t, nil, other)

	for i, end := range []struct {
		name string
		end  func(id string) error
	}{
		{"released", func(id string) error { return Release(id, nil) }},
		{"removed", Remove},
	} {
		owner, next := ids[i], ids[i+1]
		if err := CreateWithEgress(owner, l, &Egress{}); err != nil {
			t.Fatal(err)
		}
		old := []*netlink.ConntrackFlow{
			flow(guest(40000+uint16(i)), out),
			flow(netip.AddrPortFrom(l.HostAddr, 50000+uint16(i)), guest(49999)),
		}
		insertFlows(t, nil, old...)
		for _, f := range old {
			if !tracked(t, f) {
				t.Fatalf("entry %s was not inserted", f)
			}
		}
		if err := end.end(owner); err != nil {
			t.Fatal(err)
		}
		// The next owner, at once.
		if err := CreateWithEgress(next, l, &Egress{}); err != nil {
			t.Fatal(err)
		}
		for _, f := range old {
			if tracked(t, f) {
				t.Errorf("%s: the next owner of %s inherits the entry %s", end.name, l.GuestAddr, f)
			}
		}
		if !tracked(t, other) {
			t.Errorf("%s: the entry %s of another address was deleted", end.name, other)
		}
		if err := Remove(next); err != nil {
			t.Fatal(err)
		}
	}
	Settle()
}

// TestForgetPoolFlows: a starting server deletes the entries of its pool's
// slots no interface is addressed in (a crash skipped their reaper), keeps
// those of a slot in use (a sandbox kept over the restart) and of
// addresses outside the pool.
func TestForgetPoolFlows(t *testing.T) {
	testenv.RequiresRoot(t)
	pool, err := NewPool(netip.MustParsePrefix("169.254.251.192/28"))
	if err != nil {
		t.Fatal(err)
	}
	link := func(n int) Link {
		h, g := pool.Addrs(n)
		return Link{h, g, SlotPrefixLen}
	}
	kept, stale := link(0), link(1)
	t.Cleanup(func() { _ = Remove("nsct-kept") })
	if err := CreateWithEgress("nsct-kept", kept, &Egress{}); err != nil {
		t.Fatal(err)
	}
	out := netip.MustParseAddrPort("203.0.113.21:80")
	keptFlow := flow(netip.AddrPortFrom(kept.GuestAddr, 40000), out)
	staleFlows := []*netlink.ConntrackFlow{
		flow(netip.AddrPortFrom(stale.GuestAddr, 40000), out),
		flow(netip.AddrPortFrom(stale.HostAddr, 40000), netip.AddrPortFrom(stale.GuestAddr, 49999)),
	}
	outside := flow(netip.MustParseAddrPort("169.254.251.250:40001"), out)
	insertFlows(t, nil, append([]*netlink.ConntrackFlow{keptFlow, outside}, staleFlows...)...)

	n, err := ForgetPoolFlows(pool)
	if err != nil {
		t.Fatal(err)
	}
	if n < uint(len(staleFlows)) {
		t.Errorf("ForgetPoolFlows deleted %d entries, want at least %d", n, len(staleFlows))
	}
	for _, f := range staleFlows {
		if tracked(t, f) {
			t.Errorf("the entry %s of an unused slot survived", f)
		}
	}
	for _, f := range []*netlink.ConntrackFlow{keptFlow, outside} {
		if !tracked(t, f) {
			t.Errorf("the entry %s was deleted; want it kept", f)
		}
	}
}

// TestForgetLinks: released links' entries are deleted both ways —
// the kernel's flushes for a few links, one dump of the table for a
// burst — each guest's own connections and the host's to it, and no
// other address's.
func TestForgetLinks(t *testing.T) {
	testenv.RequiresRoot(t)
	out := netip.MustParseAddrPort("203.0.113.21:80")
	other := flow(netip.MustParseAddrPort("169.254.251.250:40002"), out)
	insertFlows(t, nil, other)
	for _, links := range []int{1, flushesPerDump} {
		t.Run(fmt.Sprintf("links=%d", links), func(t *testing.T) {
			var nets []netip.Prefix
			var flows []*netlink.ConntrackFlow
			for i := range links {
				// Slots of 169.254.251.128/27, which nothing else uses.
				host := fromUint(toUint(netip.MustParseAddr("169.254.251.129")) + 4*uint32(i))
				guest := host.Next()
				nets = append(nets, netip.PrefixFrom(host, SlotPrefixLen))
				flows = append(flows,
					flow(netip.AddrPortFrom(guest, 40000), out),
					flow(netip.AddrPortFrom(host, 50000), netip.AddrPortFrom(guest, 49999)))
			}
			insertFlows(t, nil, flows...)
			if err := forgetLinks(nets); err != nil {
				t.Fatal(err)
			}
			for _, f := range flows {
				if tracked(t, f) {
					t.Errorf("the entry %s of a released link survived", f)
				}
			}
			if !tracked(t, other) {
				t.Errorf("the entry %s of another address was deleted", other)
			}
		})
	}
}

// BenchmarkForgetFlows measures deleting one released guest address's
// entries — none of the table's — beside 0, 6,000 and 50,000 other
// entries, in a namespace of the benchmark's own (entries inserted over
// netlink, no packet sent), two ways: the kernel's filtered flushes
// (flushGuest, what a release does) and one dump of the table filtered
// here (forgetFlows, what a server start does over its pool). ns/op is
// the wall time, cpu-ms/op this process's CPU, the kernel's work for it
// included (system time).
//
//	go test -run '^$' -bench ForgetFlows -benchtime 20x ./internal/netns
func BenchmarkForgetFlows(b *testing.B) {
	testenv.RequiresRoot(b)
	path := filepath.Join(Dir, Prefix+"bench-conntrack")
	_ = unix.Unmount(path, unix.MNT_DETACH)
	_ = os.Remove(path)
	if err := createNamed(path); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = unix.Unmount(path, unix.MNT_DETACH)
		_ = os.Remove(path)
	})
	ns, err := netns.GetFromPath(path)
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	guest := netip.MustParseAddr("169.254.251.226")
	released := newPrefixSet([]netip.Prefix{netip.PrefixFrom(guest, 32)})
	// inNS runs f on a thread in the benchmark's namespace: flushGuest
	// speaks to the namespace of the thread it runs on.
	inNS := func(f func() error) error {
		errc := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			// No UnlockOSThread: the thread dies with this goroutine.
			if err := netns.Set(ns); err != nil {
				errc <- err
				return
			}
			errc <- f()
		}()
		return <-errc
	}
	out := netip.MustParseAddrPort("203.0.113.21:80")
	base := toUint(netip.MustParseAddr("169.254.128.2"))
	have := 0
	for _, n := range []int{0, 6000, 50000} {
		for ; have < n; have++ {
			// Other sandboxes' connections: 1000 addresses, 50 ports each.
			src := netip.AddrPortFrom(fromUint(base+4*uint32(have%1000)), uint16(30000+have/1000))
			insertFlows(b, h, flow(src, out))
		}
		for _, way := range []struct {
			name   string
			forget func() error
		}{
			{"kernel", func() error { return inNS(func() error { return flushGuest(guest) }) }},
			{"dump", func() error { _, err := forgetFlows(h, flowFilter{nets: released}); return err }},
		} {
			b.Run(fmt.Sprintf("%s/entries=%d", way.name, n), func(b *testing.B) {
				cpu := cpuTime()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := way.forget(); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/1000/float64(b.N), "cpu-ms/op")
			})
		}
	}
}
