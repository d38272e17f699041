package netns

// Addresses are recycled: a slot released by one sandbox is the next
// one's. The kernel's connection tracking outlives the sandbox, though:
// an established TCP entry of a dead sandbox lasts 5 days, and a new
// owner of the address reusing a source port would inherit it — the
// forward chain's `ct state established,related accept` letting through
// a flow its own policy forbids, the prerouting nat keeping the old
// redirect. So a slot's entries are deleted when it is released, before
// it can be taken again: Release marks the slot's link as having flows
// to forget, a background forgetter deletes them (the kernel's filtered
// flushes, or one dump of the table for a burst: forgetLinks), and a
// Create of the link waits
// until they are gone — only when the slot is taken again that soon.
// Deleting them then, not as the next owner's Create begins, also keeps
// the deletion from cutting the new owner's own connections.
// Remove, which is synchronous, deletes them itself, and a starting
// server deletes those of its pool's unused slots, which a crash before
// the forgetter got to them leaves (ForgetPoolFlows).
//
// Nothing else keyed by the address outlives the slot: neighbour
// entries and routes belong to the host veth, which is deleted or, as a
// spare, taken down (flushing its neighbours) with its addresses gone;
// the guest side's likewise (scrubGuest).

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

var forgetting struct {
	mu sync.Mutex
	// pending holds, per link whose flows are still to be deleted, a
	// channel closed once they are; queued are those not yet taken up.
	pending map[netip.Prefix]chan struct{}
	queued  []netip.Prefix
	wake    chan struct{}
	once    sync.Once
}

// linkNets returns the links of addrs, the addresses of a host veth:
// each the host's address with the link's prefix length.
func linkNets(addrs []netlink.Addr) []netip.Prefix {
	var nets []netip.Prefix
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		nets = append(nets, netip.PrefixFrom(ip, ones))
	}
	return nets
}

// markForgetting records that the flows of nets are still to be
// deleted: a Create on one of them waits (awaitForgotten) until
// forgotten(nets) or, after queueForgetting(nets), the forgetter
// deleted them.
func markForgetting(nets []netip.Prefix) {
	forgetting.mu.Lock()
	defer forgetting.mu.Unlock()
	if forgetting.pending == nil {
		forgetting.pending = map[netip.Prefix]chan struct{}{}
	}
	for _, n := range nets {
		if _, ok := forgetting.pending[n]; !ok {
			forgetting.pending[n] = make(chan struct{})
		}
	}
}

// queueForgetting has the flows of nets, marked, deleted in the
// background. The forgetter is a goroutine of its own, not a step of
// the reaper's batch, so that a Create waiting on it does not wait for
// the deletion of other sandboxes' veths too.
func queueForgetting(nets []netip.Prefix) {
	if len(nets) == 0 {
		return
	}
	forgetting.once.Do(func() {
		forgetting.wake = make(chan struct{}, 1)
		go forget()
	})
	forgetting.mu.Lock()
	forgetting.queued = append(forgetting.queued, nets...)
	forgetting.mu.Unlock()
	select {
	case forgetting.wake <- struct{}{}:
	default:
	}
}

// forget deletes the flows of the links queued, all those queued
// meanwhile in one dump of the table. A failure is logged: the entries
// left are deleted at the next start (ForgetPoolFlows).
func forget() {
	for range forgetting.wake {
		for {
			forgetting.mu.Lock()
			batch := forgetting.queued
			forgetting.queued = nil
			forgetting.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			if err := forgetLinks(batch); err != nil {
				slog.Error("deleting the connection tracking entries of released sandbox links; the next start deletes them", "links", batch, "err", err)
			}
			forgotten(batch)
		}
	}
}

// forgotten ends the wait of Creates on nets.
func forgotten(nets []netip.Prefix) {
	forgetting.mu.Lock()
	defer forgetting.mu.Unlock()
	for _, n := range nets {
		if ch, ok := forgetting.pending[n]; ok {
			close(ch)
			delete(forgetting.pending, n)
		}
	}
}

