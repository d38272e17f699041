package recipe

import (
	"context"

	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
)

// Uses maps each custom template build key that something in st refers
// to onto one such thing ("template P/NAME", "sandbox ID", "snapshot
// ID"): a template record, a live user sandbox or a snapshot keeps a
// build. A server's own sandboxes (template snapshot, warm pool) keep
// none: they are ended before a build is removed (warm.Pool.Forget), and
// none outlives its server's restart.
func Uses(ctx context.Context, st *store.Store) (map[string]string, error) {
	used := map[string]string{}
	use := func(key, what string) {
		if _, ok := used[key]; !ok {
			used[key] = what
		}
	}
	tmpls, err := st.Templates().List(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, t := range tmpls {
		use(t.Key, "template "+t.ProjectID+"/"+t.Name)
	}
	live, err := st.ListSandboxes(ctx, store.Filter{LiveOnly: true})
	if err != nil {
		return nil, err
	}
	for _, sb := range live {
		if _, k, ok := template.SplitRef(sb.Template); ok && sb.Role == "" {
			use(k, "sandbox "+sb.ID)
		}
	}
	sns, err := st.ListSnapshots(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, sn := range sns {
		if _, k, ok := template.SplitRef(sn.Template); ok {
			use(k, "snapshot "+sn.ID)
		}
	}
	return used, nil
}
