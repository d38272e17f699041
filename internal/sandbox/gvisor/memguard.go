package gvisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A guard keeps one sandbox inside its memory limit by ending the largest
// process group in it, so that a runaway program dies (Python's kernel, a
// command, a fork bomb) while the sandbox, its other processes and its
// files stay up.
//
// gVisor has no OOM killer of its own: the Sentry reports the memory limit
// to the guest (--total-memory) but lets the guest allocate past it, and
// every guest page is a page of the Sentry's memory file, charged to the
// sandbox's host cgroup. At the cgroup's limit the host's OOM killer would
// pick the Sentry (or a systrap stub, which makes the Sentry kill itself)
// and the whole sandbox would be lost.
//
// So the guard raises the cgroup's limit to the sandbox's plus
// guardHeadroom (once the sandbox runs: runsc tells the guest its total
// memory from the cgroup's limit at start, which stays the sandbox's
// own), and watches the cgroup (cgroup v1 events on an eventfd): when the
// sandbox's unreclaimable memory (rss and shmem, which holds the Sentry's
// memory file; not the page cache of its disk, which the host reclaims)
// passes the sandbox's own limit, it freezes the guest (freeze: the host
// processes running guest code stop within a millisecond, the Sentry runs
// on), asks the Sentry for its processes (runsc trace procfs), ends the
// group with the most resident memory (chooseVictim) with runsc kill,
// thaws the guest and waits for the memory to come back. Without the
// freeze a balloon, growing by about 1 GB/s, outran the tens of
// milliseconds this takes whenever the machine was busy. The headroom is
// the runaway's runway until it is frozen. If the runaway fills the
// headroom too, the host's OOM killer, turned off for
// the cgroup (memory.oom_control), does not strike: the allocating
// threads wait, and the guard lends the cgroup rescueBytes more (again
// while it stays full, up to maxLoan) so that the Sentry, whose Go heap
// cannot grow either at the limit, can answer. Should ending processes not
// bring the sandbox under its limit, the guard gives up and turns the
// host's OOM killer back on: the sandbox then dies as it would have
// without the guard.
//
// A guard lives in the server's process. When it stops (Kill, Close), the
// host's OOM killer is turned back on, so a sandbox nobody watches is never
// left with allocations that wait forever.
type guard struct {
	r      *Runtime
	id     string
	cgroup string // the sandbox's memory cgroup directory
	// usageFile is the usage the guard is told of crossing the limit and
	// polls while over it (guardUsage).
	usageFile string
	limit     int64 // the sandbox's; the cgroup's is limit + guardHeadroom
	sentry    int   // host pid of the Sentry (runsc's sandbox process)
	log       *slog.Logger
	efd       *os.File   // eventfd signalled on each OOM and limit crossing
	files     []*os.File // the cgroup files registered with efd
	stop      chan struct{}
	done      chan struct{}
	rate      runawayRate
}

const (
	// guardHeadroom is what the cgroup allows over the sandbox's limit:
	// the Sentry's own needs and a runaway's runway while the guard acts.
	guardHeadroom = 128 << 20
	// rescueBytes is lent to a cgroup at its limit for the Sentry to
	// answer the guard: blocked at the limit, it cannot even list its
	// processes.
	rescueBytes = 64 << 20
	// maxVictims is how many processes one OOM may cost before the guard
	// gives up on the sandbox.
	maxVictims = 8
	// runawayBurst and runawayEvery bound what one sandbox makes its
	// guard spend (runawayRate).
	runawayBurst = 5
	runawayEvery = 5 * time.Second
)

