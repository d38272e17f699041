// Package netns gives each sandbox its own named network namespace joined to
// the host by a veth pair: the host side keeps a point-to-point address in the
// root namespace, the sandbox side is eth0 inside the namespace. The
// namespaces are bind-mounted under /var/run/netns, like `ip netns add`, so
// they outlive the process that made them and `ip netns list` shows them.
package netns

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Dir is where named network namespaces are bind-mounted (the directory
// iproute2 uses).
const Dir = "/var/run/netns"

// Prefix starts the name of every namespace this package makes.
const Prefix = "lizard-"

var (
	// ErrExists means the namespace or the host link for an ID already exists.
	ErrExists = errors.New("network namespace already exists")
	// ErrAddrInUse means an address of the link is already on, or routed
	// through, an interface of this host: most likely a sandbox of an
	// earlier server that was never removed. Configuring the link anyway
	// would make both unreachable.
	ErrAddrInUse = errors.New("address already in use on this host")
)

// Link is the point-to-point link of one sandbox.
type Link struct {
	HostAddr  netip.Addr
	GuestAddr netip.Addr
	PrefixLen int
}

// Name is the namespace name of sandbox id.
func Name(id string) string { return Prefix + id }

// Path is the file that holds the namespace of sandbox id, as an OCI spec
// or setns(2) wants it.
func Path(id string) string { return filepath.Join(Dir, Name(id)) }

// VethName is the host-side interface name of sandbox id. Interface names
// are limited to 15 bytes and IDs are up to 40, so the name is derived from
// a hash of the ID instead of the ID itself.
func VethName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "lz" + hex.EncodeToString(sum[:])[:10]
}

// Create makes the namespace of sandbox id with its veth pair configured
// from l. On error nothing is left behind; ErrExists (wrapped) means a
// namespace or host link with that name is already present and was left
// alone.
func Create(id string, l Link) error { return CreateWithEgress(id, l, nil) }

// CreateWithEgress is Create with the sandbox's network policy e
// (egress.go), installed before the link is the sandbox's and removed
// with the namespace by Remove. A nil e installs no rules. The namespace
// and veth are a spare's when one is ready (Prepare), else made now.
func CreateWithEgress(id string, l Link, e *Egress) (err error) {
	if err := validate(l); err != nil {
		return err
	}
	hostName := VethName(id)
	settle(id)
	awaitForgotten(l)
	if _, err := os.Lstat(Path(id)); err == nil {
		return fmt.Errorf("creating namespace %s: %w", Name(id), ErrExists)
	}
	if _, err := netlink.LinkByName(hostName); err == nil {
		return fmt.Errorf("creating veth %s: %w", hostName, ErrExists)
	}
	if err := checkFree(l); err != nil {
		return err
	}

	if e != nil {
		if err := applyEgress(id, l, *e); err != nil {
			return err
		}
	}
	if n, ok := takeSpare(); ok {
		if err := adopt(n, id); err != nil {
			_ = removeSpare(n)
			_ = removeEgress(id)
			return fmt.Errorf("creating namespace %s: %w", Name(id), err)
		}
	} else if err := makeLink(id); err != nil {
		_ = removeEgress(id)
		return err
	}
	defer func() {
		if err != nil {
			_ = Remove(id)
		}
	}()

	ns, err := netns.GetFromPath(Path(id))
	if err != nil {
		return fmt.Errorf("opening namespace %s: %w", Name(id), err)
	}
	defer ns.Close()
	// A handle bound to the namespace configures it without moving this
	// goroutine's thread into it.
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("opening netlink in namespace %s: %w", Name(id), err)
	}
	defer h.Close()
	peer, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("finding eth0 in %s: %w", Name(id), err)
	}
	if err := h.AddrAdd(peer, addr(l.GuestAddr, l.PrefixLen)); err != nil {
		return fmt.Errorf("adding %s to eth0 in %s: %w", l.GuestAddr, Name(id), err)
	}
	if err := h.LinkSetUp(peer); err != nil {
		return fmt.Errorf("setting eth0 up in %s: %w", Name(id), err)
	}

	host, err := netlink.LinkByName(hostName)
	if err != nil {
		return fmt.Errorf("finding veth %s: %w", hostName, err)
	}
	if err := netlink.AddrAdd(host, addr(l.HostAddr, l.PrefixLen)); err != nil {
		return fmt.Errorf("adding %s to %s: %w", l.HostAddr, hostName, err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("setting %s up: %w", hostName, err)
	}
	if e != nil && e.Internet {
		if err := routeOut(id, l, ns); err != nil {
			return err
		}
	}
	return nil
}

