package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// soakCycles is how many create → run → kill cycles TestSoak runs:
// LIZARD_SOAK_CYCLES, or 150 (what `make test` runs in a few minutes on two
// cores). `make soak` runs 1,000.
func soakCycles(t *testing.T) int {
	t.Helper()
	v := os.Getenv("LIZARD_SOAK_CYCLES")
	if v == "" {
		return 150
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 {
		t.Fatalf("LIZARD_SOAK_CYCLES=%q: want a whole number of cycles, at least 2", v)
	}
	return n
}

const (
	soakWorkers = 4
	// soakRSSGrowth is how much the server's resident memory may grow
	// between the end of the warm-up and the end of the soak: a leak of a
	// few KiB per sandbox shows over 1,000 cycles, allocator noise and
	// caches filling up stay well below it.
	soakRSSGrowth = 30 << 20
)

// TestSoak runs create → run → kill cycles on a few concurrent workers
// against one server with a warm pool, mixing the paths a sandbox can take
// (a warm-pool claim, a restore of the template snapshot for a non-default
// shape, pause and resume, fork, a snapshot and a create from it), then
// checks that nothing of any sandbox is left on the host and that the
// server's memory stayed flat after the warm-up.
func TestSoak(t *testing.T) {
	cycles := soakCycles(t)
	warmup := min(50, cycles/3)
	s := startServer(t, "--warm-pool", "2", "--creates-per-second", "0", "--requests-per-second", "0")
	c := s.createProject("proj_soak")
	s.waitLog(t, 1, "template snapshot made")

	var (
		mu      sync.Mutex
		ids     []string
		failed  []string
		next    atomic.Int64
		stopped atomic.Bool
	)
	record := func(id string) {
		mu.Lock()
		ids = append(ids, id)
		mu.Unlock()
	}
	run := func(upTo int) time.Duration {
		begin := time.Now()
		var wg sync.WaitGroup
		for range soakWorkers {
			wg.Go(func() {
				for !stopped.Load() {
					i := int(next.Add(1)) - 1
					if i >= upTo {
						next.Add(-1)
						return
					}
					if err := soakCycle(c, i, record); err != nil {
						mu.Lock()
						failed = append(failed, fmt.Sprintf("cycle %d: %v", i, err))
						if len(failed) >= 5 {
							stopped.Store(true) // enough to go on
						}
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		return time.Since(begin)
	}

	took := run(warmup)
	before := s.serverRSS(t)
	t.Logf("soak warm-up: %d cycles in %s; server RSS %.1f MiB", warmup, took.Round(time.Millisecond), mib(before))
	took = run(cycles)
	after := s.serverRSS(t)
	if len(failed) > 0 {
		t.Fatalf("%d cycles failed:\n%s\nserver log of their sandboxes:\n%s", len(failed), strings.Join(failed, "\n"),
			logOf(s.logs(), sandboxIDPattern.FindAllString(strings.Join(failed, "\n"), -1)))
	}
	rate := float64(cycles-warmup) / took.Seconds()
	t.Logf("soak: %d cycles (%d after the warm-up in %s, %.2f cycles/s) with %d workers; server RSS %.1f MiB after the warm-up, %.1f MiB at the end (%+.1f MiB)",
		cycles, cycles-warmup, took.Round(time.Millisecond), rate, soakWorkers, mib(before), mib(after), mib(after-before))
	if after-before > soakRSSGrowth {
		t.Errorf("the server's RSS grew from %.1f MiB to %.1f MiB over %d cycles: more than %d MiB, a leak", mib(before), mib(after), cycles-warmup, soakRSSGrowth>>20)
	}

	// Every sandbox a cycle made is ended and has left nothing behind,
	// while the server (and its warm pool) still runs.
	list, err := c.ListSandboxes(context.Background(), client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list {
		if sb.State == api.StateRunning || sb.State == api.StatePaused || sb.State == api.StateStarting {
			t.Errorf("sandbox %s is still %s after its cycle killed it", sb.SandboxID, sb.State)
		}
	}
	if snaps, err := c.Snapshots().List(context.Background()); err != nil || len(snaps) != 0 {
		t.Errorf("snapshots after the soak: %d, %v; want none", len(snaps), err)
	}
	s.expectNoLeftovers(t, leftoverCheck{ids: ids})
	// Then the server stops and nothing of it is left: its warm pool, its
	// template sandbox, their addresses.
	s.stopAndExpectNothingLeft(t)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// sandboxIDPattern matches sandbox IDs (node.NewID) in messages.
var sandboxIDPattern = regexp.MustCompile(`\b[a-z0-9]{20}\b`)

// logOf returns the lines of a server log that name any of ids.
func logOf(log string, ids []string) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		for _, id := range ids {
			if strings.Contains(line, id) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// soakCycle is cycle i: create a sandbox, run code, write and read a file,
// and kill it; every tenth pauses and resumes it, forks it or creates from
// a snapshot of it on the way. record is told every sandbox made.
func soakCycle(c *client.Client, i int, record func(string)) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var made []string
	kill := func(id string) error {
		if err := c.KillSandbox(ctx, id); err != nil {
			return fmt.Errorf("kill %s: %w", id, err)
		}
		return nil
	}
	defer func() {
		// A failed cycle still ends what it made, so the leftover check
		// at the end looks at the server, not at the cycle's failure.
		for _, id := range made {
			if kerr := kill(id); kerr != nil && err == nil {
				err = kerr
			}
		}
	}()
	create := func(req api.CreateSandboxRequest) (string, error) {
		sb, err := c.CreateSandbox(ctx, req)
		if err != nil {
			return "", fmt.Errorf("create %+v: %w", req, err)
		}
		record(sb.SandboxID)
		made = append(made, sb.SandboxID)
		return sb.SandboxID, nil
	}

	req := api.CreateSandboxRequest{Metadata: map[string]string{"soak": strconv.Itoa(i)}}
	if k := i % 10; k == 3 || k == 6 {
		req.MemoryMb = ptr(int64(512)) // not the default shape: restores the template snapshot
	}
	id, err := create(req)
	if err != nil {
		return err
	}
	if err := expectPy(ctx, c, id, "1+1", "2"); err != nil {
		return err
	}
	payload := fmt.Sprintf("cycle %d of sandbox %s\n", i, id)
	if _, err := c.WriteFile(ctx, id, "soak.txt", strings.NewReader(payload)); err != nil {
		return fmt.Errorf("write file in %s: %w", id, err)
	}
	if err := expectFile(ctx, c, id, "soak.txt", payload); err != nil {
		return err
	}

	switch i % 10 {
	case 0: // pause and resume keep the kernel's state and the files
		if err := expectPy(ctx, c, id, "x = 41", ""); err != nil {
			return err
		}
		if sb, err := c.PauseSandbox(ctx, id); err != nil || sb.State != api.StatePaused {
			return fmt.Errorf("pause %s: %+v, %w", id, sb, err)
		}
		if sb, err := c.ResumeSandbox(ctx, id, api.ResumeRequest{}); err != nil || sb.State != api.StateRunning {
			return fmt.Errorf("resume %s: %+v, %w", id, sb, err)
		}
		if err := expectPy(ctx, c, id, "x + 1", "42"); err != nil {
			return err
		}
		if err := expectFile(ctx, c, id, "soak.txt", payload); err != nil {
			return err
		}
	case 1: // a fork has the source's state
		if err := expectPy(ctx, c, id, "x = 41", ""); err != nil {
			return err
		}
		forks, err := c.Fork(ctx, id, api.ForkRequest{Count: 1})
		for _, f := range forks {
			record(f.SandboxID)
			made = append(made, f.SandboxID)
		}
		if err != nil || len(forks) != 1 {
			return fmt.Errorf("fork %s: %d copies, %w", id, len(forks), err)
		}
		if err := expectPy(ctx, c, forks[0].SandboxID, "x + 1", "42"); err != nil {
			return err
		}
	case 2: // a create from a snapshot has its state; deleting the snapshot removes its image
		if err := expectPy(ctx, c, id, "x = 41", ""); err != nil {
			return err
		}
		snap, err := c.Snapshot(ctx, id)
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", id, err)
		}
		copyID, cerr := create(api.CreateSandboxRequest{SnapshotID: snap.SnapshotID})
		if cerr == nil {
			cerr = expectPy(ctx, c, copyID, "x + 1", "42")
		}
		if err := c.Snapshots().Delete(ctx, snap.SnapshotID); err != nil {
			return errors.Join(cerr, fmt.Errorf("delete snapshot %s: %w", snap.SnapshotID, err))
		}
		if cerr != nil {
			return cerr
		}
	}

	for len(made) > 0 {
		id := made[len(made)-1]
		made = made[:len(made)-1]
		if err := kill(id); err != nil {
			return err
		}
	}
	return nil
}

// expectPy runs Python code in sandbox id and checks its last
// expression's value (want "" expects none).
func expectPy(ctx context.Context, c *client.Client, id, code, want string) error {
	ex, err := c.Execute(ctx, id, api.ExecuteRequest{Code: code}, nil)
	if err != nil {
		return fmt.Errorf("run %q in %s: %w", code, id, err)
	}
	if ex.Error != nil {
		return fmt.Errorf("run %q in %s: %s: %s", code, id, ex.Error.Name, ex.Error.Message)
	}
	got := ""
	if len(ex.Results) > 0 {
		got = ex.Results[0].Data
	}
	if got != want || len(ex.Results) > 1 {
		return fmt.Errorf("run %q in %s: results %+v, want %q", code, id, ex.Results, want)
	}
	return nil
}

// expectFile reads path in sandbox id and checks its contents.
func expectFile(ctx context.Context, c *client.Client, id, path, want string) error {
	r, err := c.ReadFile(ctx, id, path)
	if err != nil {
		return fmt.Errorf("read %s in %s: %w", path, id, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("read %s in %s: %w", path, id, err)
	}
	if string(b) != want {
		return fmt.Errorf("read %s in %s: %q, want %q", path, id, b, want)
	}
	return nil
}
