// Package qemu runs each sandbox as a QEMU virtual machine with its own
// Linux kernel (Debian's cloud kernel): hardware virtualisation (KVM) where
// the host offers it, software emulation (TCG) elsewhere.
//
// A VM has three virtio disks, found in the guest by serial: the template's
// root filesystem as an ext4 image made once per template key and shared
// read-only by every VM; the sandbox's writable layer, a qcow2 image of an
// empty ext4 filesystem of its disk limit; and the host files the sandbox
// gets (the agent), an ext4 image made once per set of files. The guest's
// init (package vminit, packed into an initramfs with the kernel modules it
// needs) lays an overlay of the second over the first, so the template is
// never written and the disk limit is the writable filesystem's size.
//
// The VM's network is a tap device bridged to eth0 of the sandbox's own
// network namespace (package netns), so the host reaches the guest over the
// same veth, under the same egress policy, as a gVisor sandbox. QEMU runs
// in that namespace and, once its devices are open, as an unprivileged
// user of its own, chrooted into an empty directory, under its seccomp
// filter: it is handed every file it needs open (fd sets), so a VMM taken
// over by its guest holds little more than that guest's own disks.
//
// Checkpoints are QEMU migrations to a file (the VM's devices, and its
// memory unless it was booted) beside a copy of the writable disk. A
// booted VM's RAM is copied into the image as a file of its own, which
// every VM restored from the image maps copy-on-write from one sealed
// memfd (ram.go): the template snapshot's pages are held once however
// many VMs run from it. A restore loads the image into a new QEMU in the
// new sandbox's namespace and then tells the guest's init its new address
// (and the time) over the control port: every fork answers on its own
// address, and nothing is shared between sandboxes but read-only images
// and that read-only RAM.
package qemu

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/lizard-build/lizard/internal/keylock"
	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sandbox/hostproc"
	"github.com/lizard-build/lizard/internal/sandbox/qemu/vminit"
)

var _ sandbox.Runtime = (*Runtime)(nil)

// Accelerators.
const (
	AccelAuto = "auto" // KVM if a probe VM boots with it, else TCG
	AccelKVM  = "kvm"
	AccelTCG  = "tcg"
)

// Defaults for what a Spec or Config leaves at zero.
const (
	DefaultMemoryBytes = 1 << 30
	DefaultDiskBytes   = 4 << 30
	// DefaultBootTimeout bounds a boot, a restore and a checkpoint.
	// Software emulation on a busy two-core machine is slow: a boot to
	// the first process takes 2 to 10 seconds there.
	DefaultBootTimeout = 90 * time.Second
	// DefaultProbeTimeout bounds the KVM probe: a tiny VM reaches its
	// init in well under a second with working KVM.
	DefaultProbeTimeout = 5 * time.Second
	minMemoryBytes      = 128 << 20
)

// Config configures a Runtime.
type Config struct {
	QEMU      string // qemu-system-x86_64; "" finds it on PATH
	QEMUImg   string // qemu-img; "" finds it on PATH
	KernelDir string // a linux-image-*-cloud-amd64 package unpacked (dpkg-deb -x)
	Init      string // the lizard-vminit binary
	Dir       string // work directory; created if missing
	CacheDir  string // disk images made from templates; "" is Dir/cache
	Accel     string // AccelAuto (""), AccelKVM or AccelTCG
	// BootTimeout bounds one boot, restore or checkpoint (0: the
	// default); ProbeTimeout the KVM probe.
	BootTimeout  time.Duration
	ProbeTimeout time.Duration
	Logger       *slog.Logger
}

// Runtime is the QEMU sandbox backend.
type Runtime struct {
	qemu, qemuImg string
	kernel        string
	kernelStub    string // the kernel's header, restored VMs' -kernel
	initramfs     string
	root, boxDir  string
	cacheDir      string
	accel         string
	bootTimeout   time.Duration
	imageKey      string
	log           *slog.Logger
	// shared holds the images' RAM that restored VMs map copy-on-write.
	shared sharedRAM

	// locks serialises every operation on one sandbox ID.
	locks keylock.Map
	// mu guards closed and building (one per cache file being made).
	mu       sync.Mutex
	building map[string]*sync.Mutex
	closed   bool
	busy     sync.WaitGroup
}

// ErrClosed is returned by Create and Restore after Close.
var ErrClosed = errors.New("qemu runtime closed")

// sockDir holds each sandbox's QMP and control sockets: unix socket paths
// are limited to 108 bytes, which a sandbox directory may exceed.
var sockDir = "/run/lizard/qemu"

const cleanupTimeout = 30 * time.Second

// keepImages is how many disk images of each kind (template, files,
// initramfs) the cache keeps: servers sharing it may run different
// builds, and each build makes its own.
const keepImages = 4

