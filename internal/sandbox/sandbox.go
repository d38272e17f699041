// Package sandbox defines what a sandbox runtime backend must do and the
// errors it reports. Backends live in subpackages (gvisor, and qemu: a Linux
// kernel per sandbox); sandboxtest holds the conformance suite every backend runs.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"github.com/lizard-build/lizard/internal/netns"
	"net/netip"
	"regexp"
	"time"
)

var (
	// ErrNotFound means the runtime knows no sandbox with that ID.
	ErrNotFound = errors.New("sandbox not found")
	// ErrExists means a sandbox with that ID is already present.
	ErrExists = errors.New("sandbox already exists")
	// ErrNotRunning means the sandbox exists but is not running.
	ErrNotRunning = errors.New("sandbox not running")
	// ErrImage means a checkpoint image is missing or unreadable.
	ErrImage = errors.New("checkpoint image unusable")
	// ErrOtherBuild means a checkpoint image was made by another build
	// of the runtime (another runsc) than the one this runtime runs,
	// which cannot restore it. The image is intact: its owner keeps it
	// (a paused sandbox stays paused) until it is restored by the build
	// that made it.
	ErrOtherBuild = errors.New("checkpoint image made by another runtime build")
)

var validID = regexp.MustCompile(`^[a-z0-9-]{1,40}$`)

// ValidID reports whether id may name a sandbox (Spec.ID): 1 to 40 of
// [a-z0-9-], so that it can be a path component, part of a namespace
// name and of a runtime's container ID.
func ValidID(id string) bool { return validID.MatchString(id) }

// CheckID is ValidID as an error that says what an ID must be.
func CheckID(id string) error {
	if !ValidID(id) {
		return fmt.Errorf("invalid sandbox id %q: want 1 to 40 of [a-z0-9-]", id)
	}
	return nil
}

// Network is the link a sandbox is reached over: a point-to-point pair of
// addresses taken from the server's pool. The host side gets HostAddr, the
// sandbox gets GuestAddr; the agent listens on GuestAddr.
type Network struct {
	HostAddr  netip.Addr
	GuestAddr netip.Addr
	PrefixLen int // of the link, e.g. 30
	// The egress policy (netns.Egress): with Internet the sandbox may open
	// connections to public addresses; with APIPort it may open TCP
	// connections to HostAddr on that port. Nothing else leaves the
	// sandbox, whatever these say.
	Internet bool
	APIPort  int
	// Allow, when not empty, narrows the internet an Internet sandbox may
	// reach to these destinations.
	Allow Prefixes
	// Names, when set, puts an Internet sandbox's DNS and HTTP/TLS in the
	// path of the node's resolver and proxy (its policy by name).
	Names *netns.Names
}

// Prefixes is an egress allow-list.
type Prefixes []netip.Prefix

// Artifact is a template as built: what the backend starts sandboxes from.
// A backend may convert it once (a disk image for a VM) and cache the
// result under Key.
type Artifact struct {
	Name   string // the template's name, for logs
	Key    string // changes whenever the content does
	RootFS string // the root filesystem directory, read-only
}

// File is a host file the backend makes visible inside the sandbox,
// read-only, at Target (a bind mount for gVisor, a copy for a VM).
type File struct {
	Source string // host path
	Target string // path inside the sandbox
}

// Volume is a host directory the backend mounts writable inside the
// sandbox at Target: a persistent volume (package volume), whose writes
// reach the host directly, never a per-sandbox layer, and are not part of
// checkpoints.
type Volume struct {
	Source string // host directory
	Target string // path inside the sandbox
}

// Limits bound what one sandbox may use. Zero means the backend default.
type Limits struct {
	MemoryBytes int64
	Pids        int64
	DiskBytes   int64 // writable layer
	CPUs        float64
	// OpenFiles is RLIMIT_NOFILE and Processes RLIMIT_NPROC of the
	// sandbox's first process, inherited by all it starts. Processes is
	// the bound on guest processes: the pids cgroup counts the runtime's
	// host threads, not them.
	OpenFiles int64
	Processes int64
}

// Spec says what to start: which sandbox, from which template, with what.
// How is the backend's business.
type Spec struct {
	ID       string   // unique, [a-z0-9-], at most 40 characters
	Template Artifact // read-only; writes go to a per-sandbox layer
	// Args is the first process, normally the agent. Env is its environment.
	Args    []string
	Env     []string
	Files   []File
	Volumes []Volume
	Network Network
	Limits  Limits
	// WritableRoot makes writes land in Template.RootFS itself instead of
	// a per-sandbox layer: a template build's sandbox, which fills a
	// private copy of its base. Such a sandbox is never checkpointed.
	WritableRoot bool
	// Background starts the sandbox with a small share of the CPU, so
	// that one made ahead of need (a warm-pool sandbox) yields to the
	// sandboxes in use; Prioritizer.Foreground gives it a full share.
	// Runtimes that are not Prioritizers ignore it.
	Background bool
	// Disk, when set, is an image directory a DiskSaver saved: Create
	// boots the template with that writable layer over it (a sandbox
	// paused keeping its disk alone, resumed fresh).
	Disk string
	// HeapDir is a host directory mounted read-only at api.HeapMount,
	// holding the file the template's kernel maps its preloaded heap
	// from; set only on a template snapshot's sandbox built with
	// --share-heap. A runtime keeps the file with every image of the
	// sandbox (and of sandboxes restored from those), and mounts the kept
	// copy again at each restore; one that cannot refuses the Spec.
	HeapDir string
}

