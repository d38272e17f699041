package netns

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// A sandbox's rules are written over netlink, one batch (one nftables
// transaction) per change, rather than by the nft command: nft costs a
// process start and reads the kernel's whole ruleset before each change —
// under churn, with hundreds of sandbox tables coming and going, that read
// restarts whenever another change lands meanwhile. The rules are the ones
// the nft script the server ran before made, expression for expression
// (nftscript_test.go keeps that script; TestRulesMatchScript compares
// nft's listings of both), so `nft list table inet lizard-ID` still shows
// them as the script read.

// icmpPortUnreachable is the code of ICMP's destination unreachable
// message a plain `reject` sends (RFC 792).
const icmpPortUnreachable = 3

// table is sandbox id's nftables table.
func table(id string) *nftables.Table {
	return &nftables.Table{Name: TableName(id), Family: nftables.TableFamilyINet}
}

// addRules queues in c the batch that (re)creates sandbox id's table.
// hostNets are the host's own connected subnets and gateways (HostNets),
// denied like Blocked.
//
// With fresh the batch fails if the table exists; else it replaces the
// table. A new sandbox's table does not exist, and deleting a table costs
// a kernel grace period (about 16 ms here) a create need not wait for.
func addRules(c *nftables.Conn, id string, l Link, e Egress, hostNets []netip.Prefix, fresh bool) error {
	t := table(id)
	if fresh {
		c.CreateTable(t)
	} else {
		queueDelete(c, id)
		c.AddTable(t)
	}
	r := &rules{c: c, t: t, veth: VethName(id)}
	names := e.Names
	if !e.Internet {
		names = nil
	}
	accept := nftables.ChainPolicyAccept
	input := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityRef(-10), Policy: &accept})
	forward := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityRef(-10), Policy: &accept})
	var namesChain, prerouting *nftables.Chain
	if names != nil {
		namesChain = c.AddChain(&nftables.Chain{Name: "names", Table: t})
		prerouting = c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	}
	var postrouting *nftables.Chain
	if e.Internet {
		postrouting = c.AddChain(&nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept})
	}
	guest, host := l.GuestAddr.AsSlice(), l.HostAddr.AsSlice()

	// Packets from the sandbox to this host, any of its addresses.
	if names != nil {
		// Before the established ones: a flood of queries is one flow.
		r.add(input, r.iif(), r.tcpOrUDP(), dport(names.DNSPort), rateOver(MaxQueries), verdict(expr.VerdictDrop))
	}
	r.add(input, r.iif(), ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))
	r.add(input, r.iif(), ctState(expr.CtStateBitNEW), flowsOver(MaxFlows), verdict(expr.VerdictDrop))
	r.add(input, r.iif(), ctState(expr.CtStateBitNEW), rateOver(MaxNewFlows), verdict(expr.VerdictDrop))
	if e.APIPort > 0 {
		r.add(input, r.iif(), ipv4(), saddr(expr.CmpOpEq, guest), daddr(expr.CmpOpEq, host), l4proto(unix.IPPROTO_TCP),
			dport(e.APIPort), ctState(expr.CtStateBitNEW), verdict(expr.VerdictAccept))
	}
	if names != nil {
		// After the redirects below: the resolver and the proxy, on the
		// host address the redirect chose.
		r.add(input, r.iif(), ipv4(), saddr(expr.CmpOpEq, guest), daddr(expr.CmpOpEq, host), r.tcpOrUDP(),
			dport(names.DNSPort), verdict(expr.VerdictAccept))
		r.add(input, r.iif(), ipv4(), saddr(expr.CmpOpEq, guest), daddr(expr.CmpOpEq, host), l4proto(unix.IPPROTO_TCP),
			dport(names.ProxyPort), verdict(expr.VerdictAccept))
	}
	r.add(input, r.iif(), verdict(expr.VerdictDrop))

	// Packets through this host, to or from the sandbox.
	r.add(forward, r.oif(expr.CmpOpEq), ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))
	r.add(forward, r.oif(expr.CmpOpEq), verdict(expr.VerdictDrop))
	r.add(forward, r.iif(), ctState(expr.CtStateBitNEW), flowsOver(MaxFlows), verdict(expr.VerdictDrop))
	r.add(forward, r.iif(), ctState(expr.CtStateBitNEW), rateOver(MaxNewFlows), verdict(expr.VerdictDrop))
	// Without a resolver, a lookup fails at once rather than timing out.
	r.add(forward, r.iif(), ipv4(), daddr(expr.CmpOpEq, NameServer.AsSlice()),
		[]expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: icmpPortUnreachable}})
	if e.Internet {
		// What passes to an open range: the internet, or the policy's
		// address rules.
		pass := verdict(expr.VerdictAccept)
		if names != nil {
			// A policy update does not cut what is open (unless asked:
			// CutFlows).
			r.add(forward, r.iif(), ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))
			pass = []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: namesChain.Name}}
		}
		r.add(forward, r.iif(), []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
		}, verdict(expr.VerdictDrop))
		r.add(forward, r.iif(), ipv4(), saddr(expr.CmpOpNeq, guest), verdict(expr.VerdictDrop))
		r.add(forward, r.iif(), ipv4(), r.daddrIn(false, merge(append(slices.Clone(Blocked), hostNets...))), verdict(expr.VerdictDrop))
		if open := opened(e.AllowTo); len(open) > 0 {
			r.add(forward, r.iif(), ipv4(), r.daddrIn(false, open), pass)
		}
		r.add(forward, r.iif(), ipv4(), r.daddrIn(false, merge(SpecialPurpose)), verdict(expr.VerdictDrop))
		if len(e.AllowTo) > 0 {
			r.add(forward, r.iif(), ipv4(), r.daddrIn(true, merge(e.AllowTo)), verdict(expr.VerdictDrop))
		}
		r.add(forward, r.iif(), pass)
	}
	r.add(forward, r.iif(), verdict(expr.VerdictDrop))

	if names != nil {
		// The policy's address rules, for what the proxy does not see.
		r.add(namesChain, l4proto(unix.IPPROTO_UDP), r.dports(names.Ports), verdict(expr.VerdictDrop))
		for _, pp := range names.Deny {
			r.add(namesChain, r.portPrefix(pp), verdict(expr.VerdictDrop))
		}
		for _, pp := range names.Allow {
			r.add(namesChain, r.portPrefix(pp), verdict(expr.VerdictAccept))
		}
		if names.DefaultDeny {
			r.add(namesChain, verdict(expr.VerdictDrop))
		} else {
			r.add(namesChain, verdict(expr.VerdictAccept))
		}
		// DNS to any resolver goes to the node's; TCP to the proxied
		// ports to its proxy, which reads the name and ignores the
		// address the sandbox asked for.
		r.add(prerouting, r.iif(), ipv4(), saddr(expr.CmpOpEq, guest), r.tcpOrUDP(), dport(53), redirect(names.DNSPort))
		r.add(prerouting, r.iif(), ipv4(), saddr(expr.CmpOpEq, guest), l4proto(unix.IPPROTO_TCP), r.dports(names.Ports), redirect(names.ProxyPort))
	}

	if e.Internet {
		// The sandbox's link address is not routable outside this host.
		r.add(postrouting, ipv4(), saddr(expr.CmpOpEq, guest), r.oif(expr.CmpOpNeq), []expr.Any{&expr.Masq{}})
	}
	return r.err
}

