package netns

// Spares: namespaces with their veth pair made ahead of need, so that a
// create adopts one (a rename and a bind mount) instead of making it, and
// a removal gives its own back (a scrub and a rename) instead of deleting
// its veth, which holds the kernel's RTNL lock through a grace period
// (about 20 ms here) that stalls every other create's links meanwhile.
//
// A spare is named after this process: namespace lizard-spare.<pid>.<n>,
// host veth lzs<pid>.<n> (base 36), down and without addresses, its peer
// already eth0 inside the namespace, lo up. Spares of a process that is
// gone are removed by the next Prepare; a process removes its own with
// Drain. Nothing of a sandbox outlives its return to the pool: its
// addresses and routes go, its nftables table is deleted.

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

var spares struct {
	mu      sync.Mutex
	want    int
	free    []int // spare numbers, ready
	next    int   // the number the next spare gets
	filling bool
	swept   bool
	idle    *sync.Cond // signalled when a fill ends
}

var pid36 = strconv.FormatInt(int64(os.Getpid()), 36)

func spareName(n int) string {
	return Prefix + "spare." + pid36 + "." + strconv.FormatInt(int64(n), 36)
}
func sparePath(n int) string { return filepath.Join(Dir, spareName(n)) }
func spareVeth(n int) string { return "lzs" + pid36 + "." + strconv.FormatInt(int64(n), 36) }

// Prepare keeps n spares ready from now on, made in the background, and
// the first time removes the spares of processes that are gone.
func Prepare(n int) {
	spares.mu.Lock()
	if spares.idle == nil {
		spares.idle = sync.NewCond(&spares.mu)
	}
	spares.want = n
	sweep := !spares.swept
	spares.swept = true
	spares.mu.Unlock()
	if sweep {
		sweepSpares()
	}
	fill()
}

// Drain stops keeping spares, waits for the releases under way (Settle)
// and removes the spares ready: what a stopping server calls. The spares
// are taken after Settle, for a release that found spares short before
// want went to zero still makes one.
func Drain() {
	spares.mu.Lock()
	spares.want = 0
	for spares.filling {
		spares.idle.Wait()
	}
	spares.mu.Unlock()
	Settle()
	spares.mu.Lock()
	free := spares.free
	spares.free = nil
	spares.mu.Unlock()
	for _, n := range free {
		if err := removeSpare(n); err != nil {
			slog.Error("removing a spare network namespace", "namespace", spareName(n), "err", err)
		}
	}
}

// fill starts making spares until there are as many as wanted, unless
// that is under way.
func fill() {
	spares.mu.Lock()
	defer spares.mu.Unlock()
	if spares.filling || len(spares.free) >= spares.want {
		return
	}
	spares.filling = true
	go func() {
		for {
			spares.mu.Lock()
			if len(spares.free) >= spares.want {
				spares.filling = false
				spares.idle.Broadcast()
				spares.mu.Unlock()
				return
			}
			n := spares.next
			spares.next++
			spares.mu.Unlock()
			if err := makeSpare(n); err != nil {
				slog.Warn("making a spare network namespace; creates make their own", "err", err)
				spares.mu.Lock()
				spares.filling = false
				spares.idle.Broadcast()
				spares.mu.Unlock()
				return
			}
			spares.mu.Lock()
			spares.free = append(spares.free, n)
			spares.mu.Unlock()
		}
	}()
}

// takeSpare returns a ready spare's number, if any, and has it replaced.
func takeSpare() (int, bool) {
	spares.mu.Lock()
	if len(spares.free) == 0 {
		spares.mu.Unlock()
		return 0, false
	}
	n := spares.free[len(spares.free)-1]
	spares.free = spares.free[:len(spares.free)-1]
	spares.mu.Unlock()
	fill()
	return n, true
}

// Spares returns how many spares are ready.
func Spares() int {
	spares.mu.Lock()
	defer spares.mu.Unlock()
	return len(spares.free)
}

