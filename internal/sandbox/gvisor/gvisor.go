// Package gvisor runs sandboxes with gVisor's runsc: each sandbox is one
// runsc container on the systrap platform, with runsc's own network stack
// (--network=sandbox) bound to a network namespace and veth pair made by
// package netns, and a per-sandbox writable overlay over the shared,
// read-only template root filesystem.
//
// Everything a sandbox has lives under Config.Dir (runsc's state in
// Dir/state, the bundle, console log and overlay store in Dir/sandboxes/ID)
// or is named after its ID (the namespace lizard-ID, the host veth, the
// cgroups /lizard/ID), so a restarted server finds every sandbox, even half
// made ones, and can remove all of it. The directory Dir/sandboxes/ID is
// made first and removed last: it marks the sandbox as this Runtime's, so
// that two Runtimes on one machine (a server and a test run) never list or
// remove each other's sandboxes through the machine-wide names. Those
// names are also recorded machine-wide, in OwnersDir/ID holding Dir, while
// they exist: a Runtime that starts removes the ones whose sandbox
// directory is gone (their server was killed mid-removal and its data
// deleted), which nothing else could ever trace back to an owner.
package gvisor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/internal/keylock"
	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sandbox/hostproc"
	"github.com/lizard-build/lizard/internal/trace"
	"github.com/lizard-build/lizard/internal/version"
)

var (
	_ sandbox.Runtime   = (*Runtime)(nil)
	_ sandbox.DiskSaver = (*Runtime)(nil)
)

// Config configures a Runtime.
type Config struct {
	Runsc  string       // path to a static runsc binary
	Dir    string       // work directory; created if missing
	Logger *slog.Logger // nil means slog.Default()
	// SpareNetworks is how many network namespaces with their veth pair
	// are kept made ahead of need (netns.Prepare); 0 means
	// DefaultSpareNetworks, a negative number none.
	SpareNetworks int
	// Unrecorded are the files (sandbox.Spec.Files' Target → a host
	// path) to restore an image with that records none of its own, made
	// by Lizard 0.1.0 or before (files.go): an image needing one that is
	// missing is refused. Targets not named get the current file.
	Unrecorded map[string]string
}

// DefaultSpareNetworks covers a burst of a few creates at once; a kill
// gives its sandbox's network back, so a steady create-kill loop rarely
// waits for one.
const DefaultSpareNetworks = 4

// Runtime is the gVisor sandbox backend.
type Runtime struct {
	runsc    string
	root     string // Config.Dir, absolute
	stateDir string // runsc --root
	boxDir   string // one directory per sandbox
	log      *slog.Logger
	imageKey string // hash of the runsc binary (ImageKey)
	// unrecorded is Config.Unrecorded.
	unrecorded map[string]string

	// locks serialises every operation on one ID (two Kills of one
	// sandbox, Create racing Kill).
	locks keylock.Map
	// mu guards procs, the sandbox process runsc last reported running
	// for each sandbox: State, called for every sandbox at each liveness
	// sweep and several times a second while calls are in flight, then
	// needs no runsc process while that process lives; the guards,
	// removals and closed, set by Close.
	mu     sync.Mutex
	procs  map[string]hostProc
	guards map[string]*guard // memguard.go
	// kept are the copies of Spec.Files' sources under filesDir, by
	// source (files.go).
	kept map[string]keptFile
	// heapSums are the kept heaps' SHA-256 (hex) by their directory
	// under filesDir (files.go SharedFiles): hashed once, never changed.
	heapSums sync.Map
	// removing counts the removals under way per ID (watch skips them).
	removing map[string]int
	// imaged are the sandboxes checkpointed since they started: a pause
	// (a checkpoint, then Kill) is resumed under the same ID, whose
	// restore would wait for a removal left to the background, so their
	// Kill removes all at once.
	imaged map[string]bool
	// builds are the runsc builds of the sandboxes, by ID, as their
	// records say (runsc.go).
	builds map[string]string
	closed bool
	// busy counts the operations under way, for Close to wait on.
	busy sync.WaitGroup
}

// hostProc names one host process for good: a PID and its start time, so
// that a reused PID is not taken for it.
type hostProc struct {
	pid   int
	start string
}

// OwnersDir holds a file per sandbox of every Runtime on this machine,
// named by its ID and holding the Runtime's Dir, for as long as the
// machine-wide names of the sandbox (namespace, veth, nftables table,
// cgroups) may exist. It is on a tmpfs: those names do not outlive a
// reboot either.
var OwnersDir = "/run/lizard/sandboxes"

// ErrClosed is returned by Create and Restore after Close.
var ErrClosed = errors.New("gvisor runtime closed")

// cleanupTimeout bounds removal of a sandbox, which runs even when the
// caller's context is already cancelled.
const cleanupTimeout = 30 * time.Second

// New returns a Runtime keeping its state under cfg.Dir.
func New(cfg Config) (*Runtime, error) {
	if cfg.Runsc == "" {
		return nil, errors.New("gvisor: no runsc binary configured")
	}
	if _, err := os.Stat(cfg.Runsc); err != nil {
		return nil, fmt.Errorf("gvisor: checking runsc: %w", err)
	}
	if cfg.Dir == "" {
		return nil, errors.New("gvisor: no work directory configured")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("gvisor: resolving %s: %w", cfg.Dir, err)
	}
	r := &Runtime{
		runsc:    cfg.Runsc,
		root:     dir,
		stateDir: filepath.Join(dir, "state"),
		boxDir:   filepath.Join(dir, "sandboxes"),
		log:      cfg.Logger,
		procs:    map[string]hostProc{},
		guards:   map[string]*guard{},
		removing: map[string]int{},
		imaged:   map[string]bool{},
		builds:   map[string]string{},
		kept:     map[string]keptFile{},

		unrecorded: cfg.Unrecorded,
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.log = r.log.With("runtime", "gvisor")
	if r.imageKey, err = hashFile(cfg.Runsc); err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	for _, d := range []string{r.stateDir, r.boxDir, OwnersDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("gvisor: creating %s: %w", d, err)
		}
	}
	if err := r.keepRunsc(); err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	r.removeOrphans()
	switch {
	case cfg.SpareNetworks == 0:
		netns.Prepare(DefaultSpareNetworks)
	case cfg.SpareNetworks > 0:
		netns.Prepare(cfg.SpareNetworks)
	}
	return r, nil
}

