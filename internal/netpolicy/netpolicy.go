// Package netpolicy is a sandbox's network policy by name (docs/network.md):
// what a create or an update says, validated and normalized here, and the
// matching of names, addresses and a secret's hosts against it. It is a
// leaf: the store records policies and the control plane checks them
// without linking the node's resolver and proxy (package egress), which
// enforce them, nor the nftables rules (package netns) that put both in a
// sandbox's path.
package netpolicy

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/idna"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// Defaults of a policy.
const (
	Allow = "allow"
	Deny  = "deny"
	// MaxRules bounds allow, deny, ports and inject together: every rule
	// is looked at on every new connection and in nftables.
	MaxRules = 1000
)

// DefaultPorts are the ports whose TCP connections go through the proxy
// when a policy names none: HTTP and HTTPS.
var DefaultPorts = []int{80, 443}

// Policy is a sandbox's egress by name. A name is allowed when no deny
// rule matches it and an allow rule does, or none does and Default is
// allow; addresses (connections the proxy does not see: ports other than
// Ports, and UDP) the same with the CIDR rules. Deny always wins.
type Policy struct {
	Default string `json:"default"`
	// Allow and Deny hold domain names ("example.com", matched exactly),
	// wildcards ("*.example.com": any name under it, not the name
	// itself), IPv4 addresses and prefixes ("203.0.113.0/24"), and a
	// prefix with a port ("203.0.113.7/32:5432": that port only, TCP and
	// UDP).
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	// Ports are the TCP ports whose connections go through the proxy and
	// are checked by Host or SNI name: DefaultPorts when empty.
	Ports []int `json:"ports,omitempty"`
	// Inject are header rules: requests to a matching name get these
	// headers (set by an Interceptor, package secrets).
	Inject []HeaderRule `json:"inject,omitempty"`

	names   nameSet
	denied  nameSet
	nets    []netRule
	blocked []netRule
}

// HeaderRule says: on requests to Domain (a name or a wildcard), set
// Headers. A value is a template: text with {{ secrets.NAME }} in it.
type HeaderRule struct {
	Domain  string            `json:"domain"`
	Headers map[string]string `json:"headers"`
}

type nameSet struct {
	exact    map[string]bool
	suffixes []string // ".example.com" for *.example.com
}

func (s *nameSet) add(pattern string) {
	if rest, ok := strings.CutPrefix(pattern, "*."); ok {
		s.suffixes = append(s.suffixes, "."+rest)
		return
	}
	if s.exact == nil {
		s.exact = map[string]bool{}
	}
	s.exact[pattern] = true
}

func (s *nameSet) match(name string) bool {
	if s.exact[name] {
		return true
	}
	for _, suf := range s.suffixes {
		if strings.HasSuffix(name, suf) {
			return true
		}
	}
	return false
}

type netRule struct {
	prefix netip.Prefix
	port   int // 0: any
}

func (r netRule) match(a netip.Addr, port int) bool {
	return r.prefix.Contains(a) && (r.port == 0 || r.port == port)
}

