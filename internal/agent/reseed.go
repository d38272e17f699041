package agent

import (
	"context"
	"net/http"
	"time"

	"github.com/lizard-build/lizard/api"
)

// reseeder is a kernel whose random generators can be reseeded;
// *jupyter.Kernel is one.
type reseeder interface {
	Reseed(ctx context.Context) error
}

// reseed answers POST /reseed, which the server calls in every sandbox
// restored from another's checkpoint (fork, create from snapshot): the
// copies share the generators' state, so each gives every running Python
// kernel fresh seeds from the OS. Kernels not started yet seed themselves
// when they start.
func (a *Agent) reseed(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	a.mu.Lock()
	var cs []*execContext
	for _, id := range a.order {
		if c := a.contexts[id]; c.info.Language == langPython {
			cs = append(cs, c)
		}
	}
	a.mu.Unlock()
	n := 0
	for _, c := range cs {
		k, err := c.current()
		if err != nil || k == nil {
			continue // deleted, or not started
		}
		rs, ok := k.(reseeder)
		if !ok {
			continue
		}
		if err := rs.Reseed(ctx); err != nil {
			writeError(w, http.StatusInternalServerError, api.CodeInternal, "reseeding context %s: %v", c.info.ID, err)
			return
		}
		n++
	}
	a.log.Info("reseeded kernels", "kernels", n)
	w.WriteHeader(http.StatusNoContent)
}
