package store

import (
	"encoding/json"
	"fmt"

	"github.com/lizard-build/lizard/internal/netpolicy"
)

// Roles of sandboxes the server runs for itself. Users never see them:
// a Filter with a ProjectID selects only role "" (users') sandboxes.
const (
	// RoleTemplate is the sandbox booted once to checkpoint a template.
	RoleTemplate = "template"
	// RoleWarm is a restored sandbox waiting in the warm pool to be claimed.
	RoleWarm = "warm"
	// RoleBuild is a custom template's build sandbox (package recipe).
	RoleBuild = "build"
)

// InternalProject owns the server's own sandboxes until a user claims one.
// The leading underscore keeps it apart from project names users choose.
const InternalProject = "_lizard"

// Shape is what a sandbox was made with that a restore must give it again:
// its resource limits, its egress and whether it holds a lizardToken. It is
// stored as JSON with the sandbox, and copied to its snapshots.
type Shape struct {
	MemoryBytes int64   `json:"memoryBytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	DiskBytes   int64   `json:"diskBytes,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
	OpenFiles   int64   `json:"openFiles,omitempty"`
	Processes   int64   `json:"processes,omitempty"`
	Internet    bool    `json:"internet,omitempty"`
	Token       bool    `json:"token,omitempty"`
	// Volumes are mounted again at every restore; PublicPorts lets
	// anyone reach its ports through the API without a key or token.
	Volumes     []VolumeMount `json:"volumes,omitempty"`
	PublicPorts bool          `json:"publicPorts,omitempty"`
	// PortsHost is the Host its ports' requests carry ("": the caller's).
	PortsHost string `json:"portsHost,omitempty"`
	// Network is its policy by name (nil: none, the server's egress as
	// it is); an update while it runs replaces it (SetNetwork).
	Network *netpolicy.Policy `json:"network,omitempty"`
	// Recorded is false for rows written before shapes were stored; the
	// control plane then uses the server's current defaults.
	Recorded bool `json:"-"`
}

func encodeShape(sh Shape) (string, error) {
	if !sh.Recorded {
		return "", nil
	}
	b, err := json.Marshal(sh)
	if err != nil {
		return "", fmt.Errorf("encoding shape: %w", err)
	}
	return string(b), nil
}

func decodeShape(s string) (Shape, error) {
	var sh Shape
	if s == "" {
		return sh, nil
	}
	if err := json.Unmarshal([]byte(s), &sh); err != nil {
		return sh, fmt.Errorf("decoding shape: %w", err)
	}
	sh.Recorded = true
	return sh, nil
}
