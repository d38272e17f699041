package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/store"
)

func TestSign(t *testing.T) {
	// Computed apart, with Python's hmac (docs/events.md shows the check).
	const want = "t=1700000000,v1=2f441ba4b3b2d50d28a9ab9d9fd8880376ecd1eb5d0435401553f5d8d0a5dcf8"
	if got := Sign("whsec_test", time.Unix(1700000000, 0), []byte(`{"id":1}`)); got != want {
		t.Errorf("Sign = %s; want %s", got, want)
	}
	if Sign("other", time.Unix(1700000000, 0), []byte(`{"id":1}`)) == want {
		t.Error("another secret signs alike")
	}
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {10, 512 * time.Second},
		{11, 10 * time.Minute}, {64, 10 * time.Minute}, {1000, 10 * time.Minute},
	} {
		if got := Backoff(tc.n); got != tc.want {
			t.Errorf("Backoff(%d) = %s; want %s", tc.n, got, tc.want)
		}
	}
}

func TestCheckURL(t *testing.T) {
	ctx := context.Background()
	// Only literal addresses and localhost (/etc/hosts): the test resolves
	// no name over the network.
	for _, tc := range []struct {
		url     string
		private bool   // --webhook-allow-private
		want    string // "" accepted, else in the message
	}{
		{"https://93.184.215.14/hook", false, ""},
		{"http://[2606:4700::1111]:8080/x", false, ""},
		{"ftp://93.184.215.14/", false, "http:// or https://"},
		{"javascript:alert(1)", false, "http:// or https://"},
		{"93.184.215.14/hook", false, "http:// or https://"},
		{"https:///nohost", false, "no host"},
		{"https://user:pw@93.184.215.14/", false, "user name or password"},
		{"https://93.184.215.14/" + strings.Repeat("a", MaxURL), false, "over the 2048"},
		{"http://127.0.0.1:9000/", false, "loopback"},
		{"http://localhost:9000/", false, "must resolve to a public address"},
		{"http://[::1]/", false, "loopback"},
		{"http://[::ffff:127.0.0.1]/", false, "loopback"},
		{"http://169.254.169.254/latest/meta-data", false, "link-local"},
		{"http://[fe80::1]/", false, "link-local"},
		{"http://10.1.2.3/", false, "private"},
		{"http://172.16.0.1/", false, "private"},
		{"http://192.168.1.1/", false, "private"},
		{"http://100.64.0.1/", false, "private"},
		{"http://[fd00::1]/", false, "private"},
		{"http://0.0.0.0/", false, "unspecified"},
		{"http://239.1.1.1/", false, "multicast"},
		{"http://192.0.0.170/", false, "reserved"},
		{"http://240.0.0.1/", false, "reserved"},
		{"http://255.255.255.255/", false, "reserved"},
		{"http://198.18.0.1/", false, "special-purpose"},
		{"http://[64:ff9b::a9fe:a9fe]/", false, "link-local"},
		{"http://[64:ff9b::7f00:1]/", false, "loopback"},
		{"http://[64:ff9b::5db8:d70e]/", false, ""},
		{"http://127.0.0.1:9000/", true, ""},
		{"http://10.1.2.3/", true, ""},
		{"ftp://127.0.0.1/", true, "http:// or https://"},
	} {
		err := CheckURL(ctx, tc.url, tc.private, net.DefaultResolver)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckURL(%.60q, private %v) = %v; want accepted", tc.url, tc.private, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckURL(%.60q, private %v) = %v; want refused with %q", tc.url, tc.private, err, tc.want)
		case tc.want != "" && !errors.Is(err, errdefs.ErrInvalid):
			t.Errorf("CheckURL(%.60q) = %v; want errdefs.ErrInvalid (a 400)", tc.url, err)
		}
	}
}