// awaitForgotten waits until no flows of a link overlapping l's are
// left to delete, so that l's new owner starts with none of the last
// one's, and the deletion cannot cut the new owner's own.
func awaitForgotten(l Link) {
	link := netip.PrefixFrom(l.HostAddr, l.PrefixLen).Masked()
	for {
		forgetting.mu.Lock()
		var ch chan struct{}
		for n, c := range forgetting.pending {
			if n.Overlaps(link) {
				ch = c
				break
			}
		}
		forgetting.mu.Unlock()
		if ch == nil {
			return
		}
		<-ch
	}
}

// Settling returns the slots of p whose last owner's conntrack entries
// are still to be deleted: a Create of one waits until they are
// (20–30 ms at ~12,700 entries), so an allocation takes one only when no
// other slot is free.
func (p Pool) Settling() []int {
	forgetting.mu.Lock()
	defer forgetting.mu.Unlock()
	var slots []int
	for n := range forgetting.pending {
		if n.Bits() != SlotPrefixLen {
			continue // not a slot's link
		}
		if s, ok := p.slotOf(n.Addr()); ok {
			slots = append(slots, s)
		}
	}
	return slots
}

// flowFilter matches the conntrack entries with an address inside one
// of nets (either side, either direction: the sandbox's own connections,
// those redirected or translated to it, and the host's to it) and none
// of skip.
type flowFilter struct {
	nets, skip prefixSet
}

func (f flowFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	for _, ip := range []net.IP{flow.Forward.SrcIP, flow.Forward.DstIP, flow.Reverse.SrcIP, flow.Reverse.DstIP} {
		if a, ok := netip.AddrFromSlice(ip.To4()); ok && f.nets.contains(a) && !f.skip.contains(a) {
			return true
		}
	}
	return false
}

// prefixSet tells in a map lookup per prefix length whether an address
// is in one of its prefixes: the filter runs on every entry of a table
// of tens of thousands against as many links.
type prefixSet struct {
	bits []int
	set  map[netip.Prefix]bool
}

func newPrefixSet(nets []netip.Prefix) prefixSet {
	s := prefixSet{set: make(map[netip.Prefix]bool, len(nets))}
	for _, n := range nets {
		n = n.Masked()
		if !slices.Contains(s.bits, n.Bits()) {
			s.bits = append(s.bits, n.Bits())
		}
		s.set[n] = true
	}
	return s
}

func (s prefixSet) contains(a netip.Addr) bool {
	for _, b := range s.bits {
		if p, err := a.Prefix(b); err == nil && s.set[p] {
			return true
		}
	}
	return false
}

// forgetFlows deletes the IPv4 conntrack entries f matches from h's
// namespace (nil: this process's), reading the table once. It returns
// how many it deleted.
func forgetFlows(h *netlink.Handle, f flowFilter) (uint, error) {
	if len(f.nets.set) == 0 {
		return 0, nil
	}
	if h == nil {
		h = &netlink.Handle{}
	}
	var (
		n   uint
		err error
	)
	// An interrupted dump still deletes what it read; the next reads the
	// rest.
	for range dumpTries {
		var d uint
		d, err = h.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, f)
		n += d
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return n, fmt.Errorf("deleting connection tracking entries: %w", err)
	}
	return n, nil
}

// ForgetPoolFlows deletes the conntrack entries of every slot of pool
// that no interface of this host is addressed in: those of sandboxes a
// crashed server released but whose entries it never deleted.
// A starting server calls it before it creates any sandbox; sandboxes
// kept over the restart keep their addresses, and so their connections.
func ForgetPoolFlows(pool Pool) (uint, error) {
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return 0, fmt.Errorf("listing host addresses: %w", err)
	}
	var inUse []netip.Prefix
	for _, n := range linkNets(addrs) {
		if n.Overlaps(pool.Prefix()) {
			inUse = append(inUse, n)
		}
	}
	return forgetFlows(nil, flowFilter{nets: newPrefixSet([]netip.Prefix{pool.Prefix()}), skip: newPrefixSet(inUse)})
}

