package gvisor

import (
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/sandbox"
)

// Defaults for limits a Spec leaves at zero.
const (
	DefaultMemoryBytes = 1 << 30
	DefaultPids        = 1024
)

// The host tasks (pids cgroup) a sandbox gets per guest process it may
// run, and for the Sentry, the gofer and root's processes besides.
const (
	hostTasksPerProcess = 4
	hostTasksReserve    = 256
)

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// capabilities is Docker's default set: enough for package managers and
// the usual root-in-a-container habits. They only matter inside the
// sentry; the host never sees them.
var capabilities = []string{
	"CAP_AUDIT_WRITE", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_MKNOD", "CAP_NET_BIND_SERVICE", "CAP_NET_RAW", "CAP_SETFCAP",
	"CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_CHROOT",
}

// layout is the set of mounts a sandbox is made with. runsc restores a
// checkpoint only into the mounts it was taken with, so an image records
// its layout (imageRecord) and is restored with that one.
type layout int

const (
	// layoutTmpfs is the first layout: /tmp and /dev/shm are tmpfs of
	// no set size, in memory. A program filling them grows the sandbox
	// until the host kills all of it, and nothing it could free helps.
	// Images without a record have it.
	layoutTmpfs layout = iota
	// layoutBounded puts /tmp on a writable layer of the disk limit's
	// size, written to disk like the root's, and gives /dev/shm a fixed
	// size (fixed, not a share of the memory limit: a restore must see
	// the mounts of the checkpoint, whatever the new shape). /tmp is a
	// bind of an empty per-sandbox directory that runsc's
	// --overlay2=all covers with such a layer (overlayArg): left out of
	// the spec, runsc would put a tmpfs of its own, in memory, on an
	// empty /tmp, and a mount point inside /tmp to stop it would be made
	// by runsc in the shared template.
	layoutBounded
	// layoutVolumes is layoutBounded's for a sandbox that mounts
	// persistent volumes: runsc's --overlay2=all would cover their bind
	// mounts with a layer too and keep their writes from the host, and
	// runsc has no way to leave one writable mount out. So only the root
	// gets a layer, and /tmp is a tmpfs of a fixed size (tmpSize), in
	// memory, within the sandbox's memory limit.
	layoutVolumes
	// layoutVolumesFirst is layoutVolumes with the volumes mounted before
	// Lizard's own files (sandbox.Spec.Files, the agent among them)
	// instead of after: whatever path a volume reaches, through a
	// symlink in a custom template or a rule the control plane missed,
	// the agent that runs as root is Lizard's. layoutVolumes images keep
	// their order: runsc restores into the mounts of the checkpoint.
	layoutVolumesFirst
)

// layoutDirect is layoutBounded without the writable layers: the root
// and /tmp are written through the gofer to their host directories
// (sandbox.Spec.WritableRoot, template builds). Never checkpointed.
const layoutDirect layout = 100

// currentLayout is what a booted sandbox gets.
const currentLayout = layoutBounded

// shmSize bounds /dev/shm (Docker's default).
const shmSize = "size=65536k"

// tmpSize bounds /tmp in layoutVolumes; fixed for the same reason as
// shmSize.
const tmpSize = "size=268435456"

