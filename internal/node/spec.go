package node

// A sandbox's shape — limits, egress, lizardToken — is recorded at create
// and copied to its snapshots, so that every restore (resume, fork, create
// from a snapshot or from a template snapshot) runs it exactly as a boot
// would. Every runtime.Spec is made by spec below, and nowhere else.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/lizard-build/lizard/internal/egress"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

// Paths inside every sandbox.
const (
	AgentPath  = "/opt/lizard/bin/lizard-agent"
	LizardPath = "/usr/local/bin/lizard"
	// SudoPath is the sandbox's sudo, a link the agent makes to itself.
	SudoPath = "/usr/bin/sudo"
)

// Shape is the record of a plan's limits, egress and token.
func (p Plan) Shape() store.Shape {
	l := p.Limits
	return store.Shape{MemoryBytes: l.MemoryBytes, CPUs: l.CPUs, DiskBytes: l.DiskBytes, Pids: l.Pids,
		OpenFiles: l.OpenFiles, Processes: l.Processes, Internet: p.Internet, Token: p.Token, Recorded: true,
		Volumes: p.Volumes, PublicPorts: p.PublicPorts, PortsHost: p.PortsHost, Network: p.Network}
}

// Shaped returns p with sh's limits and egress; rows from before shapes
// were recorded get the node's current defaults, as they did then.
func (n *Local) Shaped(p Plan, sh store.Shape) Plan {
	if !sh.Recorded {
		p.Limits, p.Internet = n.cfg.Limits, n.cfg.Internet
		return p
	}
	p.Limits = Limits{MemoryBytes: sh.MemoryBytes, CPUs: sh.CPUs, DiskBytes: sh.DiskBytes, Pids: sh.Pids,
		OpenFiles: sh.OpenFiles, Processes: sh.Processes}
	p.Internet = sh.Internet
	p.Volumes, p.PublicPorts, p.PortsHost = sh.Volumes, sh.PublicPorts, sh.PortsHost
	p.Network = sh.Network
	return p
}

// artifact waits for template's artifact.
func (n *Local) artifact(ctx context.Context, template string) (sandbox.Artifact, error) {
	a, err := n.cfg.Artifact(ctx, template)
	if err != nil {
		if ctx.Err() != nil {
			return a, fmt.Errorf("waiting for template %s: %w", template, ctx.Err())
		}
		var e *errdefs.Error
		if errors.As(err, &e) && e.Kind != nil {
			return a, err // says itself why (a custom template lost from the image store)
		}
		return a, &errdefs.Error{Kind: errdefs.ErrUnavailable, Cause: err,
			Msg: fmt.Sprintf("template %q is not available: building it failed (the server log says why); try again later", template)}
	}
	return a, nil
}

// spec is the runtime spec of l's sandbox (its ID, addresses and recorded
// shape) from its template artifact, with env as its first process's
// environment (a restore takes the environment from the image instead)
// and the port of its sandbox API listener, if it has a lizardToken.
func (l *launch) spec(env []string) (sandbox.Spec, error) {
	n, sb := l.n, l.sb
	host, err1 := netip.ParseAddr(sb.HostAddr)
	guest, err2 := netip.ParseAddr(sb.GuestAddr)
	if err := errors.Join(err1, err2); err != nil {
		return sandbox.Spec{}, fmt.Errorf("parsing sandbox addresses: %w", err)
	}
	p := n.Shaped(Plan{}, sb.Shape)
	// Every sandbox has sudo, whichever API made it (docs/security.md
	// says why that opens nothing).
	env = append(slices.Clone(env), "LIZARD_AGENT_SUDO="+SudoPath)
	if secret := n.agents.secret(sb.ID); secret != "" {
		env = append(env, "LIZARD_AGENT_SECRET="+secret)
	}
	var vols []sandbox.Volume
	for _, v := range p.Volumes {
		if n.cfg.Volumes == nil {
			return sandbox.Spec{}, errors.New("sandbox mounts volumes but the node keeps none")
		}
		vols = append(vols, sandbox.Volume{Source: n.cfg.Volumes.Path(v.ID), Target: v.Path})
	}
	var names *netns.Names
	if p.Network != nil && p.Internet && n.cfg.Egress != nil {
		// The runtime installs the rules; the table must know the
		// sandbox before its first packet (a restored one sends at once).
		n.cfg.Egress.Table.Set(guest, egress.Sandbox{ID: sb.ID, Project: sb.ProjectID, Policy: p.Network})
		names = n.cfg.Egress.Names(p.Network)
	}
	return sandbox.Spec{
		ID:           sb.ID,
		Template:     l.art,
		WritableRoot: l.p.Build != nil,
		Args:         []string{AgentPath},
		Env:          env,
		Files:        n.cfg.Files,
		Volumes:      vols,
		Network: sandbox.Network{HostAddr: host, GuestAddr: guest, PrefixLen: netns.SlotPrefixLen,
			Internet: p.Internet, APIPort: l.apiPort, Allow: n.cfg.Allow, Names: names},
		Limits: sandbox.Limits(p.Limits),
		// A warm-pool sandbox is restored ahead of need: it yields the CPU
		// to sandboxes in use until claimed (provision).
		Background: sb.Role == store.RoleWarm,
		HeapDir:    l.p.HeapDir,
	}, nil
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
