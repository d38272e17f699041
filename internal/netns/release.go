package netns

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Removing a sandbox's network costs two kernel grace periods: deleting
// its veth (about 20 ms here) and its nftables table (about 16 ms), each
// waiting for RCU readers to finish, not for the CPU. A kill need not
// wait for them. Release does at once what frees the sandbox's slot —
// the host addresses and the namespace's name — and leaves the two
// deletions to one background reaper, which deletes the tables of every
// sandbox released meanwhile in one nftables transaction, one grace
// period for all of them. The slot's conntrack entries are deleted in
// the background too, by a goroutine of their own (conntrack.go).

var reaper struct {
	mu sync.Mutex
	// queued are the releases not yet taken up; busy holds a channel per
	// ID queued or being deleted, closed when it is done.
	queued []release
	busy   map[string]chan struct{}
	wake   chan struct{}
	once   sync.Once
}

type release struct {
	id   string
	done func(error)
}

// Release removes the network of sandbox id, as Remove does, but returns
// once its addresses are off the host: the address slot may be used again
// at once, and a Create of the same ID waits for the rest. The rest goes
// in the background: the namespace and veth are scrubbed and kept as a
// spare if spares are short (spares.go), else deleted, and the nftables
// table is deleted; done, when not nil, is called with the outcome then.
// The link's conntrack entries go in the background as well, and a
// Create of the link waits for that (conntrack.go).
// If the process dies before that, Remove of the ID finishes the job.
func Release(id string, done func(error)) error {
	var (
		errs []error
		nets []netip.Prefix
	)
	if l, err := netlink.LinkByName(VethName(id)); err == nil {
		addrs, err := retryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(l, netlink.FAMILY_V4) })
		if err != nil {
			errs = append(errs, fmt.Errorf("listing addresses of %s: %w", VethName(id), err))
		}
		// Marked before the addresses go, so that no Create of the link
		// comes between.
		nets = linkNets(addrs)
		markForgetting(nets)
		for _, a := range addrs {
			if err := netlink.AddrDel(l, &a); err != nil && !isNotFound(err) && !errors.Is(err, unix.EADDRNOTAVAIL) {
				errs = append(errs, fmt.Errorf("removing %s from %s: %w", a.IPNet, VethName(id), err))
			}
		}
	} else if !isNotFound(err) {
		errs = append(errs, fmt.Errorf("finding veth %s: %w", VethName(id), err))
	}
	if err := errors.Join(errs...); err != nil {
		// What is left is for Remove, now, rather than in the background.
		err = errors.Join(err, Remove(id), forgetLinks(nets))
		forgotten(nets)
		return err
	}
	queueForgetting(nets)

	reaper.once.Do(func() {
		reaper.busy = map[string]chan struct{}{}
		reaper.wake = make(chan struct{}, 1)
		go reap()
	})
	reaper.mu.Lock()
	if _, ok := reaper.busy[id]; !ok {
		reaper.busy[id] = make(chan struct{})
	}
	reaper.queued = append(reaper.queued, release{id, done})
	reaper.mu.Unlock()
	select {
	case reaper.wake <- struct{}{}:
	default:
	}
	return nil
}

// settle waits until no release of sandbox id is queued or under way.
func settle(id string) {
	reaper.mu.Lock()
	ch := reaper.busy[id]
	reaper.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// Settle waits until every release queued so far is done: a server
// stopping calls it, so that it leaves nothing behind.
func Settle() {
	reaper.mu.Lock()
	chs := make([]chan struct{}, 0, len(reaper.busy))
	for _, ch := range reaper.busy {
		chs = append(chs, ch)
	}
	reaper.mu.Unlock()
	forgetting.mu.Lock()
	for _, ch := range forgetting.pending {
		chs = append(chs, ch)
	}
	forgetting.mu.Unlock()
	for _, ch := range chs {
		<-ch
	}
}

// reap deletes the veths and tables of released sandboxes, batch by batch.
func reap() {
	for range reaper.wake {
		for {
			reaper.mu.Lock()
			batch := reaper.queued
			reaper.queued = nil
			reaper.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			errs := make([]error, len(batch))
			for i, r := range batch {
				recycled, err := recycle(r.id)
				if err != nil {
					slog.Warn("keeping a removed sandbox's network as a spare; deleting it instead", "sandbox_id", r.id, "err", err)
				}
				if !recycled {
					errs[i] = unmount(r.id)
					if l, err := netlink.LinkByName(VethName(r.id)); err == nil {
						if err := netlink.LinkDel(l); err != nil && !isNotFound(err) {
							errs[i] = errors.Join(errs[i], fmt.Errorf("deleting veth %s: %w", VethName(r.id), err))
						}
					}
				}
			}
			ids := make([]string, len(batch))
			for i, r := range batch {
				ids[i] = r.id
			}
			for i, err := range deleteTables(ids) {
				errs[i] = errors.Join(errs[i], err)
			}
			for i, r := range batch {
				if errs[i] != nil {
					slog.Error("removing a released sandbox network", "sandbox_id", r.id, "err", errs[i])
				}
				if r.done != nil {
					r.done(errs[i])
				}
			}
			reaper.mu.Lock()
			for _, r := range batch {
				if ch := reaper.busy[r.id]; ch != nil && !queuedAgain(r.id) {
					close(ch)
					delete(reaper.busy, r.id)
				}
			}
			reaper.mu.Unlock()
		}
	}
}

// deleteTables deletes the tables of sandboxes ids, missing ones being no
// error, in one transaction; if it fails — one bad table fails them all —
// one by one. It returns the outcome of each.
func deleteTables(ids []string) []error {
	errs := make([]error, len(ids))
	err := flush(func(c *nftables.Conn) error {
		for _, id := range ids {
			queueDelete(c, id)
		}
		return nil
	})
	if err != nil {
		for i, id := range ids {
			errs[i] = removeEgress(id)
		}
	}
	return errs
}

// queuedAgain reports whether id was released again after the batch being
// finished was taken. The caller holds reaper.mu.
func queuedAgain(id string) bool {
	for _, r := range reaper.queued {
		if r.id == id {
			return true
		}
	}
	return false
}