// runawayRate bounds a sandbox's runaways: runawayBurst of them at once,
// then one each runawayEvery; the guard keeps the guest frozen after one
// that comes early until it is due. Each costs the host about 85 ms of
// CPU (runsc trace procfs and runsc kill) and two lines of the node's log,
// and code in a sandbox can start runaways, each in a process group of
// its own, as fast as the guard ends them: 19 in 15 s, 0.11 of a core of
// the host per sandbox, at no cost to its own bounds. Ending a runaway
// later would break what the guard is for (it must die before the
// sandbox's memory is exhausted, or the whole sandbox dies), and failing
// the sandbox would end, for a loop of a program that runs out of
// memory, everything its user had in it. Freezing instead costs the host
// nothing, makes only the sandbox that does it slower (at most
// runawayEvery at a time), and bounds the guard to 85 ms in runawayEvery,
// under 2% of a core, per sandbox. The log with it: once held, a
// sandbox's runaways are logged at debug level, and one line says it is
// held, at the first hold and then each holdLogEvery.
type runawayRate struct {
	next time.Time // when a runaway after a full burst is due (GCRA)
	// held counts the runaways held to the rate since the last that was
	// not (0: not held), unlogged those since the last line saying so,
	// logged when that line was.
	held, unlogged int
	logged         time.Time
}

// holdLogEvery is how often a sandbox held to its runaway rate is said to
// be so in the node's log; its runaways meanwhile are not logged.
const holdLogEvery = time.Minute

// take counts a runaway ended at now, and returns how long the guest is
// to stay frozen after it.
func (r *runawayRate) take(now time.Time) time.Duration {
	t := r.next
	if t.Before(now) {
		t = now
	}
	r.next = t.Add(runawayEvery)
	return max(0, t.Sub(now)-(runawayBurst-1)*runawayEvery)
}

func memoryCgroup(id string) string { return filepath.Join(cgroupRoot, "memory", cgroupPath(id)) }

// watch starts guarding sandbox id, whose memory limit is limit and whose
// Sentry is host process sentry. It is a no-op if id is guarded already or
// its cgroup has no v1 memory controller (the host's OOM killer then stays
// in charge).
func (r *Runtime) watch(id string, limit int64, sentry int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// A State racing a removal must not guard what is being removed.
	if r.guards[id] != nil || r.closed || r.removing[id] > 0 {
		return
	}
	g, err := newGuard(r, id, limit, sentry)
	if err != nil {
		r.log.Warn("not guarding the sandbox's memory: the host's OOM killer will end all of it at its limit", "sandbox_id", id, "err", err)
		return
	}
	r.guards[id] = g
	go g.run()
}

// unwatch stops guarding sandbox id and waits for its guard to end.
func (r *Runtime) unwatch(id string) {
	r.mu.Lock()
	g := r.guards[id]
	delete(r.guards, id)
	r.mu.Unlock()
	if g != nil {
		g.close()
	}
}

func newGuard(r *Runtime, id string, limit int64, sentry int) (g *guard, err error) {
	cg := memoryCgroup(id)
	if _, err := os.Stat(filepath.Join(cg, "memory.oom_control")); err != nil {
		return nil, err
	}
	// A guard whose server died while the guest was frozen left it so.
	if err := thawGuest(id); err != nil {
		r.log.Warn("thawing a sandbox left frozen by an earlier guard", "sandbox_id", id, "err", err)
	}
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	// Non-blocking, so reads go through the runtime's poller and Close
	// wakes them.
	made := &guard{r: r, id: id, cgroup: cg, usageFile: guardUsage(cg), limit: limit, sentry: sentry, log: r.log.With("sandbox_id", id),
		efd: os.NewFile(uintptr(fd), "memguard-eventfd"), stop: make(chan struct{}), done: make(chan struct{})}
	// Not g: an error return sets g to nil before this runs.
	defer func() {
		if err != nil {
			made.closeFiles()
		}
	}()
	g = made
	// An event at each OOM, and each time the usage (guardUsage) crosses
	// the sandbox's limit (either way).
	events := []struct{ file, arg string }{
		{"memory.oom_control", ""},
		{g.usageFile, " " + strconv.FormatInt(limit, 10)},
	}
	for _, ev := range events {
		f, err := os.Open(filepath.Join(cg, ev.file))
		if err != nil {
			return nil, err
		}
		g.files = append(g.files, f)
		reg := fmt.Sprintf("%d %d%s", fd, f.Fd(), ev.arg)
		if err := os.WriteFile(filepath.Join(cg, "cgroup.event_control"), []byte(reg), 0); err != nil {
			return nil, fmt.Errorf("registering for %s events: %w", ev.file, err)
		}
	}
	if err := g.setLimit(limit + guardHeadroom); err != nil {
		return nil, fmt.Errorf("giving the cgroup headroom: %w", err)
	}
	if err := os.WriteFile(filepath.Join(cg, "memory.oom_control"), []byte("1"), 0); err != nil {
		g.setLimit(limit)
		return nil, fmt.Errorf("turning the host's OOM killer off: %w", err)
	}
	return g, nil
}

