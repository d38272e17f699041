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
// remove each other's sandboxes through the machine-wide names.
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
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/sandbox"
)

var _ sandbox.Runtime = (*Runtime)(nil)

// Config configures a Runtime.
type Config struct {
	Runsc  string       // path to a static runsc binary
	Dir    string       // work directory; created if missing
	Logger *slog.Logger // nil means slog.Default()
}

// Runtime is the gVisor sandbox backend.
type Runtime struct {
	runsc    string
	stateDir string // runsc --root
	boxDir   string // one directory per sandbox
	log      *slog.Logger
	imageKey string // hash of the runsc binary (ImageKey)

	// mu guards locks, the per-sandbox mutexes that serialise every
	// operation on one ID (two Kills of one sandbox, Create racing Kill),
	// and procs, the sandbox process runsc last reported running for each
	// sandbox: State, called for every sandbox at each liveness sweep and
	// several times a second while calls are in flight, then needs no
	// runsc process while that process lives.
	mu    sync.Mutex
	locks map[string]*idLock
	procs map[string]hostProc
}

// hostProc names one host process for good: a PID and its start time, so
// that a reused PID is not taken for it.
type hostProc struct {
	pid   int
	start string
}

type idLock struct {
	mu   sync.Mutex
	refs int
}

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
		stateDir: filepath.Join(dir, "state"),
		boxDir:   filepath.Join(dir, "sandboxes"),
		log:      cfg.Logger,
		locks:    map[string]*idLock{},
		procs:    map[string]hostProc{},
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.log = r.log.With("runtime", "gvisor")
	if r.imageKey, err = hashFile(cfg.Runsc); err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	for _, d := range []string{r.stateDir, r.boxDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("gvisor: creating %s: %w", d, err)
		}
	}
	return r, nil
}

// Name implements sandbox.Runtime.
func (r *Runtime) Name() string { return "gvisor" }

// ImageKey implements sandbox.Runtime: a checkpoint restores only with the
// runsc build that took it.
func (r *Runtime) ImageKey() string { return "gvisor-" + r.imageKey }

func hashFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("hashing %s: %w", p, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

var validID = regexp.MustCompile(`^[a-z0-9-]{1,40}$`)

func checkID(id string) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("invalid sandbox id %q: want 1 to 40 of [a-z0-9-]", id)
	}
	return nil
}

// containerID is the runsc container ID of sandbox id. runsc resolves IDs
// by prefix and refuses one that is a prefix of another ("a" while "a1"
// exists), so every ID gets a terminator that sandbox IDs cannot contain.
func containerID(id string) string { return id + "." }

func (r *Runtime) lock(id string) func() {
	r.mu.Lock()
	l := r.locks[id]
	if l == nil {
		l = &idLock{}
		r.locks[id] = l
	}
	l.refs++
	r.mu.Unlock()

	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		r.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(r.locks, id)
		}
		r.mu.Unlock()
	}
}

func (r *Runtime) dir(id string) string        { return filepath.Join(r.boxDir, id) }
func (r *Runtime) overlayDir(id string) string { return filepath.Join(r.dir(id), "overlay") }
func (r *Runtime) logPath(id string) string    { return filepath.Join(r.dir(id), "console.log") }

// globalArgs are runsc's flags before the subcommand. They must agree on
// every call for one sandbox: runsc keeps no record of them.
func (r *Runtime) globalArgs(id string, diskBytes int64) []string {
	overlay := "--overlay2=root:dir=" + r.overlayDir(id)
	if diskBytes > 0 {
		overlay += ",size=" + strconv.FormatInt(diskBytes, 10)
	}
	// Each gofer gets a new empty network namespace: runsc's default shares
	// one, bind-mounted into the state directory, which would then never be
	// removable.
	return []string{"--root", r.stateDir, "--platform=systrap", "--network=sandbox", "--gofer-network-namespace=new", overlay}
}

// command runs a short runsc subcommand and returns its stdout; its stderr
// goes into the error.
func (r *Runtime) command(ctx context.Context, id string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, r.runsc, append(r.globalArgs(id, 0), args...)...)
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
func (r *Runtime) start(ctx context.Context, id string, diskBytes int64, args ...string) error {
	f, err := os.OpenFile(r.logPath(id), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening console log: %w", err)
	}
	defer f.Close()
	off, _ := f.Seek(0, io.SeekEnd)

	cmd := exec.CommandContext(ctx, r.runsc, append(r.globalArgs(id, diskBytes), args...)...)
	cmd.Stdout, cmd.Stderr = f, f
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
	return r.boot(ctx, spec, "")
}