// TestEmbeddedIPv4: an IPv6 address that a translator or tunnel turns
// into an IPv4 one is refused as that IPv4 address is, at registration
// (CheckURL) and at connect (refusedDial, the dialer's Control); each was
// accepted and dialled before.
func TestEmbeddedIPv4(t *testing.T) {
	for _, tc := range []struct {
		form, addr string
		want       string // "" accepted, else in the refusal
	}{
		{"IPv4-compatible ::/96", "::127.0.0.1", "embedding 127.0.0.1, a loopback"},
		{"IPv4-compatible ::/96", "::10.1.2.3", "embedding 10.1.2.3, a private"},
		{"IPv4-compatible ::/96", "::169.254.169.254", "link-local"},
		{"IPv4-compatible ::/96", "::93.184.215.14", ""},
		{"IPv4-mapped ::ffff:0:0/96", "::ffff:127.0.0.1", "loopback"},
		{"IPv4-mapped ::ffff:0:0/96", "::ffff:192.168.0.1", "private"},
		{"IPv4-mapped ::ffff:0:0/96", "::ffff:93.184.215.14", ""},
		{"SIIT ::ffff:0:0:0/96", "::ffff:0:7f00:1", "embedding 127.0.0.1, a loopback"},
		{"SIIT ::ffff:0:0:0/96", "::ffff:0:a9fe:a9fe", "embedding 169.254.169.254, a link-local"},
		{"SIIT ::ffff:0:0:0/96", "::ffff:0:5db8:d70e", ""},
		{"6to4 2002::/16", "2002:7f00:1::1", "embedding 127.0.0.1, a loopback"},
		{"6to4 2002::/16", "2002:a9fe:a9fe::", "embedding 169.254.169.254, a link-local"},
		{"6to4 2002::/16", "2002:ac10:1:1::2", "embedding 172.16.0.1, a private"},
		{"6to4 2002::/16", "2002:5db8:d70e::1", ""},
		{"NAT64 64:ff9b::/96", "64:ff9b::7f00:1", "embedding 127.0.0.1, a loopback"},
		{"NAT64 64:ff9b::/96", "64:ff9b::a00:1", "embedding 10.0.0.1, a private"},
		{"NAT64 64:ff9b::/96", "64:ff9b::5db8:d70e", ""},
		{"local NAT64 64:ff9b:1::/48", "64:ff9b:1::7f00:1", "local-use NAT64"},
		{"local NAT64 64:ff9b:1::/48", "64:ff9b:1:7f00:0:100::", "local-use NAT64"},
		{"local NAT64 64:ff9b:1::/48", "64:ff9b:1::5db8:d70e", "local-use NAT64"},
		// Teredo: server 93.184.215.14 in bits 32-63, the client inverted
		// in the last 32 (127.0.0.1 is 80ff:fffe, 93.184.215.14 a247:28f1).
		{"Teredo 2001::/32 client", "2001:0:5db8:d70e::80ff:fffe", "embedding 127.0.0.1, a loopback"},
		{"Teredo 2001::/32 client", "2001:0:5db8:d70e:8000:f227:f5ff:fffe", "embedding 10.0.0.1, a private"},
		{"Teredo 2001::/32 server", "2001:0:a00:1::a247:28f1", "embedding 10.0.0.1, a private"},
		{"Teredo 2001::/32 server", "2001:0:7f00:1::a247:28f1", "embedding 127.0.0.1, a loopback"},
		{"Teredo 2001::/32", "2001:0:5db8:d70e::a247:28f1", ""},
		{"plain IPv6", "2606:4700::1111", ""},
	} {
		a := netip.MustParseAddr(tc.addr)
		err := CheckURL(context.Background(), "http://"+netip.AddrPortFrom(a, 8080).String()+"/hook", false, net.DefaultResolver)
		dial := refusedDial("tcp6", netip.AddrPortFrom(a, 443).String(), nil)
		switch {
		case tc.want == "" && (err != nil || dial != nil):
			t.Errorf("%s %s: CheckURL = %v, dial = %v; want both accepted", tc.form, tc.addr, err, dial)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errdefs.ErrInvalid)):
			t.Errorf("%s %s: CheckURL = %v; want an errdefs.ErrInvalid refusal with %q", tc.form, tc.addr, err, tc.want)
		case tc.want != "" && !errors.Is(dial, errNotPublic):
			t.Errorf("%s %s: dial = %v; want errNotPublic", tc.form, tc.addr, dial)
		}
	}
}

