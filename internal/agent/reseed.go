package agent

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/pykernel"
)

// renewer is a kernel whose environment and random generators can be
// renewed while it runs; *pykernel.Kernel is one.
type renewer interface {
	Renew(ctx context.Context, r pykernel.Renewal) error
}

// importer is a kernel that can import modules silently; *pykernel.Kernel
// is one.
type importer interface {
	Import(ctx context.Context, modules []string) error
}

// getEnv answers GET /env: the environment every kernel and process
// starts with, which code can read already (a pause keeping the disk alone
// saves it).
func (a *Agent) getEnv(w http.ResponseWriter, _ *http.Request) {
	api.WriteJSON(w, http.StatusOK, api.AgentEnv{Env: a.launch.baseEnv()})
}

// reseed answers POST /reseed, which the server calls in every sandbox
// restored from another's checkpoint (fork, create from a snapshot or a
// template snapshot, a warm-pool claim) and in resumed sandboxes whose
// environment changed. The copies share the generators' state, so each
// gives every running Python kernel fresh seeds from the OS (kernels not
// started yet seed themselves). The sandbox also takes its own identity:
// envs (and LIZARD_SANDBOX_ID) are set, and unset removed, for every
// kernel and process started from now on and in running kernels'
// os.environ.
func (a *Agent) reseed(w http.ResponseWriter, r *http.Request) {
	var req api.ReseedRequest
	if !a.decode(w, r, &req, true) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	set := map[string]string{}
	for k, v := range req.Envs {
		// As at boot (buildEnv): the agent's own settings are not code's.
		if !strings.HasPrefix(k, "LIZARD_AGENT_") {
			set[k] = v
		}
	}
	if req.SandboxID != "" {
		set["LIZARD_SANDBOX_ID"] = req.SandboxID
	}
	n, err := a.renewEnv(ctx, set, req.Unset, !req.KeepSeeds)
	if err != nil {
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "%v", err)
		return
	}
	if req.Secret != "" {
		// The copy's own secret; its source's no longer opens it.
		a.guard.set(req.Secret)
	}
	a.log.Info("reseeded", "kernels", n, "envs", len(set), "unset", len(req.Unset), "keep_seeds", req.KeepSeeds)
	w.WriteHeader(http.StatusNoContent)
}

// readyz answers GET /ready (internal, for the server's template
// snapshots): 204 once the default Python kernel runs with its preloaded
// modules and the template's ready check passed, 500 if either failed,
// waiting up to 2 minutes for each.
func (a *Agent) readyz(w http.ResponseWriter, r *http.Request) {
	select {
	case <-a.ready:
	case <-r.Context().Done():
		return
	case <-time.After(kernelStartTimeout):
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "the default kernel is still starting")
		return
	}
	if a.readyErr != nil {
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "starting the default kernel: %v", a.readyErr)
		return
	}
	// The template snapshot holds the start command ready, or is not
	// taken.
	if err := a.start.wait(r.Context()); err != nil {
		if r.Context().Err() == nil {
			writeError(w, http.StatusInternalServerError, api.CodeInternal, "%v", err)
		}
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// renewEnv sets set and removes unset in the environment of every kernel
// and process started from now on and in running Python kernels'
// os.environ, reseeding those kernels' generators too with reseed. It
// returns how many kernels it renewed.
func (a *Agent) renewEnv(ctx context.Context, set map[string]string, unset []string, reseed bool) (int, error) {
	changed := len(set) > 0 || len(unset) > 0
	if changed {
		a.launch.renewEnv(set, unset)
	}
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
		if err != nil {
			continue // deleted
		}
		if k == nil && changed {
			// A kernel starting now may have read the old environment:
			// wait for it (or start it) and update it below.
			if k, err = a.kernel(ctx, c); err != nil {
				continue
			}
		}
		if k == nil {
			continue
		}
		if rk, ok := k.(renewer); ok {
			r := pykernel.Renewal{Reseed: reseed}
			if changed {
				r.Set, r.Unset = set, unset
			}
			if err := rk.Renew(ctx, r); err != nil {
				return n, fmt.Errorf("renewing context %s: %w", c.info.ID, err)
			}
		}
		n++
	}
	return n, nil
}