// Parse validates p and returns it normalized (names lower-case and in
// punycode, prefixes masked, ports sorted) and ready to match. Errors are
// errdefs.ErrInvalid naming the field under prefix ("network").
func Parse(p Policy, field string) (*Policy, error) {
	out := &Policy{Default: p.Default}
	switch p.Default {
	case Allow, Deny:
	case "":
		out.Default = Allow
	default:
		return nil, errdefs.Invalidf("%s.default: %q is not allow or deny", field, p.Default)
	}
	if n := len(p.Allow) + len(p.Deny) + len(p.Ports) + len(p.Inject); n > MaxRules {
		return nil, errdefs.Invalidf("%s: %d rules (allow, deny, ports and inject together), at most %d", field, n, MaxRules)
	}
	var err error
	if out.Allow, err = parseRules(p.Allow, field+".allow", &out.names, &out.nets); err != nil {
		return nil, err
	}
	if out.Deny, err = parseRules(p.Deny, field+".deny", &out.denied, &out.blocked); err != nil {
		return nil, err
	}
	for i, port := range p.Ports {
		if port < 1 || port > 65535 {
			return nil, errdefs.Invalidf("%s.ports[%d]: %d is not a port (1-65535)", field, i, port)
		}
		if port == 53 {
			return nil, errdefs.Invalidf("%s.ports[%d]: 53 is DNS, which always goes to the node's resolver", field, i)
		}
	}
	out.Ports = slices.Clone(p.Ports)
	slices.Sort(out.Ports)
	out.Ports = slices.Compact(out.Ports)
	for i, r := range p.Inject {
		f := fmt.Sprintf("%s.inject[%d]", field, i)
		d, err := normalizeName(r.Domain, true)
		if err != nil {
			return nil, errdefs.Invalidf("%s.domain: %v", f, err)
		}
		if len(r.Headers) == 0 {
			return nil, errdefs.Invalidf("%s.headers: no headers", f)
		}
		hs := make(map[string]string, len(r.Headers))
		for k, v := range r.Headers {
			if !httpguts.ValidHeaderFieldName(k) {
				return nil, errdefs.Invalidf("%s.headers: %q is not a header name (an RFC 9110 token)", f, k)
			}
			if _, err := TemplateSecrets(v); err != nil {
				return nil, errdefs.Invalidf("%s.headers[%s]: %v", f, k, err)
			}
			hs[k] = v
		}
		out.Inject = append(out.Inject, HeaderRule{Domain: d, Headers: hs})
	}
	return out, nil
}

func parseRules(rules []string, field string, names *nameSet, nets *[]netRule) ([]string, error) {
	out := make([]string, 0, len(rules))
	for i, r := range rules {
		n, err := parseRule(r, names, nets)
		if err != nil {
			return nil, errdefs.Invalidf("%s[%d]: %v", field, i, err)
		}
		out = append(out, n)
	}
	return slices.Compact(out), nil
}

// ParseRule validates one allow or deny rule on its own and returns its
// normal form and, for an address rule, its prefix (the zero Prefix for a
// name): for surfaces whose rule lists are not a Policy's (E2B's allowOut
// and denyOut, internal/e2b), which name their own fields in errors.
func ParseRule(r string) (string, netip.Prefix, error) {
	var names nameSet
	var nets []netRule
	n, err := parseRule(r, &names, &nets)
	if err != nil || len(nets) == 0 {
		return n, netip.Prefix{}, err
	}
	return n, nets[0].prefix, nil
}

// parseRule adds rule r to names or nets and returns its normal form.
func parseRule(r string, names *nameSet, nets *[]netRule) (string, error) {
	r = strings.TrimSpace(r)
	if looksLikeAddress(r) {
		nr, err := parseNet(r)
		if err != nil {
			return "", err
		}
		*nets = append(*nets, nr)
		if nr.port != 0 {
			return fmt.Sprintf("%s:%d", nr.prefix, nr.port), nil
		}
		return nr.prefix.String(), nil
	}
	n, err := normalizeName(r, true)
	if err != nil {
		return "", err
	}
	names.add(n)
	return n, nil
}

// looksLikeAddress: a rule that starts with a digit and holds only digits,
// dots, a slash and a colon is an address rule (a name's last label is
// never all digits), as is anything with a colon (IPv6, refused there).
func looksLikeAddress(r string) bool {
	if strings.Contains(r, ":") {
		return true
	}
	return r != "" && strings.Trim(r, "0123456789./") == ""
}

func parseNet(r string) (netRule, error) {
	var port int
	if i := strings.LastIndexByte(r, ':'); i >= 0 && !strings.Contains(r[:i], ":") {
		p, err := strconv.Atoi(r[i+1:])
		if err != nil || p < 1 || p > 65535 {
			return netRule{}, fmt.Errorf("%q: the port after the colon is not 1-65535", r)
		}
		r, port = r[:i], p
	}
	var pf netip.Prefix
	var err error
	if strings.Contains(r, "/") {
		pf, err = netip.ParsePrefix(r)
	} else {
		var a netip.Addr
		if a, err = netip.ParseAddr(r); err == nil {
			pf = netip.PrefixFrom(a, a.BitLen())
		}
	}
	if err != nil {
		return netRule{}, fmt.Errorf("%q is not a domain name, an IPv4 address or an IPv4 prefix (CIDR)", r)
	}
	if !pf.Addr().Is4() {
		return netRule{}, fmt.Errorf("%q is IPv6: nothing leaves a sandbox over IPv6", r)
	}
	return netRule{prefix: pf.Masked(), port: port}, nil
}

