package netns

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/lizard-build/lizard/internal/testenv"
)

// listTable is `nft list table inet lizard-ID`, one rule a line, without
// indentation and blank lines; "" when the table does not exist.
func listTable(t *testing.T, id string) string {
	t.Helper()
	out, err := exec.Command("nft", "list", "table", "inet", TableName(id)).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "No such file or directory") {
			return ""
		}
		t.Fatalf("nft list table %s: %v: %s", TableName(id), err, out)
	}
	var lines []string
	for _, line := range strings.Split(string(out), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}

// install writes sandbox id's rules over netlink.
func install(id string, l Link, e Egress, hostNets []netip.Prefix, fresh bool) error {
	return flush(func(c *nftables.Conn) error { return addRules(c, id, l, e, hostNets, fresh) })
}

// TestRulesMatchScript installs each kind of policy twice — with the nft
// script the rules were made by before (nftScript) and over netlink, fresh
// and replacing — and wants nft to list the same table each time, rule by
// rule.
func TestRulesMatchScript(t *testing.T) {
	testenv.RequiresRoot(t)
	p := netip.MustParsePrefix
	l := Link{netip.MustParseAddr("169.254.251.229"), netip.MustParseAddr("169.254.251.230"), 30}
	host := []netip.Prefix{p("45.1.2.0/24"), p("93.184.216.1/32"), p("10.1.0.0/16")}
	names := Names{DNSPort: 5353, ProxyPort: 8081, Ports: []int{80, 443},
		Allow: []PortPrefix{{p("203.0.113.0/24"), 0}, {p("8.8.8.8/32"), 53}, {p("45.1.0.0/23"), 0}},
		Deny:  []PortPrefix{{p("203.0.113.9/32"), 22}, {p("1.2.3.0/31"), 0}}, DefaultDeny: true}
	tests := []struct {
		name string
		e    Egress
		host []netip.Prefix
	}{
		{"no internet", Egress{}, nil},
		{"no internet, API port", Egress{APIPort: 7000}, nil},
		{"internet", Egress{Internet: true}, nil},
		{"internet, host nets", Egress{Internet: true}, host},
		{"internet, API port", Egress{Internet: true, APIPort: 7000}, host},
		{"allow-to with special-purpose prefixes", Egress{Internet: true,
			AllowTo: []netip.Prefix{p("203.0.113.1/32"), p("198.51.100.0/24"), p("8.8.8.0/24"), p("45.1.2.0/23")}}, host},
		{"allow-to one address", Egress{Internet: true, AllowTo: []netip.Prefix{p("8.8.8.8/32")}}, nil},
		{"allow-to adjacent halves", Egress{Internet: true, AllowTo: []netip.Prefix{p("203.0.113.0/25"), p("203.0.113.128/25"), p("0.0.0.0/0")}}, nil},
		{"names, default deny", Egress{Internet: true, APIPort: 7000, AllowTo: []netip.Prefix{p("203.0.113.0/24")}, Names: &names}, host},
		{"names, default allow, one port", Egress{Internet: true, Names: &Names{DNSPort: 5300, ProxyPort: 9000, Ports: []int{8080},
			Allow: []PortPrefix{{p("0.0.0.0/0"), 443}}, Deny: []PortPrefix{{p("100.0.0.0/7"), 0}}}}, nil},
		{"names without internet", Egress{APIPort: 7000, Names: &names}, host},
	}
	for i, tt := range tests {
		id := fmt.Sprintf("nfteq-%d", i)
		_ = removeEgress(id)
		t.Cleanup(func() { _ = removeEgress(id) })
		if err := nft(nftScript(id, l, tt.e, tt.host, true)); err != nil {
			t.Fatalf("%s: the nft script: %v", tt.name, err)
		}
		want := listTable(t, id)
		if err := removeEgress(id); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if err := install(id, l, tt.e, tt.host, true); err != nil {
			t.Fatalf("%s: installing over netlink: %v", tt.name, err)
		}
		if got := listTable(t, id); got != want {
			t.Errorf("%s: over netlink nft lists\n%s\nwant (the nft script's)\n%s", tt.name, got, want)
		}
		// Replacing, as UpdateEgress does, gives the same table.
		if err := install(id, l, tt.e, tt.host, false); err != nil {
			t.Fatalf("%s: replacing over netlink: %v", tt.name, err)
		}
		if got := listTable(t, id); got != want {
			t.Errorf("%s: replaced over netlink, nft lists\n%s\nwant (the nft script's)\n%s", tt.name, got, want)
		}
		if err := removeEgress(id); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
	}
}