func (g *guard) closeFiles() {
	g.efd.Close()
	for _, f := range g.files {
		f.Close()
	}
}

func (g *guard) close() {
	close(g.stop)
	<-g.done
}

func (g *guard) run() {
	defer close(g.done)
	defer g.closeFiles()
	defer g.restore()
	events := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 8)
		for {
			if _, err := g.efd.Read(buf); err != nil {
				return // closed
			}
			select {
			case events <- struct{}{}:
			default:
			}
		}
	}()
	// While the usage is over the limit but mostly page cache (or, with
	// swap, its memory in RAM still under it), no new crossing will come
	// as the unreclaimable part grows: poll.
	var poll <-chan time.Time
	for {
		select {
		case <-g.stop:
			return
		case <-events:
		case <-poll:
		}
		if _, err := os.Stat(g.cgroup); err != nil {
			// The cgroup was removed (the eventfd fires then too):
			// the sandbox is gone.
			g.r.mu.Lock()
			if g.r.guards[g.id] == g {
				delete(g.r.guards, g.id)
			}
			g.r.mu.Unlock()
			return
		}
		poll = nil
		if g.pressure() < g.limit && !g.underOOM() {
			if g.usage() >= g.limit {
				poll = time.After(50 * time.Millisecond)
			}
			continue
		}
		wait := g.rate.take(time.Now())
		// Once held to the rate, the sandbox's runaways are counted in
		// hold's line instead of logged each.
		if err := g.relieve(wait > 0 && g.rate.held > 0); err != nil {
			g.log.Error("could not bring the sandbox under its memory limit by ending processes; the host's OOM killer will end it", "err", err)
			return
		}
		if wait == 0 {
			g.rate.held = 0
			continue
		}
		g.hold(wait)
	}
}

// hold keeps the guest frozen for d after a runaway that came early
// (runawayRate), or until the guard stops. It says so in the log at the
// first hold and then every holdLogEvery, counting the holds since.
func (g *guard) hold(d time.Duration) {
	g.rate.held++
	g.rate.unlogged++
	if now := time.Now(); g.rate.held == 1 || now.Sub(g.rate.logged) >= holdLogEvery {
		g.log.Warn("the sandbox ends up with runaways faster than its memory guard ends them unhindered; its processes stay frozen after each until the next is due",
			"frozen_for", d, "runaways_held", g.rate.unlogged, "burst", runawayBurst, "every", runawayEvery)
		g.rate.unlogged, g.rate.logged = 0, now
	}
	thaw, err := g.freeze()
	if err != nil {
		g.log.Warn("could not freeze the sandbox's processes after a runaway that came early", "err", err)
		return
	}
	select {
	case <-g.stop:
	case <-time.After(d):
	}
	if err := thaw(); err != nil {
		g.log.Error("thawing the sandbox's processes", "err", err)
	}
}

// pressure is the cgroup's memory the host cannot reclaim (usage.go).
func (g *guard) pressure() int64 { return pressure(g.cgroup) }

// restore turns the host's OOM killer back on with the sandbox's own
// limit, if the cgroup is still there.
func (g *guard) restore() {
	if _, err := os.Stat(g.cgroup); err != nil {
		return
	}
	// May fail while over it: the cgroup keeps the headroom, the host's
	// OOM killer acts at its end.
	g.setLimit(g.limit)
	_ = os.WriteFile(filepath.Join(g.cgroup, "memory.oom_control"), []byte("0"), 0)
}

func (g *guard) underOOM() bool {
	b, err := os.ReadFile(filepath.Join(g.cgroup, "memory.oom_control"))
	return err == nil && bytes.Contains(b, []byte("under_oom 1"))
}

