package e2b

import (
	"encoding/json"
	"net/http"
	"net/netip"

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
	Rules       json.RawMessage `json:"rules"`
}

// given reports whether e asks for egress rules at all.
func (e egressRules) given() bool { return len(e.AllowOut) > 0 || len(e.DenyOut) > 0 }

// unsupported refuses what Lizard's policy has no counterpart for.
func (e egressRules) unsupported() error {
	if present(e.EgressProxy) {
		return notImplemented("network.egressProxy (a SOCKS5 proxy for the sandbox's egress) is not supported by Lizard's E2B surface")
	}
	if present(e.Rules) && string(e.Rules) != "{}" {
		return notImplemented("network.rules (per-domain request transforms) are not supported by Lizard's E2B surface; " +
			"Lizard's own API sets headers on a domain's requests with network.inject (docs/network.md)")
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
// update: default, allow and deny are replaced; the policy's ports and
// header rules, which E2B has no word for, are kept.
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
		api.UpdateNetworkRequest{Default: &pol.Default, Allow: &allow, Deny: &deny}); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
