package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

// ErrRateLimited means the project is over one of its limits (running
// sandboxes, creates per second); retrying later may work.
var ErrRateLimited = errors.New("rate limited")

// Policy is what untrusted code and clients are allowed: sandbox resource
// limits, per-project quotas, network egress and the sandbox API.
type Policy struct {
	// MaxLimits bounds what a create may ask for (memoryMb, cpus, diskMb);
	// zero fields mean the asked value is only bounded by Config.Limits
	// being the default, i.e. no override allowed beyond it.
	MaxLimits sandbox.Limits
	// MaxRunning is how many live sandboxes a project may have (0: no
	// bound). CreateRate is creates per second per project, with bursts of
	// CreateBurst (0: no bound).
	MaxRunning  int
	CreateRate  float64
	CreateBurst int
	// Internet lets sandboxes reach public addresses unless their create
	// says allowInternet: false. Without it no sandbox has any egress.
	Internet bool
	// SandboxAPI serves the API to sandboxes created with lizardToken on
	// their own host address; nil means they get LIZARD_API_KEY and, if
	// set, Config.APIURL, but no way in through the sandbox's link.
	SandboxAPI SandboxAPI
	// Audit receives create, end and key events (key IDs, never keys);
	// nil discards them.
	Audit *slog.Logger
	// LivenessInterval is how often running sandboxes are checked for a
	// dead runtime (default 5 s).
	LivenessInterval time.Duration
}

// SandboxAPI opens the Lizard API to one sandbox on its host address, so
// that the `lizard` CLI inside, holding the sandbox's lizardToken, can use
// it. The network policy lets the sandbox reach Port on its host address
// and nothing else on the host.
type SandboxAPI interface {
	// Open starts serving on hostAddr and returns the URL the sandbox
	// should use and the port to let through.
	Open(id string, hostAddr netip.Addr) (url string, port int, err error)
	// Close stops serving sandbox id; closing what is not open is a no-op.
	Close(id string)
}

// policyState holds the per-project limiters.
type policyState struct {
	mu       sync.Mutex // serializes admission: count of live rows, then insert
	limiters map[string]*rate.Limiter
}

func (m *Manager) policy() Policy { return m.cfg.Policy }

func (m *Manager) audit(msg string, attrs ...any) {
	if a := m.cfg.Policy.Audit; a != nil {
		a.Info(msg, attrs...)
	}
}

// AuditDiscard is a logger that drops everything.
var AuditDiscard = slog.New(slog.NewTextHandler(io.Discard, nil))

// checkPolicy checks the policy itself, for New.
func checkPolicy(cfg Config) error {
	p, d := cfg.Policy.MaxLimits, cfg.Limits
	switch {
	case p.MemoryBytes > 0 && d.MemoryBytes > p.MemoryBytes:
		return fmt.Errorf("manager: default memory %d is over the maximum %d", d.MemoryBytes, p.MemoryBytes)
	case p.CPUs > 0 && d.CPUs > p.CPUs:
		return fmt.Errorf("manager: default CPUs %g is over the maximum %g", d.CPUs, p.CPUs)
	case p.DiskBytes > 0 && d.DiskBytes > p.DiskBytes:
		return fmt.Errorf("manager: default disk %d is over the maximum %d", d.DiskBytes, p.DiskBytes)
	}
	return nil
}

// planPolicy fills p's limits and egress from req within the maxima.
func (m *Manager) planPolicy(p *createPlan, req api.CreateSandboxRequest) error {
	p.limits = m.cfg.Limits
	max := m.cfg.Policy.MaxLimits
	if req.MemoryMb != nil {
		mb := *req.MemoryMb
		top := max.MemoryBytes >> 20
		if top == 0 {
			top = m.cfg.Limits.MemoryBytes >> 20
		}
		if mb < 64 || top > 0 && mb > top {
			return invalidf(fmt.Sprintf("memoryMb %d is out of range: want 64 to %d (the server's --max-memory)", mb, top))
		}
		p.limits.MemoryBytes = mb << 20
	}
	if req.Cpus != nil {
		c := *req.Cpus
		top := max.CPUs
		if top == 0 {
			top = m.cfg.Limits.CPUs
		}
		if math.IsNaN(c) || c < 0.1 || top > 0 && c > top {
			return invalidf(fmt.Sprintf("cpus %g is out of range: want 0.1 to %s (the server's --max-cpus)", c, strconv.FormatFloat(top, 'g', -1, 64)))
		}
		p.limits.CPUs = c
	}
	if req.DiskMb != nil {
		mb := *req.DiskMb
		top := max.DiskBytes >> 20
		if top == 0 {
			top = m.cfg.Limits.DiskBytes >> 20
		}
		if mb < 16 || top > 0 && mb > top {
			return invalidf(fmt.Sprintf("diskMb %d is out of range: want 16 to %d (the server's --max-disk)", mb, top))
		}
		p.limits.DiskBytes = mb << 20
	}
	p.internet = m.cfg.Policy.Internet
	if req.AllowInternet != nil && !*req.AllowInternet {
		p.internet = false
	}
	return nil
}

