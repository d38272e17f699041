package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// The operations chaos interrupts, each with the window its fault lands
// in (about the time the operation takes on two cores).
var chaosOps = []struct {
	name   string
	window time.Duration
}{
	{"create", 450 * time.Millisecond},
	{"pause", 200 * time.Millisecond},
	{"resume", 500 * time.Millisecond},
	{"fork", 650 * time.Millisecond},
	{"runCode", 1000 * time.Millisecond},
}

// The faults: SIGKILL of the server; of every runsc process of a sandbox
// (sandbox, gofer, and runsc commands the server runs on it); or of its
// agent: the agent itself (PID 1 inside, killed with runsc kill), the one
// runsc process holding the sandbox's kernel and the agent in it, or its
// gofer alone (which a running gVisor sandbox survives).
var chaosFaults = []string{"server", "runsc", "agent"}

const (
	chaosRounds = 20
	// chaosBudget bounds the suite's time: rounds stop being started
	// once it is spent.
	chaosBudget = 4 * time.Minute
	// chaosCallEnd is how soon after its sandbox dies a runCode in flight
	// must end (the node watches every 250 ms; a server kill ends
	// connections at once).
	chaosCallEnd = 3 * time.Second
	// chaosOpEnd bounds any other operation after a fault: a create may
	// fall back to a cold boot, which takes seconds, but nothing may hang
	// or wait out a timeout (the wait for an agent is 30 s).
	chaosOpEnd = 25 * time.Second
)

// TestChaos kills the server, a sandbox's runsc processes or its agent
// with SIGKILL at random points of create, pause, resume, fork and runCode
// (math/rand seeded and logged; LIZARD_CHAOS_SEED repeats a run), then
// checks that the call in flight ended promptly with a typed error, that
// after a restart every sandbox is either usable with its state or cleanly
// ended with a reason, that a bystander sandbox kept its state through
// every round, and that nothing is left behind.
func TestChaos(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("LIZARD_CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("LIZARD_CHAOS_SEED=%q: want a number", v)
		}
		seed = n
	}
	t.Logf("chaos seed %d (LIZARD_CHAOS_SEED=%d repeats this run)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	s := startServer(t, "--creates-per-second", "0", "--requests-per-second", "0")
	c := s.createProject("proj_chaos")
	s.waitLog(t, 1, "template snapshot made")
	ctx := context.Background()
	bystander := newSandbox(t, c, api.CreateSandboxRequest{TimeoutMs: ms(0)})
	if err := expectPy(ctx, c, bystander.SandboxID, "x = 41", ""); err != nil {
		t.Fatal(err)
	}

	begin := time.Now()
	rounds := 0
	for r := range chaosRounds {
		if time.Since(begin) > chaosBudget {
			t.Logf("stopping after %d rounds: the time budget of %s is spent", r, chaosBudget)
			break
		}
		rounds++
		op := chaosOps[rng.IntN(len(chaosOps))]
		fault := chaosFaults[rng.IntN(len(chaosFaults))]
		delay := time.Duration(rng.Int64N(int64(op.window)))
		// Drawn here, whatever the fault, so that a seed repeats a run.
		proc, newOne := []string{"boot", "boot", "gofer", "init"}[rng.IntN(4)], rng.IntN(2) == 0
		ch := &chaosRound{t: t, s: s, c: c, n: r, op: op.name, fault: fault, delay: delay, bystander: bystander.SandboxID,
			proc: proc, newOne: newOne}
		ch.run()
		if t.Failed() {
			t.Fatalf("round %d (%s during %s after %s) failed; seed %d\nserver log of its sandboxes:\n%s\nserver log tail:\n%s",
				r, fault, op.name, delay, seed, logOf(s.logs(), ch.seen()), tail(s.logs(), 20))
		}
	}
	t.Logf("chaos: %d rounds in %s", rounds, time.Since(begin).Round(time.Millisecond))

	if err := c.KillSandbox(ctx, bystander.SandboxID); err != nil {
		t.Fatalf("killing the bystander: %v", err)
	}
	s.stopAndExpectNothingLeft(t)
}

// chaosRound is one fault during one operation.
type chaosRound struct {
	t         *testing.T
	s         *server
	c         *client.Client
	n         int
	op, fault string
	delay     time.Duration
	bystander string
	// proc is what the agent fault kills: the sandbox process (boot),
	// its gofer, or the agent itself, the container's init (runsc kill).
	proc   string
	newOne bool // a fork's fault hits a copy being made, not the source

	victim  string          // the sandbox the operation is on ("" for create)
	hasX    map[string]bool // sandboxes whose kernel holds x = 41
	target  string          // the sandbox whose processes were killed
	faultAt time.Time
	ids     map[string]bool // every sandbox of the round, once known
	log     []string        // what happened, in order (logf)
}

