package netns

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/lizard-build/lizard/internal/testenv"
	"golang.org/x/sys/unix"
)

// BenchmarkNetwork measures one sandbox network's life — create with an
// egress policy, then removal — three ways in one run: removed in full
// (Remove: the veth and the table deleted before it returns), released
// (Release: both deleted in the background), and released with spares
// (made ahead, given back). ns/op is the time a create plus a kill wait.
// Released, each create takes the link just released, as an allocation
// of the lowest free slot would, and waits for its conntrack entries to
// go (conntrack.go); "release-other" takes the lowest link not settling
// (Pool.Settling), as the store's allocation does. Both take their links
// from a test pool (testenv.TakePool). create-ms/op is a create's own
// wait.
//
//	go test -run '^$' -bench Network -benchtime 50x ./internal/netns
func BenchmarkNetwork(b *testing.B) {
	testenv.RequiresRoot(b)
	l := Link{netip.MustParseAddr("169.254.251.209"), netip.MustParseAddr("169.254.251.210"), 30}
	n, free, err := testenv.TakePool()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(free)
	pool, err := ParsePool(fmt.Sprintf("169.254.%d.0/24", n))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		spares    int
		release   bool
		alternate bool
	}{{"remove", 0, false, false}, {"release", 0, true, false}, {"release-other", 0, true, true}, {"spares", 4, true, false}} {
		b.Run(c.name, func(b *testing.B) {
			Prepare(c.spares)
			for Spares() < c.spares {
			}
			var create time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// A new ID each time, as sandboxes have.
				id := fmt.Sprintf("nsbench-%s-%d", c.name, i)
				link := l
				if c.release && c.spares == 0 {
					slot := 0 // the lowest free, just released
					for settling := pool.Settling(); c.alternate && slices.Contains(settling, slot); {
						slot++
					}
					link.HostAddr, link.GuestAddr = pool.Addrs(slot)
				}
				start := time.Now()
				if err := CreateWithEgress(id, link, &Egress{Internet: true}); err != nil {
					b.Fatal(err)
				}
				create += time.Since(start)
				var err error
				if c.release {
					err = Release(id, nil)
				} else {
					err = Remove(id)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(create.Microseconds())/1000/float64(b.N), "create-ms/op")
			Drain()
		})
	}
}

// BenchmarkAddTable measures installing one sandbox's table, fresh, while
// others exist — none, then 300 sandbox-like tables — by the nft script the
// rules were made by before and over netlink, in one run. ns/op is the
// wall time of one install, cpu-ms/op the CPU it cost this process and its
// children (nft); the deletes between installs are not counted.
//
//	go test -run '^$' -bench AddTable -benchtime 100x ./internal/netns
func BenchmarkAddTable(b *testing.B) {
	testenv.RequiresRoot(b)
	l := Link{netip.MustParseAddr("169.254.251.209"), netip.MustParseAddr("169.254.251.210"), 30}
	e := Egress{Internet: true, APIPort: 7000}
	hostNets, err := HostNets()
	if err != nil {
		b.Fatal(err)
	}
	var others []string
	b.Cleanup(func() { deleteTables(others) })
	for _, n := range []int{0, 300} {
		for len(others) < n {
			id := fmt.Sprintf("nsbench-other-%d", len(others))
			others = append(others, id)
			if err := applyEgress(id, l, e); err != nil {
				b.Fatal(err)
			}
		}
		for _, way := range []struct {
			name    string
			install func(id string) error
		}{
			{"nft", func(id string) error { return nft(nftScript(id, l, e, hostNets, true)) }},
			{"netlink", func(id string) error {
				return flush(func(c *nftables.Conn) error { return addRules(c, id, l, e, hostNets, true) })
			}},
		} {
			b.Run(fmt.Sprintf("tables=%d/%s", n, way.name), func(b *testing.B) {
				var cpu time.Duration
				for i := 0; i < b.N; i++ {
					id := fmt.Sprintf("nsbench-add-%d", i)
					before := cpuTime()
					if err := way.install(id); err != nil {
						b.Fatal(err)
					}
					cpu += cpuTime() - before
					b.StopTimer()
					if err := removeEgress(id); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
			})
		}
	}
}

// cpuTime is the CPU this process and its waited-for children have used.
func cpuTime() time.Duration {
	var self, children unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &self)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &children)
	var t time.Duration
	for _, ru := range []unix.Rusage{self, children} {
		t += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return t
}