// flushesPerDump is about how many of the kernel's filtered flushes
// cost what one dump of the table filtered here does
// (BenchmarkForgetFlows: 7–8 at 6,000 entries, 15 at 50,000).
const flushesPerDump = 8

// forgetLinks deletes the conntrack entries of links nets, released:
// those of each guest address (every address of the link but the host's,
// network and broadcast). The kernel deletes them, two filtered flushes
// an address (flushGuest), unless there are so many that one dump of the
// table filtered here costs less, as for a burst of kills or a link
// wider than a pool's.
func forgetLinks(nets []netip.Prefix) error {
	var (
		guests []netip.Prefix
		wide   bool
	)
	for _, n := range nets {
		if n.Bits() < 28 {
			guests, wide = append(guests, n), true
			continue
		}
		first, last := toUint(n.Masked().Addr()), toUint(n.Masked().Addr())|(1<<(32-n.Bits())-1)
		for a := first + 1; a < last; a++ {
			if fromUint(a) != n.Addr() {
				guests = append(guests, netip.PrefixFrom(fromUint(a), 32))
			}
		}
	}
	if len(guests) == 0 {
		return nil
	}
	if wide || 2*len(guests) > flushesPerDump {
		_, err := forgetFlows(nil, flowFilter{nets: newPrefixSet(guests)})
		return err
	}
	var errs []error
	for _, g := range guests {
		err := flushGuest(g.Addr())
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			// A kernel older than 6.3 takes no filter on a flush; the
			// tuple sent with it, incomplete, makes it refuse rather
			// than flush everything.
			_, err := forgetFlows(nil, flowFilter{nets: newPrefixSet(guests)})
			return err
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ctnetlink's CTA_FILTER (linux/netfilter/nfnetlink_conntrack.h) and the
// kernel's flags of the tuple fields it compares
// (net/netfilter/nf_conntrack_netlink.c), which x/sys and netlink lack.
const (
	ctaFilter            = 25
	ctaFilterOrigFlags   = 1
	ctaFilterReplyFlags  = 2
	ctaFilterFlagIPSrc   = 1 << 0
	ctnetlinkSubsys      = unix.NFNL_SUBSYS_CTNETLINK
	ctnetlinkDeleteFlows = nl.IPCTNL_MSG_CT_DELETE
)

// flushGuest has the kernel delete every IPv4 conntrack entry of guest
// address a: those it opened (original source; their replies come back
// to it, or to the host's address if masqueraded) and those opened to it
// (reply source: the host's connections to it, anything translated to
// it), one filtered flush each. The kernel walks its table and deletes
// in place; a dump filtered here, as ConntrackDeleteFilters does, copies
// the whole table out, 2–5 times the CPU (BenchmarkForgetFlows). Linux
// 6.3 and later take a filter on a flush.
func flushGuest(a netip.Addr) error {
	for _, f := range []struct{ tuple, flags int }{
		{nl.CTA_TUPLE_ORIG, ctaFilterOrigFlags},
		{nl.CTA_TUPLE_REPLY, ctaFilterReplyFlags},
	} {
		req := nl.NewNetlinkRequest(ctnetlinkSubsys<<8|ctnetlinkDeleteFlows, unix.NLM_F_ACK)
		req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_INET, Version: nl.NFNETLINK_V0})
		tuple := nl.NewRtAttr(unix.NLA_F_NESTED|f.tuple, nil)
		ip := tuple.AddRtAttr(unix.NLA_F_NESTED|nl.CTA_TUPLE_IP, nil)
		ip.AddRtAttr(nl.CTA_IP_V4_SRC, a.AsSlice())
		req.AddData(tuple)
		filter := nl.NewRtAttr(unix.NLA_F_NESTED|ctaFilter, nil)
		filter.AddRtAttr(f.flags, nl.Uint32Attr(ctaFilterFlagIPSrc))
		req.AddData(filter)
		// ENOENT: nothing matched.
		if _, err := req.Execute(unix.NETLINK_NETFILTER, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("deleting the connection tracking entries of %s: %w", a, err)
		}
	}
	return nil
}
