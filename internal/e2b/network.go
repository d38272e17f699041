package e2b

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/netpolicy"
)

// allTraffic is E2B's ALL_TRAFFIC (e2b.sandbox.network): the denyOut
// entry that makes a sandbox's egress allow-listed.
const allTraffic = "0.0.0.0/0"

// egressRules are the fields E2B's create (network) and update (PUT
// /sandboxes/{id}/network) share.
type egressRules struct {
	AllowOut    []string        `json:"allowOut"`
	DenyOut     []string        `json:"denyOut"`
	DNSServers  []string        `json:"dnsServers"`
	EgressProxy json.RawMessage `json:"egressProxy"`
	// Rules are E2B's transform rules by domain: headers set on the
	// sandbox's requests to it, which Lizard's inject rules do.
	Rules map[string][]networkRule `json:"rules"`
}

// networkRule is E2B's SandboxNetworkRule.
type networkRule struct {
	Transform *transform `json:"transform,omitempty"`
}

// transform is E2B's SandboxNetworkTransform.
type transform struct {
	Headers map[string]string `json:"headers"`
}

// networkInfo is E2B's SandboxNetworkConfig as get_info reads it: the
// sandbox's policy in E2B's words.
type networkInfo struct {
	AllowOut           []string                 `json:"allowOut,omitempty"`
	DenyOut            []string                 `json:"denyOut,omitempty"`
	Rules              map[string][]networkRule `json:"rules,omitempty"`
	AllowPublicTraffic bool                     `json:"allowPublicTraffic"`
	MaskRequestHost    string                   `json:"maskRequestHost,omitempty"`
}

// networkOf says sb's network as E2B's get_info does: a deny default is
// ALL_TRAFFIC denied, the inject rules are transform rules with each
// {{ secrets.NAME }} as E2B's ${e2b.secrets.NAME} (templates only: no
// secret's value is in a policy).
func networkOf(sb api.Sandbox) *networkInfo {
	n := &networkInfo{AllowPublicTraffic: sb.PublicPorts, MaskRequestHost: sb.PortsHost}
	p := sb.Network
	if p == nil {
		return n
	}
	n.AllowOut = slices.Clone(p.Allow)
	if p.Default == netpolicy.Deny {
		n.DenyOut = append(n.DenyOut, allTraffic)
	}
	n.DenyOut = append(n.DenyOut, p.Deny...)
	for _, r := range p.Inject {
		h := make(map[string]string, len(r.Headers))
		for k, v := range r.Headers {
			h[k], _ = netpolicy.ExpandTemplate(v, func(name string) (string, error) { return secretPlaceholder + name + "}", nil })
		}
		if n.Rules == nil {
			n.Rules = map[string][]networkRule{}
		}
		n.Rules[r.Domain] = []networkRule{{Transform: &transform{Headers: h}}}
	}
	return n
}

// given reports whether e asks for egress rules at all.
func (e egressRules) given() bool { return len(e.AllowOut) > 0 || len(e.DenyOut) > 0 }

// unsupported refuses what Lizard's policy has no counterpart for.
func (e egressRules) unsupported() error {
	if present(e.EgressProxy) {
		return notImplemented("network.egressProxy (a SOCKS5 proxy for the sandbox's egress) is not supported by Lizard's E2B surface")
	}
	return nil
}

