package netns

import (
	"errors"
	"fmt"
	"github.com/lizard-build/lizard/internal/agent/pid1"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/testenv"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ianaSpecial is the IANA IPv4 Special-Purpose Address Registry (RFC 6890
// and its updates), with multicast (RFC 5771) and the limited broadcast.
var ianaSpecial = []string{
	"0.0.0.0/8", "0.0.0.0/32", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.0.0.0/29", "192.0.0.8/32", "192.0.0.9/32", "192.0.0.10/32",
	"192.0.0.170/32", "192.0.0.171/32", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24",
	"192.88.99.0/24", "192.168.0.0/16", "192.175.48.0/24", "198.18.0.0/15", "198.51.100.0/24",
	"203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4", "255.255.255.255/32",
}

func denied(a netip.Addr) bool {
	for _, p := range append(Blocked, SpecialPurpose...) {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	for i := p.Bits(); i < 32; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	return netip.AddrFrom4(b)
}

func TestEveryIANASpecialRangeDenied(t *testing.T) {
	for _, s := range ianaSpecial {
		p := netip.MustParsePrefix(s)
		for _, a := range []netip.Addr{p.Masked().Addr(), lastAddr(p)} {
			if !denied(a) {
				t.Errorf("%s (of %s) is in neither Blocked nor SpecialPurpose", a, s)
			}
		}
	}
	for _, s := range []string{"1.1.1.1", "8.8.8.8", "93.184.216.34", "192.0.1.255", "192.0.3.0", "198.17.255.255", "198.20.0.0", "203.0.114.1", "223.255.255.255"} {
		if a := netip.MustParseAddr(s); denied(a) {
			t.Errorf("public address %s is denied", s)
		}
	}
}

func TestMerge(t *testing.T) {
	p := netip.MustParsePrefix
	tests := []struct {
		in, want string
	}{
		{"", ""},
		{"10.0.0.0/8", "10.0.0.0/8"},
		{"10.1.2.3/8, 10.9.0.0/16", "10.0.0.0/8"},
		{"10.9.0.0/16, 10.0.0.0/8", "10.0.0.0/8"},
		{"192.0.2.1/32, 192.0.2.0/24, 192.0.2.0/24", "192.0.2.0/24"},
		{"203.0.113.0/25, 203.0.113.128/25", "203.0.113.0/25, 203.0.113.128/25"},
		{"8.8.8.8/32, 1.1.1.1/32", "1.1.1.1/32, 8.8.8.8/32"},
	}
	for _, tt := range tests {
		var in []netip.Prefix
		for _, s := range strings.Split(tt.in, ",") {
			if s = strings.TrimSpace(s); s != "" {
				in = append(in, p(s))
			}
		}
		if got := prefixes(merge(in)); got != tt.want {
			t.Errorf("merge(%s) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestOpened(t *testing.T) {
	p := netip.MustParsePrefix
	allow := []netip.Prefix{p("203.0.113.1/32"), p("198.51.100.0/24"), p("8.8.8.0/24"), p("10.1.2.3/32"), p("0.0.0.0/0"), p("198.0.0.0/8")}
	// Only prefixes inside a special-purpose range open it; a wider one
	// (0.0.0.0/0, 198/8) does not, and nothing opens Blocked (10/8).
	if got, want := prefixes(opened(allow)), "198.51.100.0/24, 203.0.113.1/32"; got != want {
		t.Errorf("opened(%v) = %q, want %q", allow, got, want)
	}
}

// TestRulesetOrder checks the forward chain's order: Blocked and the
// host's subnets first (nothing opens them), then what --egress-allow
// opens, then the special-purpose drop, then the allow-list's narrowing.
func TestRulesetOrder(t *testing.T) {
	l := Link{netip.MustParseAddr("169.254.251.229"), netip.MustParseAddr("169.254.251.230"), 30}
	host := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("45.1.2.0/24")}
	rs := nftScript("ordertest", l, Egress{Internet: true, AllowTo: []netip.Prefix{netip.MustParsePrefix("203.0.113.1/32"), netip.MustParsePrefix("45.1.2.0/23")}}, host, false)
	order := []string{
		"ip daddr { 0.0.0.0/8, 10.0.0.0/8, 45.1.2.0/24, 100.64.0.0/10, 127.0.0.0/8, 169.254.0.0/16, 172.16.0.0/12, 192.0.0.0/24, 192.0.2.0/24, 192.168.0.0/16, 224.0.0.0/4, 240.0.0.0/4 } drop",
		"ip daddr { 203.0.113.1/32 } accept",
		"ip daddr { 192.0.2.0/24, 192.31.196.0/24, 192.52.193.0/24, 192.88.99.0/24, 192.175.48.0/24, 198.18.0.0/15, 198.51.100.0/24, 203.0.113.0/24 } drop",
		"ip daddr != { 45.1.2.0/23, 203.0.113.1/32 } drop",
		"\"" + VethName("ordertest") + "\" accept",
	}
	at := 0
	for _, want := range order {
		i := strings.Index(rs[at:], want)
		if i < 0 {
			t.Fatalf("ruleset lacks %q after offset %d:\n%s", want, at, rs)
		}
		at += i + len(want)
	}
	if rs := nftScript("ordertest", l, Egress{}, host, false); strings.Contains(rs, "45.1.2.0") || strings.Contains(rs, "masquerade") {
		t.Errorf("without Internet the ruleset forwards or names host subnets:\n%s", rs)
	}
}

// TestHostNets checks HostNets against what ip(8) says of this host: every
// IPv4 address's subnet and the default gateway are in it.
func TestHostNets(t *testing.T) {
	testenv.RequiresRoot(t)
	// Other tests add and remove sandbox links meanwhile: only addresses
	// present both before and after HostNets ran must be in it.
	before, err := exec.Command("ip", "-4", "-o", "addr", "show").Output()
	if err != nil {
		t.Fatalf("ip addr: %v", err)
	}
	nets, err := HostNets()
	if err != nil {
		t.Fatal(err)
	}
	in := func(a netip.Addr) bool {
		for _, p := range nets {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	out, err := exec.Command("ip", "-4", "-o", "addr", "show").Output()
	if err != nil {
		t.Fatalf("ip addr: %v", err)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] != "inet" {
				continue
			}
			p, err := netip.ParsePrefix(f[i+1])
			if err != nil {
				t.Fatalf("parsing %q: %v", f[i+1], err)
			}
			n++
			if !strings.Contains(string(before), " "+f[i+1]+" ") {
				continue // came while HostNets ran
			}
			if !in(p.Masked().Addr()) || !in(lastAddr(p)) {
				t.Errorf("HostNets() = %v lacks %s (%s)", nets, p.Masked(), f[1])
			}
		}
	}
	if n == 0 {
		t.Fatalf("ip addr showed no IPv4 address: %q", out)
	}
	out, _ = exec.Command("ip", "-4", "route", "show", "default").Output()
	if f := strings.Fields(string(out)); len(f) > 2 && f[1] == "via" {
		if gw := netip.MustParseAddr(f[2]); !in(gw) {
			t.Errorf("HostNets() = %v lacks the default gateway %s", nets, gw)
		}
	}
}

// The world of TestEgressRealListeners: a namespace joined to the host by
// lzt-egw0 (203.0.113.65/29, so 203.0.113.64/29 is one of the host's own
// connected subnets, with 203.0.113.66 its "gateway" in the namespace), and
// one listener on an address of each special-purpose range, routed from
// the host by /32. Nothing here is the machine's real uplink: 192.0.2.0/24
// is left alone.
const (
	worldNS      = "lizt-egress"
	worldHostIf  = "lzt-egw0"
	worldPeerIf  = "lzt-egwp"
	worldHost    = "203.0.113.65"
	worldGateway = "203.0.113.66"
	egressPort   = 8000
)

var worldAddrs = []string{
	"10.255.77.1", "100.64.77.1", "169.254.77.1", "172.16.77.1", "192.0.0.77", "192.31.196.77",
	"192.52.193.77", "192.88.99.77", "192.168.77.1", "192.175.48.77", "198.18.77.1", "198.51.100.77",
	"203.0.113.77", "240.0.0.77",
}

// listener counts the connections it accepted.
type listener struct {
	addr     string
	accepted atomic.Int32
}

func makeWorld(t *testing.T) map[string]*listener {
	t.Helper()
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	exec.Command("ip", "netns", "del", worldNS).Run()
	exec.Command("ip", "link", "del", worldHostIf).Run()
	run("ip", "netns", "add", worldNS)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", worldNS).Run() })
	run("ip", "link", "add", worldHostIf, "type", "veth", "peer", "name", worldPeerIf, "netns", worldNS)
	t.Cleanup(func() { exec.Command("ip", "link", "del", worldHostIf).Run() })
	run("ip", "addr", "add", worldHost+"/29", "dev", worldHostIf)
	run("ip", "link", "set", worldHostIf, "up")
	// Replies to masqueraded sandbox traffic come in on this link.
	run("sysctl", "-qw", "net.ipv4.conf."+worldHostIf+".forwarding=1")
	run("ip", "-n", worldNS, "link", "set", "lo", "up")
	run("ip", "-n", worldNS, "addr", "add", worldGateway+"/29", "dev", worldPeerIf)
	run("ip", "-n", worldNS, "link", "set", worldPeerIf, "up")
	run("ip", "-n", worldNS, "route", "add", "default", "via", worldHost)
	ls := map[string]*listener{}
	for _, a := range append([]string{worldGateway}, worldAddrs...) {
		if a != worldGateway {
			run("ip", "-n", worldNS, "addr", "add", a+"/32", "dev", worldPeerIf)
			run("ip", "route", "add", a+"/32", "dev", worldHostIf)
		}
		l := &listener{addr: a}
		ln := listenInNamed(t, worldNS, net.JoinHostPort(a, fmt.Sprint(egressPort)))
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				l.accepted.Add(1)
				fmt.Fprintf(c, "hello from %s\n", a)
				c.Close()
			}
		}()
		ls[a] = l
	}
	return ls
}

// listenInNamed listens on addr inside namespace name (of ip-netns).
func listenInNamed(t *testing.T, name, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	err := inNamespace(func() (netns.NsHandle, error) { return netns.GetFromName(name) }, func() error {
		var err error
		ln, err = net.Listen("tcp4", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listening on %s in %s: %v", addr, name, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// inNamespace runs f on a thread of its own moved into the namespace open
// gives. The thread is never unlocked, so it dies with its goroutine and
// no other goroutine ever runs in that namespace; a socket stays in the
// namespace it was made in.
func inNamespace(open func() (netns.NsHandle, error), f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := open()
		if err != nil {
			errc <- err
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}

// dialFrom connects from sandbox id's namespace to addr and returns what
// the listener said.
func dialFrom(id, addr string, timeout time.Duration) (string, error) {
	var got string
	err := inNamespace(func() (netns.NsHandle, error) { return netns.GetFromPath(Path(id)) }, func() error {
		c, err := net.DialTimeout("tcp4", addr, timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		b, err := io.ReadAll(c)
		got = strings.TrimSpace(string(b))
		return err
	})
	return got, err
}

// TestEgressRealListeners applies the real rules of two sandboxes with
// --egress=internet and sends real SYNs from their namespaces to listeners
// on an address of every routable special-purpose range and on the
// gateway of one of the host's connected subnets. Sandbox "open" has no
// allow-list: every one is dropped. Sandbox "allow" has an allow-list that
// names some of them: the special-purpose ones it names connect (the path
// works), the Blocked one and the host's subnet it names stay dropped. The
// host itself reaches every listener, so a drop is the rules' doing.
func TestEgressRealListeners(t *testing.T) {
	testenv.RequiresRoot(t)
	if err := CheckEgress(); err != nil {
		t.Fatal(err)
	}
	ls := makeWorld(t)
	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	boxes := []struct {
		id    string
		link  Link
		allow []netip.Prefix
		reach []string // the rest must be dropped
	}{
		{"egtest-open", Link{a("169.254.251.229"), a("169.254.251.230"), 30}, nil, nil},
		{"egtest-allow", Link{a("169.254.251.233"), a("169.254.251.234"), 30},
			[]netip.Prefix{p("198.51.100.77/32"), p("203.0.113.0/24"), p("10.255.77.1/32"), p("192.168.0.0/16")},
			[]string{"198.51.100.77", "203.0.113.77"}},
	}
	for _, b := range boxes {
		_ = Remove(b.id)
		t.Cleanup(func() {
			if err := Remove(b.id); err != nil {
				t.Errorf("removing %s: %v", b.id, err)
			}
		})
		if err := CreateWithEgress(b.id, b.link, &Egress{Internet: true, AllowTo: b.allow}); err != nil {
			t.Fatalf("creating %s: %v", b.id, err)
		}
	}

	// The host reaches every listener: each is up and routed. Reading the
	// greeting waits for the accept, so the count is reset after it.
	for addr := range ls {
		c, err := net.DialTimeout("tcp4", net.JoinHostPort(addr, fmt.Sprint(egressPort)), 5*time.Second)
		if err != nil {
			t.Fatalf("the host cannot reach the listener on %s: %v", addr, err)
		}
		b, _ := io.ReadAll(c)
		c.Close()
		if got := strings.TrimSpace(string(b)); got != "hello from "+addr {
			t.Fatalf("the listener on %s said %q", addr, got)
		}
	}
	for _, l := range ls {
		l.accepted.Store(0)
	}

	// Every SYN at once: a dropped one costs the whole timeout.
	type result struct {
		box, addr, got string
		err            error
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		results []result
	)
	for _, b := range boxes {
		for addr := range ls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := dialFrom(b.id, net.JoinHostPort(addr, fmt.Sprint(egressPort)), 3*time.Second)
				mu.Lock()
				results = append(results, result{b.id, addr, got, err})
				mu.Unlock()
			}()
		}
	}
	wg.Wait()

	want := map[string]int32{} // connections each listener must have seen
	for _, b := range boxes {
		reach := map[string]bool{}
		for _, r := range b.reach {
			reach[r] = true
			want[r]++
		}
		for _, r := range results {
			if r.box != b.id {
				continue
			}
			if reach[r.addr] {
				if r.err != nil || r.got != "hello from "+r.addr {
					t.Errorf("%s → %s: got %q, %v; want it to connect", b.id, r.addr, r.got, r.err)
				}
				continue
			}
			var ne net.Error
			if r.err == nil || !errors.As(r.err, &ne) || !ne.Timeout() {
				t.Errorf("%s → %s: got %q, %v; want the SYN dropped (a timeout)", b.id, r.addr, r.got, r.err)
			}
		}
	}
	for addr, l := range ls {
		if got := l.accepted.Load(); got != want[addr] {
			t.Errorf("listener on %s accepted %d connections from the sandboxes, want %d", addr, got, want[addr])
		}
	}
}

// TestRulesetNames checks a policy by name's rules: nft accepts them, the
// redirects go to the node's resolver and proxy, open flows pass before
// the policy's address rules, and its deny rules come before its allow.
func TestRulesetNames(t *testing.T) {
	testenv.RequiresRoot(t)
	l := Link{netip.MustParseAddr("169.254.251.229"), netip.MustParseAddr("169.254.251.230"), 30}
	p := netip.MustParsePrefix
	e := Egress{Internet: true, AllowTo: []netip.Prefix{p("203.0.113.0/24")}, Names: &Names{DNSPort: 5353, ProxyPort: 8081, Ports: []int{80, 443},
		Allow: []PortPrefix{{p("203.0.113.0/24"), 0}}, Deny: []PortPrefix{{p("203.0.113.9/32"), 22}}, DefaultDeny: true}}
	rs := nftScript("namestest", l, e, nil, true)
	order := []string{
		"th dport 5353 accept",
		"tcp dport 8081 accept",
		"ip daddr 169.254.0.53 reject",
		"ct state established,related accept",
		"ip daddr { 203.0.113.0/24 } jump names",
		"chain names",
		"udp dport { 80, 443 } drop",
		"ip daddr 203.0.113.9/32 meta l4proto { tcp, udp } th dport 22 drop",
		"ip daddr 203.0.113.0/24 accept",
		"drop\n\t}",
		"th dport 53 redirect to :5353",
		"tcp dport { 80, 443 } redirect to :8081",
	}
	at := 0
	for _, want := range order {
		i := strings.Index(rs[at:], want)
		if i < 0 {
			t.Fatalf("ruleset lacks %q after offset %d:\n%s", want, at, rs)
		}
		at += i + len(want)
	}
	if err := nft(rs, "-c"); err != nil {
		t.Fatalf("nft refuses the ruleset: %v\n%s", err, rs)
	}
	if rs := nftScript("namestest", l, Egress{Names: e.Names}, nil, true); strings.Contains(rs, "redirect") {
		t.Errorf("without Internet a policy by name redirects:\n%s", rs)
	}
}

// TestNameServer: the address the agent writes in resolv.conf is the one
// these rules redirect and refuse.
func TestNameServer(t *testing.T) {
	if got := NameServer.String(); got != pid1.NameServer {
		t.Errorf("netns.NameServer %s, pid1.NameServer %s: want them equal", got, pid1.NameServer)
	}
}

// TestFlowsBounded: a sandbox holds at most MaxFlows live entries of the
// host's connection-tracking table, which every sandbox and the host's
// own connections share (nf_conntrack_max): a new flow past them is
// dropped. Before, UDP from a new port each time (30 s an entry) or SYNs
// nobody answers (120 s) made an entry per packet, and one sandbox filled
// the table in seconds, after which the kernel dropped everyone's new
// connections.
func TestFlowsBounded(t *testing.T) {
	testenv.RequiresRoot(t)
	if err := CheckEgress(); err != nil {
		t.Fatal(err)
	}
	makeWorld(t)
	const id = "egtest-flows"
	l := Link{netip.MustParseAddr("169.254.251.197"), netip.MustParseAddr("169.254.251.198"), 30}
	_ = Remove(id)
	t.Cleanup(func() {
		if err := Remove(id); err != nil {
			t.Errorf("removing %s: %v", id, err)
		}
	})
	if err := CreateWithEgress(id, l, &Egress{Internet: true, AllowTo: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}); err != nil {
		t.Fatal(err)
	}
	const sent = MaxFlows + 2000
	err := inNamespace(func() (netns.NsHandle, error) { return netns.GetFromPath(Path(id)) }, func() error {
		if err := warmLink(l); err != nil {
			return err
		}
		for range sent {
			c, err := net.Dial("udp4", "203.0.113.77:9")
			if err != nil {
				return err
			}
			c.Write([]byte("x"))
			c.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	flows, err := retryDump(func() ([]*netlink.ConntrackFlow, error) {
		return netlink.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range flows {
		if f.Forward.SrcIP.Equal(l.GuestAddr.AsSlice()) {
			n++
		}
	}
	if n > MaxFlows {
		t.Errorf("the sandbox holds %d conntrack entries after %d UDP packets from new ports; want at most %d", n, sent, MaxFlows)
	}
	// New flows come at most MaxNewFlows a second: fewer than MaxFlows
	// within the test's second.
	if n < MaxNewFlows/2 {
		t.Errorf("the sandbox holds %d conntrack entries after %d UDP packets from new ports; want its flows tracked up to the bounds", n, sent)
	}
}

// TestQueriesBounded: a sandbox with a policy reaches the node's resolver
// with at most MaxQueries UDP packets a second (and as many at once), the
// rest dropped by the kernel. Before, one socket sending queries as fast
// as it could (one flow: no count of flows bounds it) had the API process
// answer 50,000 a second, half a core of the machine every sandbox and
// the API share, counted in no bound of the sandbox.
func TestQueriesBounded(t *testing.T) {
	testenv.RequiresRoot(t)
	if err := CheckEgress(); err != nil {
		t.Fatal(err)
	}
	const id = "egtest-dns"
	l := Link{netip.MustParseAddr("169.254.251.201"), netip.MustParseAddr("169.254.251.202"), 30}
	_ = Remove(id)
	t.Cleanup(func() {
		if err := Remove(id); err != nil {
			t.Errorf("removing %s: %v", id, err)
		}
	})
	// The resolver, on a free port of every host address.
	ln, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.LocalAddr().(*net.UDPAddr).Port
	names := &Names{DNSPort: port, ProxyPort: 9, Ports: []int{80}, DefaultDeny: true}
	if err := CreateWithEgress(id, l, &Egress{Internet: true, Names: names}); err != nil {
		t.Fatal(err)
	}
	var got atomic.Int32
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := ln.ReadFrom(buf)
			if err != nil {
				return
			}
			got.Add(1)
			ln.WriteTo(buf[:n], from) // the answer makes the flow established
		}
	}()
	const sent = 5 * MaxQueries
	start := time.Now()
	err = inNamespace(func() (netns.NsHandle, error) { return netns.GetFromPath(Path(id)) }, func() error {
		if err := warmLink(l); err != nil {
			return err
		}
		c, err := net.Dial("udp4", net.JoinHostPort(NameServer.String(), "53"))
		if err != nil {
			return err
		}
		defer c.Close()
		for i := range sent {
			if _, err := c.Write([]byte("query")); err != nil {
				return err
			}
			if i%200 == 199 {
				time.Sleep(time.Millisecond) // within the receiving socket's buffer
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	time.Sleep(100 * time.Millisecond)
	n := int(got.Load())
	if max := 2*MaxQueries + int(took.Seconds()*MaxQueries); n > max {
		t.Errorf("the resolver got %d of %d packets sent in %v; want at most %d (%d a second and as many at once)", n, sent, took, max, MaxQueries)
	}
	if n < MaxQueries/2 {
		t.Errorf("the resolver got %d of %d packets; want up to the bound delivered", n, sent)
	}
}

// TestNewFlowsBounded: a sandbox opens at most MaxNewFlows connections a
// second (and as many at once) to the host, the rest dropped. A TCP
// connection that ended stays in the host's connection-tracking table
// for two minutes (TIME_WAIT), which MaxFlows does not count: before, a
// sandbox opening and closing connections to the host (the egress proxy,
// its API listener) as fast as it could left thousands a second there and
// filled the table every sandbox and the host share.
func TestNewFlowsBounded(t *testing.T) {
	testenv.RequiresRoot(t)
	if err := CheckEgress(); err != nil {
		t.Fatal(err)
	}
	const id = "egtest-newflows"
	l := Link{netip.MustParseAddr("169.254.251.205"), netip.MustParseAddr("169.254.251.206"), 30}
	_ = Remove(id)
	t.Cleanup(func() {
		if err := Remove(id); err != nil {
			t.Errorf("removing %s: %v", id, err)
		}
	})
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	if err := CreateWithEgress(id, l, &Egress{APIPort: port}); err != nil {
		t.Fatal(err)
	}
	const tries = 3 * MaxNewFlows
	start := time.Now()
	var connected atomic.Int32
	// Every SYN at once, from sockets made in the namespace (a goroutine
	// started there would run on a thread of the host's); a dropped one
	// is sent again only after a second.
	err = inNamespace(func() (netns.NsHandle, error) { return netns.GetFromPath(Path(id)) }, func() error {
		// One connection first, so that the burst does not wait for the
		// host's link address (ARP).
		c, err := net.DialTimeout("tcp4", net.JoinHostPort(l.HostAddr.String(), fmt.Sprint(port)), 5*time.Second)
		if err != nil {
			return err
		}
		c.Close()
		to := &unix.SockaddrInet4{Port: port, Addr: l.HostAddr.As4()}
		var fds []int
		defer func() {
			for _, fd := range fds {
				unix.Close(fd)
			}
		}()
		for range tries {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			fds = append(fds, fd)
			if err := unix.Connect(fd, to); err != nil && err != unix.EINPROGRESS {
				return err
			}
		}
		time.Sleep(600 * time.Millisecond)
		for _, fd := range fds {
			if _, err := unix.Getpeername(fd); err == nil {
				connected.Add(1)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	n := int(connected.Load())
	if max := MaxNewFlows + int(took.Seconds()*MaxNewFlows) + 1; n > max {
		t.Errorf("%d of %d connections opened in %v; want at most %d (%d a second and as many at once)", n, tries, took, max, MaxNewFlows)
	}
	if n < MaxNewFlows/2 {
		t.Errorf("%d of %d connections opened; want up to the bound", n, tries)
	}
}

// warmLink has the namespace learn the host's link address (ARP) before a
// test's burst, which the kernel would otherwise hold, 101 packets at
// most, until it does. Run in the sandbox's namespace.
func warmLink(l Link) error {
	c, err := net.Dial("udp4", net.JoinHostPort(l.HostAddr.String(), "9"))
	if err != nil {
		return err
	}
	defer c.Close()
	c.Write([]byte("x"))
	for range 100 {
		if out, _ := exec.Command("ip", "neigh", "show", l.HostAddr.String()).Output(); strings.Contains(string(out), "lladdr") {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("the host's address %s was not resolved", l.HostAddr)
}