// TestApplyOverExisting: a fresh install fails on a table left behind
// (by a crash, say), and applyEgress then replaces it; an update replaces
// the rules whole.
func TestApplyOverExisting(t *testing.T) {
	testenv.RequiresRoot(t)
	const id = "nftold"
	l := Link{netip.MustParseAddr("169.254.251.229"), netip.MustParseAddr("169.254.251.230"), 30}
	_ = removeEgress(id)
	t.Cleanup(func() { _ = removeEgress(id) })

	if err := install(id, l, Egress{Internet: true}, nil, true); err != nil {
		t.Fatal(err)
	}
	if err := install(id, l, Egress{APIPort: 7000}, nil, true); err == nil {
		t.Fatal("a fresh install over an existing table succeeded")
	}
	if err := applyEgress(id, l, Egress{APIPort: 7000}); err != nil {
		t.Fatalf("applyEgress over an existing table: %v", err)
	}
	got := listTable(t, id)
	if !strings.Contains(got, "tcp dport 7000") || strings.Contains(got, "masquerade") {
		t.Errorf("after applyEgress over an old table nft lists\n%s\nwant the new rules only", got)
	}
	if err := UpdateEgress(id, l, Egress{Internet: true}); err != nil {
		t.Fatalf("UpdateEgress: %v", err)
	}
	if got := listTable(t, id); strings.Contains(got, "tcp dport 7000") || !strings.Contains(got, "masquerade") {
		t.Errorf("after UpdateEgress nft lists\n%s\nwant the new rules only", got)
	}
}

// TestDeleteTables: removing a table that does not exist is no error, and
// a batch with one bad entry still deletes the others (one by one).
func TestDeleteTables(t *testing.T) {
	testenv.RequiresRoot(t)
	l := Link{netip.MustParseAddr("169.254.251.229"), netip.MustParseAddr("169.254.251.230"), 30}
	if err := removeEgress("nftdel-missing"); err != nil {
		t.Errorf("removing a missing table: %v", err)
	}
	ids := []string{"nftdel-a", "nftdel-missing", strings.Repeat("x", 300), "nftdel-b"}
	for _, id := range []string{ids[0], ids[3]} {
		t.Cleanup(func() { _ = removeEgress(id) })
		if err := install(id, l, Egress{Internet: true}, nil, false); err != nil {
			t.Fatal(err)
		}
	}
	errs := deleteTables(ids)
	for i, id := range ids {
		if bad := i == 2; (errs[i] != nil) != bad {
			t.Errorf("deleting %.20s: %v, want an error: %t", id, errs[i], bad)
		}
	}
	for _, id := range []string{ids[0], ids[3]} {
		if got := listTable(t, id); got != "" {
			t.Errorf("table %s left after the batch delete", TableName(id))
		}
	}
	// Without the bad entry it is one transaction, and as good.
	for _, id := range []string{ids[0], ids[3]} {
		if err := install(id, l, Egress{}, nil, true); err != nil {
			t.Fatal(err)
		}
	}
	for i, err := range deleteTables([]string{ids[0], ids[1], ids[3]}) {
		if err != nil {
			t.Errorf("batch delete, entry %d: %v", i, err)
		}
	}
	for _, id := range []string{ids[0], ids[3]} {
		if got := listTable(t, id); got != "" {
			t.Errorf("table %s left after the batch delete", TableName(id))
		}
	}
}

// TestCheckEgressRefused: where nftables does not answer — here a process
// without CAP_NET_ADMIN over the host's network namespace (in a user
// namespace of its own) — CheckEgress fails and says what is needed.
func TestCheckEgressRefused(t *testing.T) {
	if os.Getenv("LIZARD_NETNS_CHECK_CHILD") == "1" {
		if err := CheckEgress(); err != nil {
			fmt.Println(err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	if err := CheckEgress(); err != nil && os.Geteuid() == 0 {
		t.Fatalf("CheckEgress as root: %v", err)
	}
	cmd := exec.Command("unshare", "--user", os.Args[0], "-test.run=^TestCheckEgressRefused$")
	cmd.Env = append(os.Environ(), "LIZARD_NETNS_CHECK_CHILD=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("CheckEgress without CAP_NET_ADMIN: %v: %s; want it to fail", err, out)
	}
	for _, want := range []string{"nftables does not answer over netlink", "operation not permitted", "nf_tables", "root"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("CheckEgress without CAP_NET_ADMIN said %q, want it to name %q", out, want)
		}
	}
}
