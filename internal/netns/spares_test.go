package netns

import (
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/testenv"
	"github.com/vishvananda/netlink"
)

// TestSpares: a removed sandbox's network kept as a spare carries nothing
// of it into the next sandbox, which reaches and is reached on its own
// addresses only; Drain leaves no spare behind.
func TestSpares(t *testing.T) {
	testenv.RequiresRoot(t)
	a := netip.MustParseAddr
	la := Link{a("169.254.251.221"), a("169.254.251.222"), 30}
	lb := Link{a("169.254.251.217"), a("169.254.251.218"), 30}
	t.Cleanup(func() {
		Drain()
		_ = Remove("nssp-a")
		_ = Remove("nssp-b")
	})
	Prepare(0) // no spares made ahead: this test decides when there is one

	if err := CreateWithEgress("nssp-a", la, &Egress{Internet: true}); err != nil {
		t.Fatal(err)
	}
	spares.mu.Lock()
	spares.want = 1
	spares.mu.Unlock()
	if err := Release("nssp-a", nil); err != nil {
		t.Fatalf("Release: %v", err)
	}
	Settle()
	if got := Spares(); got != 1 {
		t.Fatalf("%d spares after a release with one wanted, want 1", got)
	}
	if _, err := netlink.LinkByName(VethName("nssp-a")); err == nil {
		t.Errorf("veth %s still has the released sandbox's name", VethName("nssp-a"))
	}

	if err := CreateWithEgress("nssp-b", lb, &Egress{}); err != nil {
		t.Fatalf("a create on the spare: %v", err)
	}
	out, err := exec.Command("ip", "-n", Name("nssp-b"), "-4", "-o", "addr", "show", "eth0").Output()
	if err != nil || strings.Count(string(out), "inet ") != 1 || !strings.Contains(string(out), "169.254.251.218/30") {
		t.Errorf("eth0 of the sandbox on a spare: %q (%v), want its own address only", out, err)
	}
	out, _ = exec.Command("ip", "-n", Name("nssp-b"), "-4", "route", "show").Output()
	if strings.Contains(string(out), "169.254.251.221") || strings.Contains(string(out), "default") {
		t.Errorf("routes of the sandbox on a spare: %q, want none of the previous sandbox's", out)
	}
	out, _ = exec.Command("ip", "-4", "-o", "addr", "show", VethName("nssp-b")).Output()
	if strings.Count(string(out), "inet ") != 1 || !strings.Contains(string(out), "169.254.251.217/30") {
		t.Errorf("host veth of the sandbox on a spare: %q, want its own address only", out)
	}
	ln := listenIn(t, "nssp-b", "169.254.251.218:4001")
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	c, err := net.DialTimeout("tcp", "169.254.251.218:4001", 2*time.Second)
	if err != nil {
		t.Fatalf("dialing the sandbox on a spare: %v", err)
	}
	got, _ := io.ReadAll(c)
	c.Close()
	ln.Close()
	if string(got) != "hi" {
		t.Errorf("read %q, want hi", got)
	}

	if err := Release("nssp-b", nil); err != nil {
		t.Fatal(err)
	}
	Drain()
	expectNoSpares(t)
	if _, err := os.Lstat(Path("nssp-b")); err == nil {
		t.Errorf("namespace of nssp-b left")
	}
}

// TestSparesMadeAhead: Prepare makes spares in the background; creates
// take them, and they are made again.
func TestSparesMadeAhead(t *testing.T) {
	testenv.RequiresRoot(t)
	t.Cleanup(func() {
		Drain()
		_ = Remove("nssp-c")
	})
	Prepare(2)
	waitSpares(t, 2)
	l := Link{netip.MustParseAddr("169.254.251.213"), netip.MustParseAddr("169.254.251.214"), 30}
	if err := CreateWithEgress("nssp-c", l, &Egress{}); err != nil {
		t.Fatal(err)
	}
	waitSpares(t, 2)
	if err := Release("nssp-c", nil); err != nil {
		t.Fatal(err)
	}
	Settle()
	if Exists("nssp-c") {
		t.Errorf("nssp-c left after its release")
	}
}

func waitSpares(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for Spares() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d spares after 10 s, want %d", Spares(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDrainDuringRecycle: a release that found spares short just before
// Drain still makes its spare, and Drain removes it too (it used to take
// the spares before the release ended, leaving that one behind).
func TestDrainDuringRecycle(t *testing.T) {
	testenv.RequiresRoot(t)
	t.Cleanup(func() {
		recycling = nil
		Drain()
		_ = Remove("nssp-d")
	})
	Prepare(0)
	l := Link{netip.MustParseAddr("169.254.251.245"), netip.MustParseAddr("169.254.251.246"), 30}
	if err := CreateWithEgress("nssp-d", l, &Egress{}); err != nil {
		t.Fatal(err)
	}
	spares.mu.Lock()
	spares.want = 1
	spares.mu.Unlock()
	// The release decides to keep a spare, then goes on once Drain has
	// stopped keeping spares.
	decided := make(chan struct{})
	recycling = func() {
		close(decided)
		for {
			spares.mu.Lock()
			want := spares.want
			spares.mu.Unlock()
			if want == 0 {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := Release("nssp-d", nil); err != nil {
		t.Fatal(err)
	}
	<-decided
	Drain()
	expectNoSpares(t)
}

// expectNoSpares fails t if this process has a spare namespace or veth.
func expectNoSpares(t *testing.T) {
	t.Helper()
	if m, _ := filepath.Glob(filepath.Join(Dir, Prefix+"spare."+pid36+".*")); len(m) > 0 {
		t.Errorf("spare namespaces left after Drain: %v", m)
	}
	links, _ := netlink.LinkList()
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "lzs"+pid36+".") {
			t.Errorf("spare veth %s left after Drain", l.Attrs().Name)
		}
	}
}