// ociSpec is the bundle's config.json for spec with the mounts of lay,
// joined to the network namespace at netnsPath. tmpDir is an empty host
// directory, the lower layer of /tmp in layoutBounded; it stays empty.
func ociSpec(spec sandbox.Spec, netnsPath, tmpDir string, lay layout) *specs.Spec {
	env := slices.Clone(spec.Env)
	if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		env = append([]string{defaultPath}, env...)
	}

	mounts := ociMounts(spec, tmpDir, lay)

	memory := spec.Limits.MemoryBytes
	if memory <= 0 {
		memory = DefaultMemoryBytes
	}
	pids := spec.Limits.Pids
	if pids <= 0 {
		pids = DefaultPids
	}
	// The guest's own bound (RLIMIT_NPROC of the sandbox user) must be
	// met first: a fork that fails inside is the program's problem, while
	// the host's pids cgroup failing the Sentry a thread or a systrap stub
	// ends the whole sandbox. Measured here, each guest process costs the
	// host one to three tasks.
	if min := spec.Limits.Processes*hostTasksPerProcess + hostTasksReserve; spec.Limits.Processes > 0 && pids < min {
		pids = min
	}
	res := &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &memory},
		Pids:   &specs.LinuxPids{Limit: pids},
	}
	if spec.Limits.CPUs > 0 {
		period := uint64(100_000)
		quota := int64(spec.Limits.CPUs * float64(period))
		res.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	if spec.Background {
		if res.CPU == nil {
			res.CPU = &specs.LinuxCPU{}
		}
		shares := uint64(backgroundShares)
		res.CPU.Shares = &shares
	}

	var annotations map[string]string
	if spec.Disk != "" {
		// runsc unpacks the saved layer into the new sandbox's overlay
		// before its first process starts (--allow-rootfs-tar-annotation).
		// The path is relative to the sandbox's directory, where runsc
		// runs (start): runsc keeps the annotation in the sandbox's
		// checkpoints and refuses a restore whose spec differs, so the
		// same words must name a file in every later restore's
		// directory too (prepare).
		annotations = map[string]string{rootfsTarAnnotation: DiskLayerName}
	}
	return &specs.Spec{
		Version:     specs.Version,
		Annotations: annotations,
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: slices.Clone(spec.Args),
			Env:  env,
			Cwd:  "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding:  capabilities,
				Effective: capabilities,
				Permitted: capabilities,
			},
			Rlimits: rlimits(spec.Limits),
		},
		// Not read-only: runsc's --overlay2 then puts a writable layer over
		// the shared template, which stays untouched. A read-only root
		// would switch the overlay off.
		Root:     &specs.Root{Path: spec.Template.RootFS, Readonly: false},
		Hostname: "lizard",
		Mounts:   mounts,
		Linux: &specs.Linux{
			CgroupsPath: cgroupPath(spec.ID),
			Resources:   res,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.NetworkNamespace, Path: netnsPath},
			},
		},
	}
}

// ociMounts are the mounts of lay for spec, in order: runsc restores a
// checkpoint only into the mounts it was taken with.
func ociMounts(spec sandbox.Spec, tmpDir string, lay layout) []specs.Mount {
	shm := []string{"nosuid", "noexec", "nodev", "mode=1777"}
	if lay >= layoutBounded {
		shm = append(shm, shmSize)
	}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: shm},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
	}
	switch lay {
	case layoutTmpfs:
		mounts = append(mounts, specs.Mount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}})
	case layoutVolumes, layoutVolumesFirst:
		mounts = append(mounts, specs.Mount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", tmpSize}})
	default:
		mounts = append(mounts, specs.Mount{Destination: "/tmp", Type: "bind", Source: tmpDir, Options: []string{"rbind", "rw", "nosuid", "nodev"}})
	}
	files := make([]specs.Mount, 0, len(spec.Files))
	for _, f := range spec.Files {
		files = append(files, specs.Mount{Destination: f.Target, Type: "bind", Source: f.Source, Options: []string{"rbind", "ro"}})
	}
	volumes := make([]specs.Mount, 0, len(spec.Volumes))
	for _, v := range spec.Volumes {
		volumes = append(volumes, specs.Mount{Destination: v.Target, Type: "bind", Source: v.Source, Options: []string{"rbind", "rw", "nosuid", "nodev"}})
	}
	// Later mounts cover earlier ones: Lizard's files go last.
	if lay == layoutVolumes {
		mounts = append(append(mounts, files...), volumes...)
	} else {
		mounts = append(append(mounts, volumes...), files...)
	}
	if spec.HeapDir != "" {
		// Read-only, so --overlay2 leaves it bare (overlayArg) and no
		// sandbox writes the file every sandbox of the template maps;
		// the same mount, type and options in the template's sandbox and
		// in every restore, as runsc wants (its source may differ).
		mounts = append(mounts, specs.Mount{Destination: api.HeapMount, Type: "bind", Source: spec.HeapDir, Options: []string{"rbind", "ro"}})
	}
	return mounts
}

// The cgroup cpu.shares of a sandbox started in the background
// (sandbox.Spec.Background), and of one in the foreground: the kernel's
// default. A background restore gets a sixteenth of the CPU a sandbox in
// use gets when both want it, and all it wants of an idle machine.
const (
	backgroundShares = 64
	foregroundShares = 1024
)

// cgroupPath is the cgroup (under every v1 controller) of sandbox id.
func cgroupPath(id string) string { return "/lizard/" + id }

// rlimits are the first process's resource limits, inherited by every
// process in the sandbox.
func rlimits(l sandbox.Limits) []specs.POSIXRlimit {
	nofile := uint64(1 << 20)
	if l.OpenFiles > 0 {
		nofile = uint64(l.OpenFiles)
	}
	rl := []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile}}
	if l.Processes > 0 {
		// Counted per user: it bounds the sandbox user's processes (code
		// runs as uid 1000), while root, the agent, is exempt as in Linux.
		rl = append(rl, specs.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: uint64(l.Processes), Soft: uint64(l.Processes)})
	}
	return rl
}
