package gvisor

import (
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/lizard-build/lizard/internal/sandbox"
)

// Defaults for limits a Spec leaves at zero.
const (
	DefaultMemoryBytes = 1 << 30
	DefaultPids        = 1024
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

// ociSpec is the bundle's config.json for spec, joined to the network
// namespace at netnsPath.
func ociSpec(spec sandbox.Spec, netnsPath string) *specs.Spec {
	env := slices.Clone(spec.Env)
	if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		env = append([]string{defaultPath}, env...)
	}

	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
	}
	for _, f := range spec.Files {
		mounts = append(mounts, specs.Mount{Destination: f.Target, Type: "bind", Source: f.Source, Options: []string{"rbind", "ro"}})
	}

	memory := spec.Limits.MemoryBytes
	if memory <= 0 {
		memory = DefaultMemoryBytes
	}
	pids := spec.Limits.Pids
	if pids <= 0 {
		pids = DefaultPids
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

	return &specs.Spec{
		Version: specs.Version,
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
