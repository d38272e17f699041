package node

// Limits bound what one sandbox may use, as the seam speaks of them (a
// plan's, a sandbox's shape): the control plane decides them without the
// runtime's package, and the node's internal API carries them as they
// are. Zero means the backend default. It has the runtime's fields
// (sandbox.Limits), so that a field added to one and not the other fails
// to compile where the spec converts it (launch.spec).
type Limits struct {
	MemoryBytes int64   `json:"memoryBytes,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
	DiskBytes   int64   `json:"diskBytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	OpenFiles   int64   `json:"openFiles,omitempty"`
	Processes   int64   `json:"processes,omitempty"`
}