// TestCheckURLNoOracle: registering a name tells the key neither what it
// resolves to nor whether a refused name resolves at all, so webhooks do
// not map the operator's internal names.
func TestCheckURLNoOracle(t *testing.T) {
	// localhost comes from /etc/hosts; every other name fails without a
	// packet sent (the resolver's dial refuses).
	r := &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no DNS in this test")
	}}
	msg := func(host string) string {
		err := CheckURL(context.Background(), "http://"+host+":9000/hook", false, r)
		if !errors.Is(err, errdefs.ErrInvalid) {
			t.Fatalf("CheckURL(http://%s:9000/hook) = %v; want errdefs.ErrInvalid (a 400)", host, err)
		}
		return strings.ReplaceAll(err.Error(), host, "HOST")
	}
	resolves, not := msg("localhost"), msg("nowhere.invalid")
	if resolves != not {
		t.Errorf("a name resolving to loopback is refused with %q, one not resolving with %q; want the same", resolves, not)
	}
	for _, leak := range []string{"127.0.0.1", "::1", "loopback", "does not resolve"} {
		if strings.Contains(resolves, leak) {
			t.Errorf("refusal %q tells %q", resolves, leak)
		}
	}
	if !strings.Contains(resolves, "must resolve to a public address") {
		t.Errorf("refusal %q; want it to say the host must resolve to a public address", resolves)
	}
}

// TestHostOwnRefused: a webhook never reaches this host's own services
// through one of its addresses, public ones included (this machine's
// eth0 is 192.0.2.2, a documentation address, which passed as public).
func TestHostOwnRefused(t *testing.T) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var own []netip.Addr
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.(*net.IPNet).IP); ok && !ip.Unmap().IsLoopback() && ip.Unmap().Is4() {
			own = append(own, ip.Unmap())
		}
	}
	if len(own) == 0 {
		t.Fatal("this host has no IPv4 address but loopback")
	}
	if hostOwn(netip.MustParseAddr("93.184.215.14")) {
		t.Error("hostOwn(93.184.215.14) = true; want false")
	}
	for _, a := range own {
		if !hostOwn(a) {
			t.Errorf("hostOwn(%s) = false; want true", a)
		}
		if refused(a) == "" {
			t.Errorf("refused(%s) = \"\"; want this host's address refused", a)
		}
		if err := CheckURL(context.Background(), "http://"+a.String()+"/", false, net.DefaultResolver); err == nil {
			t.Errorf("CheckURL(http://%s/) = nil; want refused", a)
		}
	}
	hits := 0
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	u := fmt.Sprintf("http://%s/", netip.AddrPortFrom(own[0], uint16(port)))
	if _, err := deliveryClient(false).Post(u, "application/json", strings.NewReader("{}")); err == nil || hits != 0 {
		t.Errorf("delivery to %s = %v, %d requests; want refused, none sent", u, err, hits)
	}
}

// TestDialRefused: a delivery checks the address it connects to, so a
// name that resolved to a public address at registration and to loopback
// now (DNS rebinding) is refused.
func TestDialRefused(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	defer srv.Close()
	// The attempt's error, which the key reads, names no address.
	s := &Service{client: deliveryClient(false)}
	status, why := s.send(context.Background(), store.Webhook{ID: "wh_1", URL: srv.URL}, store.Event{ID: 1, Type: "sandbox.created"})
	if status != 0 || !strings.Contains(why, "not public") || strings.Contains(why, "127.0.0.1") || hits != 0 {
		t.Errorf("delivery to %s = %d %q, %d requests; want refused as not public, the address not named, none sent", srv.URL, status, why, hits)
	}
	resp, err := deliveryClient(true).Post(srv.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("with private addresses allowed: %v", err)
	}
	resp.Body.Close()
	if hits != 1 {
		t.Errorf("receiver got %d requests; want 1", hits)
	}
}
