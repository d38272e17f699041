package netns

import (
	"net/netip"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lizard-build/lizard/internal/testenv"
	"github.com/vishvananda/netlink"
)

// TestRelease: a released sandbox's slot and ID are free at once — a new
// link with the same addresses, and one with the same ID, come up while
// the old veth and table may still be queued — and after Settle nothing
// of either release is left.
func TestRelease(t *testing.T) {
	testenv.RequiresRoot(t)
	l := Link{netip.MustParseAddr("169.254.251.229"), netip.MustParseAddr("169.254.251.230"), 30}
	ids := []string{"nsrel-a", "nsrel-b"}
	t.Cleanup(func() {
		for _, id := range ids {
			_ = Remove(id)
		}
	})
	var done atomic.Int32
	count := func(err error) {
		if err != nil {
			t.Errorf("release finished with %v", err)
		}
		done.Add(1)
	}

	if err := CreateWithEgress("nsrel-a", l, &Egress{}); err != nil {
		t.Fatal(err)
	}
	if err := Release("nsrel-a", count); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// Another sandbox on the same slot, at once.
	if err := CreateWithEgress("nsrel-b", l, &Egress{}); err != nil {
		t.Fatalf("a new sandbox on a released slot: %v", err)
	}
	if err := Release("nsrel-b", count); err != nil {
		t.Fatal(err)
	}
	// The first ID again (a resume), at once.
	if err := CreateWithEgress("nsrel-a", l, &Egress{Internet: true}); err != nil {
		t.Fatalf("the released ID again: %v", err)
	}
	if tables := nftTableNames(t); !tables[TableName("nsrel-a")] {
		t.Errorf("the recreated sandbox has no table: %v", tables)
	}
	if err := Release("nsrel-a", count); err != nil {
		t.Fatal(err)
	}
	Settle()
	if got := done.Load(); got != 3 {
		t.Errorf("%d releases reported done, want 3", got)
	}
	tables := nftTableNames(t)
	for _, id := range ids {
		if Exists(id) {
			t.Errorf("%s: namespace or veth left after Settle", id)
		}
		if _, err := netlink.LinkByName(VethName(id)); err == nil {
			t.Errorf("%s: veth %s left after Settle", id, VethName(id))
		}
		if tables[TableName(id)] {
			t.Errorf("%s: table %s left after Settle", id, TableName(id))
		}
	}
}

func nftTableNames(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command("nft", "list", "tables").Output()
	if err != nil {
		t.Fatalf("nft list tables: %v", err)
	}
	m := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			m[f[2]] = true
		}
	}
	return m
}