func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// policy maps E2B's egress rules onto Lizard's policy by name
// (docs/network.md). E2B lets through what allowOut names, then stops
// what denyOut names, and lets the rest through; denyAll is
// allow_internet_access=false, which E2B defines as denyOut 0.0.0.0/0.
// Lizard's deny wins over its allow, so all traffic denied becomes a deny
// default with allowOut as the allow list, and an allowOut address inside
// a narrower denyOut prefix — which E2B lets through and Lizard could not
// — is refused by name. Names in allowOut are matched by the node's proxy
// and resolver as Lizard's allow rules are.
func (e egressRules) policy(denyAll bool) (*api.NetworkPolicy, error) {
	var allow []string
	var allowNets []netip.Prefix
	var allowIdx []int
	hasName, allowAll := false, false
	for i, r := range e.AllowOut {
		n, pf, err := netpolicy.ParseRule(r)
		if err != nil {
			return nil, badRequest("network.allowOut[%d]: %v", i, err)
		}
		allow = append(allow, n)
		if !pf.IsValid() {
			hasName = true
			continue
		}
		allowAll = allowAll || n == allTraffic
		allowNets, allowIdx = append(allowNets, pf), append(allowIdx, i)
	}
	var deny []string
	var denyNets []netip.Prefix
	for i, r := range e.DenyOut {
		n, pf, err := netpolicy.ParseRule(r)
		if err != nil {
			return nil, badRequest("network.denyOut[%d]: %v", i, err)
		}
		if !pf.IsValid() {
			return nil, badRequest("network.denyOut[%d]: %q is a domain name; denyOut takes CIDR blocks and IP addresses (E2B's rule): "+
				"deny 0.0.0.0/0 and allow the names you want instead", i, r)
		}
		denyAll = denyAll || n == allTraffic
		deny, denyNets = append(deny, n), append(denyNets, pf)
	}
	if !denyAll && !allowAll {
		for i, d := range denyNets {
			for j, a := range allowNets {
				if a.Overlaps(d) {
					return nil, notImplemented("network.allowOut[%d] (%s) overlaps network.denyOut[%d] (%s): E2B lets the allow win, "+
						"Lizard's policy lets the deny win; deny 0.0.0.0/0 and allow what the sandbox may reach instead", allowIdx[j], a, i, d)
				}
			}
		}
	}
	var dns []string
	for i, s := range e.DNSServers {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			return nil, badRequest("network.dnsServers[%d]: %q is not an IPv4 address", i, s)
		}
		dns = append(dns, a.String())
	}
	switch {
	case allowAll:
		// An allow of everything wins over every deny.
		return &api.NetworkPolicy{Default: netpolicy.Allow}, nil
	case denyAll:
		// E2B opens the DNS servers named when a name is allowed; with
		// none named a sandbox's DNS, to any server, is answered by the
		// node's resolver under the policy, so nothing else needs opening.
		if hasName {
			allow = append(allow, dns...)
		}
		return &api.NetworkPolicy{Default: netpolicy.Deny, Allow: allow}, nil
	}
	return &api.NetworkPolicy{Default: netpolicy.Allow, Allow: allow, Deny: deny}, nil
}

// networkUpdate is E2B's SandboxNetworkUpdateConfig: it replaces the
// sandbox's egress rules, a field left out clearing them.
type networkUpdate struct {
	egressRules
	AllowInternetAccess *bool `json:"allow_internet_access"`
}

