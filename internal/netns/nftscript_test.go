package netns

import (
	"bytes"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// nftScript is the nft script that (re)created sandbox id's table before
// the rules were written over netlink (nftables.go): the oracle the
// netlink rules are compared with, rule by rule. hostNets
// are the host's own connected subnets and gateways (HostNets), denied
// like Blocked.
//
// With fresh the script fails if the table exists; else it replaces the
// table. A new sandbox's table does not exist, and deleting a table costs
// a kernel grace period (about 16 ms here) a create need not wait for.
func nftScript(id string, l Link, e Egress, hostNets []netip.Prefix, fresh bool) string {
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
	names := e.Names
	if !e.Internet {
		names = nil
	}
	b.WriteString("\tchain input {\n\t\ttype filter hook input priority -10; policy accept;\n")
	if names != nil {
		fmt.Fprintf(&b, "\t\tiifname %q meta l4proto { tcp, udp } th dport %d limit rate over %d/second burst %d packets drop\n", veth, names.DNSPort, MaxQueries, MaxQueries)
	}
	fmt.Fprintf(&b, "\t\tiifname %q ct state established,related accept\n", veth)
	fmt.Fprintf(&b, "\t\tiifname %q ct state new ct count over %d drop\n", veth, MaxFlows)
	fmt.Fprintf(&b, "\t\tiifname %q ct state new limit rate over %d/second burst %d packets drop\n", veth, MaxNewFlows, MaxNewFlows)
	if e.APIPort > 0 {
		fmt.Fprintf(&b, "\t\tiifname %q ip saddr %s ip daddr %s tcp dport %d ct state new accept\n", veth, l.GuestAddr, l.HostAddr, e.APIPort)
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
	fmt.Fprintf(&b, "\t\tiifname %q ct state new ct count over %d drop\n", veth, MaxFlows)
	fmt.Fprintf(&b, "\t\tiifname %q ct state new limit rate over %d/second burst %d packets drop\n", veth, MaxNewFlows, MaxNewFlows)
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

func prefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.Masked().String()
	}
	return strings.Join(s, ", ")
}

// nft runs the nft command with script on its standard input; tests use
// it to install the oracle's rules and to list tables.
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
