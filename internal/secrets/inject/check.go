package inject

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/lizard-build/lizard/internal/netpolicy"
	"github.com/lizard-build/lizard/internal/secrets"
)

// Check refuses policy p (its field in the request: "network") if an
// inject rule names a secret projectID does not have — another project's
// included — or one that may not be sent to the rule's domain, with
// ErrInvalid naming the header that names it. The
// policy's syntax is netpolicy.Parse's to check, first.
func Check(ctx context.Context, s *secrets.Store, projectID, field string, p *netpolicy.Policy) error {
	if p == nil || len(p.Inject) == 0 {
		return nil
	}
	var refs []secrets.Ref
	for i, r := range p.Inject {
		for _, h := range slices.Sorted(maps.Keys(r.Headers)) {
			names, err := netpolicy.TemplateSecrets(r.Headers[h])
			if err != nil {
				return err // Parse refused it already
			}
			for _, n := range names {
				refs = append(refs, secrets.Ref{Field: fmt.Sprintf("%s.inject[%d].headers[%s]", field, i, h), Name: n, Domain: r.Domain})
			}
		}
	}
	return s.Check(ctx, projectID, refs)
}