var label = regexp.MustCompile(`^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$`)

// idnaProfile turns a name into its punycode form as a lookup does.
var idnaProfile = idna.New(idna.MapForLookup(), idna.Transitional(false), idna.StrictDomainName(false))

// normalizeName returns name (or, with wildcard, "*.name") lower-case,
// without a final dot, and in punycode.
func normalizeName(name string, wildcard bool) (string, error) {
	orig := name
	name = strings.TrimSuffix(strings.TrimSpace(name), ".")
	star := false
	if wildcard {
		if rest, ok := strings.CutPrefix(name, "*."); ok {
			star, name = true, rest
		}
	}
	if strings.Contains(name, "*") {
		return "", fmt.Errorf("%q: a wildcard may only be the whole leftmost label (*.example.com)", orig)
	}
	if name == "" {
		return "", fmt.Errorf("%q is not a domain name", orig)
	}
	a, err := idnaProfile.ToASCII(name)
	if err != nil {
		return "", fmt.Errorf("%q is not a domain name: %v", orig, err)
	}
	a = strings.ToLower(a)
	if len(a) > 253 {
		return "", fmt.Errorf("%q is longer than 253 characters", orig)
	}
	for _, l := range strings.Split(a, ".") {
		if !label.MatchString(l) {
			return "", fmt.Errorf("%q is not a domain name: label %q", orig, l)
		}
	}
	if star {
		return "*." + a, nil
	}
	return a, nil
}

// Name returns name as the policy matches it (lower-case punycode without
// a final dot), or an error when it is not a domain name (an IP literal,
// say).
func Name(name string) (string, error) {
	if _, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
		return "", fmt.Errorf("%q is an address, not a name", name)
	}
	return normalizeName(name, false)
}

// AllowName reports whether p lets the sandbox reach name (in the form
// Name returns).
func (p *Policy) AllowName(name string) bool {
	if p.denied.match(name) {
		return false
	}
	return p.names.match(name) || p.Default == Allow
}

// AllowAddr reports whether p lets the sandbox reach a by TCP or UDP on
// port without a name (the CIDR rules).
func (p *Policy) AllowAddr(a netip.Addr, port int) bool {
	for _, r := range p.blocked {
		if r.match(a, port) {
			return false
		}
	}
	for _, r := range p.nets {
		if r.match(a, port) {
			return true
		}
	}
	return p.Default == Allow
}

// ProxyPorts are the TCP ports that go through the proxy.
func (p *Policy) ProxyPorts() []int {
	if len(p.Ports) == 0 {
		return DefaultPorts
	}
	return p.Ports
}

// Proxied reports whether TCP port goes through the proxy.
func (p *Policy) Proxied(port int) bool { return slices.Contains(p.ProxyPorts(), port) }

// NetRule is an address rule for nftables.
type NetRule struct {
	Prefix netip.Prefix
	Port   int // 0: any
}

// NetRules are p's allowed and denied address rules.
func (p *Policy) NetRules() (allow, deny []NetRule) {
	for _, r := range p.nets {
		allow = append(allow, NetRule{r.prefix, r.port})
	}
	for _, r := range p.blocked {
		deny = append(deny, NetRule{r.prefix, r.port})
	}
	return allow, deny
}

// HeaderRule returns the first inject rule whose domain matches name.
func (p *Policy) HeaderRule(name string) (HeaderRule, bool) {
	for _, r := range p.Inject {
		var s nameSet
		s.add(r.Domain)
		if s.match(name) {
			return r, true
		}
	}
	return HeaderRule{}, false
}

// Wire returns the policy's fields without its compiled matchers: what is
// stored and sent.
func (p *Policy) Wire() Policy {
	return Policy{Default: p.Default, Allow: p.Allow, Deny: p.Deny, Ports: p.Ports, Inject: p.Inject}
}

