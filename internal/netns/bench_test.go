package netns

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/lizard-build/lizard/internal/testenv"
)

// BenchmarkNetwork measures one sandbox network's life — create with an
// egress policy, then removal — three ways in one run: removed in full
// (Remove: the veth and the table deleted before it returns), released
// (Release: both deleted in the background), and released with spares
// (made ahead, given back). ns/op is the time a create plus a kill wait.
//
//	go test -run '^$' -bench Network -benchtime 50x ./internal/netns
func BenchmarkNetwork(b *testing.B) {
	testenv.RequiresRoot(b)
	l := Link{netip.MustParseAddr("169.254.251.209"), netip.MustParseAddr("169.254.251.210"), 30}
	for _, c := range []struct {
		name    string
		spares  int
		release bool
	}{{"remove", 0, false}, {"release", 0, true}, {"spares", 4, true}} {
		b.Run(c.name, func(b *testing.B) {
			Prepare(c.spares)
			for Spares() < c.spares {
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// A new ID each time, as sandboxes have.
				id := fmt.Sprintf("nsbench-%s-%d", c.name, i)
				if err := CreateWithEgress(id, l, &Egress{Internet: true}); err != nil {
					b.Fatal(err)
				}
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
			Drain()
		})
	}
}
