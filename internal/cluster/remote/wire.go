// Package remote carries the node seam (node.Node) over HTTP between
// `lizard api` and `lizard node` (docs/cluster.md): Client is a Node whose
// sandboxes run on another machine, Handler serves a machine's *node.Local
// to it. Every request carries the cluster's shared secret. The control
// plane's decisions travel in the plan; the node records and runs.
//
// The internal node API, under /internal/v1 on the node's listener:
//
//	POST   /internal/v1/sandboxes                 create: plan → sandbox
//	POST   /internal/v1/sandboxes/{id}/fork       {plan, count} → [sandbox]
//	DELETE /internal/v1/sandboxes/{id}            kill
//	POST   /internal/v1/sandboxes/{id}/timeout    {timeoutMs} → sandbox
//	POST   /internal/v1/sandboxes/{id}/pause      → sandbox
//	POST   /internal/v1/sandboxes/{id}/resume     {timeoutMs?} → sandbox
//	POST   /internal/v1/sandboxes/{id}/snapshot   {snapshotId} → {image, sizeBytes}
//	POST   /internal/v1/images/remove             {image}
//	POST   /internal/v1/volumes                   {id, sizeBytes}: make a volume here
//	DELETE /internal/v1/volumes/{id}              remove it
//	POST   /internal/v1/templates/build           build a custom template here (templates.go)
//	POST   /internal/v1/templates/{forget,remove}  drop one
//	*      /internal/v1/sandboxes/{id}/ports/{port}/{resume|no-resume}/...  an exposed port
//
// and the public agent paths, /v1/sandboxes/{id}/execute and the rest
// (api.AgentPublicPaths), which the API forwards unchanged, streaming, with
// the caller named in headers (HeaderProject...). Errors are {"kind",
// "message", "retryAfterMs"}, kind naming a kind of errdefs by its wire name.
package remote

import (
	"errors"
	"time"

	"github.com/lizard-build/lizard/internal/netpolicy"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/store"
)

// Headers naming the API's caller on a forwarded agent call, and on an
// internal request, for the node's audit trail (node.Audit).
const (
	HeaderProject       = "X-Lizard-Project"
	HeaderKeyID         = "X-Lizard-Key-Id"
	HeaderCallerSandbox = "X-Lizard-Caller-Sandbox"
	HeaderRemote        = "X-Lizard-Remote"
)

// ErrUnreachable means the node did not answer: it is down, restarting or
// cut off. A create that meets it may be placed on another node.
var ErrUnreachable = errors.New("node unreachable")