// Restore implements sandbox.Runtime.
func (r *Runtime) Restore(ctx context.Context, spec sandbox.Spec, imageDir string) error {
	if _, err := os.Stat(filepath.Join(imageDir, "checkpoint.img")); err != nil {
		return fmt.Errorf("restoring sandbox %s: %w: %v", spec.ID, sandbox.ErrImage, err)
	}
	return r.boot(ctx, spec, imageDir)
}

// boot makes a sandbox from scratch, or from a checkpoint image when
// imageDir is set, and removes whatever it made if anything fails.
func (r *Runtime) boot(ctx context.Context, spec sandbox.Spec, imageDir string) (err error) {
	verb := "creating"
	if imageDir != "" {
		verb = "restoring"
	}
	if err := checkID(spec.ID); err != nil {
		return fmt.Errorf("%s sandbox: %w", verb, err)
	}
	// runsc reports a bad root only as "waiting for sandbox to start: EOF".
	if fi, err := os.Stat(spec.Template.RootFS); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s sandbox %s: root filesystem %q is not a directory", verb, spec.ID, spec.Template.RootFS)
	}
	id := spec.ID
	log := r.log.With("sandbox_id", id)
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
			if rerr := r.remove(context.WithoutCancel(ctx), id); rerr != nil {
				log.Error("removing half-made sandbox", "err", rerr)
			}
		}
	}()

	if err := os.Mkdir(r.overlayDir(id), 0o700); err != nil {
		return fmt.Errorf("%s sandbox %s: %w", verb, id, err)
	}
	link := netns.Link{HostAddr: spec.Network.HostAddr, GuestAddr: spec.Network.GuestAddr, PrefixLen: spec.Network.PrefixLen}
	egress := &netns.Egress{Internet: spec.Network.Internet, AllowTo: spec.Network.Allow, APIPort: spec.Network.APIPort}
	if err := netns.CreateWithEgress(id, link, egress); err != nil {
		return fmt.Errorf("%s sandbox %s: setting up network: %w", verb, id, err)
	}
	b, err := json.MarshalIndent(ociSpec(spec, netns.Path(id)), "", "\t")
	if err != nil {
		return fmt.Errorf("%s sandbox %s: encoding OCI spec: %w", verb, id, err)
	}
	if err := os.WriteFile(filepath.Join(r.dir(id), "config.json"), b, 0o600); err != nil {
		return fmt.Errorf("%s sandbox %s: writing OCI spec: %w", verb, id, err)
	}

	cid, bundle, disk := containerID(id), r.dir(id), spec.Limits.DiskBytes
	if imageDir == "" {
		if err := r.start(ctx, id, disk, "run", "--detach", "--bundle", bundle, cid); err != nil {
			return fmt.Errorf("creating sandbox %s: %w", id, err)
		}
	} else {
		if err := r.start(ctx, id, disk, "create", "--bundle", bundle, cid); err != nil {
			return fmt.Errorf("restoring sandbox %s: %w", id, err)
		}
		// --background: the sandbox runs while the rest of its memory
		// loads, instead of after all of it has.
		if err := r.start(ctx, id, disk, "restore", "--detach", "--background", "--image-path", imageDir, "--bundle", bundle, cid); err != nil {
			return fmt.Errorf("restoring sandbox %s: %w: %w", id, sandbox.ErrImage, err)
		}
	}
	log.Info("sandbox up", "restored_from", imageDir, "addr", spec.Network.GuestAddr, "took", time.Since(begin))
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
	if err := checkID(id); err != nil {
		return "", fmt.Errorf("getting state: %w: %v", sandbox.ErrNotFound, err)
	}
	r.mu.Lock()
	p, cached := r.procs[id]
	r.mu.Unlock()
	if cached && processStart(p.pid) == p.start {
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
		if st.Status == "running" && processAlive(st.Pid) {
			if start := processStart(st.Pid); start != "" {
				r.procs[id] = hostProc{pid: st.Pid, start: start}
			}
			r.mu.Unlock()
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
		if id, dot := strings.CutSuffix(cid, "."); ok && dot && strings.HasSuffix(e.Name(), ".state") && validID.MatchString(id) {
			seen[id] = true
		}
	}
	ents, err = os.ReadDir(r.boxDir)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	for _, e := range ents {
		if e.IsDir() && validID.MatchString(e.Name()) {
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
	if err := checkID(id); err != nil {
		return nil // no such sandbox can exist
	}
	unlock := r.lock(id)
	defer unlock()
	begin := time.Now()
	if err := r.remove(context.WithoutCancel(ctx), id); err != nil {
		return fmt.Errorf("killing sandbox %s: %w", id, err)
	}
	r.log.Debug("killed sandbox", "sandbox_id", id, "took", time.Since(begin))
	return nil
}

// Checkpoint implements sandbox.Runtime.
func (r *Runtime) Checkpoint(ctx context.Context, id, imageDir string, leaveRunning bool) error {
	if err := checkID(id); err != nil {
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
	if _, err := r.command(ctx, id, append(args, containerID(id))...); err != nil {
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

// owns reports whether sandbox id is this Runtime's: its directory is
// there (made first, removed last).
func (r *Runtime) owns(id string) bool {
	_, err := os.Lstat(r.dir(id))
	return err == nil
}

// remove ends and deletes everything sandbox id has; what is already gone
// is skipped. The sandbox directory goes last and only if all else went,
// so a failed removal is listed and retried. The caller holds the ID's
// lock.
func (r *Runtime) remove(ctx context.Context, id string) error {
	r.mu.Lock()
	delete(r.procs, id)
	r.mu.Unlock()
	if !r.owns(id) && !r.hasState(id) {
		return nil // unknown here; the machine-wide names may be another Runtime's
	}
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	var errs []error

	// Find the processes before runsc forgets them. The bundle directory is
	// on the command line of the sandbox, its gofer and systrap stubs.
	pids := procsWithBundle(r.dir(id))
	if r.hasState(id) {
		if st, err := r.state(ctx, id); err == nil && st.Pid > 0 && !slices.Contains(pids, st.Pid) {
			pids = append(pids, st.Pid)
		}
		// The sandbox may be dead already: only delete's error matters.
		_, _ = r.command(ctx, id, "kill", containerID(id), "KILL")
		if _, err := r.command(ctx, id, "delete", "--force", containerID(id)); err != nil && r.hasState(id) {
			errs = append(errs, err)
		}
	}
	if err := r.waitGone(ctx, id, pids); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroups(ctx, cgroupPath(id)); err != nil {
		errs = append(errs, err)
	}
	if err := netns.Remove(id); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := r.removeStateFiles(id); err != nil {
		return err
	}
	if err := os.RemoveAll(r.dir(id)); err != nil {
		return fmt.Errorf("removing sandbox directory: %w", err)
	}
	return nil
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
		alive := slices.DeleteFunc(slices.Clone(pids), func(pid int) bool { return !processAlive(pid) })
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

// processAlive reports whether pid exists and is not a zombie (a zombie
// sandbox process holds nothing; its parent, a server that was restarted
// or runsc itself, reaps it).
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || (b[i+2] != 'Z' && b[i+2] != 'X')
}

// processStart is the start time of live process pid (field 22 of its
// /proc stat), or "" if there is no such process or it has exited.
func processStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3, the state; field 22 is f[19].
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return ""
	}
	return f[19]
}

// procsWithBundle returns the processes whose command line names bundle
// as runsc's --bundle.
func procsWithBundle(bundle string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(bundle)) {
			continue
		}
		args := strings.Split(string(b), "\x00")
		for i, a := range args {
			if a == "--bundle="+bundle || a == "-bundle="+bundle ||
				((a == "--bundle" || a == "-bundle") && i+1 < len(args) && args[i+1] == bundle) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

const cgroupRoot = "/sys/fs/cgroup"

// removeCgroups removes the cgroup path under every controller. runsc
// normally does this on delete; this catches sandboxes it never finished
// making or deleting. A cgroup still holding exiting processes cannot be
// removed yet, hence the retries.
func removeCgroups(ctx context.Context, path string) error {
	dirs, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", path))
	if d := filepath.Join(cgroupRoot, path); isDir(d) { // cgroup v2 (unified)
		dirs = append(dirs, d)
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