// admit checks projectID's quotas before a sandbox is recorded. The caller
// records it and then calls release, so that concurrent creates are
// counted one after the other.
func (m *Manager) admit(ctx context.Context, projectID string) (release func(), err error) {
	pol := m.cfg.Policy
	st := m.pol
	st.mu.Lock()
	if pol.CreateRate > 0 {
		l := st.limiters[projectID]
		if l == nil {
			burst := max(pol.CreateBurst, 1)
			l = rate.NewLimiter(rate.Limit(pol.CreateRate), burst)
			st.limiters[projectID] = l
		}
		r := l.Reserve()
		if d := r.Delay(); d > 0 {
			r.Cancel()
			st.mu.Unlock()
			return nil, &Error{Kind: ErrRateLimited, RetryAfter: d,
				Msg: fmt.Sprintf("project %s creates sandboxes too fast: at most %g per second (bursts of %d); retry in %s",
					projectID, pol.CreateRate, max(pol.CreateBurst, 1), d.Round(time.Millisecond))}
		}
	}
	if pol.MaxRunning > 0 {
		live, err := m.cfg.Store.ListSandboxes(ctx, store.Filter{ProjectID: projectID, LiveOnly: true})
		if err != nil {
			st.mu.Unlock()
			return nil, fmt.Errorf("counting live sandboxes: %w", err)
		}
		if len(live) >= pol.MaxRunning {
			st.mu.Unlock()
			return nil, &Error{Kind: ErrRateLimited, RetryAfter: time.Second,
				Msg: fmt.Sprintf("project %s already has %d live sandboxes, its maximum; kill some first", projectID, len(live))}
		}
	}
	return st.mu.Unlock, nil
}

// tokenAPI opens the sandbox API for a sandbox with a lizardToken and
// returns the environment to add and the port its policy must let
// through.
func (m *Manager) tokenAPI(sb store.Sandbox, host netip.Addr) (env []string, port int, err error) {
	if m.cfg.APIURL != "" {
		return []string{"LIZARD_API_URL=" + m.cfg.APIURL}, 0, nil
	}
	if m.cfg.Policy.SandboxAPI == nil {
		return nil, 0, nil
	}
	url, port, err := m.cfg.Policy.SandboxAPI.Open(sb.ID, host)
	if err != nil {
		return nil, 0, fmt.Errorf("opening the API to sandbox %s: %w", sb.ID, err)
	}
	return []string{"LIZARD_API_URL=" + url}, port, nil
}

// released is called once a sandbox has ended, whatever ended it.
func (m *Manager) released(sb store.Sandbox, state, reason string) {
	if a := m.cfg.Policy.SandboxAPI; a != nil {
		a.Close(sb.ID)
	}
	m.audit("sandbox.end", "sandbox_id", sb.ID, "project_id", sb.ProjectID, "state", state, "reason", reason)
}

// reopenSandboxAPI serves the API again to a sandbox kept over a restart
// if it holds a live lizardToken.
func (m *Manager) reopenSandboxAPI(ctx context.Context, sb store.Sandbox) {
	a := m.cfg.Policy.SandboxAPI
	if a == nil || m.cfg.APIURL != "" {
		return
	}
	has, err := m.cfg.Store.SandboxHasLiveKey(ctx, sb.ID)
	if err != nil || !has {
		return
	}
	host, err := netip.ParseAddr(sb.HostAddr)
	if err == nil {
		_, _, err = a.Open(sb.ID, host)
	}
	if err != nil {
		m.log.Error("reopening the API to a sandbox after restart", "sandbox_id", sb.ID, "err", err)
	}
}

// checkLiveness ends, as failed, every running sandbox whose runtime has
// stopped: its agent, kernel or runsc processes were killed, so nothing
// will ever answer in it again.
func (m *Manager) checkLiveness(ctx context.Context) {
	rows, err := m.cfg.Store.ListSandboxes(ctx, store.Filter{States: []string{api.StateRunning}, LiveOnly: true})
	if err != nil {
		if ctx.Err() == nil {
			m.log.Error("listing running sandboxes", "err", err)
		}
		return
	}
	for _, sb := range rows {
		if !m.dead(ctx, sb.ID) {
			continue
		}
		unlock := m.locks.lock(sb.ID)
		// Re-read under the lock: a pause or kill may have moved it on.
		cur, err := m.cfg.Store.GetSandbox(ctx, sb.ID)
		if err == nil && cur.State == api.StateRunning && cur.Live() && m.dead(ctx, sb.ID) {
			err = m.end(ctx, cur, api.StateFailed, "its runtime stopped: the sandbox's processes died or were killed")
		}
		unlock()
		if err != nil {
			m.log.Error("ending a dead sandbox", "sandbox_id", sb.ID, "err", err)
		}
	}
}

func (m *Manager) dead(ctx context.Context, id string) bool {
	st, err := m.cfg.Runtime.State(ctx, id)
	return errors.Is(err, sandbox.ErrNotFound) || err == nil && st != sandbox.Running
}

func (m *Manager) livenessEvery() int {
	iv := m.cfg.Policy.LivenessInterval
	if iv <= 0 {
		iv = 5 * time.Second
	}
	return max(1, int(iv/m.cfg.ReapInterval))
}