// New checks the VMM, kernel and init, builds the guest's initramfs,
// picks the accelerator and returns a Runtime keeping its state in cfg.Dir.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	r := &Runtime{qemu: cfg.QEMU, qemuImg: cfg.QEMUImg, accel: cfg.Accel, bootTimeout: cfg.BootTimeout,
		log: cfg.Logger, building: map[string]*sync.Mutex{}}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.log = r.log.With("runtime", "qemu")
	if r.bootTimeout <= 0 {
		r.bootTimeout = DefaultBootTimeout
	}
	var err error
	for _, p := range []*string{&r.qemu, &r.qemuImg} {
		name := map[*string]string{&r.qemu: "qemu-system-x86_64", &r.qemuImg: "qemu-img"}[p]
		if *p == "" {
			*p = name
		}
		if *p, err = exec.LookPath(*p); err != nil {
			return nil, fmt.Errorf("qemu: finding %s (Debian: apt-get install qemu-system-x86 qemu-utils, or make qemu): %w", name, err)
		}
	}
	if cfg.Dir == "" {
		return nil, errors.New("qemu: no work directory configured")
	}
	if r.root, err = filepath.Abs(cfg.Dir); err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	r.boxDir = filepath.Join(r.root, "sandboxes")
	r.cacheDir = cfg.CacheDir
	if r.cacheDir == "" {
		r.cacheDir = filepath.Join(r.root, "cache")
	}
	for _, d := range []string{r.boxDir, r.cacheDir, sockDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("qemu: creating %s: %w", d, err)
		}
	}
	// QEMU runs in each sandbox's directory: every path it gets is absolute.
	for _, p := range []*string{&cfg.KernelDir, &cfg.Init, &r.cacheDir} {
		if *p, err = filepath.Abs(*p); err != nil {
			return nil, fmt.Errorf("qemu: %w", err)
		}
	}
	kernel, modDir, err := findKernel(cfg.KernelDir)
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	r.kernel = kernel
	if _, err := os.Stat(cfg.Init); err != nil {
		return nil, fmt.Errorf("qemu: the guest init (lizard-vminit; make build): %w", err)
	}
	key, err := hashFiles(cfg.Init, kernel)
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	r.initramfs = filepath.Join(r.cacheDir, "initramfs-"+key+".cpio")
	if _, err := os.Stat(r.initramfs); err != nil {
		if err := buildInitramfs(r.initramfs, cfg.Init, modDir); err != nil {
			return nil, fmt.Errorf("qemu: building the guest initramfs: %w", err)
		}
		if err := prune(r.cacheDir, "initramfs-*.cpio", keepImages); err != nil {
			r.log.Warn("removing old initramfs images", "err", err)
		}
	}
	kkey, err := hashFiles(kernel)
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	r.kernelStub = filepath.Join(r.cacheDir, "kernel-stub-"+kkey+".img")
	if _, err := os.Stat(r.kernelStub); err != nil {
		if err := writeKernelStub(r.kernelStub, kernel); err != nil {
			return nil, fmt.Errorf("qemu: the kernel stub restored VMs load: %w", err)
		}
		if err := prune(r.cacheDir, "kernel-stub-*.img", keepImages); err != nil {
			r.log.Warn("removing old kernel stubs", "err", err)
		}
	}
	if err := os.MkdirAll(r.emptyDir(), 0o755); err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	if err := r.pickAccel(ctx, cfg.ProbeTimeout); err != nil {
		return nil, err
	}
	vmm, err := hashFiles(r.qemu)
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	// A migration stream restores only into the same QEMU, machine and
	// CPU model, with the same guest kernel and init in memory.
	r.imageKey = "qemu-" + r.accel + "-" + vmm[:8] + "-" + key[:8] + "-" + imageFormat
	return r, nil
}

func (r *Runtime) emptyDir() string { return filepath.Join(r.root, "empty") }

// vmmUID is the unprivileged user sandbox directory dir's QEMU runs as:
// one of its own, owning nothing on the host, so that a VMM taken over
// by its guest cannot signal, trace or read another sandbox's.
func vmmUID(dir string) int {
	h := sha256.Sum256([]byte(dir))
	return vmmUIDBase + int(binary.BigEndian.Uint32(h[:4])%vmmUIDRange)
}

// The users QEMU runs as: far above any a distribution hands out.
const vmmUIDBase, vmmUIDRange = 1 << 30, 1 << 24

// Name implements sandbox.Runtime.
func (r *Runtime) Name() string { return "qemu" }

// ImageKey implements sandbox.Runtime.
func (r *Runtime) ImageKey() string { return r.imageKey }

// Accel is the accelerator the Runtime's VMs use: "kvm" or "tcg".
func (r *Runtime) Accel() string { return r.accel }

// Close implements sandbox.Runtime: VMs keep running.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		r.busy.Wait()
		r.shared.close()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("closing qemu runtime: waiting for operations under way: %w", ctx.Err())
	}
}

func (r *Runtime) enter(create bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed && create {
		return false
	}
	r.busy.Add(1)
	return true
}

func (r *Runtime) lock(id string) func() { return r.locks.Lock(id) }

// once makes the cache file path with make unless it exists; concurrent
// callers for one path wait for the first.
func (r *Runtime) once(path string, make func() error) error {
	r.mu.Lock()
	m := r.building[path]
	if m == nil {
		m = &sync.Mutex{}
		r.building[path] = m
	}
	r.mu.Unlock()
	m.Lock()
	defer m.Unlock()
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	return make()
}

func (r *Runtime) dir(id string) string { return filepath.Join(r.boxDir, id) }

// socks is the directory of sandbox id's sockets, named by a hash of its
// sandbox directory so that two Runtimes never share one.
func (r *Runtime) socks(id string) string {
	return filepath.Join(sockDir, shortHash(r.dir(id)))
}

func (r *Runtime) qmpPath(id string) string     { return filepath.Join(r.socks(id), "qmp") }
func (r *Runtime) ctlPath(id string) string     { return filepath.Join(r.socks(id), "ctl") }
func (r *Runtime) consoleSock(id string) string { return filepath.Join(r.socks(id), "console") }
func (r *Runtime) consolePath(id string) string { return filepath.Join(r.dir(id), "console.log") }
func (r *Runtime) qemuLog(id string) string     { return filepath.Join(r.dir(id), "qemu.log") }
func (r *Runtime) upperPath(id string) string   { return filepath.Join(r.dir(id), "upper.qcow2") }
func (r *Runtime) pidPath(id string) string     { return filepath.Join(r.dir(id), "qemu.pid") }
func (r *Runtime) recordPath(id string) string  { return filepath.Join(r.dir(id), recordName) }

