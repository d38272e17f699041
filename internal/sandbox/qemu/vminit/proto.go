// Package vminit is process 1 of every QEMU sandbox's guest: it loads the
// few kernel modules the guest needs (virtio, overlayfs), puts the sandbox's
// root together (the template's read-only disk under an overlay whose upper
// layer is the sandbox's own disk, sized by its disk limit), configures the
// network, starts the sandbox's first process (the agent) and then stays,
// reaping orphans and answering the host on a virtio-serial port.
//
// The host and this init talk over that port in JSON lines: the host sends
// one Request, the guest answers with one Reply. The first request, Start,
// carries the whole sandbox (args, env, files, limits, network), so nothing
// secret is on the kernel command line; Net re-addresses a restored guest
// (a fork in its own namespace, with its own address) and sets its clock.
package vminit

// PortName is the virtio-serial port's name, as QEMU's virtserialport
// name= and the guest's /sys/class/virtio-ports/*/name say it.
const PortName = "lizard.ctl"

// ProbeArg on the kernel command line makes the init print ProbeMarker and
// stop the guest at once: the host's test of an accelerator.
const (
	ProbeArg    = "lizard.probe"
	ProbeMarker = "lizard-vminit: probe reached userspace"
)

// Disk serials: the guest finds each disk by the serial QEMU gives it, not by
// the order of its PCI slot.
const (
	SerialRoot  = "lzroot"  // the template, ext4, read-only
	SerialUpper = "lzupper" // the sandbox's writable layer, ext4
	SerialFiles = "lzfiles" // the host files (Spec.Files), ext4, read-only
)

// Request is one message from the host.
type Request struct {
	Op    string `json:"op"` // "start" or "net"
	Start *Start `json:"start,omitempty"`
	Net   *Net   `json:"net,omitempty"`
	// TimeUnixNano, when set, is the host's clock: a restored guest's
	// clock is the checkpoint's otherwise.
	TimeUnixNano int64 `json:"timeUnixNano,omitempty"`
}

// Reply is the guest's answer to one Request.
type Reply struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	Pid   int    `json:"pid,omitempty"` // Start: the first process
}

// Start describes the sandbox to make and its first process.
type Start struct {
	Args  []string `json:"args"`
	Env   []string `json:"env"`
	Files []File   `json:"files,omitempty"`
	Net   Net      `json:"net"`
	// Pids bounds the guest's processes and threads (a pids cgroup over
	// everything the first process starts); 0: no bound.
	Pids      int64 `json:"pids,omitempty"`
	OpenFiles int64 `json:"openFiles,omitempty"`
	Processes int64 `json:"processes,omitempty"`
}

// File is one host file on the files disk (by its name there), shown
// read-only at Target.
type File struct {
	Name   string `json:"name"`
	Target string `json:"target"`
}

// Net is the guest's address on its link, and the host's, its gateway.
type Net struct {
	Addr      string `json:"addr"`
	PrefixLen int    `json:"prefixLen"`
	Gateway   string `json:"gateway"`
}
