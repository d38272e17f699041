package manager

// A sandbox's shape — limits, egress, lizardToken — is recorded at create
// and copied to its snapshots, so that every restore (resume, fork, create
// from a snapshot or from a template snapshot) runs it exactly as a boot
// would. Every runtime.Spec is made by spec below, and nowhere else.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

// shape is the record of a plan's limits, egress and token.
func (p createPlan) shape() store.Shape {
	l := p.limits
	return store.Shape{MemoryBytes: l.MemoryBytes, CPUs: l.CPUs, DiskBytes: l.DiskBytes, Pids: l.Pids,
		OpenFiles: l.OpenFiles, Processes: l.Processes, Internet: p.internet, Token: p.token, Recorded: true}
}

// shaped sets p's limits and egress to sh's; rows from before shapes were
// recorded get the server's current defaults, as they did then.
func (m *Manager) shaped(p createPlan, sh store.Shape) createPlan {
	if !sh.Recorded {
		p.limits, p.internet = m.cfg.Limits, m.cfg.Policy.Internet
		return p
	}
	p.limits = sandbox.Limits{MemoryBytes: sh.MemoryBytes, CPUs: sh.CPUs, DiskBytes: sh.DiskBytes, Pids: sh.Pids,
		OpenFiles: sh.OpenFiles, Processes: sh.Processes}
	p.internet = sh.Internet
	return p
}

// recorded returns sh, or for a row from before shapes were stored, the
// shape it runs with (the server's defaults).
func (m *Manager) recorded(sh store.Shape) store.Shape {
	if sh.Recorded {
		return sh
	}
	return m.shaped(createPlan{}, sh).shape()
}

// spec is the runtime spec of sandbox sb (its ID, addresses and recorded
// shape) on rootfs, with env as its first process's environment (a
// restore takes the environment from the image instead) and apiPort the
// port of its sandbox API listener (0: none).
func (m *Manager) spec(sb store.Sandbox, rootfs string, env []string, apiPort int) (sandbox.Spec, error) {
	host, err1 := netip.ParseAddr(sb.HostAddr)
	guest, err2 := netip.ParseAddr(sb.GuestAddr)
	if err := errors.Join(err1, err2); err != nil {
		return sandbox.Spec{}, fmt.Errorf("parsing sandbox addresses: %w", err)
	}
	p := m.shaped(createPlan{}, sb.Shape)
	return sandbox.Spec{
		ID:     sb.ID,
		RootFS: rootfs,
		Args:   []string{AgentPath},
		Env:    env,
		Mounts: []sandbox.Mount{
			{Source: m.cfg.AgentBinary, Target: AgentPath, ReadOnly: true},
			{Source: m.cfg.LizardBinary, Target: LizardPath, ReadOnly: true},
		},
		Network: sandbox.Network{HostAddr: host, GuestAddr: guest, PrefixLen: SlotPrefixLen,
			Internet: p.internet, APIPort: apiPort},
		Limits: p.limits,
	}, nil
}

// identityEnv is the environment Lizard itself gives sandbox sb.
func identityEnv(sb store.Sandbox) []string {
	return []string{"LIZARD_SANDBOX_ID=" + sb.ID, "LIZARD_PROJECT_ID=" + sb.ProjectID}
}

// reseedRequest is the body of the agent's internal POST /reseed.
type reseedRequest struct {
	SandboxID string            `json:"sandboxId"`
	Envs      map[string]string `json:"envs,omitempty"`
	// Unset names variables to remove (a fork's parent's lizardToken).
	Unset []string `json:"unset,omitempty"`
	// KeepSeeds leaves the random generators alone: a resumed sandbox is
	// the same sandbox, not a copy.
	KeepSeeds bool `json:"keepSeeds,omitempty"`
}

// envMap turns KEY=VALUE pairs into a map (later pairs win).
func envMap(env []string) map[string]string {
	out := make(map[string]string, len(env))
	for _, kv := range env {
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				out[kv[:i]] = kv[i+1:]
				break
			}
		}
	}
	return out
}

// reseed tells a restored sandbox's agent its identity: its ID, the
// environment to apply to every kernel and process from now on, and
// (unless r.KeepSeeds) to reseed every kernel's random generators.
func (m *Manager) reseed(ctx context.Context, r reseedRequest) error {
	body, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding reseed request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+agentHost(r.SandboxID)+"/reseed", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: m.transport, Timeout: time.Minute}).Do(req)
	if err != nil {
		return fmt.Errorf("reseeding sandbox %s: %w", r.SandboxID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("reseeding sandbox %s: agent answered %s", r.SandboxID, resp.Status)
	}
	return nil
}