// record is what a VM was made with that its checkpoints must be restored
// with: QEMU restores memory and devices only into the same shape.
type record struct {
	MemoryBytes int64 `json:"memoryBytes"`
	CPUs        int   `json:"cpus"`
	DiskBytes   int64 `json:"diskBytes"` // as the Spec asked: 0 is the default
	Files       bool  `json:"files"`
	// SharedRAM (a VM's record): its RAM is a memfd QEMU maps shared,
	// which a checkpoint copies out (a booted VM). A restored VM's RAM
	// is private, and its checkpoints migrate all of it.
	SharedRAM bool `json:"sharedRAM,omitempty"`
	// RAMFile (an image's record): the RAM is in the file imageRAM and
	// the migration stream, made with x-ignore-shared, has none of it.
	RAMFile bool `json:"ramFile,omitempty"`
	// Build (an image's record) is the ImageKey of the runtime that made
	// it (QEMU, machine, guest kernel and init, image format); an image of
	// another is refused with ErrOtherBuild, not attempted (a failed
	// restore costs the image). An image without it is an older Lizard's,
	// taken for this build's.
	Build string `json:"build,omitempty"`
}

const (
	recordName      = "vm.json"
	imageRecordName = "lizard-qemu.json"
	imageMemory     = "memory"
	imageDisk       = "disk.qcow2"
	// imageFormat changes with what a checkpoint holds: since "r2" the
	// guest RAM is the memory backend "mem", and a booted VM's checkpoint
	// keeps it in a file of its own.
	imageFormat = "r2"
)

func shape(l sandbox.Limits, files bool) record {
	rec := record{MemoryBytes: l.MemoryBytes, CPUs: 1, DiskBytes: l.DiskBytes, Files: files}
	if rec.MemoryBytes <= 0 {
		rec.MemoryBytes = DefaultMemoryBytes
	}
	rec.MemoryBytes = max(rec.MemoryBytes, minMemoryBytes) &^ (1<<20 - 1)
	if l.CPUs > 1 {
		rec.CPUs = int(math.Ceil(l.CPUs))
	}
	return rec
}

func (rec record) diskSize() int64 {
	if rec.DiskBytes > 0 {
		return (rec.DiskBytes + 1<<20 - 1) &^ (1<<20 - 1)
	}
	return DefaultDiskBytes
}

func readRecord(path string) (record, error) {
	var rec record
	b, err := os.ReadFile(path)
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("decoding %s: %w", path, err)
	}
	return rec, nil
}

// Create implements sandbox.Runtime: it returns once the guest's init has
// started the first process.
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) error {
	return r.boot(ctx, spec, "")
}

// Restore implements sandbox.Runtime. A VM restores with the memory, CPUs
// and writable disk it was checkpointed with (QEMU restores into the same
// shape), so an image taken under other limits is refused with ErrImage.
func (r *Runtime) Restore(ctx context.Context, spec sandbox.Spec, imageDir string) error {
	for _, f := range []string{imageMemory, imageDisk, imageRecordName} {
		if _, err := os.Stat(filepath.Join(imageDir, f)); err != nil {
			return fmt.Errorf("restoring sandbox %s: %w: %v", spec.ID, sandbox.ErrImage, err)
		}
	}
	rec, err := readRecord(filepath.Join(imageDir, imageRecordName))
	if err != nil {
		return fmt.Errorf("restoring sandbox %s: %w: %v", spec.ID, sandbox.ErrImage, err)
	}
	if rec.Build != "" && rec.Build != r.imageKey {
		return fmt.Errorf("restoring sandbox %s: %w: its image %s was made by the VM build %s and this server runs %s, which cannot restore it",
			spec.ID, sandbox.ErrOtherBuild, imageDir, rec.Build, r.imageKey)
	}
	if rec.RAMFile {
		if _, err := os.Stat(filepath.Join(imageDir, imageRAM)); err != nil {
			return fmt.Errorf("restoring sandbox %s: %w: %v", spec.ID, sandbox.ErrImage, err)
		}
	}
	if want := shape(spec.Limits, true); want.MemoryBytes != rec.MemoryBytes || want.CPUs != rec.CPUs {
		return fmt.Errorf("restoring sandbox %s: %w: it was taken with %d MiB of memory and %d CPUs, which a VM keeps, not the %d MiB and %d asked for; boot the sandbox instead",
			spec.ID, sandbox.ErrImage, rec.MemoryBytes>>20, rec.CPUs, want.MemoryBytes>>20, want.CPUs)
	}
	if rec.DiskBytes != spec.Limits.DiskBytes {
		return fmt.Errorf("restoring sandbox %s: %w: it was taken with a writable disk of %s and a VM restores its disk as it was, not the %s asked for; boot the sandbox instead",
			spec.ID, sandbox.ErrImage, mib(rec.DiskBytes), mib(spec.Limits.DiskBytes))
	}
	return r.boot(ctx, spec, imageDir)
}

func mib(n int64) string {
	if n <= 0 {
		return "the default size"
	}
	return strconv.FormatInt(n>>20, 10) + " MiB"
}

