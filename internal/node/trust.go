package node

// A sandbox whose network policy injects secrets (docs/secrets.md) has
// its HTTPS to the names of those rules terminated by the node's
// injector with a certificate authority of its own, which it must trust:
// the node makes the CA when the sandbox first has such rules and has
// its agent install the certificate (never the key). A fork takes a copy
// of its parent's CA, which its processes' memory trusts already; a
// sandbox restored from a snapshot gets a CA of its own, which replaces
// the one its image trusted (or removes it, when its policy injects
// nothing); a paused sandbox keeps its CA, and is given it again at
// resume when its policy injects (rules added while it was paused). One
// whose rules were removed while paused still trusts its own CA, whose
// key only this node's injector holds and which now signs nothing it is
// shown.

import (
	"context"
	"fmt"

	"github.com/lizard-build/lizard/internal/netpolicy"
)

// injects reports whether policy p sets headers on any request.
func injects(p *netpolicy.Policy) bool { return p != nil && len(p.Inject) > 0 }

// trustEgress has sandbox id trust its egress CA if policy p injects
// secrets: its parent's, for a fork. Otherwise, when restored (its image
// may come from a sandbox that did), it has it trust none.
func (nw *network) trustEgress(ctx context.Context, id string, p *netpolicy.Policy, restored bool, parent string) error {
	if nw.cas == nil {
		return nil
	}
	if !injects(p) {
		if !restored || p == nil {
			// Without a policy no connection is intercepted: a CA left
			// in its image signs nothing it will be shown.
			return nil
		}
		return nw.agents.Trust(ctx, id, "")
	}
	if parent != "" {
		if err := nw.cas.Inherit(id, parent); err != nil {
			return err
		}
	}
	ca, err := nw.cas.Get(id)
	if err != nil {
		return fmt.Errorf("making sandbox %s's egress CA: %w", id, err)
	}
	return nw.agents.Trust(ctx, id, string(ca.CertPEM()))
}

// forgetEgressCA deletes ended sandbox id's CA key.
func (nw *network) forgetEgressCA(id string) {
	if nw.cas == nil {
		return
	}
	if err := nw.cas.Remove(id); err != nil {
		nw.log.Warn("removing the egress CA of an ended sandbox", "sandbox_id", id, "err", err)
	}
}