// guardUsage is the usage file of memory cgroup cg that the guard watches:
// with swap accounting memory + swap's (memory.memsw.usage_in_bytes), else
// memory's. One threshold, not one for each: memory + swap is never under
// memory alone, so it crosses the limit first, and while it is over the
// guard polls (run), which catches the unreclaimable part (pressure, swap
// included) passing the limit later, as memory's own crossing would. A
// sandbox whose memory went to swap (--idle-reclaim) may pass its limit
// with its usage in RAM under it. Each threshold registered costs a create
// an RCU grace period in the kernel (5–16 ms here, waited for, no CPU):
// memory's beside memory + swap's was ~20 ms on every create and restore.
func guardUsage(cg string) string {
	if _, err := os.Stat(filepath.Join(cg, "memory.memsw.usage_in_bytes")); err == nil {
		return "memory.memsw.usage_in_bytes"
	}
	return "memory.usage_in_bytes"
}

// usage is the cgroup's usage that the guard watches (guardUsage).
func (g *guard) usage() int64 {
	b, _ := os.ReadFile(filepath.Join(g.cgroup, g.usageFile))
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// setLimit sets the cgroup's memory limit to n, and its memory+swap limit
// with it where there is one (memory.memsw.limit_in_bytes, with swap
// accounting): else the swap that --idle-reclaim, or the host's own
// pressure, pushes a sandbox's memory to would be room past its limit,
// refilled at each squeeze. The memory+swap limit may never be under the
// memory limit, so it moves first when raised and last when lowered.
func (g *guard) setLimit(n int64) error {
	s := []byte(strconv.FormatInt(n, 10))
	limit, memsw := filepath.Join(g.cgroup, "memory.limit_in_bytes"), filepath.Join(g.cgroup, "memory.memsw.limit_in_bytes")
	if _, err := os.Stat(memsw); err != nil {
		return os.WriteFile(limit, s, 0)
	}
	_ = os.WriteFile(memsw, s, 0) // refused when lowering: written again below
	if err := os.WriteFile(limit, s, 0); err != nil {
		return err
	}
	return os.WriteFile(memsw, s, 0)
}

// victimWait bounds the listing of a sandbox's processes and the kill of
// the chosen group.
const victimWait = 5 * time.Second

// relieve ends processes until the sandbox is under its limit again,
// logging what it ends (at debug level if quiet).
func (g *guard) relieve(quiet bool) error {
	begin := time.Now()
	level := slog.LevelWarn
	if quiet {
		level = slog.LevelDebug
	}
	// First stop the guest, so that the runaway cannot outrun the guard.
	thaw, err := g.freeze()
	if err != nil {
		g.log.Warn("could not freeze the sandbox's processes; ending one while they run", "err", err)
	}
	defer func() {
		if thaw == nil {
			return
		}
		if err := thaw(); err != nil {
			g.log.Error("thawing the sandbox's processes", "err", err)
		}
	}()
	stopLending := g.lend()
	defer stopLending()
	for range maxVictims {
		ctx, cancel := context.WithTimeout(context.Background(), victimWait)
		v, err := g.r.chooseVictim(ctx, g.id)
		if err != nil && thaw != nil {
			// The Sentry could not list its processes with the guest
			// frozen: a task stopped in the middle of a fault may hold
			// what the listing needs. Let it run, and ask again.
			cancel()
			g.log.Warn("listing the sandbox's processes with the guest frozen failed; thawing it and asking again", "err", err)
			if terr := thaw(); terr != nil {
				return fmt.Errorf("thawing the sandbox's processes: %w", terr)
			}
			thaw = nil
			ctx, cancel = context.WithTimeout(context.Background(), victimWait)
			v, err = g.r.chooseVictim(ctx, g.id)
		}
		if err == nil {
			target := []string{"--pgid", strconv.Itoa(int(v.PGID))}
			if v.PGID == 0 {
				target = []string{"--pid", strconv.Itoa(int(v.PID))}
			}
			_, err = g.r.command(ctx, g.id, append(append([]string{"kill"}, target...), containerID(g.id), "KILL")...)
		}
		cancel()
		if err != nil {
			return err
		}
		g.log.Log(context.Background(), level, "ended the largest process group in the sandbox to keep it within its memory limit",
			"pgid", v.PGID, "pid", v.PID, "processes", v.Procs, "uid", v.UID, "command", v.Comm, "rss_bytes", v.RSS, "limit_bytes", g.limit)
		// The victim can only exit once it runs again.
		if thaw != nil {
			if err := thaw(); err != nil {
				return fmt.Errorf("thawing the sandbox's processes: %w", err)
			}
			thaw = nil
		}
		// The Sentry returns a dead process's pages to the host shortly
		// after it is reaped.
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if g.pressure() < g.limit-g.limit/16 {
				stopLending()
				if err := g.setLimit(g.limit + guardHeadroom); err != nil {
					return fmt.Errorf("taking the loan back: %w", err)
				}
				g.log.Log(context.Background(), min(level, slog.LevelInfo), "sandbox back under its memory limit", "pressure_bytes", g.pressure(), "took", time.Since(begin))
				return nil
			}
		}
	}
	return fmt.Errorf("still at %d of %d bytes after ending %d process groups", g.pressure(), g.limit, maxVictims)
}