// boot makes a VM from scratch, or from the checkpoint in imageDir, and
// removes whatever it made if anything fails.
func (r *Runtime) boot(ctx context.Context, spec sandbox.Spec, imageDir string) (err error) {
	verb := "creating"
	if imageDir != "" {
		verb = "restoring"
	}
	if err := sandbox.CheckID(spec.ID); err != nil {
		return fmt.Errorf("%s sandbox: %w", verb, err)
	}
	if fi, err := os.Stat(spec.Template.RootFS); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s sandbox %s: root filesystem %q is not a directory", verb, spec.ID, spec.Template.RootFS)
	}
	if spec.WritableRoot {
		// The template's disk is an image made of RootFS once; writes
		// cannot land back in the directory.
		return fmt.Errorf("%s sandbox %s: building custom templates is not supported by the qemu runtime yet (it boots a template from a disk image made once); build them on a --runtime gvisor server", verb, spec.ID)
	}
	if len(spec.Volumes) > 0 {
		// A volume is a directory on the host; a VM could only get its
		// image as a disk, which the host has mounted meanwhile.
		return fmt.Errorf("%s sandbox %s: persistent volumes are not supported by the qemu runtime yet; use --runtime gvisor for sandboxes with volumes", verb, spec.ID)
	}
	if spec.HeapDir != "" {
		// The shared heap is a file the guest kernel maps from a host
		// directory; a VM's memory is its own, and --share-heap is
		// refused with --runtime qemu before a sandbox asks.
		return fmt.Errorf("%s sandbox %s: a heap shared from a file (lizard serve --share-heap) is not supported by the qemu runtime; serve without --share-heap or with --runtime gvisor", verb, spec.ID)
	}
	id := spec.ID
	log := r.log.With("sandbox_id", id)
	if !r.enter(true) {
		return fmt.Errorf("%s sandbox %s: %w", verb, id, ErrClosed)
	}
	defer r.busy.Done()
	unlock := r.lock(id)
	defer unlock()
	begin := time.Now()
	ctx, cancel := context.WithTimeout(ctx, r.bootTimeout)
	defer cancel()

	if netns.Exists(id) {
		return fmt.Errorf("%s sandbox %s: %w", verb, id, sandbox.ErrExists)
	}
	if err := os.Mkdir(r.dir(id), 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s sandbox %s: %w", verb, id, sandbox.ErrExists)
		}
		return fmt.Errorf("%s sandbox %s: %w", verb, id, err)
	}
	defer func() {
		if err != nil {
			if rerr := r.remove(context.WithoutCancel(ctx), id); rerr != nil {
				log.Error("removing half-made sandbox", "err", rerr)
			}
		}
	}()
	fail := func(err error) error { return fmt.Errorf("%s sandbox %s: %w", verb, id, err) }

	rec := shape(spec.Limits, true)
	rec.SharedRAM = true
	var image record
	if imageDir != "" {
		if image, err = readRecord(filepath.Join(imageDir, imageRecordName)); err != nil {
			return fail(fmt.Errorf("%w: %v", sandbox.ErrImage, err))
		}
		rec = image
		rec.SharedRAM, rec.RAMFile = false, false
	}
	b, _ := json.Marshal(rec)
	if err := os.WriteFile(r.recordPath(id), b, 0o600); err != nil {
		return fail(err)
	}
	rootImg, err := r.templateImage(ctx, spec.Template)
	if err != nil {
		return fail(err)
	}
	filesImg, files, err := r.filesImage(ctx, spec.Files)
	if err != nil {
		return fail(err)
	}
	if imageDir == "" {
		blank := filepath.Join(r.cacheDir, fmt.Sprintf("blank-%d.qcow2", rec.diskSize()))
		if err := r.once(blank, func() error { return blankDisk(ctx, r.qemuImg, blank, rec.diskSize()) }); err != nil {
			return fail(err)
		}
		err = copyFile(blank, r.upperPath(id))
	} else {
		err = copyFile(filepath.Join(imageDir, imageDisk), r.upperPath(id))
	}
	if err != nil {
		return fail(fmt.Errorf("making the writable disk: %w", err))
	}

	if err := network(spec); err != nil {
		return fail(fmt.Errorf("setting up network: %w", err))
	}
	if err := os.MkdirAll(r.socks(id), 0o700); err != nil {
		return fail(err)
	}

	exited, err := r.start(id, rec, rootImg, filesImg, imageDir, image)
	if err != nil {
		return fail(err)
	}
	console, err := r.dialWhileUp(ctx, id, r.consoleSock(id), exited)
	if err != nil {
		return fail(fmt.Errorf("connecting to the VM's console: %w", err))
	}
	if err := logConsole(console, r.consolePath(id)); err != nil {
		return fail(err)
	}
	if err := r.attachTap(ctx, id, exited); err != nil {
		return fail(fmt.Errorf("setting up network: %w", err))
	}
	if err := r.startGuest(ctx, spec, exited, files, imageDir, image); err != nil {
		return fail(err)
	}
	log.Info("sandbox up", "restored_from", imageDir, "addr", spec.Network.GuestAddr, "accel", r.accel, "took", time.Since(begin))
	return nil
}

// templateImage returns the template's disk image, made once per key.
func (r *Runtime) templateImage(ctx context.Context, a sandbox.Artifact) (string, error) {
	key := a.Key
	if key == "" {
		key = a.RootFS
	}
	p := filepath.Join(r.cacheDir, "template-"+shortHash(key+"\x00"+a.RootFS)+".img")
	err := r.once(p, func() error {
		begin := time.Now()
		if err := imageOf(ctx, p, a.RootFS); err != nil {
			return err
		}
		r.log.Info("made the template's disk image", "template", a.Name, "image", p, "took", time.Since(begin))
		if err := prune(r.cacheDir, "template-*.img", keepImages); err != nil {
			r.log.Warn("removing old template disk images", "err", err)
		}
		return nil
	})
	return p, err
}

