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

// ErrExists means the namespace or the host link for an ID already exists.
var ErrExists = errors.New("network namespace already exists")

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
// (egress.go), installed before the link exists and removed with the
// namespace by Remove. A nil e installs no rules.
func CreateWithEgress(id string, l Link, e *Egress) (err error) {
	if err := validate(l); err != nil {
		return err
	}
	hostName := VethName(id)
	if _, err := os.Lstat(Path(id)); err == nil {
		return fmt.Errorf("creating namespace %s: %w", Name(id), ErrExists)
	}
	if _, err := netlink.LinkByName(hostName); err == nil {
		return fmt.Errorf("creating veth %s: %w", hostName, ErrExists)
	}

	if e != nil {
		if err := applyEgress(id, l, *e); err != nil {
			return err
		}
	}
	if err := createNamed(Path(id)); err != nil {
		_ = removeEgress(id)
		return fmt.Errorf("creating namespace %s: %w", Name(id), err)
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

	// A handle bound to the namespace configures it without moving this
	// goroutine's thread into it.
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
	if err := os.MkdirAll(Dir, 0o755); err != nil {
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

// Remove deletes the namespace of sandbox id and its host veth. Removing
// what is already gone is not an error.
func Remove(id string) error {
	var errs []error
	if l, err := netlink.LinkByName(VethName(id)); err == nil {
		if err := netlink.LinkDel(l); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting veth %s: %w", VethName(id), err))
		}
	} else if !isNotFound(err) {
		errs = append(errs, fmt.Errorf("finding veth %s: %w", VethName(id), err))
	}
	if err := removeEgress(id); err != nil {
		errs = append(errs, err)
	}
	p := Path(id)
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("removing %s: %w", p, err))
	}
	return errors.Join(errs...)
}

func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT)
}

// Exists reports whether the namespace of sandbox id or its host veth is
// present.
func Exists(id string) bool {
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