// freeze stops every host process of the sandbox that runs guest code —
// the Sentry's systrap stubs, its descendants — in a freezer cgroup of
// their own below the sandbox's, while the Sentry and the gofer run on
// and can answer the guard. It takes a millisecond, where the Sentry,
// listing and ending processes, takes tens while a runaway grows by
// gigabytes a second. The returned thaw undoes it; it may be called once.
func (g *guard) freeze() (thaw func() error, err error) {
	parent, dir := freezerDirs(g.id)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	thaw = func() error { return thawGuest(g.id) }
	b, err := os.ReadFile(filepath.Join(parent, "cgroup.procs"))
	if err != nil {
		return nil, errors.Join(err, thaw())
	}
	moved := 0
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		if pid == g.sentry || !descends(pid, g.sentry) {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(f), 0); err == nil {
			moved++
		}
	}
	if moved == 0 {
		return nil, errors.Join(errors.New("no guest processes found on the host"), thaw())
	}
	if err := os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("FROZEN"), 0); err != nil {
		return nil, errors.Join(err, thaw())
	}
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if st, _ := os.ReadFile(filepath.Join(dir, "freezer.state")); strings.TrimSpace(string(st)) == "FROZEN" {
			break
		}
	}
	return thaw, nil
}

// freezerDirs are sandbox id's freezer cgroup and the one below it where
// the guard freezes the guest.
func freezerDirs(id string) (parent, dir string) {
	parent = filepath.Join(cgroupRoot, "freezer", cgroupPath(id))
	return parent, filepath.Join(parent, "guard")
}

// thawGuest undoes freeze, if sandbox id has its freezer cgroup.
func thawGuest(id string) error {
	parent, dir := freezerDirs(id)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	err := os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0)
	if b, rerr := os.ReadFile(filepath.Join(dir, "cgroup.procs")); rerr == nil {
		for _, pid := range strings.Fields(string(b)) {
			_ = os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(pid), 0)
		}
	}
	// The sandbox's removal removes its cgroups, and cannot with a child
	// left in one.
	return errors.Join(err, os.Remove(dir))
}

// descends reports whether host process pid has ancestor among its
// parents.
func descends(pid, ancestor int) bool {
	for range 8 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			return false
		}
		ppid, _ := strconv.Atoi(f[1])
		if ppid == ancestor {
			return true
		}
		if ppid <= 1 {
			return false
		}
		pid = ppid
	}
	return false
}

// lend lends the cgroup rescueBytes over its limit each time it is full
// while the guard works (whatever allocates may eat a loan before the
// Sentry has used it to answer), up to maxLoan. The returned func stops lending (the limit stays
// where it is); it may be called more than once.
func (g *guard) lend() func() {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var loan int64
		for {
			if g.underOOM() && loan < g.maxLoan() {
				loan += rescueBytes
				if err := g.setLimit(g.limit + guardHeadroom + loan); err != nil {
					g.log.Warn("lending the sandbox memory to answer", "err", err)
				}
				g.log.Info("the sandbox filled its headroom; lent it more while its guard acts", "loan_bytes", loan)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(stop); <-done })
	}
}