// seen lists the round's sandboxes known so far.
func (ch *chaosRound) seen() []string {
	out := []string{}
	for _, id := range []string{ch.victim, ch.target} {
		if id != "" {
			out = append(out, id)
		}
	}
	for id := range ch.ids {
		out = append(out, id)
	}
	return out
}

type opResult struct {
	ids []string // sandboxes the operation returned
	err error
	at  time.Time
}

// logf adds to the round's log, which is printed after the round: first
// its errors, then the log, so that a failure's cause leads the test's
// output (which CI may show only the head and tail of).
func (ch *chaosRound) logf(format string, args ...any) {
	ch.log = append(ch.log, fmt.Sprintf("round %d (%s during %s after %s): %s", ch.n, ch.fault, ch.op, ch.delay, fmt.Sprintf(format, args...)))
}

func (ch *chaosRound) run() {
	t, c := ch.t, ch.c
	t.Helper()
	ctx := context.Background()
	ch.hasX = map[string]bool{}
	// Printed when the round ends, also by a t.Fatalf within it.
	defer func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("round %d's log:\n%s", ch.n, strings.Join(ch.log, "\n"))
		}
	}()
	before := ch.s.dbSandboxes(t)

	if ch.op != "create" {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
		if err != nil {
			t.Fatalf("round %d: creating the victim: %v", ch.n, err)
		}
		ch.victim = sb.SandboxID
		if err := expectPy(ctx, c, ch.victim, "x = 41", ""); err != nil {
			t.Fatalf("round %d: %v", ch.n, err)
		}
		ch.hasX[ch.victim] = true
		if ch.op == "resume" {
			if _, err := c.PauseSandbox(ctx, ch.victim); err != nil {
				t.Fatalf("round %d: pausing the victim: %v", ch.n, err)
			}
		}
	}
	known := ch.s.runtimeIDs()

	done := make(chan opResult, 1)
	opCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	go func() { done <- ch.do(opCtx) }()

	time.Sleep(ch.delay)
	var res *opResult
	switch ch.fault {
	case "server":
		ch.faultAt = time.Now()
		ch.s.kill9()
		ch.logf("killed the server")
	default:
		res = ch.killSandbox(known, done)
	}
	if res == nil {
		select {
		case r := <-done:
			res = &r
		case <-time.After(2*time.Minute + 5*time.Second):
			t.Fatalf("round %d: the %s call never ended", ch.n, ch.op)
		}
	}
	ch.checkCall(*res)

	// Restart: after a crash, or gracefully.
	if ch.fault == "server" {
		ch.s.start()
	} else {
		ch.s.restart()
	}

	// Every sandbox of the round — the victim, what the operation returned,
	// and whatever the server recorded meanwhile — is usable or ended.
	ids := map[string]bool{}
	ch.ids = ids
	if ch.victim != "" {
		ids[ch.victim] = true
	}
	for _, id := range res.ids {
		ids[id] = true
	}
	for id, row := range ch.s.dbSandboxes(t) {
		if _, ok := before[id]; !ok && row.Role == "" {
			ids[id] = true
		}
	}
	for id := range ids {
		ch.checkSandbox(id)
	}
	if err := expectPy(ctx, c, ch.bystander, "x + 1", "42"); err != nil {
		t.Errorf("round %d: the bystander lost its state: %v", ch.n, err)
	}

	// End the round's sandboxes; nothing of them may be left.
	var list []string
	for id := range ids {
		list = append(list, id)
		if err := c.KillSandbox(ctx, id); err != nil && !errors.Is(err, client.ErrNotFound) {
			t.Errorf("round %d: killing %s: %v", ch.n, id, err)
		}
	}
	ch.s.expectNoLeftovers(t, leftoverCheck{ids: list})
}

// do runs the round's operation.
func (ch *chaosRound) do(ctx context.Context) opResult {
	c := ch.c
	var ids []string
	var err error
	switch ch.op {
	case "create":
		var sb *api.Sandbox
		if sb, err = c.CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ms(600_000)}); err == nil {
			ids = append(ids, sb.SandboxID)
		}
	case "pause":
		_, err = c.PauseSandbox(ctx, ch.victim)
	case "resume":
		_, err = c.ResumeSandbox(ctx, ch.victim, api.ResumeRequest{})
	case "fork":
		var forks []api.Sandbox
		forks, err = c.Fork(ctx, ch.victim, api.ForkRequest{Count: 2, TimeoutMs: ms(600_000)})
		for _, f := range forks {
			ids = append(ids, f.SandboxID)
			ch.hasX[f.SandboxID] = true
		}
	case "runCode":
		var ex *client.Execution
		ex, err = c.Execute(ctx, ch.victim, api.ExecuteRequest{Code: "import time\ntime.sleep(8)\nprint('woke')"}, nil)
		if err == nil && (ex.Error != nil || ex.Stdout != "woke\n") {
			err = fmt.Errorf("the run ended with stdout %q and error %+v", ex.Stdout, ex.Error)
		}
	}
	return opResult{ids: ids, err: err, at: time.Now()}
}