// Within checks that p is no looser than bound, the loosest policy the
// operator permits (lizard serve --network-bound): with a bound whose
// default is deny, p's default must be deny and each of its allow rules
// must lie inside one of the bound's (a name matched by it, a wildcard
// under one of its wildcards, a prefix inside one of its prefixes). The
// bound's deny rules are not checked here: Tighten adds them.
func (p *Policy) Within(bound *Policy, field string) error {
	if bound == nil || bound.Default == Allow {
		return nil
	}
	if p.Default == Allow {
		return errdefs.Invalidf("%s.default: allow is looser than the server permits (its bound's default is deny)", field)
	}
	for i, r := range p.Allow {
		if !bound.covers(r) {
			return errdefs.Invalidf("%s.allow[%d]: %q is not within what the server permits", field, i, r)
		}
	}
	return nil
}

// covers reports whether one of p's allow rules holds rule r (normalized).
func (p *Policy) covers(r string) bool { return covers(p.names, p.nets, r) }

// covers reports whether one of the rules names and nets hold holds rule
// r (normalized): a name they match, a wildcard under one of their
// wildcards, a prefix inside one of their prefixes.
func covers(names nameSet, nets []netRule, r string) bool {
	if looksLikeAddress(r) {
		nr, err := parseNet(r)
		if err != nil {
			return false
		}
		for _, b := range nets {
			if b.prefix.Bits() <= nr.prefix.Bits() && b.prefix.Contains(nr.prefix.Addr()) && (b.port == 0 || b.port == nr.port) {
				return true
			}
		}
		return false
	}
	return names.covers(r)
}

// covers reports whether every name name rule r (a name or a wildcard)
// matches is matched by s.
func (s *nameSet) covers(r string) bool {
	if rest, ok := strings.CutPrefix(r, "*."); ok {
		for _, suf := range s.suffixes {
			if strings.HasSuffix("."+rest, suf) {
				return true
			}
		}
		return false
	}
	return s.match(r)
}

// Widening says what p lets a sandbox do that cur, its current policy,
// does not — "" when p is no wider. A sandbox's own key may only narrow
// (docs/network.md), so this is the one test of every policy such a key
// asks for: under a deny default, every allow rule must lie inside one of
// cur's; every deny rule of cur must stay (inside one of p's); the
// proxied ports must be the same (a port leaving the proxy is reached by
// address rules instead, and one joining it by name); and every inject
// rule must be one of cur's, headers and all (a new one sends a secret
// where cur does not).
func (p *Policy) Widening(cur *Policy) string {
	if cur.Default == Deny {
		if p.Default == Allow {
			return "default: allow where the policy's default is deny"
		}
		for i, r := range p.Allow {
			if !cur.covers(r) {
				return fmt.Sprintf("allow[%d]: %q is not within the policy's allow rules", i, r)
			}
		}
	}
	for _, d := range cur.Deny {
		if !covers(p.denied, p.blocked, d) {
			return fmt.Sprintf("deny: the policy's rule %q is not kept", d)
		}
	}
	if !slices.Equal(p.ProxyPorts(), cur.ProxyPorts()) {
		return fmt.Sprintf("ports: %v where the policy's are %v", p.ProxyPorts(), cur.ProxyPorts())
	}
	for i, r := range p.Inject {
		if !slices.ContainsFunc(cur.Inject, func(c HeaderRule) bool { return c.Domain == r.Domain && maps.Equal(c.Headers, r.Headers) }) {
			return fmt.Sprintf("inject[%d]: the rule for %s is not one of the policy's", i, r.Domain)
		}
	}
	return ""
}

// ParseHost returns host, a name or a wildcard ("*.example.com") where a
// secret may be sent (package secrets), in the form a policy's name
// rules have; an address is refused: inject rules are by name.
func ParseHost(host string) (string, error) {
	if looksLikeAddress(strings.TrimSpace(host)) {
		return "", fmt.Errorf("%q is an address; a secret's hosts are names or wildcards (*.example.com), as inject rules are", host)
	}
	return normalizeName(host, true)
}

// MatchHost reports whether name (in Name's form) is one of hosts (in
// ParseHost's form) or under one of their wildcards, as a policy's name
// rules match.
func MatchHost(hosts []string, name string) bool {
	var s nameSet
	for _, h := range hosts {
		s.add(h)
	}
	return s.match(name)
}