// maxLoan bounds what relieve lends: half the limit, at least rescueBytes.
func (g *guard) maxLoan() int64 { return max(rescueBytes, g.limit/2) }

// guestProcess is one process in a sandbox, as runsc trace procfs shows it.
type guestProcess struct {
	PID  int32
	PGID int32
	UID  uint32
	Comm string
	RSS  int64 // bytes
}

// victim is what the guard ends: a process group (PGID set), or one
// process.
type victim struct {
	PID, PGID int32
	UID       uint32
	Comm      string
	RSS       int64 // of all its processes
	Procs     int
}

// chooseVictim picks what to end in a sandbox at its memory limit: the
// process group with the most resident memory, for the agent starts every
// kernel and command in a group of its own, so a runaway and whatever it
// forked (a fork bomb's thousand small shells) go together. Groups of the
// sandbox user come before root's, which runs the agent, holder of every
// context's state; pid 1's group is never chosen. Failing a group, the
// largest single process but pid 1.
func chooseVictim(procs []guestProcess) (victim, bool) {
	var initGroup int32 = -1
	for _, p := range procs {
		if p.PID == 1 {
			initGroup = p.PGID
		}
	}
	groups := map[int32]*victim{}
	for _, p := range procs {
		if p.PID == 1 || p.PGID == initGroup || p.PGID <= 0 {
			continue
		}
		g := groups[p.PGID]
		if g == nil {
			g = &victim{PGID: p.PGID}
			groups[p.PGID] = g
		}
		g.RSS += p.RSS
		g.Procs++
		if p.PID == p.PGID || g.Comm == "" {
			g.Comm, g.UID = p.Comm, p.UID
		}
		if p.UID != 0 {
			g.UID = p.UID
		}
	}
	better := func(a, b victim) bool {
		if (a.UID != 0) != (b.UID != 0) {
			return a.UID != 0
		}
		return a.RSS > b.RSS
	}
	var best victim
	found := false
	for _, g := range groups {
		if !found || better(*g, best) {
			best, found = *g, true
		}
	}
	if found {
		return best, true
	}
	for _, p := range procs {
		v := victim{PID: p.PID, UID: p.UID, Comm: p.Comm, RSS: p.RSS, Procs: 1}
		if p.PID != 1 && (!found || better(v, best)) {
			best, found = v, true
		}
	}
	return best, found
}

// chooseVictim lists sandbox id's processes and picks what to end.
func (r *Runtime) chooseVictim(ctx context.Context, id string) (victim, error) {
	out, err := r.command(ctx, id, "trace", "procfs", containerID(id))
	if err != nil {
		return victim{}, fmt.Errorf("listing the sandbox's processes: %w", err)
	}
	procs, err := parseProcfs(out)
	if err != nil {
		return victim{}, err
	}
	v, ok := chooseVictim(procs)
	if !ok {
		return victim{}, errors.New("no process but pid 1 to end")
	}
	return v, nil
}

// parseProcfs reads runsc trace procfs's output: a title line, then one
// JSON object per process.
func parseProcfs(out []byte) ([]guestProcess, error) {
	var procs []guestProcess
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var d struct {
			Status struct {
				Comm  string                `json:"comm"`
				PID   int32                 `json:"pid"`
				UID   struct{ Real uint32 } `json:"uid"`
				VMRSS int64                 `json:"vm_rss"` // KiB
			} `json:"status"`
			Stat struct {
				PGID int32 `json:"pgid"`
			} `json:"stat"`
		}
		if err := json.Unmarshal(line, &d); err != nil {
			return nil, fmt.Errorf("decoding runsc trace procfs: %w", err)
		}
		procs = append(procs, guestProcess{PID: d.Status.PID, PGID: d.Stat.PGID, UID: d.Status.UID.Real, Comm: d.Status.Comm, RSS: d.Status.VMRSS << 10})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading runsc trace procfs: %w", err)
	}
	return procs, nil
}