// killSandbox picks the sandbox to hit — the victim, or for a create or a
// fork one being made — and SIGKILLs its runsc processes: all of them, or
// for the agent fault the agent (killInit), the sandbox process or its
// gofer alone. Processes
// are found by the sandbox ID on their command line; only those pids are
// signalled. If the operation ends before there is anything to kill, its
// result is returned.
func (ch *chaosRound) killSandbox(known []string, done chan opResult) *opResult {
	t := ch.t
	t.Helper()
	pickNew := ch.op == "create" || (ch.op == "fork" && ch.newOne)
	deadline := time.Now().Add(chaosOpEnd)
	for time.Now().Before(deadline) {
		id := ch.victim
		if pickNew {
			id = ""
			for _, n := range ch.s.runtimeIDs() {
				if !slices.Contains(known, n) {
					id = n
					break
				}
			}
		}
		if id != "" && ch.fault == "agent" && ch.proc == "init" {
			if ch.killInit(id) {
				return nil
			}
		} else if id != "" {
			if procs := ch.pick(hostProcs(id)); len(procs) > 0 {
				ch.faultAt = time.Now()
				ch.target = id
				var killed []string
				for _, p := range procs {
					if err := syscall.Kill(p.pid, syscall.SIGKILL); err == nil {
						killed = append(killed, fmt.Sprintf("%d (%s)", p.pid, runscCommand(p)))
					}
				}
				ch.logf("killed processes of %s: %s", id, strings.Join(killed, ", "))
				return nil
			}
		}
		select {
		case r := <-done:
			if pickNew && ch.op == "create" && len(r.ids) > 0 && r.err == nil {
				// The create was quicker: hit what it made.
				ch.op = "create (done)"
				if ch.fault == "agent" && ch.proc == "init" {
					ch.killInit(r.ids[0])
				} else {
					procs := ch.pick(hostProcs(r.ids[0]))
					ch.faultAt, ch.target = time.Now(), r.ids[0]
					for _, p := range procs {
						syscall.Kill(p.pid, syscall.SIGKILL)
					}
					ch.logf("the create ended first; killed %d processes of %s", len(procs), r.ids[0])
				}
			} else {
				ch.logf("the operation ended (%v) before any process was there to kill", r.err)
			}
			return &r
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("round %d: found no process to kill and the operation did not end", ch.n)
	return nil
}

// killInit sends SIGKILL to the agent of sandbox id, its container's init
// (PID 1 inside), with runsc kill as root on the host would; inside the
// sandbox nothing can kill its init. It reports whether runsc did.
func (ch *chaosRound) killInit(id string) bool {
	stateDir := filepath.Join(ch.s.dataDir, "gvisor", "state")
	ents, _ := os.ReadDir(stateDir)
	for _, e := range ents {
		cid, _, ok := strings.Cut(e.Name(), "_sandbox:")
		if !ok || !strings.HasSuffix(e.Name(), ".state") || strings.TrimSuffix(cid, ".") != id {
			continue
		}
		at := time.Now()
		if err := exec.Command(ch.s.runsc, "--root", stateDir, "kill", cid, "KILL").Run(); err != nil {
			return false // not running yet, or gone
		}
		ch.faultAt, ch.target = at, id
		ch.logf("killed the agent (init) of %s", id)
		return true
	}
	return false
}

// pick chooses, among a sandbox's processes, those the fault kills.
func (ch *chaosRound) pick(procs []hostProc) []hostProc {
	if ch.fault == "runsc" || len(procs) == 0 {
		return procs
	}
	var out []hostProc
	for _, p := range procs {
		if runscCommand(p) == ch.proc {
			out = append(out, p)
		}
	}
	return out
}

// runscCommand is the runsc subcommand a process runs (boot, gofer,
// create, restore, ...), or its program name.
func runscCommand(p hostProc) string {
	for _, a := range p.args[1:] {
		if !strings.HasPrefix(a, "-") && !strings.Contains(a, "=") && !strings.Contains(a, "/") {
			return a
		}
	}
	return p.args[0]
}

// checkCall checks how the operation in flight ended.
func (ch *chaosRound) checkCall(r opResult) {
	t := ch.t
	t.Helper()
	if ch.faultAt.IsZero() {
		if r.err != nil && !typedError(r.err) {
			t.Errorf("round %d: the %s call failed with an untyped error: %v", ch.n, ch.op, r.err)
		}
		return
	}
	took := r.at.Sub(ch.faultAt)
	if took < 0 {
		ch.logf("the call had ended %s before the fault: %v", -took.Round(time.Millisecond), r.err)
	} else {
		ch.logf("the call ended %s after the fault: %v", took.Round(time.Millisecond), r.err)
	}
	// A sandbox whose gofer alone was killed runs on: gVisor reaches its
	// files directly once it is up. A call in it may end normally.
	killedSandbox := ch.fault == "runsc" || ch.fault == "agent" && ch.proc != "gofer"
	inDeadSandbox := ch.op == "runCode" && ch.target == ch.victim && killedSandbox
	limit := chaosOpEnd
	if inDeadSandbox || ch.fault == "server" {
		limit = chaosCallEnd
	}
	if took > limit {
		t.Errorf("round %d: the %s call ended %s after the fault; want within %s", ch.n, ch.op, took, limit)
	}
	if r.err == nil {
		if inDeadSandbox {
			t.Errorf("round %d: a run in a sandbox whose processes were killed succeeded", ch.n)
		}
		return
	}
	if !typedError(r.err) {
		t.Errorf("round %d: the %s call failed with an untyped error: %v", ch.n, ch.op, r.err)
	}
	switch {
	case ch.fault == "server":
		// A connection cut mid-call; any answer that came first is typed.
	case inDeadSandbox:
		if !errors.Is(r.err, client.ErrGone) {
			t.Errorf("round %d: a run in a sandbox that died failed with %v; want ErrGone (410 or the abort event)", ch.n, r.err)
		}
	default:
		var e *client.Error
		switch {
		case !errors.As(r.err, &e):
			t.Errorf("round %d: with the server up the %s call failed without an API error: %v", ch.n, ch.op, r.err)
		case e.Message == "":
			t.Errorf("round %d: the %s call failed with %v and no message", ch.n, ch.op, r.err)
		case e.Status >= 500 && ch.target == ch.victim:
			// The sandbox the call is about died: that is news for
			// the caller (410), not a failure of the server.
			t.Errorf("round %d: the %s call failed with %v; want a status that says what happened to %s (410, 409)", ch.n, ch.op, r.err, ch.victim)
		}
	}
}

// typedError reports whether err is one the client maps: an API error, a
// server out of reach or a stream cut off.
func typedError(err error) bool {
	var e *client.Error
	return errors.As(err, &e) || errors.Is(err, client.ErrUnreachable) || errors.Is(err, client.ErrTruncated)
}

// checkSandbox checks that sandbox id is usable — running (or paused and
// resumable) with its kernel's state — or ended with a reason.
func (ch *chaosRound) checkSandbox(id string) {
	t, c := ch.t, ch.c
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var sb *api.Sandbox
	for {
		var err error
		if sb, err = c.GetSandbox(ctx, id); err != nil {
			t.Errorf("round %d: get %s after the restart: %v", ch.n, id, err)
			return
		}
		if sb.State != api.StateStarting {
			break
		}
		if ctx.Err() != nil {
			t.Errorf("round %d: %s is still starting a minute after the restart", ch.n, id)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	switch sb.State {
	case api.StatePaused:
		if _, err := c.ResumeSandbox(ctx, id, api.ResumeRequest{}); err != nil {
			// An image the crash left unusable fails it, with a reason.
			if !errors.Is(err, client.ErrGone) {
				t.Errorf("round %d: resuming paused %s: %v; want it resumed or gone", ch.n, id, err)
				return
			}
			ch.checkEnded(id)
			return
		}
		fallthrough
	case api.StateRunning:
		if err := expectPy(ctx, c, id, "1+1", "2"); err != nil {
			t.Errorf("round %d: %s is %s after the restart but not usable: %v", ch.n, id, sb.State, err)
			return
		}
		if ch.hasX[id] {
			if err := expectPy(ctx, c, id, "x + 1", "42"); err != nil {
				t.Errorf("round %d: %s is usable but lost its state: %v", ch.n, id, err)
			}
		}
		ch.logf("%s is usable (%s)", id, sb.State)
	default:
		ch.checkEnded(id)
	}
}

// checkEnded checks that sandbox id ended with a reason recorded.
func (ch *chaosRound) checkEnded(id string) {
	t := ch.t
	t.Helper()
	row := ch.s.dbSandboxes(t)[id]
	if row.State != api.StateFailed && row.State != api.StateKilled || row.EndReason == "" {
		t.Errorf("round %d: %s ended as %q with reason %q; want failed or killed with a reason", ch.n, id, row.State, row.EndReason)
		return
	}
	ch.logf("%s ended cleanly: %s: %s", id, row.State, row.EndReason)
}