// Handle opens a netlink handle bound to the namespace of sandbox id: it
// configures the namespace without moving any thread into it. The caller
// closes it.
func Handle(id string) (*netlink.Handle, error) {
	ns, err := netns.GetFromPath(Path(id))
	if err != nil {
		return nil, fmt.Errorf("opening namespace %s: %w", Name(id), err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("opening netlink in namespace %s: %w", Name(id), err)
	}
	return h, nil
}

// makeLink makes the namespace of sandbox id and its veth pair, the peer
// named eth0 inside, lo up, nothing addressed: what a spare is, made now.
func makeLink(id string) (err error) {
	hostName := VethName(id)
	if err := createNamed(Path(id)); err != nil {
		return fmt.Errorf("creating namespace %s: %w", Name(id), err)
	}
	defer func() {
		if err != nil {
			_ = unmount(id)
			if l, lerr := netlink.LinkByName(hostName); lerr == nil {
				_ = netlink.LinkDel(l)
			}
		}
	}()
	ns, err := netns.GetFromPath(Path(id))
	if err != nil {
		return fmt.Errorf("opening namespace %s: %w", Name(id), err)
	}
	defer ns.Close()

	// The peer is created straight inside the namespace, under a temporary
	// name: a peer called eth0 in the root namespace would clash with the
	// host's own eth0.
	peerTmp := "lp" + hostName[2:]
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hostName},
		PeerName:      peerTmp,
		PeerNamespace: netlink.NsFd(int(ns)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("creating veth %s: %w", hostName, ErrExists)
		}
		return fmt.Errorf("creating veth %s: %w", hostName, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("opening netlink in namespace %s: %w", Name(id), err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("finding lo in %s: %w", Name(id), err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("setting lo up in %s: %w", Name(id), err)
	}
	peer, err := h.LinkByName(peerTmp)
	if err != nil {
		return fmt.Errorf("finding veth peer in %s: %w", Name(id), err)
	}
	if err := h.LinkSetName(peer, "eth0"); err != nil {
		return fmt.Errorf("renaming veth peer to eth0 in %s: %w", Name(id), err)
	}
	return nil
}

func validate(l Link) error {
	if !l.HostAddr.Is4() || !l.GuestAddr.Is4() {
		return fmt.Errorf("link addresses %s and %s: want IPv4", l.HostAddr, l.GuestAddr)
	}
	if l.PrefixLen < 1 || l.PrefixLen > 30 {
		return fmt.Errorf("link prefix length %d: want 1..30", l.PrefixLen)
	}
	p := netip.PrefixFrom(l.HostAddr, l.PrefixLen).Masked()
	if !p.Contains(l.GuestAddr) || l.HostAddr == l.GuestAddr {
		return fmt.Errorf("link addresses %s and %s: want two addresses of one /%d", l.HostAddr, l.GuestAddr, l.PrefixLen)
	}
	return nil
}

// checkFree fails with ErrAddrInUse if any address of l's subnet is on an
// interface of this host, or the subnet (or a part of it) is routed: the
// kernel would send the sandbox's packets elsewhere and its agent would
// simply never answer. Wider routes that merely contain the subnet (a
// default route, a link-local /16) do not count: the link's own /N
// route is more specific.
func checkFree(l Link) error {
	link := netip.PrefixFrom(l.HostAddr, l.PrefixLen).Masked()
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return fmt.Errorf("listing host addresses: %w", err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		if p := netip.PrefixFrom(ip, ones).Masked(); p.Overlaps(link) && (link.Contains(ip) || p.Bits() >= link.Bits()) {
			return fmt.Errorf("link %s: %s is already on interface %s%s: %w", link, a.IPNet, linkName(a.LinkIndex), leftoverHint(a.LinkIndex), ErrAddrInUse)
		}
	}
	routes, err := retryDump(func() ([]netlink.Route, error) { return netlink.RouteList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return fmt.Errorf("listing host routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(r.Dst.IP.To4())
		if !ok {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		if p := netip.PrefixFrom(ip, ones).Masked(); p.Bits() >= link.Bits() && p.Overlaps(link) {
			return fmt.Errorf("link %s: %s is already routed through interface %s%s: %w", link, p, linkName(r.LinkIndex), leftoverHint(r.LinkIndex), ErrAddrInUse)
		}
	}
	return nil
}

func linkName(index int) string {
	if l, err := netlink.LinkByIndex(index); err == nil {
		return l.Attrs().Name
	}
	return fmt.Sprintf("#%d", index)
}

// leftoverHint says what to do when the interface holding an address is a
// sandbox veth that its server never removed.
func leftoverHint(index int) string {
	name := linkName(index)
	if !strings.HasPrefix(name, "lz") {
		return " (not a Lizard sandbox's: use an address pool that does not overlap it)"
	}
	return fmt.Sprintf(" (a Lizard sandbox veth; if no running server owns it, remove it with `ip link del %s`, its namespace from `ip netns list` and its `nft list tables` entry, or use another address pool)", name)
}

func addr(a netip.Addr, prefixLen int) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{
		IP:   net.IP(a.AsSlice()),
		Mask: net.CIDRMask(prefixLen, 32),
	}}
}

// createNamed makes a new network namespace and bind-mounts it at path. The
// unshare happens on a locked thread that is thrown away afterwards (the
// goroutine exits without unlocking), so no other goroutine can ever run in
// the new namespace even if switching back were to fail.
func createNamed(path string) error {
	if err := sharedDir(); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return ErrExists
		}
		return err
	}
	f.Close()

	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread dies with this goroutine.
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		src := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("bind-mounting %s: %w", path, err)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// sharedDir makes Dir a mount point of its own with shared propagation,
// as iproute2 does before its first `ip netns add`. Were Dir a plain
// directory, the first `ip netns add` on the host (by anyone) would bind
// Dir over itself and hide every namespace mounted before: their files
// could then never be unmounted nor removed (EBUSY), and their namespaces
// would leak.
func sharedDir() error {
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(Dir)
	if err != nil {
		return err
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		// Field 5 is the mount point.
		if f := strings.Fields(line); len(f) > 4 && f[4] == real {
			return nil
		}
	}
	if err := unix.Mount(real, real, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mounting %s over itself: %w", real, err)
	}
	if err := unix.Mount("", real, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making %s a shared mount: %w", real, err)
	}
	return nil
}

// Remove deletes the namespace of sandbox id and its host veth, and the
// conntrack entries of its link (conntrack.go). Removing what is already
// gone is not an error.
func Remove(id string) error {
	settle(id)
	var errs []error
	if l, err := netlink.LinkByName(VethName(id)); err == nil {
		addrs, err := retryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(l, netlink.FAMILY_V4) })
		if err != nil {
			errs = append(errs, fmt.Errorf("listing addresses of %s: %w", VethName(id), err))
		}
		nets := linkNets(addrs)
		markForgetting(nets)
		if err := netlink.LinkDel(l); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting veth %s: %w", VethName(id), err))
		}
		if err := forgetLinks(nets); err != nil {
			errs = append(errs, err)
		}
		forgotten(nets)
	} else if !isNotFound(err) {
		errs = append(errs, fmt.Errorf("finding veth %s: %w", VethName(id), err))
	}
	if err := removeEgress(id); err != nil {
		errs = append(errs, err)
	}
	if err := unmount(id); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// unmount unmounts and deletes the file holding the namespace of sandbox id.
func unmount(id string) error {
	p := Path(id)
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmounting %s: %w", p, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", p, err)
	}
	return nil
}

func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT)
}

// Exists reports whether the namespace of sandbox id or its host veth is
// present.
func Exists(id string) bool {
	settle(id)
	if _, err := os.Lstat(Path(id)); err == nil {
		return true
	}
	_, err := netlink.LinkByName(VethName(id))
	return err == nil
}

// List returns the IDs of every namespace named with Prefix.
func List() ([]string, error) {
	ents, err := os.ReadDir(Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", Dir, err)
	}
	var ids []string
	for _, e := range ents {
		if id, ok := strings.CutPrefix(e.Name(), Prefix); ok && id != "" {
			ids = append(ids, id)
		}
	}
	return ids, nil
}