func makeSpare(n int) (err error) {
	path := sparePath(n)
	if err := createNamed(path); err != nil {
		return fmt.Errorf("creating namespace %s: %w", spareName(n), err)
	}
	defer func() {
		if err != nil {
			_ = removeSpare(n)
		}
	}()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return err
	}
	defer ns.Close()
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: spareVeth(n)},
		PeerName:      "lp" + spareVeth(n)[3:],
		PeerNamespace: netlink.NsFd(int(ns)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("creating veth %s: %w", spareVeth(n), err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(lo); err != nil {
		return err
	}
	peer, err := h.LinkByName("lp" + spareVeth(n)[3:])
	if err != nil {
		return err
	}
	return h.LinkSetName(peer, "eth0")
}

func removeSpare(n int) error {
	var errs []error
	if l, err := netlink.LinkByName(spareVeth(n)); err == nil {
		if err := netlink.LinkDel(l); err != nil && !isNotFound(err) {
			errs = append(errs, err)
		}
	}
	p := sparePath(n)
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// adopt makes spare n the namespace and veth of sandbox id: the host
// veth renamed (it is down, as a rename wants), the namespace bind-mounted
// at id's path and its spare name dropped.
func adopt(n int, id string) error {
	l, err := netlink.LinkByName(spareVeth(n))
	if err != nil {
		return fmt.Errorf("finding spare veth %s: %w", spareVeth(n), err)
	}
	if err := netlink.LinkSetName(l, VethName(id)); err != nil {
		return fmt.Errorf("renaming spare veth %s to %s: %w", spareVeth(n), VethName(id), err)
	}
	if err := move(sparePath(n), Path(id)); err != nil {
		return fmt.Errorf("adopting spare namespace %s: %w", spareName(n), err)
	}
	return nil
}

// recycling, when set (by tests), runs in recycle once it has decided to
// keep a spare.
var recycling func()

// recycle scrubs the network of removed sandbox id — addresses, routes,
// neighbours, forwarding — and keeps it as a spare, if spares are short;
// false if it was not wanted. Its table is the caller's to delete.
func recycle(id string) (bool, error) {
	spares.mu.Lock()
	if len(spares.free) >= spares.want || spares.idle == nil {
		spares.mu.Unlock()
		return false, nil
	}
	n := spares.next
	spares.next++
	spares.mu.Unlock()
	if recycling != nil {
		recycling()
	}

	host, err := netlink.LinkByName(VethName(id))
	if err != nil {
		return false, err
	}
	if err := netlink.LinkSetDown(host); err != nil {
		return false, err
	}
	_ = os.WriteFile("/proc/sys/net/ipv4/conf/"+VethName(id)+"/forwarding", []byte("0"), 0o644)
	if err := scrubGuest(id); err != nil {
		return false, err
	}
	if err := netlink.LinkSetName(host, spareVeth(n)); err != nil {
		return false, err
	}
	if err := move(Path(id), sparePath(n)); err != nil {
		// The veth has its spare name now: put it back, for Remove.
		_ = netlink.LinkSetName(host, VethName(id))
		return false, err
	}
	spares.mu.Lock()
	spares.free = append(spares.free, n)
	spares.mu.Unlock()
	return true, nil
}

// scrubGuest takes eth0 in sandbox id's namespace down (which flushes its
// neighbours) and removes its addresses and routes.
func scrubGuest(id string) error {
	h, err := Handle(id)
	if err != nil {
		return err
	}
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return err
	}
	if err := h.LinkSetDown(eth0); err != nil {
		return err
	}
	routes, err := retryDump(func() ([]netlink.Route, error) { return h.RouteList(eth0, netlink.FAMILY_ALL) })
	if err != nil {
		return err
	}
	for _, r := range routes {
		if err := h.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			return err
		}
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return h.AddrList(eth0, netlink.FAMILY_V4) })
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if err := h.AddrDel(eth0, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return err
		}
	}
	return nil
}

// move moves the namespace bind-mounted at from to to: a second bind
// mount, then the first one gone.
func move(from, to string) error {
	f, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return ErrExists
		}
		return err
	}
	f.Close()
	if err := unix.Mount(from, to, "none", unix.MS_BIND, ""); err != nil {
		os.Remove(to)
		return fmt.Errorf("bind-mounting %s at %s: %w", from, to, err)
	}
	if err := unix.Unmount(from, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmounting %s: %w", from, err)
	}
	return os.Remove(from)
}

// sweepSpares removes the spares of processes that are gone.
func sweepSpares() {
	dead := func(p36 string) bool {
		pid, err := strconv.ParseInt(p36, 36, 64)
		if err != nil || pid <= 0 || p36 == pid36 {
			return false
		}
		return unix.Kill(int(pid), 0) == unix.ESRCH
	}
	ents, _ := os.ReadDir(Dir)
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), Prefix+"spare.")
		if p36, _, ok2 := strings.Cut(rest, "."); ok && ok2 && dead(p36) {
			p := filepath.Join(Dir, e.Name())
			if err := unix.Unmount(p, unix.MNT_DETACH); err == nil || errors.Is(err, unix.EINVAL) {
				os.Remove(p)
			}
		}
	}
	links, _ := netlink.LinkList()
	for _, l := range links {
		rest, ok := strings.CutPrefix(l.Attrs().Name, "lzs")
		if p36, _, ok2 := strings.Cut(rest, "."); ok && ok2 && dead(p36) {
			_ = netlink.LinkDel(l)
		}
	}
}