// queueDelete queues in c the deletion of sandbox id's table, whether or
// not it exists: adding the table first makes the delete succeed either
// way, in the same transaction.
func queueDelete(c *nftables.Conn, id string) {
	c.AddTable(table(id))
	c.DelTable(table(id))
}

// rules adds the rules of one table, with the anonymous sets they use.
type rules struct {
	c    *nftables.Conn
	t    *nftables.Table
	veth string
	// sets numbers the anonymous sets of the batch: their IDs tie a rule's
	// lookup to its set within the batch, and are set here rather than by
	// the library, whose counter is global and unlocked.
	sets uint32
	err  error
}

func (r *rules) add(ch *nftables.Chain, parts ...[]expr.Any) {
	var exprs []expr.Any
	for _, p := range parts {
		exprs = append(exprs, p...)
	}
	r.c.AddRule(&nftables.Rule{Table: r.t, Chain: ch, Exprs: exprs})
}

// set adds an anonymous constant set of elems and returns the lookup of
// register 1 in it.
func (r *rules) set(key nftables.SetDatatype, interval, invert bool, elems []nftables.SetElement) []expr.Any {
	r.sets++
	s := &nftables.Set{Table: r.t, ID: r.sets, Name: fmt.Sprintf("__set%d", r.sets-1), Anonymous: true, Constant: true,
		Interval: interval, KeyType: key}
	if err := r.c.AddSet(s, elems); err != nil && r.err == nil {
		r.err = fmt.Errorf("adding a set: %w", err)
	}
	return []expr.Any{&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID, Invert: invert}}
}

func (r *rules) iif() []expr.Any { return ifname(expr.MetaKeyIIFNAME, expr.CmpOpEq, r.veth) }

func (r *rules) oif(op expr.CmpOp) []expr.Any { return ifname(expr.MetaKeyOIFNAME, op, r.veth) }

func ifname(key expr.MetaKey, op expr.CmpOp, name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: op, Register: 1, Data: b}}
}

// ctState matches a connection in any of the states of mask.
func ctState(mask uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(mask), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// ipv4 is the match an inet table needs before reading an IPv4 header.
func ipv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

func saddr(op expr.CmpOp, a []byte) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Cmp{Op: op, Register: 1, Data: a},
	}
}

func daddr(op expr.CmpOp, a []byte) []expr.Any {
	return daddrPrefix(op, netip.PrefixFrom(netip.AddrFrom4([4]byte(a)), 32))
}