// CoversHost reports whether every name domain (an inject rule's: a name
// or a wildcard) matches is matched by one of hosts.
func CoversHost(hosts []string, domain string) bool {
	var s nameSet
	for _, h := range hosts {
		s.add(h)
	}
	return s.covers(domain)
}

// Tighten returns p with bound's deny rules added: what the operator
// denies, every sandbox is denied. It fails (naming field) only when the
// rules together pass MaxRules.
func (p *Policy) Tighten(bound *Policy, field string) (*Policy, error) {
	if bound == nil || len(bound.Deny) == 0 {
		return p, nil
	}
	w := p.Wire()
	w.Deny = slices.Clone(w.Deny)
	for _, d := range bound.Deny {
		if !slices.Contains(w.Deny, d) {
			w.Deny = append(w.Deny, d)
		}
	}
	out, err := Parse(w, field)
	if err != nil {
		return nil, errdefs.Invalidf("%s: with the server's %d deny rules (--network-bound) added: %s", field, len(bound.Deny), errdefs.Message(err))
	}
	return out, nil
}

// secretRef is one {{ secrets.NAME }} in a header template.
var secretRef = regexp.MustCompile(`\{\{\s*secrets\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// TemplateSecrets returns the secret names header template v refers to,
// or an error when v is not a template: a "{{" that is not a secret
// reference, or a character a header value cannot hold.
func TemplateSecrets(v string) ([]string, error) {
	var names []string
	for _, m := range secretRef.FindAllStringSubmatch(v, -1) {
		names = append(names, m[1])
	}
	rest := secretRef.ReplaceAllString(v, "")
	if strings.Contains(rest, "{{") || strings.Contains(rest, "}}") {
		return nil, fmt.Errorf("%q: want text with {{ secrets.NAME }} references", v)
	}
	if !httpguts.ValidHeaderFieldValue(rest) {
		return nil, fmt.Errorf("%q holds a character a header value cannot (a control character or newline)", v)
	}
	return names, nil
}

// ExpandTemplate returns template v with each secret reference replaced by
// lookup(NAME).
func ExpandTemplate(v string, lookup func(name string) (string, error)) (string, error) {
	var err error
	out := secretRef.ReplaceAllStringFunc(v, func(m string) string {
		name := secretRef.FindStringSubmatch(m)[1]
		s, lerr := lookup(name)
		if lerr != nil && err == nil {
			err = lerr
		}
		return s
	})
	return out, err
}

// UnmarshalJSON decodes and parses a policy, so that a stored or sent one
// is ready to match.
func (p *Policy) UnmarshalJSON(b []byte) error {
	type wire Policy // without this method
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	q, err := Parse(Policy(w), "network")
	if err != nil {
		return err
	}
	*p = *q
	return nil
}

// FromAPI parses a policy as the API gives it; errors name the field
// under field.
func FromAPI(a api.NetworkPolicy, field string) (*Policy, error) {
	p := Policy{Default: a.Default, Allow: a.Allow, Deny: a.Deny, Ports: a.Ports}
	for _, r := range a.Inject {
		p.Inject = append(p.Inject, HeaderRule{Domain: r.Domain, Headers: r.Headers})
	}
	return Parse(p, field)
}

// API is p as the API shows it.
func (p *Policy) API() *api.NetworkPolicy {
	if p == nil {
		return nil
	}
	a := &api.NetworkPolicy{Default: p.Default, Allow: p.Allow, Deny: p.Deny, Ports: p.Ports}
	for _, r := range p.Inject {
		a.Inject = append(a.Inject, api.HeaderRule{Domain: r.Domain, Headers: r.Headers})
	}
	return a
}

// Patch returns p with u's given fields in place of its own, parsed.
func (p *Policy) Patch(u api.UpdateNetworkRequest, field string) (*Policy, error) {
	a := *p.API()
	if u.Default != nil {
		a.Default = *u.Default
	}
	if u.Allow != nil {
		a.Allow = *u.Allow
	}
	if u.Deny != nil {
		a.Deny = *u.Deny
	}
	if u.Ports != nil {
		a.Ports = *u.Ports
	}
	if u.Inject != nil {
		a.Inject = *u.Inject
	}
	return FromAPI(a, field)
}