// State is what the runtime reports about a sandbox.
type State string

const (
	Running State = "running"
	Stopped State = "stopped" // exists but its processes have ended
)

// ForkRestorer is a Runtime that can set a fork's copy up while its parent
// is still being checkpointed, so that the two overlap.
type ForkRestorer interface {
	// RestoreFork is Restore of the image sandbox parent is being
	// checkpointed into by this Runtime: what needs no image is done at
	// once, then wait (which returns when the checkpoint has ended, with
	// its error) before the image is read. If wait fails, nothing is
	// left and its error is returned, wrapped.
	RestoreFork(ctx context.Context, spec Spec, parent, imageDir string, wait func(context.Context) error) error
}

// DiskSaver is a Runtime that can save a sandbox's writable root layer
// alone — its files, not its memory or processes — into an image
// directory, and boot a sandbox over such a layer (Spec.Disk).
type DiskSaver interface {
	// SaveDisk writes running sandbox id's writable root layer into
	// imageDir, leaving the sandbox running.
	SaveDisk(ctx context.Context, id, imageDir string) error
}

// Prioritizer is a Runtime that can start sandboxes in the background
// (Spec.Background) and bring them to the foreground.
type Prioritizer interface {
	// Foreground gives running sandbox id the CPU share of any sandbox
	// started without Spec.Background; ErrNotFound if unknown.
	Foreground(ctx context.Context, id string) error
}

// Usage is what a running sandbox uses of its host at one moment.
type Usage struct {
	// CPU is the CPU time it has used since it started (or was restored).
	CPU time.Duration
	// MemoryBytes is its memory the host cannot reclaim, SwapBytes the
	// part of it in swap.
	MemoryBytes, SwapBytes int64
	// SharedBytes is the part of MemoryBytes in RAM that other sandboxes
	// map too (a QEMU VM's pages of its template's RAM): a squeeze
	// (Reclaimer) leaves it where it is, so it is no reason to squeeze
	// again. 0 where a sandbox's memory is its own (gVisor's cgroup).
	SharedBytes int64
}

// Meter is a Runtime that can say what a sandbox uses (the node's metrics
// samples).
type Meter interface {
	// Usage reports running sandbox id's use; ErrNotFound if unknown.
	Usage(ctx context.Context, id string) (Usage, error)
}

// Reclaimer is a Runtime that can push a running sandbox's memory out to
// the host's swap (the node's --idle-reclaim): the sandbox runs on, and
// the pages it touches again come back as it touches them.
type Reclaimer interface {
	// CanReclaim says why this host cannot, or nil.
	CanReclaim() error
	// Reclaim pushes out what it can of running sandbox id's memory;
	// ErrNotFound if unknown.
	Reclaim(ctx context.Context, id string) error
}

// Runtime runs sandboxes on this machine. Implementations must be safe for
// concurrent use, and every method that removes a sandbox must remove all of
// it (processes, network namespace and links, writable layer, cgroups) even
// if the sandbox was half made or has already died.
type Runtime interface {
	// Name identifies the backend, e.g. "gvisor".
	Name() string
	// ImageKey changes whenever checkpoint images this runtime made before
	// may no longer restore (another runsc build, another VMM): template
	// snapshot images are keyed by it.
	ImageKey() string
	// Create boots a new sandbox from spec and returns once its first process
	// has started. On error nothing is left behind.
	Create(ctx context.Context, spec Spec) error
	// Checkpoint saves the sandbox's memory, processes and writable layer to
	// imageDir. With leaveRunning false the sandbox is stopped and removed
	// afterwards (its Spec's network is released); with true it keeps running.
	Checkpoint(ctx context.Context, id, imageDir string, leaveRunning bool) error
	// Restore starts a new sandbox from a checkpoint image; spec.ID and
	// spec.Network may differ from the checkpointed sandbox's (fork).
	Restore(ctx context.Context, spec Spec, imageDir string) error
	// State reports whether the sandbox is running; ErrNotFound if unknown.
	State(ctx context.Context, id string) (State, error)
	// Kill ends the sandbox and removes everything it had. Killing an
	// unknown sandbox is not an error, so cleanup can always be retried.
	// Its ID and address may be used again once Kill returns; links and
	// rules whose removal only waits on the kernel may go a moment later,
	// and are gone when Close returns.
	Kill(ctx context.Context, id string) error
	// List returns the IDs of every sandbox the runtime has on this machine,
	// including ones left by an earlier server process.
	List(ctx context.Context) ([]string, error)
	// Close refuses new sandboxes and waits (as ctx allows) for the
	// operations under way — a create interrupted by a stopping server is
	// still removing what it made — and stops the runtime's own
	// watchers. Sandboxes keep running: they outlive the server.
	Close(ctx context.Context) error
}