// Close makes Create and Restore fail with ErrClosed from now on, waits,
// up to ctx, for the operations under way to end, among them the removal
// of a sandbox whose Create was interrupted by its cancelled context, and
// stops guarding the sandboxes' memory (they keep running, with the host's
// OOM killer back in charge until a new Runtime's State finds them). A
// server calls it last on its way out: exiting earlier would cut that
// removal short and leave the sandbox's namespace, veth and rules behind.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		r.busy.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("closing gvisor runtime: waiting for operations under way: %w", ctx.Err())
	}
	r.mu.Lock()
	ids := make([]string, 0, len(r.guards))
	for id := range r.guards {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	for _, id := range ids {
		r.unwatch(id)
	}
	// The spare networks, and the veths and rules of sandboxes removed
	// last, go before the server does.
	netns.Drain()
	return err
}

// enter counts an operation as under way; false once the Runtime is
// closed and create is set (removals always proceed: they are how a
// closing server cleans up).
func (r *Runtime) enter(create bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed && create {
		return false
	}
	r.busy.Add(1)
	return true
}

func (r *Runtime) ownerPath(id string) string { return filepath.Join(OwnersDir, id) }

// claimOwner records this Runtime as the owner of id's machine-wide names.
func (r *Runtime) claimOwner(id string) error {
	f, err := os.OpenFile(r.ownerPath(id), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(r.root + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// dropOwner removes id's owner record if it names this Runtime.
func (r *Runtime) dropOwner(id string) error {
	b, err := os.ReadFile(r.ownerPath(id))
	if errors.Is(err, os.ErrNotExist) || (err == nil && strings.TrimSpace(string(b)) != r.root) {
		return nil
	}
	if err == nil {
		err = os.Remove(r.ownerPath(id))
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing owner record: %w", err)
	}
	return nil
}

// removeOrphans removes the machine-wide names of every sandbox whose
// owner record names a Runtime directory without that sandbox's
// directory: its Runtime's process ended in the middle of making or
// removing it (a server stopped during start-up) and its data is gone, so
// no List will ever find it, while its veth keeps holding an address of
// some server's pool. A live Runtime has the directory while the record
// exists (made before it), but for the moment between the directory's
// removal and the end of the sandbox's network release, when the
// sandbox's processes are gone already: removing its network twice is
// harmless (both removals skip what the other removed).
func (r *Runtime) removeOrphans() {
	ents, err := os.ReadDir(OwnersDir)
	if err != nil {
		r.log.Warn("listing sandbox owner records", "dir", OwnersDir, "err", err)
		return
	}
	for _, e := range ents {
		id := e.Name()
		if !sandbox.ValidID(id) {
			continue
		}
		b, err := os.ReadFile(r.ownerPath(id))
		if err != nil {
			continue
		}
		owner := strings.TrimSpace(string(b))
		dir := filepath.Join(owner, "sandboxes", id)
		if !filepath.IsAbs(owner) || isDir(dir) {
			continue
		}
		log := r.log.With("sandbox_id", id, "owner", owner)
		log.Warn("removing the leftovers of a sandbox whose runtime directory is gone")
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		// Frozen processes (memguard.go) could not even die.
		if err := thawGuest(id); err != nil {
			log.Warn("thawing leftover processes", "err", err)
		}
		if err := r.waitGone(ctx, id, procsWithBundle(dir)); err != nil {
			log.Error("ending leftover processes", "err", err)
		}
		errs := []error{removeCgroups(ctx, id), netns.Remove(id)}
		cancel()
		if err := errors.Join(errs...); err != nil {
			log.Error("removing leftovers; kept the owner record to retry at the next start", "err", err)
			continue
		}
		if err := os.Remove(r.ownerPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			log.Error("removing owner record", "err", err)
		}
	}
}

// Name implements sandbox.Runtime.
func (r *Runtime) Name() string { return "gvisor" }

// ImageKey implements sandbox.Runtime: a checkpoint restores only with the
// runsc build that took it.
func (r *Runtime) ImageKey() string { return "gvisor-" + r.imageKey }

func hashFile(p string) (string, error) {
	sum, err := sha256File(p)
	if err != nil {
		return "", err
	}
	return sum[:16], nil
}

// sha256File is the hex SHA-256 of file p.
func sha256File(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("hashing %s: %w", p, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// containerID is the runsc container ID of sandbox id. runsc resolves IDs
// by prefix and refuses one that is a prefix of another ("a" while "a1"
// exists), so every ID gets a terminator that sandbox IDs cannot contain.
func containerID(id string) string { return id + "." }

func (r *Runtime) lock(id string) func() { return r.locks.Lock(id) }

func (r *Runtime) dir(id string) string        { return filepath.Join(r.boxDir, id) }
func (r *Runtime) overlayDir(id string) string { return filepath.Join(r.dir(id), "overlay") }
func (r *Runtime) logPath(id string) string    { return filepath.Join(r.dir(id), "console.log") }
func (r *Runtime) tmpDir(id string) string     { return filepath.Join(r.dir(id), "tmp") }

// runscFlags are what a sandbox's runsc flags depend on besides its ID.
type runscFlags struct {
	disk int64 // its writable layers' size (0: the default)
	lay  layout
	// heap: it maps a template's heap from a file (Spec.HeapDir), so its
	// runsc copies only the pages written of a private file mapping
	// (build/runsc/cow-4k.patch). Not every sandbox's: the .so files'
	// data then copies page by page too, and a default sandbox's first
	// call took ~8 ms longer for those faults (bench/create_ab.py).
	heap bool
}

// globalArgs are runsc's flags before the subcommand. runsc keeps no
// record of them; only the ones that make a sandbox (run, create,
// restore) read the overlay's and the heap's.
func (r *Runtime) globalArgs(id string, f runscFlags) []string {
	overlay := overlayArg(r.overlayDir(id), f.disk, f.lay)
	// Each gofer gets a new empty network namespace: runsc's default shares
	// one, bind-mounted into the state directory, which would then never be
	// removable.
	// --allow-rootfs-tar-annotation: only Lizard writes the OCI spec, and
	// it names a saved layer only for a resume from disk (SaveDisk).
	args := []string{"--root", r.stateDir, "--platform=systrap", "--network=sandbox", "--gofer-network-namespace=new", overlay,
		"--allow-rootfs-tar-annotation"}
	if f.heap {
		args = append(args, "--lizard-copy-written-pages")
	}
	return args
}

// overlayArg is runsc's --overlay2: a writable layer over the root
// filesystem, backed by a file in dir (on disk, not in memory) and of
// diskBytes, and with layoutBounded one more over every writable bind
// mount, which is /tmp alone (the others are read-only and runsc leaves
// those bare; layoutVolumes and layoutVolumesFirst have writable volumes,
// which must stay bare). runsc sizes each layer alike, so / and /tmp may
// each hold diskBytes.
func overlayArg(dir string, diskBytes int64, lay layout) string {
	if lay == layoutDirect {
		return "--overlay2=none"
	}
	mounts := "root"
	if lay == layoutBounded {
		mounts = "all"
	}
	arg := "--overlay2=" + mounts + ":dir=" + dir
	if diskBytes > 0 {
		arg += ",size=" + strconv.FormatInt(diskBytes, 10)
	}
	return arg
}

// command runs a short runsc subcommand and returns its stdout; its stderr
// goes into the error.
func (r *Runtime) command(ctx context.Context, id string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, r.runscOf(id), append(r.globalArgs(id, runscFlags{lay: currentLayout}), args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A runsc child that kept our pipes open must not hang us.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("runsc %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// start runs a runsc subcommand that leaves sandbox processes behind
// (run, create, restore). Its output and the container's go to the
// sandbox's console log, not to pipes: the sandbox inherits them and would
// keep a pipe open forever. Setsid puts the sandbox in its own session, so
// it outlives the server and its process group.
func (r *Runtime) start(ctx context.Context, id string, flags runscFlags, args ...string) error {
	f, err := os.OpenFile(r.logPath(id), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening console log: %w", err)
	}
	defer f.Close()
	off, _ := f.Seek(0, io.SeekEnd)

	cmd := exec.CommandContext(ctx, r.runscOf(id), append(r.globalArgs(id, flags), args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	// The rootfs tar annotation's path is relative to it (ociSpec).
	cmd.Dir = r.dir(id)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("runsc %s: %w: %s", args[0], err, tail(r.logPath(id), off))
	}
	return nil
}

// tail returns what a file gained after offset off, at most its last 2 KiB.
func tail(path string, off int64) string {
	b, err := os.ReadFile(path)
	if err != nil || off > int64(len(b)) {
		return ""
	}
	b = b[off:]
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return strings.TrimSpace(string(b))
}

// Create implements sandbox.Runtime.
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) error {
	lay := currentLayout
	if len(spec.Volumes) > 0 {
		lay = layoutVolumesFirst
	}
	if spec.WritableRoot {
		lay = layoutDirect
	}
	files, kept, err := r.keepFiles(spec.Files)
	if err != nil {
		return fmt.Errorf("creating sandbox %s: %w", spec.ID, err)
	}
	spec.Files = files
	return r.boot(ctx, spec, r.ImageKey(), "", lay, kept, "", nil)
}

// Restore implements sandbox.Runtime. The image must have been taken of a
// sandbox with spec's disk limit: gVisor restores the writable layer (a
// tmpfs in the Sentry, with its size) as it was checkpointed, and has no
// way to resize it then (no tmpfs remount with size=, and runsc's
// --overlay2 size= only applies when a layer is made), so restoring it
// under another limit would silently keep the old one. Such an image is
// refused with ErrImage; the sandbox must boot instead.
func (r *Runtime) Restore(ctx context.Context, spec sandbox.Spec, imageDir string) error {
	if _, err := os.Stat(filepath.Join(imageDir, "checkpoint.img")); err != nil {
		return fmt.Errorf("restoring sandbox %s: %w: %v", spec.ID, sandbox.ErrImage, err)
	}
	rec, err := readRecord(filepath.Join(imageDir, imageRecordName))
	switch {
	case errors.Is(err, os.ErrNotExist):
		// An image of an older Lizard: the first layout, its disk
		// limit unknown.
		r.log.Warn("restoring an image without a runtime record: its disk limit is whatever it was made with", "sandbox_id", spec.ID, "image", imageDir)
		rec = imageRecord{Layout: layoutTmpfs, DiskBytes: spec.Limits.DiskBytes}
	case err != nil:
		return fmt.Errorf("restoring sandbox %s: %w: %v", spec.ID, sandbox.ErrImage, err)
	}
	build, err := r.restoreBuild(spec.ID, imageDir, rec)
	if err != nil {
		return err
	}
	if err := checkDisk(spec, rec); err != nil {
		return err
	}
	if rec.DiskTar {
		spec.Disk = restoredDisk
	}
	files, kept, err := r.restoredFiles(spec, imageDir, rec)
	if err != nil {
		return err
	}
	spec.Files = files
	if spec.HeapDir, err = r.restoredHeap(spec.ID, imageDir, rec); err != nil {
		return err
	}
	return r.boot(ctx, spec, build, imageDir, rec.Layout, kept, rec.Heap, nil)
}

func checkDisk(spec sandbox.Spec, rec imageRecord) error {
	if rec.DiskBytes != spec.Limits.DiskBytes {
		return fmt.Errorf("restoring sandbox %s: %w: it was taken with a writable layer of %s and gVisor restores that size, not the %s asked for; boot the sandbox instead",
			spec.ID, sandbox.ErrImage, mib(rec.DiskBytes), mib(spec.Limits.DiskBytes))
	}
	return nil
}

// RestoreFork implements sandbox.ForkRestorer: the copy's network, bundle
// and `runsc create` (about 40% of a restore) go while the parent is
// being checkpointed; `runsc restore` waits for the image. The image's
// layout and disk limit are the parent's, read from its record, which
// Checkpoint copies into the image.
func (r *Runtime) RestoreFork(ctx context.Context, spec sandbox.Spec, parent, imageDir string, wait func(context.Context) error) error {
	if err := sandbox.CheckID(parent); err != nil {
		return fmt.Errorf("restoring sandbox %s: %w", spec.ID, err)
	}
	rec, err := readRecord(filepath.Join(r.dir(parent), recordName))
	if err != nil {
		return fmt.Errorf("restoring sandbox %s: reading the record of its parent %s: %w: %v", spec.ID, parent, sandbox.ErrImage, err)
	}
	if err := checkDisk(spec, rec); err != nil {
		return err
	}
	if rec.DiskTar {
		spec.Disk = restoredDisk
	}
	files, kept, err := r.restoredFiles(spec, imageDir, rec)
	if err != nil {
		return err
	}
	spec.Files = files
	if spec.HeapDir, err = r.restoredHeap(spec.ID, imageDir, rec); err != nil {
		return err
	}
	// The parent's Sentry writes the image, in its build's format: the
	// copy runs that build too.
	return r.boot(ctx, spec, r.buildOf(parent), imageDir, rec.Layout, kept, rec.Heap, wait)
}

// imageRecord is what a checkpoint image must be restored with that runsc
// does not keep: written at boot into the sandbox directory (recordName),
// copied into each of its images (imageRecordName).
type imageRecord struct {
	Layout    layout `json:"layout"`
	DiskBytes int64  `json:"diskBytes"` // 0: the backend default
	// MemoryBytes is the sandbox's memory limit, for its guard
	// (memguard.go) when a new Runtime finds it running. Not checked on
	// restore: the memory limit is the cgroup's, set anew.
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// DiskTar: the sandbox was booted over a saved disk (Spec.Disk), so
	// its checkpoints carry the rootfs tar annotation, which each
	// restore's spec must repeat (with an empty tar: the layer is in the
	// checkpoint by then).
	DiskTar bool `json:"diskTar,omitempty"`
	// Runsc is the build of runsc (ImageKey) that runs the sandbox, set
	// at boot, and so the build that made an image of it; Lizard, in an
	// image's copy, the version of Lizard that ran it. An image is
	// restored by the build it names, refused while that build is not
	// kept (runsc.go); one without it is an older Lizard's, taken for the
	// current build's.
	Runsc  string `json:"runsc,omitempty"`
	Lizard string `json:"lizard,omitempty"`
	// Files are the kept copies of Lizard's own files the sandbox was
	// booted with (Spec.Files' Target → a path under filesDir), which a
	// restore mounts again (files.go); nil in images of Lizard 0.1.0 and
	// before.
	Files map[string]string `json:"files,omitempty"`
	// Heap is the kept copy of the directory the sandbox's kernel maps
	// its template's preloaded heap from (Spec.HeapDir): a directory
	// under filesDir holding api.HeapFile, which every restore of an
	// image naming it mounts read-only at api.HeapMount (files.go
	// keepHeap). The image holds the file too (imageHeapName), kept
	// from there by a restore on a node without the copy (restoredHeap).
	// HeapDir is a created sandbox's heap directory before its first
	// checkpoint keeps it; an image's record names Heap alone.
	Heap    string `json:"heap,omitempty"`
	HeapDir string `json:"heapDir,omitempty"`
}

// restoredDisk is Spec.Disk of a restore of an image with DiskTar.
const restoredDisk = "\x00restored"

// emptyTar is a tar archive of nothing: its end, two zero blocks.
var emptyTar = make([]byte, 1024)

// placeDisk puts the tar runsc reads for spec's rootfs annotation into
// the sandbox's directory: the saved layer, or for a restore an empty one.
func (r *Runtime) placeDisk(spec sandbox.Spec) error {
	dst := filepath.Join(r.dir(spec.ID), DiskLayerName)
	if spec.Disk == restoredDisk {
		return os.WriteFile(dst, emptyTar, 0o600)
	}
	src := filepath.Join(spec.Disk, DiskLayerName)
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("opening the saved disk: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying the saved disk: %w", err)
	}
	return out.Close()
}

const (
	recordName      = "runtime.json"
	imageRecordName = "lizard-runtime.json"
)

func readRecord(path string) (imageRecord, error) {
	var rec imageRecord
	b, err := os.ReadFile(path)
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("decoding %s: %w", path, err)
	}
	return rec, nil
}

func mib(n int64) string {
	if n <= 0 {
		return "the default size"
	}
	return strconv.FormatInt(n>>20, 10) + " MiB"
}

// boot makes a sandbox from scratch, or from a checkpoint image when
// imageDir is set, and removes whatever it made if anything fails.
//
// kept are the kept files' record (restoredFiles) and heap the kept heap's
// (restoredHeap, "" for none or one not kept yet), for the sandbox's own
// record, which its images copy.
func (r *Runtime) boot(ctx context.Context, spec sandbox.Spec, build, imageDir string, lay layout, kept map[string]string, heap string, wait func(context.Context) error) (err error) {
	verb := "creating"
	if imageDir != "" {
		verb = "restoring"
	}
	if err := sandbox.CheckID(spec.ID); err != nil {
		return fmt.Errorf("%s sandbox: %w", verb, err)
	}
	// runsc reports a bad root only as "waiting for sandbox to start: EOF".
	if fi, err := os.Stat(spec.Template.RootFS); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s sandbox %s: root filesystem %q is not a directory", verb, spec.ID, spec.Template.RootFS)
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

	if r.hasState(id) || netns.Exists(id) {
		return fmt.Errorf("%s sandbox %s: %w", verb, id, sandbox.ErrExists)
	}
	// The directory claims the ID, also against other processes.
	if err := os.Mkdir(r.dir(id), 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s sandbox %s: %w", verb, id, sandbox.ErrExists)
		}
		return fmt.Errorf("%s sandbox %s: %w", verb, id, err)
	}
	defer func() {
		if err != nil {
			// Whatever interrupted the create, ctx may be cancelled:
			// the removal gets its own bounded time (remove), and Close
			// waits for it.
			if rerr := r.remove(context.WithoutCancel(ctx), id, false); rerr != nil {
				log.Error("removing half-made sandbox", "err", rerr)
			}
		}
	}()
	// Every runsc call for the sandbox, from its first, runs its build.
	r.mu.Lock()
	r.builds[id] = build
	r.mu.Unlock()
	if err := r.claimOwner(id); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s sandbox %s: another runtime's sandbox has this ID: %w", verb, id, sandbox.ErrExists)
		}
		return fmt.Errorf("%s sandbox %s: recording its owner: %w", verb, id, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s sandbox %s: %w", verb, id, err)
	}
	memory, err := r.prepare(ctx, spec, build, lay, kept, heap)
	if err != nil {
		return fmt.Errorf("%s sandbox %s: %w", verb, id, err)
	}

	if (len(spec.Volumes) > 0 || spec.HeapDir != "") && lay != layoutDirect {
		// Not into the shared template (mountpoints.go).
		mountPoints.Lock()
		made := missingMountPoints(spec)
		defer func() {
			if err := removeMountPoints(made); err != nil {
				log.Error("removing the volumes' mount points runsc made in the template", "err", err)
			}
			mountPoints.Unlock()
		}()
	}
	if err := r.launch(ctx, id, runscFlags{disk: spec.Limits.DiskBytes, lay: lay, heap: spec.HeapDir != ""}, imageDir, wait); err != nil {
		return err
	}
	if pid, err := r.sentryPid(id); err == nil {
		// State, asked every half second while the node waits for the
		// agent, then needs no runsc state while this process lives.
		if start := hostproc.Start(pid); start != "" {
			r.mu.Lock()
			r.procs[id] = hostProc{pid: pid, start: start}
			r.mu.Unlock()
		}
		r.watch(id, memory, pid)
	} else {
		log.Warn("not guarding the sandbox's memory", "err", err)
	}
	log.Info("sandbox up", "restored_from", imageDir, "addr", spec.Network.GuestAddr, "took", time.Since(begin))
	return nil
}

// prepare makes what runsc is given in a claimed sandbox directory: the
// overlay's and /tmp's directories, the network namespace with its egress,
// the OCI spec and the runtime's record. It returns the sandbox's memory.
func (r *Runtime) prepare(ctx context.Context, spec sandbox.Spec, build string, lay layout, kept map[string]string, heap string) (memory int64, err error) {
	id := spec.ID
	if err := os.Mkdir(r.overlayDir(id), 0o700); err != nil {
		return 0, err
	}
	link := netns.Link{HostAddr: spec.Network.HostAddr, GuestAddr: spec.Network.GuestAddr, PrefixLen: spec.Network.PrefixLen}
	egress := &netns.Egress{Internet: spec.Network.Internet, AllowTo: spec.Network.Allow, APIPort: spec.Network.APIPort, Names: spec.Network.Names}
	err = trace.Step(ctx, "runtime.network", func(context.Context) error { return netns.CreateWithEgress(id, link, egress) })
	if err != nil {
		return 0, fmt.Errorf("setting up network: %w", err)
	}
	if err := os.Mkdir(r.tmpDir(id), 0o700); err != nil {
		return 0, err
	}
	if err := os.Chmod(r.tmpDir(id), 0o1777); err != nil { // as /tmp is, over the umask
		return 0, err
	}
	b, err := json.MarshalIndent(ociSpec(spec, netns.Path(id), r.tmpDir(id), lay), "", "\t")
	if err != nil {
		return 0, fmt.Errorf("encoding OCI spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(r.dir(id), "config.json"), b, 0o600); err != nil {
		return 0, fmt.Errorf("writing OCI spec: %w", err)
	}
	memory = spec.Limits.MemoryBytes
	if memory <= 0 {
		memory = DefaultMemoryBytes
	}
	if spec.Disk != "" {
		if err := r.placeDisk(spec); err != nil {
			return 0, err
		}
	}
	rec := imageRecord{Layout: lay, DiskBytes: spec.Limits.DiskBytes, MemoryBytes: memory, DiskTar: spec.Disk != "", Files: kept, Runsc: build, Heap: heap}
	if heap == "" {
		rec.HeapDir = spec.HeapDir
	}
	b, _ = json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(r.dir(id), recordName), b, 0o600); err != nil {
		return 0, fmt.Errorf("writing runtime record: %w", err)
	}
	return memory, nil
}

// launch runs runsc over the prepared bundle: run for a boot; restore from
// imageDir for a restore, after create and wait for a fork's copy.
func (r *Runtime) launch(ctx context.Context, id string, f runscFlags, imageDir string, wait func(context.Context) error) error {
	cid, bundle := containerID(id), r.dir(id)
	if imageDir == "" {
		if err := r.start(ctx, id, f, "run", "--detach", "--bundle", bundle, cid); err != nil {
			return fmt.Errorf("creating sandbox %s: %w", id, err)
		}
		return nil
	}
	if wait != nil {
		// A fork's copy: runsc create now, while its parent is being
		// checkpointed, and runsc restore once the image is there.
		if err := r.start(ctx, id, f, "create", "--bundle", bundle, cid); err != nil {
			return fmt.Errorf("restoring sandbox %s: %w", id, err)
		}
		if err := wait(ctx); err != nil {
			return fmt.Errorf("restoring sandbox %s: its image was not made: %w", id, err)
		}
	}
	// Otherwise runsc restore makes the container itself (it creates one
	// it does not find): one runsc process, not two. --background: the
	// sandbox runs while the rest of its memory loads, instead of after
	// all of it has.
	if err := r.start(ctx, id, f, "restore", "--detach", "--background", "--image-path", imageDir, "--bundle", bundle, cid); err != nil {
		return fmt.Errorf("restoring sandbox %s: %w: %w", id, sandbox.ErrImage, err)
	}
	return nil
}

// hasState reports whether runsc has a container for id in its state
// directory, running or not.
func (r *Runtime) hasState(id string) bool {
	m, _ := filepath.Glob(filepath.Join(r.stateDir, globEscape(containerID(id))+"_sandbox:*.state"))
	return len(m) > 0
}

func globEscape(s string) string {
	return strings.NewReplacer(`*`, `\*`, `?`, `\?`, `[`, `\[`, `\`, `\\`).Replace(s)
}

// stateFile is the part of runsc's state file of a sandbox this package
// reads: the host pids of its Sentry and gofer.
type stateFile struct {
	GoferPid int `json:"goferPid"`
	Sandbox  struct {
		Pid int `json:"pid"`
	} `json:"sandbox"`
}

// readState reads runsc's state file of sandbox id, without the cost of a
// runsc state.
func (r *Runtime) readState(id string) (stateFile, error) {
	var st stateFile
	m, _ := filepath.Glob(filepath.Join(r.stateDir, globEscape(containerID(id))+"_sandbox:*.state"))
	if len(m) != 1 {
		return st, fmt.Errorf("finding runsc's state file of %s: %d matches", id, len(m))
	}
	b, err := os.ReadFile(m[0])
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("decoding %s: %w", m[0], err)
	}
	return st, nil
}

// sentryPid reads the host pid of sandbox id's Sentry from runsc's state
// file.
func (r *Runtime) sentryPid(id string) (int, error) {
	st, err := r.readState(id)
	if err != nil {
		return 0, err
	}
	if st.Sandbox.Pid <= 0 {
		return 0, fmt.Errorf("no Sentry pid in runsc's state of %s", id)
	}
	return st.Sandbox.Pid, nil
}

// runscState is the part of `runsc state` this package reads.
type runscState struct {
	Status string `json:"status"`
	Pid    int    `json:"pid"`
}

func (r *Runtime) state(ctx context.Context, id string) (runscState, error) {
	var st runscState
	out, err := r.command(ctx, id, "state", containerID(id))
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("decoding runsc state: %w", err)
	}
	return st, nil
}

// State implements sandbox.Runtime. A sandbox runsc no longer knows but
// whose directory is still there is reported stopped, so that it is killed
// and cleaned up rather than forgotten.
func (r *Runtime) State(ctx context.Context, id string) (sandbox.State, error) {
	if err := sandbox.CheckID(id); err != nil {
		return "", fmt.Errorf("getting state: %w: %v", sandbox.ErrNotFound, err)
	}
	r.mu.Lock()
	p, cached := r.procs[id]
	r.mu.Unlock()
	if cached && hostproc.Start(p.pid) == p.start {
		return sandbox.Running, nil
	}
	if r.hasState(id) {
		st, err := r.state(ctx, id)
		if err != nil {
			return "", fmt.Errorf("getting state of sandbox %s: %w", id, err)
		}
		// runsc reports what its state file says: a sandbox process
		// killed behind its back (OOM killer, kill -9) still reads
		// "running" there.
		r.mu.Lock()
		delete(r.procs, id)
		if st.Status == "running" && hostproc.Alive(st.Pid) {
			if start := hostproc.Start(st.Pid); start != "" {
				r.procs[id] = hostProc{pid: st.Pid, start: start}
			}
			r.mu.Unlock()
			// One made before this Runtime started (a server's
			// restart) is guarded from now on.
			if rec, err := readRecord(filepath.Join(r.dir(id), recordName)); err == nil && rec.MemoryBytes > 0 {
				r.watch(id, rec.MemoryBytes, st.Pid)
			}
			return sandbox.Running, nil
		}
		r.mu.Unlock()
		return sandbox.Stopped, nil
	}
	if r.owns(id) {
		return sandbox.Stopped, nil
	}
	return "", fmt.Errorf("getting state of sandbox %s: %w", id, sandbox.ErrNotFound)
}

// List implements sandbox.Runtime: the union of runsc's containers and the
// sandbox directories, so that half-made leftovers of a crashed server are
// found too. Network namespaces are not listed on their own: lizard-* names
// are machine-wide, and one without a sandbox directory here belongs to
// another Runtime (every namespace this Runtime makes lives inside the
// lifetime of its directory).
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	ents, err := os.ReadDir(r.stateDir)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	for _, e := range ents {
		cid, _, ok := strings.Cut(e.Name(), "_sandbox:")
		if id, dot := strings.CutSuffix(cid, "."); ok && dot && strings.HasSuffix(e.Name(), ".state") && sandbox.ValidID(id) {
			seen[id] = true
		}
	}
	ents, err = os.ReadDir(r.boxDir)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	for _, e := range ents {
		if e.IsDir() && sandbox.ValidID(e.Name()) {
			seen[e.Name()] = true
		}
	}
	out := make([]string, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	slices.Sort(out)
	return out, nil
}

// Kill implements sandbox.Runtime.
func (r *Runtime) Kill(ctx context.Context, id string) error {
	if err := sandbox.CheckID(id); err != nil {
		return nil // no such sandbox can exist
	}
	r.enter(false)
	defer r.busy.Done()
	unlock := r.lock(id)
	defer unlock()
	begin := time.Now()
	r.mu.Lock()
	background := !r.imaged[id]
	r.mu.Unlock()
	if err := r.remove(context.WithoutCancel(ctx), id, background); err != nil {
		return fmt.Errorf("killing sandbox %s: %w", id, err)
	}
	r.log.Debug("killed sandbox", "sandbox_id", id, "took", time.Since(begin))
	return nil
}

// DiskLayerName is the file in a SaveDisk image that holds the root's
// writable layer, a tar of what the sandbox added, changed and removed
// (whiteouts) over its template.
const DiskLayerName = "rootfs-upper.tar"

// rootfsTarAnnotation names, in an OCI spec, the tar runsc unpacks into a
// new sandbox's root overlay before it starts.
const rootfsTarAnnotation = "dev.gvisor.tar.rootfs.upper"

// SaveDisk implements sandbox.DiskSaver with runsc tar rootfs-upper: the
// sandbox's root layer alone, no memory. /tmp, a layer of its own, is not
// in it: a boot clears /tmp as any machine's does.
func (r *Runtime) SaveDisk(ctx context.Context, id, imageDir string) error {
	if err := sandbox.CheckID(id); err != nil {
		return fmt.Errorf("saving the disk of sandbox: %w: %v", sandbox.ErrNotFound, err)
	}
	unlock := r.lock(id)
	defer unlock()
	begin := time.Now()
	if !r.hasState(id) {
		return fmt.Errorf("saving the disk of sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	if err := os.MkdirAll(imageDir, 0o700); err != nil {
		return fmt.Errorf("saving the disk of sandbox %s: %w", id, err)
	}
	if _, err := r.command(ctx, id, "tar", "rootfs-upper", "--file", filepath.Join(imageDir, DiskLayerName), containerID(id)); err != nil {
		return fmt.Errorf("saving the disk of sandbox %s: %w", id, err)
	}
	r.log.Debug("disk saved", "sandbox_id", id, "took", time.Since(begin).Round(time.Millisecond))
	return nil
}

// Checkpoint implements sandbox.Runtime.
func (r *Runtime) Checkpoint(ctx context.Context, id, imageDir string, leaveRunning bool) error {
	if err := sandbox.CheckID(id); err != nil {
		return fmt.Errorf("checkpointing sandbox: %w: %v", sandbox.ErrNotFound, err)
	}
	unlock := r.lock(id)
	defer unlock()
	begin := time.Now()
	if !r.hasState(id) {
		return fmt.Errorf("checkpointing sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	st, err := r.state(ctx, id)
	if err != nil {
		return fmt.Errorf("checkpointing sandbox %s: %w", id, err)
	}
	if st.Status != "running" {
		return fmt.Errorf("checkpointing sandbox %s (%s): %w", id, st.Status, sandbox.ErrNotRunning)
	}
	if err := os.MkdirAll(imageDir, 0o700); err != nil {
		return fmt.Errorf("checkpointing sandbox %s: %w", id, err)
	}
	// Pages a sandbox committed but left zero (freed heaps, untouched
	// arenas) are not written: smaller images, shorter restores.
	args := []string{"checkpoint", "--image-path", imageDir, "--exclude-committed-zero-pages"}
	if leaveRunning {
		args = append(args, "--leave-running")
	}
	// The record goes in first: an image without one reads as an older
	// Lizard's. Its copy names the runsc build that makes the image: the
	// sandbox's own (runsc.go).
	if rec, err := readRecord(filepath.Join(r.dir(id), recordName)); err == nil {
		if rec, err = r.keepSandboxHeap(id, rec); err != nil {
			return fmt.Errorf("checkpointing sandbox %s: %w", id, err)
		}
		if rec.Heap != "" {
			if err := r.imageHeap(imageDir, rec.Heap); err != nil {
				return fmt.Errorf("checkpointing sandbox %s: %w", id, err)
			}
		}
		rec.Runsc, rec.Lizard = r.buildOf(id), version.Version
		b, _ := json.Marshal(rec)
		if err := os.WriteFile(filepath.Join(imageDir, imageRecordName), b, 0o600); err != nil {
			return fmt.Errorf("checkpointing sandbox %s: writing runtime record: %w", id, err)
		}
	}
	if _, err := r.command(ctx, id, append(args, containerID(id))...); err != nil {
		return fmt.Errorf("checkpointing sandbox %s: %w", id, err)
	}
	r.log.Info("checkpointed sandbox", "sandbox_id", id, "image", imageDir, "leave_running", leaveRunning, "took", time.Since(begin))
	r.mu.Lock()
	r.imaged[id] = true
	r.mu.Unlock()
	if !leaveRunning {
		if err := r.remove(context.WithoutCancel(ctx), id, true); err != nil {
			return fmt.Errorf("removing sandbox %s after checkpoint: %w", id, err)
		}
	}
	return nil
}

// owns reports whether sandbox id is this Runtime's: its directory is
// there (made first, removed last).
func (r *Runtime) owns(id string) bool {
	_, err := os.Lstat(r.dir(id))
	return err == nil
}

// remove ends and deletes everything sandbox id has; what is already gone
// is skipped. The sandbox directory goes last and only if all else went,
// so a failed removal is listed and retried. With background, and the
// Runtime not closed, the network's slow half goes after remove returns
// (netns.Release); Close waits for it. The caller holds the ID's lock.
func (r *Runtime) remove(ctx context.Context, id string, background bool) error {
	r.mu.Lock()
	delete(r.procs, id)
	delete(r.imaged, id)
	r.removing[id]++
	r.mu.Unlock()
	defer func() {
		// Its build is forgotten with its directory, which names it
		// (runsc calls up to here run that build).
		gone := !r.owns(id)
		r.mu.Lock()
		if r.removing[id]--; r.removing[id] == 0 {
			delete(r.removing, id)
		}
		if gone {
			delete(r.builds, id)
		}
		r.mu.Unlock()
	}()
	if !r.owns(id) && !r.hasState(id) {
		return nil // unknown here; the machine-wide names may be another Runtime's
	}
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	var errs []error
	r.unwatch(id)
	// A frozen guest (memguard.go) would hold runsc delete up forever.
	if err := thawGuest(id); err != nil {
		r.log.Warn("thawing the sandbox's processes before removing it", "sandbox_id", id, "err", err)
	}

	// The bundle directory is on the command line of the sandbox, its
	// gofer and systrap stubs: killing them ends the sandbox at once, and
	// spares two runsc calls (state, kill) a sandbox being removed does
	// not need. runsc delete would then only remove the cgroups and state
	// files removed below, at the cost of a runsc process per kill: it
	// runs only if runsc's state names a live process not killed here.
	pids := procsWithBundle(r.dir(id))
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if r.hasState(id) && !r.allKilled(id, pids) {
		if _, err := r.command(ctx, id, "delete", "--force", containerID(id)); err != nil && r.hasState(id) {
			errs = append(errs, err)
		}
	}
	if err := r.waitGone(ctx, id, pids); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroups(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(append(errs, netns.Remove(id))...)
	}
	if err := r.removeStateFiles(id); err != nil {
		return errors.Join(err, netns.Remove(id))
	}
	if err := os.RemoveAll(r.dir(id)); err != nil {
		return errors.Join(fmt.Errorf("removing sandbox directory: %w", err), netns.Remove(id))
	}
	r.mu.Lock()
	background = background && !r.closed
	r.mu.Unlock()
	if !background {
		if err := netns.Remove(id); err != nil {
			return err
		}
		return r.dropOwner(id)
	}
	// The network goes last, its slow half in the background (netns
	// Release). The owner record outlives it: should this process die
	// before the veth and rules are gone, the next Runtime's
	// removeOrphans finds the record without a directory and finishes.
	return netns.Release(id, func(err error) {
		if err != nil {
			r.log.Error("removing the network of a removed sandbox; its owner record stays for the next start to retry", "sandbox_id", id, "err", err)
			return
		}
		if err := r.dropOwner(id); err != nil {
			r.log.Error("removing the owner record of a removed sandbox", "sandbox_id", id, "err", err)
		}
	})
}

// allKilled reports whether the sandbox and gofer processes runsc's state
// file names for sandbox id are among pids or gone.
func (r *Runtime) allKilled(id string, pids []int) bool {
	st, err := r.readState(id)
	if err != nil {
		return false
	}
	for _, pid := range []int{st.Sandbox.Pid, st.GoferPid} {
		if pid > 0 && !slices.Contains(pids, pid) && hostproc.Alive(pid) {
			return false
		}
	}
	return true
}

// removeStateFiles removes what runsc keeps in its state directory for
// sandbox id. runsc delete removes it, but a runsc create or restore
// killed before it wrote the .state file (a crash, kill -9) leaves the
// container's lock file and control socket, which delete never sees.
func (r *Runtime) removeStateFiles(id string) error {
	cid := globEscape(containerID(id))
	files, _ := filepath.Glob(filepath.Join(r.stateDir, cid+"_sandbox:*"))
	files = append(files, filepath.Join(r.stateDir, "runsc-"+containerID(id)+".sock"))
	var errs []error
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing runsc state: %w", err))
		}
	}
	return errors.Join(errs...)
}

// waitGone waits for pids to exit, and after a grace period kills those
// still running: they are runsc processes of this sandbox that runsc
// delete failed to end.
func (r *Runtime) waitGone(ctx context.Context, id string, pids []int) error {
	grace := time.Now().Add(5 * time.Second)
	killed := false
	for {
		alive := slices.DeleteFunc(slices.Clone(pids), func(pid int) bool { return !hostproc.Alive(pid) })
		if len(alive) == 0 {
			return nil
		}
		if !killed && time.Now().After(grace) {
			r.log.Warn("killing leftover runsc processes", "sandbox_id", id, "pids", alive)
			for _, pid := range alive {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			killed = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for processes %v to exit: %w", alive, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// procsWithBundle returns the processes whose command line names bundle
// as runsc's --bundle.
func procsWithBundle(bundle string) []int {
	return hostproc.Find(func(args []string) bool {
		for i, a := range args {
			if a == "--bundle="+bundle || a == "-bundle="+bundle ||
				((a == "--bundle" || a == "-bundle") && i+1 < len(args) && args[i+1] == bundle) {
				return true
			}
		}
		return false
	})
}

const cgroupRoot = "/sys/fs/cgroup"

// removeCgroups removes sandbox id's cgroup under every controller. runsc
// normally does this on delete; this catches sandboxes it never finished
// making or deleting. A cgroup still holding exiting processes cannot be
// removed yet, hence the retries.
func removeCgroups(ctx context.Context, id string) error {
	path := cgroupPath(id)
	dirs, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", path))
	if d := filepath.Join(cgroupRoot, path); isDir(d) { // cgroup v2 (unified)
		dirs = append(dirs, d)
	}
	// A guard's freezer cgroup (memguard.go) may be left below, if its
	// server died while the guest was frozen; the sandbox is dead now.
	if _, child := freezerDirs(id); isDir(child) {
		dirs = append([]string{child}, dirs...)
	}
	var errs []error
	for _, d := range dirs {
		for {
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || ctx.Err() != nil {
				errs = append(errs, fmt.Errorf("removing cgroup: %w", err))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