// daddrPrefix matches the destination against one prefix: on a byte
// boundary by loading only its bytes, else through a mask.
func daddrPrefix(op expr.CmpOp, p netip.Prefix) []expr.Any {
	p = p.Masked()
	a := p.Addr().AsSlice()
	if bits := p.Bits(); bits > 0 && bits%8 == 0 {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: uint32(bits / 8)},
			&expr.Cmp{Op: op, Register: 1, Data: a[:bits/8]},
		}
	}
	mask := binary.BigEndian.AppendUint32(nil, ^uint32(0)<<(32-p.Bits()))
	if p.Bits() == 0 {
		mask = make([]byte, 4)
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: op, Register: 1, Data: a},
	}
}

// daddrIn matches the destination against ps (merged: sorted, none inside
// another), or with invert against everything else. One prefix is one
// comparison, more an interval set, as nft makes of `ip daddr { ... }`.
func (r *rules) daddrIn(invert bool, ps []netip.Prefix) []expr.Any {
	if len(ps) == 1 {
		op := expr.CmpOpEq
		if invert {
			op = expr.CmpOpNeq
		}
		return daddrPrefix(op, ps[0])
	}
	load := &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}
	return append([]expr.Any{load}, r.set(nftables.TypeIPAddr, true, invert, intervals(ps))...)
}

// intervals are the elements of an interval set holding ps (merged): each
// run of adjacent prefixes is one interval, from its first address to the
// end element after its last, and an end element at 0.0.0.0 comes first
// when no interval starts there — the elements nft sends for the same set.
// (nft also marks an interval that runs to 255.255.255.255 in the element's
// user data, which the kernel keeps for nft's listings only; nft lists the
// set the same without it.)
func intervals(ps []netip.Prefix) []nftables.SetElement {
	key := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	var out []nftables.SetElement
	for i := 0; i < len(ps); {
		lo, hi := bounds(ps[i])
		for i++; i < len(ps); i++ {
			l, h := bounds(ps[i])
			if hi == math.MaxUint32 || l != hi+1 {
				break
			}
			hi = h
		}
		if len(out) == 0 && lo != 0 {
			out = append(out, nftables.SetElement{Key: key(0), IntervalEnd: true})
		}
		out = append(out, nftables.SetElement{Key: key(lo)})
		if hi != math.MaxUint32 {
			out = append(out, nftables.SetElement{Key: key(hi + 1), IntervalEnd: true})
		}
	}
	return out
}

// bounds are the first and last addresses of IPv4 prefix p.
func bounds(p netip.Prefix) (lo, hi uint32) {
	a := p.Masked().Addr().As4()
	lo = binary.BigEndian.Uint32(a[:])
	return lo, lo | uint32(uint64(math.MaxUint32)>>p.Bits())
}

func l4proto(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

// tcpOrUDP is `meta l4proto { tcp, udp }`.
func (r *rules) tcpOrUDP() []expr.Any {
	return append([]expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}},
		r.set(nftables.TypeInetProto, false, false, []nftables.SetElement{{Key: []byte{unix.IPPROTO_TCP}}, {Key: []byte{unix.IPPROTO_UDP}}})...)
}

// dport matches the transport header's destination port; the protocol is
// matched before it.
func dport(port int) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(uint16(port))},
	}
}

// dports matches the destination port against ports: one is a comparison,
// more a set, as nft makes of `dport { ... }`.
func (r *rules) dports(ports []int) []expr.Any {
	if len(ports) == 1 {
		return dport(ports[0])
	}
	elems := make([]nftables.SetElement, len(ports))
	for i, p := range ports {
		elems[i] = nftables.SetElement{Key: binaryutil.BigEndian.PutUint16(uint16(p))}
	}
	load := &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}
	return append([]expr.Any{load}, r.set(nftables.TypeInetService, false, false, elems)...)
}

// portPrefix is an address rule of a policy by name: its prefix, and its
// port over TCP or UDP.
func (r *rules) portPrefix(pp PortPrefix) []expr.Any {
	m := append(ipv4(), daddrPrefix(expr.CmpOpEq, pp.Prefix)...)
	if pp.Port == 0 {
		return m
	}
	return append(append(m, r.tcpOrUDP()...), dport(pp.Port)...)
}

// flowsOver matches while the rule's connections still tracked (TCP ones
// that ended aside) number more than n.
func flowsOver(n uint32) []expr.Any {
	return []expr.Any{&expr.Connlimit{Count: n, Flags: expr.NFT_CONNLIMIT_F_INV}}
}

// rateOver matches the packets past n a second (with a burst of n).
func rateOver(n uint64) []expr.Any {
	return []expr.Any{&expr.Limit{Type: expr.LimitTypePkts, Rate: n, Over: true, Unit: expr.LimitTimeSecond, Burst: uint32(n)}}
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

// redirect sends the packet to port on the address it came in on.
func redirect(port int) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(uint16(port))},
		&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
	}
}
