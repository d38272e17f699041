package node

import (
	"fmt"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/netpolicy"
	"github.com/lizard-build/lizard/internal/store"
)

// Sandbox is a sandbox as the node answers for it: what every Node method
// returns, on one machine and over the node's internal API (cluster/remote
// sends it as it is). Its own type, not the database row's, so that a
// field the row gains or hides from JSON (Shape.Recorded) crosses the seam
// on purpose or the round-trip test fails; and the one that decides
// whether a sandbox is live and running (Check).
type Sandbox struct {
	ID        string            `json:"id"`
	ProjectID string            `json:"projectId"`
	Template  string            `json:"template"`
	State     string            `json:"state"`
	TimeoutMs int64             `json:"timeoutMs"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
	ExpiresAt *time.Time        `json:"expiresAt,omitempty"`
	EndedAt   *time.Time        `json:"endedAt,omitempty"`
	EndReason string            `json:"endReason,omitempty"`
	Slot      int               `json:"slot"`
	HostAddr  string            `json:"hostAddr"`
	GuestAddr string            `json:"guestAddr"`
	Shape     Shape             `json:"shape"`
	Role      string            `json:"role,omitempty"`
	ParentID  string            `json:"parentId,omitempty"`
	Node      string            `json:"node,omitempty"`
	Durable   bool              `json:"durable,omitempty"`
}

// Shape is what a sandbox runs with: its limits, egress, token, volumes
// and ports, as recorded when it was made.
type Shape struct {
	Limits      `json:"limits"`
	Internet    bool                `json:"internet,omitempty"`
	Token       bool                `json:"token,omitempty"`
	Volumes     []store.VolumeMount `json:"volumes,omitempty"`
	PublicPorts bool                `json:"publicPorts,omitempty"`
	PortsHost   string              `json:"portsHost,omitempty"`
	Network     *netpolicy.Policy   `json:"network,omitempty"`
	// Recorded is false for a row from before shapes were recorded: the
	// control plane then reports its own defaults.
	Recorded bool `json:"recorded"`
}

// SandboxOf is sandbox row sb as the seam speaks of it.
func SandboxOf(sb store.Sandbox) Sandbox {
	sh := sb.Shape
	return Sandbox{ID: sb.ID, ProjectID: sb.ProjectID, Template: sb.Template, State: sb.State, TimeoutMs: sb.TimeoutMs,
		Metadata: sb.Metadata, CreatedAt: sb.CreatedAt, ExpiresAt: sb.ExpiresAt, EndedAt: sb.EndedAt, EndReason: sb.EndReason,
		Slot: sb.Slot, HostAddr: sb.HostAddr, GuestAddr: sb.GuestAddr, Role: sb.Role, ParentID: sb.ParentID, Node: sb.Node,
		Durable: sb.Durable,
		Shape: Shape{Limits: Limits{MemoryBytes: sh.MemoryBytes, CPUs: sh.CPUs, DiskBytes: sh.DiskBytes, Pids: sh.Pids,
			OpenFiles: sh.OpenFiles, Processes: sh.Processes}, Internet: sh.Internet, Token: sh.Token,
			Volumes: sh.Volumes, PublicPorts: sh.PublicPorts, PortsHost: sh.PortsHost, Network: sh.Network, Recorded: sh.Recorded}}
}

// Record is sh as a row records it (a snapshot's copy of its sandbox's).
func (sh Shape) Record() store.Shape {
	l := sh.Limits
	return store.Shape{MemoryBytes: l.MemoryBytes, CPUs: l.CPUs, DiskBytes: l.DiskBytes, Pids: l.Pids,
		OpenFiles: l.OpenFiles, Processes: l.Processes, Internet: sh.Internet, Token: sh.Token,
		Volumes: sh.Volumes, PublicPorts: sh.PublicPorts, PortsHost: sh.PortsHost, Network: sh.Network, Recorded: sh.Recorded}
}

// seam is a row and an error as a Node method returns them.
func seam(sb store.Sandbox, err error) (Sandbox, error) { return SandboxOf(sb), err }

// Live reports whether the sandbox has not ended.
func (sb Sandbox) Live() bool { return sb.EndedAt == nil }

// Want is what an operation needs of a sandbox; Check says whether the
// sandbox is so, and if not, what its caller is told.
type Want int

const (
	// WantLive: not ended, in any state (starting, running, paused).
	WantLive Want = iota
	// WantRunning: running. A paused sandbox is refused with ErrPaused,
	// which a caller that may resume it resumes instead.
	WantRunning
)

// ErrPaused is the Kind of Check's refusal of a paused sandbox: a
// conflict (409), told apart so that a caller can resume it instead.
var ErrPaused = fmt.Errorf("%w: paused", errdefs.ErrConflict)

// Check is the one place that decides whether a sandbox is live and
// running (TestOneDecision keeps its messages single and the surfaces off
// deciding it from the state themselves): nil when sb is as want needs;
// else ErrGone (410) naming how it ended, ErrPaused (409) or ErrConflict
// (409) for one starting.
func (sb Sandbox) Check(want Want) error {
	switch {
	case !sb.Live():
		return sb.gone()
	case want == WantLive || sb.State == api.StateRunning:
		return nil
	}
	kind := errdefs.ErrConflict
	if sb.State == api.StatePaused {
		kind = ErrPaused
	}
	return &errdefs.Error{Kind: kind, Msg: fmt.Sprintf("sandbox %s is %s, not running; wait until it runs", sb.ID, sb.State)}
}

// check is Check of row sb, for the node's own reads of the store.
func check(sb store.Sandbox, want Want) error {
	return Sandbox{ID: sb.ID, State: sb.State, EndedAt: sb.EndedAt, EndReason: sb.EndReason}.Check(want)
}

// NotFound is the error for a sandbox that does not exist, or is not the
// caller's to see.
func NotFound(id string) error {
	return &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("sandbox %s not found", id)}
}

// gone is the error for using an ended sandbox: how and when it ended,
// and what to do.
func (sb Sandbox) gone() error {
	at := ""
	if sb.EndedAt != nil {
		at = " at " + sb.EndedAt.Format(time.RFC3339)
	}
	var how string
	switch sb.State {
	case api.StateKilled:
		how = "was killed" + at
	case api.StateExpired:
		how = "expired" + at + " (its timeout passed; extend it with setTimeout next time)"
	default:
		how = "failed" + at
		if sb.EndReason != "" {
			how += ": " + sb.EndReason
		}
	}
	return &errdefs.Error{Kind: errdefs.ErrGone, Msg: fmt.Sprintf("sandbox %s %s; create a new sandbox", sb.ID, how)}
}
