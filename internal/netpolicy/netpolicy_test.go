package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/errdefs"
)

func TestParseRefuses(t *testing.T) {
	many := make([]string, MaxRules+1)
	for i := range many {
		many[i] = fmt.Sprintf("h%d.example.com", i)
	}
	cases := []struct {
		name  string
		p     Policy
		field string
	}{
		{"bad default", Policy{Default: "maybe"}, "network.default"},
		{"malformed domain", Policy{Allow: []string{"ok.com", "exa mple.com"}}, "network.allow[1]"},
		{"label too long", Policy{Allow: []string{strings.Repeat("a", 64) + ".com"}}, "network.allow[0]"},
		{"hyphen at the edge", Policy{Deny: []string{"-bad.com"}}, "network.deny[0]"},
		{"wildcard not leftmost", Policy{Allow: []string{"api.*.example.com"}}, "network.allow[0]"},
		{"wildcard inside a label", Policy{Allow: []string{"*api.example.com"}}, "network.allow[0]"},
		{"too many rules", Policy{Allow: many}, "network:"},
		{"bad CIDR", Policy{Allow: []string{"203.0.113.0/33"}}, "network.allow[0]"},
		{"IPv6", Policy{Deny: []string{"2001:db8::/32"}}, "network.deny[0]"},
		{"bad rule port", Policy{Allow: []string{"203.0.113.7:99999"}}, "network.allow[0]"},
		{"bad port", Policy{Ports: []int{443, 0}}, "network.ports[1]"},
		{"DNS port", Policy{Ports: []int{53}}, "network.ports[0]"},
		{"header not a token", Policy{Inject: []HeaderRule{{Domain: "api.example.com", Headers: map[string]string{"Bad Header": "x"}}}}, "network.inject[0].headers"},
		{"template does not parse", Policy{Inject: []HeaderRule{{Domain: "api.example.com", Headers: map[string]string{"Authorization": "Bearer {{ env.X }}"}}}}, "network.inject[0].headers[Authorization]"},
		{"newline in a header value", Policy{Inject: []HeaderRule{{Domain: "api.example.com", Headers: map[string]string{"X": "a\r\nB: c"}}}}, "network.inject[0].headers[X]"},
		{"inject domain", Policy{Inject: []HeaderRule{{Domain: "a.*.com", Headers: map[string]string{"X": "y"}}}}, "network.inject[0].domain"},
		{"inject without headers", Policy{Inject: []HeaderRule{{Domain: "a.com"}}}, "network.inject[0].headers"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.p, "network")
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("Parse = %v, want ErrInvalid", err)
			}
			if msg := errdefs.Message(err); !strings.HasPrefix(msg, tc.field) {
				t.Errorf("message %q does not start with the field %q", msg, tc.field)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	p, err := Parse(Policy{Default: Deny,
		Allow: []string{"API.Example.com.", "*.pypi.org", "bücher.example", "203.0.113.0/24", "198.51.100.7:5432"},
		Deny:  []string{"evil.pypi.org", "203.0.113.66"},
	}, "network")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(p.Allow, " "), "api.example.com *.pypi.org xn--bcher-kva.example 203.0.113.0/24 198.51.100.7/32:5432"; got != want {
		t.Errorf("normalized allow = %q, want %q", got, want)
	}
	names := []struct {
		name string
		want bool
	}{
		{"api.example.com", true},
		{"example.com", false},
		{"other.example.com", false},
		{"files.pypi.org", true},
		{"a.b.pypi.org", true},
		{"pypi.org", false}, // a wildcard is not its own apex
		{"evilpypi.org", false},
		{"evil.pypi.org", false}, // deny wins
		{"xn--bcher-kva.example", true},
	}
	for _, tc := range names {
		if got := p.AllowName(tc.name); got != tc.want {
			t.Errorf("AllowName(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Names as a sandbox sends them are normalized first.
	for in, want := range map[string]string{"API.EXAMPLE.COM.": "api.example.com", "Bücher.example": "xn--bcher-kva.example"} {
		if got, err := Name(in); err != nil || got != want {
			t.Errorf("Name(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := Name("203.0.113.1"); err == nil {
		t.Error("Name of an IP literal: want an error")
	}
	addrs := []struct {
		addr string
		port int
		want bool
	}{
		{"203.0.113.9", 22, true},
		{"203.0.113.66", 22, false},
		{"198.51.100.7", 5432, true},
		{"198.51.100.7", 5433, false},
		{"198.18.0.1", 80, false},
	}
	for _, tc := range addrs {
		if got := p.AllowAddr(netip.MustParseAddr(tc.addr), tc.port); got != tc.want {
			t.Errorf("AllowAddr(%s, %d) = %v, want %v", tc.addr, tc.port, got, tc.want)
		}
	}
	open, _ := Parse(Policy{Deny: []string{"*.evil.test"}}, "network")
	if !open.AllowName("anything.test") || open.AllowName("x.evil.test") || !open.AllowAddr(netip.MustParseAddr("198.18.0.1"), 9) {
		t.Error("default allow: want everything but the deny rules")
	}
	if got := open.ProxyPorts(); fmt.Sprint(got) != "[80 443]" {
		t.Errorf("default ports = %v", got)
	}
}

func TestWithinAndTighten(t *testing.T) {
	bound, _ := Parse(Policy{Default: Deny, Allow: []string{"*.example.com", "pypi.org", "203.0.113.0/24"}, Deny: []string{"bad.example.com"}}, "network")
	cases := []struct {
		name  string
		p     Policy
		field string // "" when permitted
	}{
		{"tighter", Policy{Default: Deny, Allow: []string{"api.example.com", "*.x.example.com", "pypi.org", "203.0.113.8/29"}}, ""},
		{"default allow is looser", Policy{Default: Allow}, "network.default"},
		{"name outside", Policy{Default: Deny, Allow: []string{"pypi.org", "github.com"}}, "network.allow[1]"},
		{"wildcard wider than the bound's", Policy{Default: Deny, Allow: []string{"*.com"}}, "network.allow[0]"},
		{"prefix wider", Policy{Default: Deny, Allow: []string{"203.0.0.0/16"}}, "network.allow[0]"},
	}
	for _, tc := range cases {
		p, err := Parse(tc.p, "network")
		if err != nil {
			t.Fatal(err)
		}
		err = p.Within(bound, "network")
		if tc.field == "" && err != nil || tc.field != "" && !strings.HasPrefix(errdefs.Message(err), tc.field) {
			t.Errorf("%s: Within = %v, want field %q", tc.name, err, tc.field)
		}
	}
	p, _ := Parse(Policy{Default: Deny, Allow: []string{"*.example.com"}}, "network")
	if got, err := p.Tighten(bound, "network"); err != nil || got.AllowName("bad.example.com") || !got.AllowName("ok.example.com") {
		t.Errorf("Tighten: the bound's deny rules must hold: %+v, %v", got, err)
	}
	// A policy at MaxRules cannot take the bound's deny rules: refused, never let through without them.
	full := make([]string, MaxRules)
	for i := range full {
		full[i] = fmt.Sprintf("h%d.example.com", i)
	}
	big, err := Parse(Policy{Default: Deny, Allow: full}, "network")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := big.Tighten(bound, "network"); got != nil || !strings.HasPrefix(errdefs.Message(err), "network:") {
		t.Errorf("Tighten past MaxRules = %v, %v; want an error naming network", got, err)
	}
	var none *Policy
	if err := p.Within(none, "network"); err != nil {
		t.Errorf("no bound: %v", err)
	}
}

func TestTemplates(t *testing.T) {
	names, err := TemplateSecrets("Bearer {{ secrets.API_KEY }} and {{secrets.other}}")
	if err != nil || fmt.Sprint(names) != "[API_KEY other]" {
		t.Fatalf("TemplateSecrets = %v, %v", names, err)
	}
	got, err := ExpandTemplate("Bearer {{ secrets.API_KEY }}", func(n string) (string, error) { return "v-" + n, nil })
	if err != nil || got != "Bearer v-API_KEY" {
		t.Errorf("ExpandTemplate = %q, %v", got, err)
	}
	for _, bad := range []string{"{{ secrets.A-B }}", "{{ secrets }}", "x }}"} {
		if _, err := TemplateSecrets(bad); err == nil {
			t.Errorf("TemplateSecrets(%q): want an error", bad)
		}
	}
	p, err := Parse(Policy{Inject: []HeaderRule{{Domain: "*.example.com", Headers: map[string]string{"Authorization": "Bearer {{ secrets.K }}"}}}}, "network")
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := p.HeaderRule("api.example.com"); !ok || r.Headers["Authorization"] == "" {
		t.Errorf("HeaderRule(api.example.com) = %v, %v", r, ok)
	}
	if _, ok := p.HeaderRule("example.org"); ok {
		t.Error("HeaderRule(example.org): want none")
	}
}

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		rule, want, prefix string // prefix "": a name
		bad                bool
	}{
		{rule: "API.Example.com.", want: "api.example.com"},
		{rule: "*.example.com", want: "*.example.com"},
		{rule: "203.0.113.7", want: "203.0.113.7/32", prefix: "203.0.113.7/32"},
		{rule: "10.1.2.3/8", want: "10.0.0.0/8", prefix: "10.0.0.0/8"},
		{rule: "0.0.0.0/0", want: "0.0.0.0/0", prefix: "0.0.0.0/0"},
		{rule: "203.0.113.7/32:5432", want: "203.0.113.7/32:5432", prefix: "203.0.113.7/32"},
		{rule: "::/0", bad: true},
		{rule: "api.*.example.com", bad: true},
		{rule: "", bad: true},
	} {
		got, pf, err := ParseRule(tc.rule)
		switch {
		case tc.bad && err == nil:
			t.Errorf("ParseRule(%q) = %q; want an error", tc.rule, got)
		case !tc.bad && err != nil:
			t.Errorf("ParseRule(%q): %v", tc.rule, err)
		case !tc.bad && (got != tc.want || tc.prefix == "" && pf.IsValid() || tc.prefix != "" && pf.String() != tc.prefix):
			t.Errorf("ParseRule(%q) = %q, %v; want %q, %q", tc.rule, got, pf, tc.want, tc.prefix)
		}
	}
}

// TestWidening: what a sandbox's own key may set (docs/network.md) — a
// policy no wider than the current one — and each way of widening it,
// named.
func TestWidening(t *testing.T) {
	inj := []HeaderRule{{Domain: "api.example.com", Headers: map[string]string{"Authorization": "Bearer {{ secrets.K }}"}}}
	cur, err := Parse(Policy{Default: Deny, Allow: []string{"*.example.com", "pypi.org", "203.0.113.0/24"}, Deny: []string{"bad.example.com"}, Inject: inj}, "network")
	if err != nil {
		t.Fatal(err)
	}
	open, _ := Parse(Policy{Default: Allow, Deny: []string{"evil.test", "198.18.0.0/15"}}, "network")
	cases := []struct {
		name string
		cur  *Policy
		p    Policy
		want string // a prefix of the reason; "" when no wider
	}{
		{"the same", cur, Policy{Default: Deny, Allow: []string{"*.example.com", "pypi.org", "203.0.113.0/24"}, Deny: []string{"bad.example.com"}, Inject: inj}, ""},
		{"narrower", cur, Policy{Default: Deny, Allow: []string{"api.example.com", "203.0.113.8/29"}, Deny: []string{"bad.example.com", "x.example.com"}}, ""},
		{"deny default to allow", cur, Policy{Default: Allow, Deny: []string{"bad.example.com"}}, "default"},
		{"a name outside", cur, Policy{Default: Deny, Allow: []string{"pypi.org", "evil.test"}, Deny: []string{"bad.example.com"}}, "allow[1]"},
		{"a wider wildcard", cur, Policy{Default: Deny, Allow: []string{"*.com"}, Deny: []string{"bad.example.com"}}, "allow[0]"},
		{"a wider prefix", cur, Policy{Default: Deny, Allow: []string{"203.0.0.0/16"}, Deny: []string{"bad.example.com"}}, "allow[0]"},
		{"a deny dropped", cur, Policy{Default: Deny, Allow: []string{"pypi.org"}}, "deny"},
		{"ports changed", cur, Policy{Default: Deny, Allow: []string{"pypi.org"}, Deny: []string{"bad.example.com"}, Ports: []int{443}}, "ports"},
		{"a new inject rule", cur, Policy{Default: Deny, Allow: []string{"*.example.com"}, Deny: []string{"bad.example.com"},
			Inject: []HeaderRule{{Domain: "echo.example.com", Headers: map[string]string{"Authorization": "Bearer {{ secrets.K }}"}}}}, "inject[0]"},
		{"an inject rule's headers changed", cur, Policy{Default: Deny, Allow: []string{"*.example.com"}, Deny: []string{"bad.example.com"},
			Inject: []HeaderRule{{Domain: "api.example.com", Headers: map[string]string{"X-Leak": "{{ secrets.K }}"}}}}, "inject[0]"},
		{"default allow, more denied", open, Policy{Default: Allow, Deny: []string{"evil.test", "198.18.0.0/15", "other.test"}}, ""},
		{"default allow to deny", open, Policy{Default: Deny, Allow: []string{"anything.test"}, Deny: []string{"evil.test", "198.18.0.0/15"}}, ""},
		// Narrower in fact, but the rule is simple: the deny rules stay.
		{"default allow to deny, the denies dropped", open, Policy{Default: Deny, Allow: []string{"anything.test"}}, "deny"},
		{"default allow, a deny dropped", open, Policy{Default: Allow, Deny: []string{"evil.test"}}, "deny"},
		{"default allow, a deny narrowed", open, Policy{Default: Allow, Deny: []string{"evil.test", "198.18.0.0/16"}}, "deny"},
	}
	for _, tc := range cases {
		p, err := Parse(tc.p, "network")
		if err != nil {
			t.Fatal(err)
		}
		got := p.Widening(tc.cur)
		if tc.want == "" && got != "" || tc.want != "" && !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: Widening = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestHosts: a secret's hosts are matched and cover inject domains as
// name rules do (one matcher), and are names only.
func TestHosts(t *testing.T) {
	for in, want := range map[string]string{"API.OpenAI.com.": "api.openai.com", "*.Example.COM": "*.example.com"} {
		if got, err := ParseHost(in); err != nil || got != want {
			t.Errorf("ParseHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "203.0.113.7", "10.0.0.0/8", "a.*.com", "exa mple.com"} {
		if _, err := ParseHost(bad); err == nil {
			t.Errorf("ParseHost(%q) accepted", bad)
		}
	}
	hosts := []string{"api.openai.com", "*.example.com"}
	for name, want := range map[string]bool{"api.openai.com": true, "x.api.openai.com": false, "a.example.com": true,
		"a.b.example.com": true, "example.com": false, "echo.attacker.test": false} {
		if got := MatchHost(hosts, name); got != want {
			t.Errorf("MatchHost(%q) = %v, want %v", name, got, want)
		}
	}
	for domain, want := range map[string]bool{"api.openai.com": true, "*.openai.com": false, "a.example.com": true,
		"*.b.example.com": true, "*.example.com": true, "*.com": false, "echo.attacker.test": false} {
		if got := CoversHost(hosts, domain); got != want {
			t.Errorf("CoversHost(%q) = %v, want %v", domain, got, want)
		}
	}
}