// updateNetwork is PUT /sandboxes/{id}/network, over Lizard's policy
// update: default, allow, deny and the header rules (E2B's transform
// rules) are replaced, a field left out clearing them, as on E2B; the
// policy's ports, which E2B has no word for, are kept.
func (h *Handler) updateNetwork(w http.ResponseWriter, r *http.Request) {
	var u networkUpdate
	if err := decode(r, &u); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := u.unsupported(); err != nil {
		h.fail(w, r, err)
		return
	}
	pol, err := u.policy(u.AllowInternetAccess != nil && !*u.AllowInternetAccess)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	inject, err := u.inject()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if inject == nil {
		inject = []api.HeaderRule{}
	}
	allow, deny := pol.Allow, pol.Deny
	if allow == nil {
		allow = []string{}
	}
	if deny == nil {
		deny = []string{}
	}
	caller, _ := auth.CallerOf(r.Context())
	id := r.PathValue("id")
	if _, err := h.cfg.Control.UpdateNetworkBy(r.Context(), caller.ProjectID, caller.SandboxID, id,
		api.UpdateNetworkRequest{Default: &pol.Default, Allow: &allow, Deny: &deny, Inject: &inject}); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Bounds of E2B's transform rules, E2B's own (e2b-dev/infra's
// validateNetworkRules): what one create or update may ask the node's
// injector to hold and to set on every request.
const (
	maxRuleDomains       = 10
	maxRulesPerDomain    = 1
	maxRuleDomainLen     = 128
	maxRuleHeaders       = 20
	maxRuleHeaderNameLen = 64
	maxRuleHeaderLen     = 2048
	maxRuleSecrets       = 32
)

// framingHeaders are the headers a transform may not set: they frame the
// request or the connection (Host, Content-Length, Transfer-Encoding...),
// which the injector writes from the request itself, so a value given
// would be dropped or would let the rule split one request into two.
var framingHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Trailer", "Te",
	"Connection", "Keep-Alive", "Upgrade", "Proxy-Connection"}

// secretName is a Lizard secret's name (internal/secrets).
var secretName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// E2B's placeholders in a transform's header value: a secret of the
// team's, and a workload identity token (iam).
const (
	secretPlaceholder   = "${e2b.secrets."
	identityPlaceholder = "${e2b.identity.tokens."
)

// inject maps E2B's transform rules onto Lizard's inject rules: each
// domain's headers are set on the sandbox's requests to it, with E2B's
// ${e2b.secrets.NAME} as Lizard's {{ secrets.NAME }} — the project's
// secret, which the node puts in at the egress, under every check
// Lizard's own inject rules have (the secret's hosts, a sandbox key's
// narrowing). As on E2B a rule allows nothing: traffic the policy denies
// never reaches the injector. Rules are sorted by domain; a domain whose
// rule sets no header has none.
func (e egressRules) inject() ([]api.HeaderRule, error) {
	if len(e.Rules) > maxRuleDomains {
		return nil, badRequest("network.rules: %d domains, at most %d", len(e.Rules), maxRuleDomains)
	}
	var out []api.HeaderRule
	for _, domain := range slices.Sorted(maps.Keys(e.Rules)) {
		field := fmt.Sprintf("network.rules[%q]", domain)
		rules := e.Rules[domain]
		if domain == "" || len(domain) > maxRuleDomainLen {
			return nil, badRequest("%s: a domain of 1 to %d characters, please", field, maxRuleDomainLen)
		}
		name, pf, err := netpolicy.ParseRule(domain)
		switch {
		case err != nil:
			return nil, badRequest("%s: %v", field, err)
		case pf.IsValid() || strings.Contains(name, ":"):
			return nil, badRequest("%s: rules are by domain name (api.example.com, *.example.com), not by address or port", field)
		}
		if len(rules) > maxRulesPerDomain {
			return nil, badRequest("%s: %d rules, at most %d a domain (E2B's bound)", field, len(rules), maxRulesPerDomain)
		}
		headers := map[string]string{}
		secrets := map[string]bool{}
		for i, r := range rules {
			if r.Transform == nil {
				continue
			}
			if len(r.Transform.Headers) > maxRuleHeaders {
				return nil, badRequest("%s[%d].transform.headers: %d headers, at most %d", field, i, len(r.Transform.Headers), maxRuleHeaders)
			}
			for k, v := range r.Transform.Headers {
				hf := fmt.Sprintf("%s[%d].transform.headers[%q]", field, i, k)
				if !httpguts.ValidHeaderFieldName(k) || len(k) > maxRuleHeaderNameLen {
					return nil, badRequest("%s: a header name is an HTTP token of 1 to %d characters", hf, maxRuleHeaderNameLen)
				}
				if slices.ContainsFunc(framingHeaders, func(f string) bool { return strings.EqualFold(f, k) }) {
					return nil, badRequest("%s: %s frames the request, which a transform may not set (%s)", hf, k, strings.Join(framingHeaders, ", "))
				}
				if len(v) > maxRuleHeaderLen {
					return nil, badRequest("%s: the value is %d bytes, at most %d", hf, len(v), maxRuleHeaderLen)
				}
				tmpl, names, err := headerTemplate(v)
				if err != nil {
					if he, ok := err.(*httpError); ok {
						he.msg = hf + ": " + he.msg
						return nil, he
					}
					return nil, err
				}
				for _, n := range names {
					secrets[n] = true
				}
				headers[http.CanonicalHeaderKey(k)] = tmpl
			}
		}
		if len(secrets) > maxRuleSecrets {
			return nil, badRequest("%s: %d secrets, at most %d a domain", field, len(secrets), maxRuleSecrets)
		}
		if len(headers) > 0 {
			out = append(out, api.HeaderRule{Domain: name, Headers: headers})
		}
	}
	return out, nil
}

// headerTemplate turns an E2B header value into a Lizard header template
// and the secrets it names. The value is sent as it is but for E2B's
// secret placeholders; Lizard's own template marks ({{, }}) cannot be
// sent as they are, nor can a character no header value holds (CR, LF,
// NUL: a second header or request smuggled in).
func headerTemplate(v string) (string, []string, error) {
	if !httpguts.ValidHeaderFieldValue(v) {
		return "", nil, badRequest("the value holds a character a header value cannot (a control character such as CR or LF)")
	}
	if strings.Contains(v, "{{") || strings.Contains(v, "}}") {
		return "", nil, badRequest("the value holds {{ or }}, which Lizard's header templates reserve; " +
			"name a secret as ${e2b.secrets.NAME}")
	}
	var b strings.Builder
	var names []string
	for {
		i := strings.Index(v, "${e2b.")
		if i < 0 {
			b.WriteString(v)
			return b.String(), names, nil
		}
		b.WriteString(v[:i])
		rest := v[i:]
		switch {
		case strings.HasPrefix(rest, identityPlaceholder):
			return "", nil, notImplemented("workload identity tokens (${e2b.identity.tokens...}, iam) are not supported by Lizard's E2B surface")
		case strings.HasPrefix(rest, secretPlaceholder):
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				return "", nil, badRequest("a ${e2b.secrets. placeholder without its closing }")
			}
			name := rest[len(secretPlaceholder):end]
			if !secretName.MatchString(name) {
				return "", nil, badRequest("secret %q: Lizard's secret names are letters, digits and _, not starting with a digit, up to 128 (lizard secret set)", name)
			}
			names = append(names, name)
			b.WriteString("{{ secrets." + name + " }}")
			v = rest[end+1:]
		default:
			// Text that is no placeholder E2B knows is sent as it is.
			b.WriteString("${e2b.")
			v = rest[len("${e2b."):]
		}
	}
}
