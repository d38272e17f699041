package node

import "github.com/lizard-build/lizard/internal/sandbox"

// Limits bound what one sandbox may use, as the seam speaks of them (a
// plan's, a sandbox's shape): the control plane decides them without the
// runtime's package, and the node's internal API carries them as they
// are. Zero means the backend default.
type Limits struct {
	MemoryBytes int64   `json:"memoryBytes,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
	DiskBytes   int64   `json:"diskBytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	OpenFiles   int64   `json:"openFiles,omitempty"`
	Processes   int64   `json:"processes,omitempty"`
}

// runtime is l as the runtime's spec takes it: the same fields, so a
// field added to one and not the other fails to compile here.
func (l Limits) runtime() sandbox.Limits { return sandbox.Limits(l) }
