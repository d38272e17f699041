package netns

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/testenv"
	"github.com/vishvananda/netns"
)

// listenIn opens a TCP listener inside the namespace of id: a socket stays
// in the namespace it was created in, so the thread can switch back at once.
func listenIn(t *testing.T, id, addr string) net.Listener {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.GetFromPath(Path(id))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if err := netns.Set(ns); err != nil {
		t.Fatal(err)
	}
	ln, lerr := net.Listen("tcp", addr)
	if err := netns.Set(orig); err != nil {
		panic("cannot return to the original network namespace: " + err.Error())
	}
	if lerr != nil {
		t.Fatal(lerr)
	}
	return ln
}

func TestVethName(t *testing.T) {
	tests := []struct {
		id string
	}{
		{"a"},
		{"sbx-0123456789abcdef0123456789abcdef0123"},
		{"x"},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		got := VethName(tt.id)
		if len(got) > 15 {
			t.Errorf("VethName(%q) = %q: %d bytes, want at most 15", tt.id, got, len(got))
		}
		if !strings.HasPrefix(got, "lz") || len(got) != 12 {
			t.Errorf("VethName(%q) = %q, want lz + 10 hex digits", tt.id, got)
		}
		if again := VethName(tt.id); again != got {
			t.Errorf("VethName(%q) not stable: %q then %q", tt.id, got, again)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("VethName(%q) = VethName(%q) = %q", tt.id, other, got)
		}
		seen[got] = tt.id
	}
}

func TestValidate(t *testing.T) {
	a := netip.MustParseAddr
	tests := []struct {
		name string
		l    Link
		ok   bool
	}{
		{"ok /30", Link{a("169.254.250.1"), a("169.254.250.2"), 30}, true},
		{"other /30", Link{a("169.254.250.1"), a("169.254.250.6"), 30}, false},
		{"same", Link{a("169.254.250.1"), a("169.254.250.1"), 30}, false},
		{"v6", Link{a("fe80::1"), a("fe80::2"), 64}, false},
		{"prefix 0", Link{a("169.254.250.1"), a("169.254.250.2"), 0}, false},
		{"zero", Link{}, false},
	}
	for _, tt := range tests {
		err := validate(tt.l)
		if got := err == nil; got != tt.ok {
			t.Errorf("%s: validate(%+v) = %v, want ok=%v", tt.name, tt.l, err, tt.ok)
		}
	}
}

func TestCreateRemove(t *testing.T) {
	testenv.RequiresRoot(t)
	id := "nstest-" + strings.ReplaceAll(t.Name(), "/", "-")[:4]
	l := Link{netip.MustParseAddr("169.254.251.253"), netip.MustParseAddr("169.254.251.254"), 30}
	t.Cleanup(func() { _ = Remove(id) })

	if err := Create(id, l); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := Create(id, l); !errors.Is(err, ErrExists) {
		t.Errorf("second Create: got %v, want ErrExists", err)
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil || !strings.Contains(string(out), Name(id)) {
		t.Errorf("ip netns list = %q (%v), want it to contain %s", out, err, Name(id))
	}
	ids, err := List()
	if err != nil || !slices.Contains(ids, id) {
		t.Errorf("List() = %v, %v; want it to contain %s", ids, err, id)
	}
	out, err = exec.Command("ip", "-n", Name(id), "-br", "addr", "show", "eth0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "169.254.251.254/30") || !strings.Contains(string(out), "UP") {
		t.Errorf("eth0 in namespace: %q (%v), want UP with 169.254.251.254/30", out, err)
	}
	// The host reaches the guest address over the veth.
	ln := listenIn(t, id, "169.254.251.254:4000")
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	c, err := net.DialTimeout("tcp", "169.254.251.254:4000", 2*time.Second)
	if err != nil {
		t.Fatalf("dialing guest address from host: %v", err)
	}
	got, _ := io.ReadAll(c)
	c.Close()
	ln.Close()
	if string(got) != "hi" {
		t.Errorf("read from guest = %q, want %q", got, "hi")
	}

	if err := Remove(id); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := Remove(id); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if Exists(id) {
		t.Errorf("Exists(%q) after Remove = true", id)
	}
	if _, err := os.Stat(Path(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat %s after Remove: %v, want not exist", Path(id), err)
	}
	if err := exec.Command("ip", "link", "show", VethName(id)).Run(); err == nil {
		t.Errorf("veth %s still present after Remove", VethName(id))
	}
}

// TestCreateRefusesAddressInUse checks that a link whose addresses are
// already on the host (a leftover sandbox of an earlier server) is refused
// with ErrAddrInUse, leaving nothing behind, instead of making a second
// link nobody can reach.
func TestCreateRefusesAddressInUse(t *testing.T) {
	testenv.RequiresRoot(t)
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	old, id := "nstest-leftover", "nstest-reuse"
	t.Cleanup(func() { _ = Remove(old); _ = Remove(id) })
	if err := Create(old, Link{a("169.254.251.237"), a("169.254.251.238"), 30}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		l    Link
	}{
		{"same link", Link{a("169.254.251.237"), a("169.254.251.238"), 30}},
		{"swapped", Link{a("169.254.251.238"), a("169.254.251.237"), 30}},
		{"overlapping /29", Link{a("169.254.251.233"), a("169.254.251.234"), 29}},
	}
	for _, tt := range tests {
		err := CreateWithEgress(id, tt.l, &Egress{})
		if !errors.Is(err, ErrAddrInUse) {
			t.Errorf("%s: Create = %v, want ErrAddrInUse", tt.name, err)
			_ = Remove(id)
			continue
		}
		if !strings.Contains(err.Error(), VethName(old)) {
			t.Errorf("%s: error %q does not name the interface %s", tt.name, err, VethName(old))
		}
		if Exists(id) {
			t.Errorf("%s: refused Create left a namespace or veth", tt.name)
		}
		if out, _ := exec.Command("nft", "list", "tables").Output(); strings.Contains(string(out), TableName(id)) {
			t.Errorf("%s: refused Create left nft table %s", tt.name, TableName(id))
		}
	}
	// The neighbouring /30 is free.
	if err := Create(id, Link{a("169.254.251.241"), a("169.254.251.242"), 30}); err != nil {
		t.Errorf("Create of a free neighbouring link: %v", err)
	}
}