// plan is node.Plan on the wire: the data of the control plane's decision.
// The API refuses early what would not fit; the node admits each sandbox
// as it records it (its node.Admission); Token asks the node to mint the
// sandbox's lizardToken once it has recorded the sandbox (the key's row
// references the sandbox's, which only the node writes).
// Plan.Build never crosses: a template build boots on the node that builds.
type plan struct {
	ProjectID string            `json:"projectId"`
	Role      string            `json:"role,omitempty"`
	Template  string            `json:"template"`
	TimeoutMs int64             `json:"timeoutMs"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	OnTimeout string            `json:"onTimeout,omitempty"`
	// PauseDiskOnly is node.Plan.PauseDiskOnly: its pauses keep the disk
	// alone, on whichever node it runs.
	PauseDiskOnly bool        `json:"pauseDiskOnly,omitempty"`
	Envs          []string    `json:"envs,omitempty"`
	Limits        node.Limits `json:"limits"`
	Internet      bool        `json:"internet"`
	// Network is parsed again as it is decoded (netpolicy.Policy's
	// UnmarshalJSON).
	Network *netpolicy.Policy `json:"network,omitempty"`
	// Volumes are on the node's disk: the API places such a plan there.
	Volumes     []volumeMount `json:"volumes,omitempty"`
	PublicPorts bool          `json:"publicPorts,omitempty"`
	PortsHost   string        `json:"portsHost,omitempty"`
	Image       string        `json:"image,omitempty"`
	Token       bool          `json:"token,omitempty"`
	// TokenExpires is node.Plan.KeyExpires (zero: none).
	TokenExpires time.Time `json:"tokenExpires,omitzero"`
	ParentID     string    `json:"parentId,omitempty"`
	SnapshotID   string    `json:"snapshotId,omitempty"`
}

func toWire(p node.Plan) plan {
	return plan{ProjectID: p.ProjectID, Role: p.Role, Template: p.Template, TimeoutMs: p.TimeoutMs, Metadata: p.Metadata,
		OnTimeout: p.OnTimeout, PauseDiskOnly: p.PauseDiskOnly, Envs: p.Envs, Limits: p.Limits, Internet: p.Internet, Image: p.Image,
		Token: p.Token, TokenExpires: p.KeyExpires, ParentID: p.ParentID, Volumes: volumesToWire(p.Volumes),
		PublicPorts: p.PublicPorts, PortsHost: p.PortsHost, SnapshotID: p.SnapshotID, Network: wirePolicy(p.Network)}
}

// wirePolicy is p without its matchers, which the other side rebuilds.
func wirePolicy(p *netpolicy.Policy) *netpolicy.Policy {
	if p == nil {
		return nil
	}
	w := p.Wire()
	return &w
}

func (w plan) plan() node.Plan {
	return node.Plan{ProjectID: w.ProjectID, Role: w.Role, Template: w.Template, TimeoutMs: w.TimeoutMs, Metadata: w.Metadata,
		OnTimeout: w.OnTimeout, PauseDiskOnly: w.PauseDiskOnly, Envs: w.Envs, Limits: w.Limits, Internet: w.Internet, Image: w.Image,
		ParentID: w.ParentID, Volumes: volumesFromWire(w.Volumes), PublicPorts: w.PublicPorts, PortsHost: w.PortsHost, KeyExpires: w.TokenExpires,
		Token: w.Token, SnapshotID: w.SnapshotID, Network: w.Network}
}

// volumeMount is store.VolumeMount on the wire.
type volumeMount struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Path string `json:"path"`
}

func volumesToWire(ms []store.VolumeMount) []volumeMount {
	var out []volumeMount
	for _, m := range ms {
		out = append(out, volumeMount{ID: m.ID, Name: m.Name, Path: m.Path})
	}
	return out
}

func volumesFromWire(ws []volumeMount) []store.VolumeMount {
	var out []store.VolumeMount
	for _, w := range ws {
		out = append(out, store.VolumeMount{ID: w.ID, Name: w.Name, Path: w.Path})
	}
	return out
}

type forkRequest struct {
	Plan  plan `json:"plan"`
	Count int  `json:"count"`
}

type networkRequest struct {
	Network *netpolicy.Policy `json:"network"`
	Cut     bool              `json:"cut,omitempty"`
}

type timeoutRequest struct {
	TimeoutMs *int64 `json:"timeoutMs"`
}

// moveRequest and moveResponse are a drain's move (node.Local.MoveOut).
type moveRequest struct {
	To string `json:"to"`
}

type moveResponse struct {
	Sandbox node.Sandbox `json:"sandbox"`
	Paused  bool         `json:"paused"`
}

type snapshotRequest struct {
	SnapshotID string `json:"snapshotId"`
}

type snapshotResponse struct {
	Image     string `json:"image"`
	SizeBytes int64  `json:"sizeBytes"`
}

type volumeRequest struct {
	ID        string `json:"id"`
	SizeBytes int64  `json:"sizeBytes"`
}

type imageRequest struct {
	Image string `json:"image"`
}

// wireError is an errdefs.Error on the wire, its kind by its name in the
// one table (errdefs.Kinds), sent with that kind's status (for people
// reading the traffic; the client goes by Kind).
type wireError struct {
	Kind         string `json:"kind"`
	Message      string `json:"message"`
	RetryAfterMs int64  `json:"retryAfterMs,omitempty"`
}

func encodeError(err error) (int, wireError) {
	k, msg := errdefs.Classify(err)
	w := wireError{Kind: k.Wire, Message: msg}
	var e *errdefs.Error
	if errors.As(err, &e) {
		w.RetryAfterMs = e.RetryAfter.Milliseconds()
	}
	if w.Message == "" && k.Err == nil {
		w.Message = "internal error on the node; its log has the details"
	}
	return k.Status, w
}

func (w wireError) err(nodeName string) error {
	e := &errdefs.Error{Msg: w.Message, RetryAfter: time.Duration(w.RetryAfterMs) * time.Millisecond}
	if k, ok := errdefs.ByWire(w.Kind); ok {
		e.Kind = k.Err
	}
	if e.Msg == "" {
		e.Msg = "node " + nodeName + " failed the request; its log has the details"
	}
	return e
}