// filesImage returns the disk of the sandbox's host files (an empty one
// without: the VM always has the same devices, so any checkpoint restores
// into any sandbox).
func (r *Runtime) filesImage(ctx context.Context, files []sandbox.File) (string, []vminit.File, error) {
	if len(files) == 0 {
		p := filepath.Join(r.cacheDir, "files-none.img")
		err := r.once(p, func() error { return imageOf(ctx, p, r.emptyDir()) })
		return p, nil, err
	}
	key, err := filesKey(files)
	if err != nil {
		return "", nil, err
	}
	p := filepath.Join(r.cacheDir, "files-"+key+".img")
	err = r.once(p, func() error {
		if err := filesDisk(ctx, r.cacheDir, p, files); err != nil {
			return err
		}
		if err := prune(r.cacheDir, "files-????????????????.img", keepImages); err != nil {
			r.log.Warn("removing old files disk images", "err", err)
		}
		return nil
	})
	var out []vminit.File
	for i, f := range files {
		out = append(out, vminit.File{Name: strconv.Itoa(i), Target: f.Target})
	}
	return p, out, err
}

// bridge joins the namespace's eth0 to a bridge, br0, on which QEMU's tap
// lands: the guest then owns the link's guest address, eth0 none.
func bridge(id string) error {
	h, err := netns.Handle(id)
	if err != nil {
		return err
	}
	defer h.Close()
	eth, err := h.LinkByName("eth0")
	if err != nil {
		return err
	}
	addrs, _ := h.AddrList(eth, netlink.FAMILY_ALL)
	for _, a := range addrs {
		if err := h.AddrDel(eth, &a); err != nil {
			return fmt.Errorf("freeing eth0's address for the guest: %w", err)
		}
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	if err := h.LinkAdd(br); err != nil {
		return fmt.Errorf("making the bridge: %w", err)
	}
	if err := h.LinkSetMaster(eth, br); err != nil {
		return fmt.Errorf("bridging eth0: %w", err)
	}
	return h.LinkSetUp(br)
}

// attachTap puts the tap device QEMU made in the sandbox's namespace on
// its bridge (QEMU, confined, may run no script to do it).
func (r *Runtime) attachTap(ctx context.Context, id string, exited <-chan struct{}) error {
	h, err := netns.Handle(id)
	if err != nil {
		return err
	}
	defer h.Close()
	for {
		tap, err := h.LinkByName("tap0")
		if err == nil {
			br, err := h.LinkByName("br0")
			if err != nil {
				return err
			}
			if err := h.LinkSetMaster(tap, br); err != nil {
				return fmt.Errorf("bridging the VM's tap: %w", err)
			}
			return h.LinkSetUp(tap)
		}
		select {
		case <-exited:
			return fmt.Errorf("%w: %s", errExited, r.tails(id))
		case <-ctx.Done():
			return r.whyNoAnswer(ctx, id, exited, errors.New("waiting for QEMU's tap device"))
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// network makes the sandbox's network namespace, its egress and the
// bridge its VM's tap joins.
func network(spec sandbox.Spec) error {
	link := netns.Link{HostAddr: spec.Network.HostAddr, GuestAddr: spec.Network.GuestAddr, PrefixLen: spec.Network.PrefixLen}
	egress := &netns.Egress{Internet: spec.Network.Internet, AllowTo: spec.Network.Allow, APIPort: spec.Network.APIPort, Names: spec.Network.Names}
	if err := netns.CreateWithEgress(spec.ID, link, egress); err != nil {
		return err
	}
	return bridge(spec.ID)
}

// startGuest tells a booted VM's init its first process, or brings a
// restored one in from imageDir and gives it its new address.
func (r *Runtime) startGuest(ctx context.Context, spec sandbox.Spec, exited <-chan struct{}, files []vminit.File, imageDir string, image record) error {
	id := spec.ID
	guestNet := vminit.Net{Addr: spec.Network.GuestAddr.String(), PrefixLen: spec.Network.PrefixLen, Gateway: spec.Network.HostAddr.String()}
	if imageDir == "" {
		pids := spec.Limits.Pids
		if pids > 0 && spec.Limits.Processes > 0 {
			pids = max(pids, spec.Limits.Processes)
		}
		req := vminit.Request{Op: "start", TimeUnixNano: time.Now().UnixNano(), Start: &vminit.Start{
			Args: spec.Args, Env: spec.Env, Files: files, Net: guestNet,
			Pids: pids, OpenFiles: spec.Limits.OpenFiles, Processes: spec.Limits.Processes}}
		_, err := r.ask(ctx, id, exited, req)
		return err
	}
	if err := r.awaitIncoming(ctx, id, exited, imageDir, image.RAMFile); err != nil {
		return fmt.Errorf("%w: %w", sandbox.ErrImage, err)
	}
	req := vminit.Request{Op: "net", Net: &guestNet, TimeUnixNano: time.Now().UnixNano()}
	if _, err := r.ask(ctx, id, exited, req); err != nil {
		return fmt.Errorf("re-addressing the restored guest: %w", err)
	}
	return nil
}

// start launches QEMU for sandbox id inside its namespace, to be restored
// from the checkpoint in imageDir (recorded as image) when set, and
// returns a channel closed when it exits.
func (r *Runtime) start(id string, rec record, rootImg, filesImg, imageDir string, image record) (<-chan struct{}, error) {
	// QEMU gets its disks (and a checkpoint's memory) as open files, in
	// fd sets: confined, it could not open them by path, and the block
	// layer reopens an image (read-only, when a migration ends) from its
	// set, never from the file system.
	var extra []*os.File
	defer func() {
		for _, f := range extra {
			f.Close()
		}
	}()
	var fdArgs, ramArg []string
	switch {
	case imageDir == "":
		ram, err := newRAM(rec.MemoryBytes)
		if err != nil {
			return nil, err
		}
		extra = append(extra, ram)
		ramArg = ramArgs(rec.MemoryBytes, true)
	case image.RAMFile:
		ram, err := r.shared.get(filepath.Join(imageDir, imageRAM))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", sandbox.ErrImage, err)
		}
		extra = append(extra, ram)
		ramArg = ramArgs(rec.MemoryBytes, false)
	default:
		ramArg = []string{"-object", fmt.Sprintf("memory-backend-ram,id=mem,size=%dM", rec.MemoryBytes>>20)}
	}
	add := func(path string, flag, set int) error {
		f, err := os.OpenFile(path, flag, 0)
		if err != nil {
			return err
		}
		extra = append(extra, f)
		fdArgs = append(fdArgs, "-add-fd", fmt.Sprintf("fd=%d,set=%d", 2+len(extra), set))
		return nil
	}
	for i, d := range []struct {
		path  string
		flags []int
	}{
		{rootImg, []int{os.O_RDONLY}},
		{r.upperPath(id), []int{os.O_RDWR, os.O_RDONLY}},
		{filesImg, []int{os.O_RDONLY}},
	} {
		for _, fl := range d.flags {
			if err := add(d.path, fl, i+1); err != nil {
				return nil, err
			}
		}
	}
	args := r.args(id, rec, ramArg, fdArgs, imageDir)
	logf, err := os.OpenFile(r.qemuLog(id), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = extra
	cmd.Dir = r.dir(id)
	// Its own session: the VM outlives the server.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting QEMU: %w", err)
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	start := hostproc.Start(pid)
	if err := os.WriteFile(r.pidPath(id), []byte(strconv.Itoa(pid)+" "+start+"\n"), 0o600); err != nil {
		_ = cmd.Process.Kill()
		return nil, err
	}
	return exited, nil
}

// args is QEMU's command line (under nsenter, in the sandbox's network
// namespace): the machine, its memory (ramArg), the disks and memory
// image in fd sets (fdArgs), the console, control and network devices, and
// how QEMU confines itself.
func (r *Runtime) args(id string, rec record, ramArg, fdArgs []string, imageDir string) []string {
	machine, cpu := "q35,accel=tcg", "max"
	if r.accel == AccelKVM {
		machine, cpu = "q35,accel=kvm", "host"
	}
	machine += ",memory-backend=mem"
	kernel := r.kernel
	if imageDir != "" {
		kernel = r.kernelStub
	}
	args := []string{
		"--net=" + netns.Path(id), "--", r.qemu,
		"-name", "lizard-" + id,
		"-machine", machine, "-cpu", cpu,
		"-smp", strconv.Itoa(rec.CPUs), "-m", strconv.FormatInt(rec.MemoryBytes>>20, 10) + "M",
		ramArg[0], ramArg[1],
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-kernel", kernel, "-initrd", r.initramfs,
		// No transparent huge pages in the guest: its kernel would back
		// Python's heap with 2 MiB pages, zero them whole and copy small
		// pages into them (khugepaged), and each page so written in a
		// restored VM is a copy of its own instead of the template's.
		"-append", "console=ttyS0 quiet panic=-1 tsc=reliable no_timer_check reboot=t transparent_hugepage=never",
		// The serial console is a socket the Runtime copies to
		// console.log within a budget (logConsole). QEMU waits for that
		// reader before it runs the guest, so the log holds the boot.
		"-chardev", "socket,id=console,path=" + r.consoleSock(id) + ",server=on,wait=on",
		"-serial", "chardev:console",
		"-qmp", "unix:" + r.qmpPath(id) + ",server=on,wait=off",
	}
	args = append(args, fdArgs...)
	args = append(args,
		"-drive", "file=/dev/fdset/1,format=raw,if=none,id=root,readonly=on",
		"-device", "virtio-blk-pci,drive=root,serial="+vminit.SerialRoot,
		"-drive", "file=/dev/fdset/2,format=qcow2,if=none,id=upper,discard=unmap,file.locking=off",
		"-device", "virtio-blk-pci,drive=upper,serial="+vminit.SerialUpper,
		"-drive", "file=/dev/fdset/3,format=raw,if=none,id=files,readonly=on",
		"-device", "virtio-blk-pci,drive=files,serial="+vminit.SerialFiles,
		"-netdev", "tap,id=net0,ifname=tap0,script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=net0,mac=52:54:00:6c:7a:01",
		"-device", "virtio-serial-pci",
		"-chardev", "socket,id=ctl,path="+r.ctlPath(id)+",server=on,wait=off",
		"-device", "virtserialport,chardev=ctl,name="+vminit.PortName,
		// Once its devices are open QEMU needs no more of the host: it
		// drops root for a user of its own, shuts itself in an empty
		// directory, and a seccomp filter refuses it new processes,
		// obsolete system calls and scheduling controls.
		"-runas", fmt.Sprintf("%d:%d", vmmUID(r.dir(id)), vmmUID(r.dir(id))),
		"-chroot", r.emptyDir(),
		"-sandbox", "on,obsolete=deny,spawn=deny,resourcecontrol=deny",
	)
	if imageDir != "" {
		// awaitIncoming starts the migration in once the capabilities
		// the image was made with are set.
		args = append(args, "-incoming", "defer")
	}
	return args
}

// maxReply bounds one answer of the guest's init.
const maxReply = 64 << 10

// ask sends the guest's init one request over the control port and
// returns its reply; an error reply is an error.
func (r *Runtime) ask(ctx context.Context, id string, exited <-chan struct{}, req vminit.Request) (vminit.Reply, error) {
	var reply vminit.Reply
	conn, err := r.dialWhileUp(ctx, id, r.ctlPath(id), exited)
	if err != nil {
		return reply, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	go func() {
		select {
		case <-exited:
			conn.SetDeadline(time.Now())
		case <-ctx.Done():
		}
	}()
	b, _ := json.Marshal(req)
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return reply, fmt.Errorf("asking the guest to %s: %w", req.Op, err)
	}
	// The guest is not trusted: its answer is read up to a bound.
	line, err := bufio.NewReader(io.LimitReader(conn, maxReply)).ReadBytes('\n')
	if err != nil {
		return reply, r.whyNoAnswer(ctx, id, exited, fmt.Errorf("waiting for the guest to %s: %w", req.Op, err))
	}
	if err := json.Unmarshal(line, &reply); err != nil {
		return reply, fmt.Errorf("decoding the guest's answer %q: %w", line, err)
	}
	if !reply.OK {
		return reply, fmt.Errorf("the guest could not %s: %s", req.Op, reply.Error)
	}
	return reply, nil
}

// whyNoAnswer turns an interrupted wait on the guest into the reason:
// QEMU exited (with its log and the console's last lines), or time ran out.
func (r *Runtime) whyNoAnswer(ctx context.Context, id string, exited <-chan struct{}, err error) error {
	select {
	case <-exited:
		return fmt.Errorf("%w: %w: %s", errExited, err, r.tails(id))
	default:
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w (the guest is slow: under software emulation, see --qemu-boot-timeout): %s", ctx.Err(), r.tails(id))
	}
	return err
}

func (r *Runtime) tails(id string) string {
	return "qemu: " + tail(r.qemuLog(id)) + "; console: " + tail(r.consolePath(id))
}

// dialWhileUp connects to the unix socket QEMU makes at path, retrying
// until it exists, QEMU exits or ctx ends.
func (r *Runtime) dialWhileUp(ctx context.Context, id, path string, exited <-chan struct{}) (net.Conn, error) {
	for {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			return conn, nil
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("%w: %s", errExited, r.tails(id))
		case <-ctx.Done():
			return nil, r.whyNoAnswer(ctx, id, exited, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// awaitIncoming loads the checkpoint in imageDir into the waiting QEMU
// and waits for it to run the guest; ramFile says the image's RAM is
// mapped from its file, not in the migration stream.
func (r *Runtime) awaitIncoming(ctx context.Context, id string, exited <-chan struct{}, imageDir string, ramFile bool) error {
	conn, err := r.dialWhileUp(ctx, id, r.qmpPath(id), exited)
	if err != nil {
		return err
	}
	conn.Close()
	q, err := dialQMP(ctx, r.qmpPath(id))
	if err != nil {
		return r.whyNoAnswer(ctx, id, exited, err)
	}
	defer q.Close()
	if err := q.ignoreShared(ramFile); err != nil {
		return err
	}
	mem, err := os.Open(filepath.Join(imageDir, imageMemory))
	if err != nil {
		return err
	}
	err = q.sendFile("incoming", mem)
	mem.Close()
	if err != nil {
		return err
	}
	if _, err := q.do("migrate-incoming", map[string]any{"uri": "fd:incoming"}); err != nil {
		return r.whyNoAnswer(ctx, id, exited, err)
	}
	for {
		st, err := q.status()
		if err != nil {
			return r.whyNoAnswer(ctx, id, exited, fmt.Errorf("loading the checkpoint: %w", err))
		}
		switch st {
		case "running":
			return nil
		case "paused":
			// The checkpoint was of a stopped VM (Checkpoint stops it
			// first): QEMU loads it stopped.
			if _, err := q.do("cont", nil); err != nil {
				return fmt.Errorf("starting the restored VM: %w", err)
			}
			continue
		case "inmigrate", "prelaunch", "restore-vm", "finish-migrate":
		default:
			return fmt.Errorf("loading the checkpoint: the VM is %s: %s", st, r.tails(id))
		}
		select {
		case <-exited:
			return fmt.Errorf("loading the checkpoint: %w: %s", errExited, r.tails(id))
		case <-ctx.Done():
			return r.whyNoAnswer(ctx, id, exited, errors.New("loading the checkpoint"))
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// tail returns the last 1 KiB of a log file.
func tail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > 1024 {
		f.Seek(fi.Size()-1024, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return strings.TrimSpace(string(b))
}

// qemuProc returns the pid of sandbox id's QEMU if it is still the
// process that was started.
func (r *Runtime) qemuProc(id string) (int, bool) {
	b, err := os.ReadFile(r.pidPath(id))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, hostproc.Start(pid) == f[1]
}

// State implements sandbox.Runtime: running while its QEMU runs.
func (r *Runtime) State(ctx context.Context, id string) (sandbox.State, error) {
	if err := sandbox.CheckID(id); err != nil {
		return "", fmt.Errorf("getting state: %w: %v", sandbox.ErrNotFound, err)
	}
	if _, err := os.Lstat(r.dir(id)); err != nil {
		return "", fmt.Errorf("getting state of sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	if _, ok := r.qemuProc(id); ok {
		return sandbox.Running, nil
	}
	return sandbox.Stopped, nil
}

// List implements sandbox.Runtime.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	ents, err := os.ReadDir(r.boxDir)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && sandbox.ValidID(e.Name()) {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}

// Kill implements sandbox.Runtime.
func (r *Runtime) Kill(ctx context.Context, id string) error {
	if err := sandbox.CheckID(id); err != nil {
		return nil
	}
	r.enter(false)
	defer r.busy.Done()
	unlock := r.lock(id)
	defer unlock()
	if err := r.remove(context.WithoutCancel(ctx), id); err != nil {
		return fmt.Errorf("killing sandbox %s: %w", id, err)
	}
	return nil
}

// Checkpoint implements sandbox.Runtime: the VM is stopped, its memory
// and devices migrated into imageDir/memory and its writable disk copied
// beside; then it runs on, or is removed.
func (r *Runtime) Checkpoint(ctx context.Context, id, imageDir string, leaveRunning bool) error {
	if err := sandbox.CheckID(id); err != nil {
		return fmt.Errorf("checkpointing sandbox: %w: %v", sandbox.ErrNotFound, err)
	}
	unlock := r.lock(id)
	defer unlock()
	begin := time.Now()
	if _, err := os.Lstat(r.dir(id)); err != nil {
		return fmt.Errorf("checkpointing sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	if _, ok := r.qemuProc(id); !ok {
		return fmt.Errorf("checkpointing sandbox %s: %w", id, sandbox.ErrNotRunning)
	}
	ctx, cancel := context.WithTimeout(ctx, r.bootTimeout)
	defer cancel()
	if err := r.checkpoint(ctx, id, imageDir, leaveRunning); err != nil {
		return fmt.Errorf("checkpointing sandbox %s: %w", id, err)
	}
	r.log.Info("checkpointed sandbox", "sandbox_id", id, "image", imageDir, "leave_running", leaveRunning, "took", time.Since(begin))
	if !leaveRunning {
		if err := r.remove(context.WithoutCancel(ctx), id); err != nil {
			return fmt.Errorf("removing sandbox %s after checkpoint: %w", id, err)
		}
	}
	return nil
}

func (r *Runtime) checkpoint(ctx context.Context, id, imageDir string, leaveRunning bool) (err error) {
	if err := os.MkdirAll(imageDir, 0o700); err != nil {
		return err
	}
	rec, err := readRecord(r.recordPath(id))
	if err != nil {
		return fmt.Errorf("reading the VM's record: %w", err)
	}
	pid, ok := r.qemuProc(id)
	if !ok {
		return sandbox.ErrNotRunning
	}
	q, err := dialQMP(ctx, r.qmpPath(id))
	if err != nil {
		return err
	}
	defer q.Close()
	if _, err := q.do("stop", nil); err != nil {
		return err
	}
	defer func() {
		// A VM left running goes on even when the checkpoint failed.
		if leaveRunning || err != nil {
			if _, cerr := q.do("cont", nil); cerr != nil && err == nil {
				err = fmt.Errorf("resuming the VM: %w", cerr)
			}
		}
	}()
	mem, err := os.OpenFile(filepath.Join(imageDir, imageMemory), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer mem.Close()
	if err := q.sendFile("image", mem); err != nil {
		return err
	}
	// A booted VM's RAM goes to a file of its own, which VMs restored
	// from the image share; the stream gets the devices.
	if err := q.ignoreShared(rec.SharedRAM); err != nil {
		return err
	}
	if err := q.migrate(ctx, "fd:image"); err != nil {
		return err
	}
	ramPath := filepath.Join(imageDir, imageRAM)
	if rec.SharedRAM {
		if err := copyRAMOut(pid, ramPath, rec.MemoryBytes); err != nil {
			return err
		}
	} else if err := os.Remove(ramPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// The migration flushed the disk and let go of it until cont: the
	// copy is of the disk the saved memory expects.
	if err := copyFile(r.upperPath(id), filepath.Join(imageDir, imageDisk+".tmp")); err != nil {
		return fmt.Errorf("copying the writable disk: %w", err)
	}
	if err := os.Rename(filepath.Join(imageDir, imageDisk+".tmp"), filepath.Join(imageDir, imageDisk)); err != nil {
		return err
	}
	image := rec
	image.SharedRAM, image.RAMFile = false, rec.SharedRAM
	image.Build = r.imageKey
	b, _ := json.Marshal(image)
	return os.WriteFile(filepath.Join(imageDir, imageRecordName), b, 0o600)
}

// remove ends and deletes everything sandbox id has; what is already gone
// is skipped. The directory goes last, so a failed removal is retried.
func (r *Runtime) remove(ctx context.Context, id string) error {
	if _, err := os.Lstat(r.dir(id)); err != nil {
		return nil // not this Runtime's
	}
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	var errs []error
	if pid, ok := r.qemuProc(id); ok {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for hostproc.Start(pid) != "" {
			if ctx.Err() != nil {
				errs = append(errs, fmt.Errorf("waiting for QEMU (pid %d) to exit: %w", pid, ctx.Err()))
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Whatever else still names the sandbox's directory (an nsenter
	// killed before it became QEMU).
	for _, pid := range procsNaming(r.dir(id)) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if err := netns.Remove(id); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(r.socks(id)); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := os.RemoveAll(r.dir(id)); err != nil {
		return fmt.Errorf("removing sandbox directory: %w", err)
	}
	return nil
}
