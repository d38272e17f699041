package netns

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Egress is the network policy of one sandbox. It is enforced with
// nftables in the root namespace, on the sandbox's host veth, because
// gVisor (runsc --network=sandbox) sends its packets through a packet
// socket on eth0, which bypasses the inet hooks of the sandbox's own
// namespace; every packet of the sandbox reaches the host veth, where
// nothing bypasses them.
//
// Whatever the policy, the sandbox never reaches the host (but for
// APIPort on its own host address), other sandboxes, private, shared,
// loopback, link-local (metadata) or multicast addresses, nor anything over
// IPv6; nobody can open a connection to the sandbox but the host itself.
type Egress struct {
	// Internet lets the sandbox open connections to public addresses
	// (forwarded and masqueraded). Without it nothing is forwarded.
	Internet bool
	// AllowTo, when not empty, narrows Internet to these destinations.
	AllowTo []netip.Prefix
	// APIPort, when not 0, lets the sandbox open TCP connections to its own
	// host address on this port: the Lizard API, for sandboxes with a
	// lizardToken.
	APIPort int
}

// Blocked are the destinations a sandbox may never reach, even with
// Internet: this host, other sandboxes, private networks and cloud
// metadata services (169.254.169.254).
var Blocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// TableName is the nftables table (family inet) holding sandbox id's
// rules.
func TableName(id string) string { return "lizard-" + id }

// ruleset is the nft script that (re)creates sandbox id's table.
func ruleset(id string, l Link, e Egress) string {
	veth := VethName(id)
	var b strings.Builder
	t := TableName(id)
	// Declaring the table before deleting it makes the delete succeed
	// whether or not it existed, in one atomic transaction.
	fmt.Fprintf(&b, "table inet %s {}\ndelete table inet %s\ntable inet %s {\n", t, t, t)

	// Packets from the sandbox to this host, any of its addresses.
	b.WriteString("\tchain input {\n\t\ttype filter hook input priority -10; policy accept;\n")
	fmt.Fprintf(&b, "\t\tiifname %q ct state established,related accept\n", veth)
	if e.APIPort > 0 {
		fmt.Fprintf(&b, "\t\tiifname %q ip saddr %s ip daddr %s tcp dport %d ct state new accept\n", veth, l.GuestAddr, l.HostAddr, e.APIPort)
	}
	fmt.Fprintf(&b, "\t\tiifname %q drop\n\t}\n", veth)

	// Packets through this host, to or from the sandbox.
	b.WriteString("\tchain forward {\n\t\ttype filter hook forward priority -10; policy accept;\n")
	fmt.Fprintf(&b, "\t\toifname %q ct state established,related accept\n", veth)
	fmt.Fprintf(&b, "\t\toifname %q drop\n", veth)
	if e.Internet {
		fmt.Fprintf(&b, "\t\tiifname %q meta nfproto ipv6 drop\n", veth)
		fmt.Fprintf(&b, "\t\tiifname %q ip saddr != %s drop\n", veth, l.GuestAddr)
		fmt.Fprintf(&b, "\t\tiifname %q ip daddr { %s } drop\n", veth, prefixes(Blocked))
		if len(e.AllowTo) > 0 {
			fmt.Fprintf(&b, "\t\tiifname %q ip daddr != { %s } drop\n", veth, prefixes(e.AllowTo))
		}
		fmt.Fprintf(&b, "\t\tiifname %q accept\n", veth)
	}
	fmt.Fprintf(&b, "\t\tiifname %q drop\n\t}\n", veth)

	if e.Internet {
		// The sandbox's link address is not routable outside this host.
		b.WriteString("\tchain postrouting {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n")
		fmt.Fprintf(&b, "\t\tip saddr %s oifname != %q masquerade\n\t}\n", l.GuestAddr, veth)
	}
	b.WriteString("}\n")
	return b.String()
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
	if err := nft(ruleset(id, l, e)); err != nil {
		return fmt.Errorf("installing network policy of sandbox %s: %w", id, err)
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
