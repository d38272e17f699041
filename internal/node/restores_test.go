package node_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

// TestRestoreQueue: a burst of restores beyond --max-restores runs at most
// that many at once, in the order they came; creates whose clients go away
// while they wait leave the queue having made nothing; a restore that fails
// ends its create with a typed error and frees its turn; another
// sandbox's kill and pause do not wait for the queue; the wait is in the
// metrics.
func TestRestoreQueue(t *testing.T) {
	const limit, burst = 2, 8
	m := metrics.New()
	e := nodetest.New(t, func(c *node.Config) { c.MaxRestores, c.Metrics = limit, m })
	ctx := context.Background()
	src := e.Create(t, nodetest.Plan(0))
	image := filepath.Join(e.DataDir, "snapshots", "s1")
	if err := e.Node.Checkpoint(ctx, src.ID, image); err != nil {
		t.Fatal(err)
	}
	other := e.Create(t, nodetest.Plan(0))

	// Each restore blocks until the test lets it go; the third create's fails.
	var mu sync.Mutex
	var order []string
	running, most := 0, 0
	release := make(chan struct{})
	restore := e.Runtime.RestoreFunc
	e.Runtime.RestoreFunc = func(ctx context.Context, spec sandbox.Spec, dir string) error {
		mu.Lock()
		order = append(order, spec.Env[0])
		running++
		most = max(most, running)
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		<-release
		if spec.Env[0] == "N=2" {
			return errors.New("the image is corrupt")
		}
		return restore(ctx, spec, dir)
	}
	started := func() int { mu.Lock(); defer mu.Unlock(); return len(order) }

	type result struct {
		sb  node.Sandbox
		err error
	}
	results := make([]chan result, burst)
	cancels := make([]context.CancelFunc, burst)
	for i := range burst {
		cctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		results[i] = make(chan result, 1)
		p := nodetest.Plan(0)
		p.Image, p.Envs = image, []string{fmt.Sprintf("N=%d", i)}
		go func() {
			sb, err := e.Node.Create(cctx, p)
			results[i] <- result{sb, err}
		}()
		// One at a time, so that the queue's order is the test's.
		if i < limit {
			nodetest.WaitFor(t, fmt.Sprintf("restore %d to start", i), func() bool { return started() == i+1 })
		} else {
			nodetest.WaitFor(t, fmt.Sprintf("create %d to queue", i), func() bool { return gauge(t, m, "lizard_restores", "waiting") == float64(i+1-limit) })
		}
	}
	if got := gauge(t, m, "lizard_restores", "running"); got != limit {
		t.Errorf("lizard_restores{state=running} = %v; want %d", got, limit)
	}
	// Other sandboxes' calls go on meanwhile.
	done := make(chan error, 1)
	go func() {
		if _, err := e.Node.Pause(ctx, src.ID); err != nil {
			done <- err
			return
		}
		done <- e.Node.Kill(ctx, other.ID)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("pause and kill of other sandboxes during the queue: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pause and kill of other sandboxes waited for the restore queue")
	}

	// Two clients give up while they wait.
	gaveUp := map[int]bool{4: true, 6: true}
	for i := range gaveUp {
		cancels[i]()
		if r := <-results[i]; !errors.Is(r.err, context.Canceled) {
			t.Errorf("create %d cancelled in the queue = %+v, %v; want context.Canceled", i, r.sb, r.err)
		}
	}
	// The restores end one at a time; each frees a turn for the next in
	// line, whose restore starts before the next one ends.
	restores := burst - len(gaveUp)
	for k := range restores {
		release <- struct{}{}
		if next := k + limit + 1; next <= restores {
			nodetest.WaitFor(t, fmt.Sprintf("restore %d to start", next), func() bool { return started() == next })
		}
	}
	ok := 0
	for i := range burst {
		if gaveUp[i] {
			continue
		}
		r := <-results[i]
		if i == 2 {
			var e *errdefs.Error
			if !errors.As(r.err, &e) || r.sb.ID != "" {
				t.Errorf("create %d whose restore failed = %+v, %v; want a typed error", i, r.sb, r.err)
			}
			continue
		}
		if r.err != nil || r.sb.State != api.StateRunning {
			t.Errorf("create %d = %+v, %v; want running", i, r.sb, r.err)
			continue
		}
		ok++
	}
	for _, c := range cancels {
		c()
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"N=0", "N=1", "N=2", "N=3", "N=5", "N=7"}
	if fmt.Sprint(order) != fmt.Sprint(want) || most != limit {
		t.Errorf("restores in the order %v, at most %d at once; want %v, at most %d", order, most, want, limit)
	}
	// Nothing left behind: the successes run, the failure is recorded
	// failed and killed, the cancelled creates made no row.
	rows, err := e.Store.ListSandboxes(ctx, store.Filter{ProjectID: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	live, failed := 0, 0
	for _, sb := range rows {
		switch {
		case sb.ID == src.ID || sb.ID == other.ID:
		case sb.State == api.StateRunning:
			live++
		case sb.State == api.StateFailed:
			failed++
			if e.Runtime.IsRunning(sb.ID) {
				t.Errorf("failed sandbox %s still runs", sb.ID)
			}
		default:
			t.Errorf("sandbox %s is %s; want running or failed", sb.ID, sb.State)
		}
	}
	if live != ok || ok != burst-len(gaveUp)-1 || failed != 1 || len(rows) != burst-len(gaveUp)+2 {
		t.Errorf("%d rows, %d running (%d creates ok), %d failed; want %d running, 1 failed and no row of a cancelled create",
			len(rows), live, ok, failed, burst-len(gaveUp)-1)
	}
	if w, r := gauge(t, m, "lizard_restores", "waiting"), gauge(t, m, "lizard_restores", "running"); w != 0 || r != 0 {
		t.Errorf("lizard_restores waiting %v, running %v after the burst; want 0 and 0", w, r)
	}
	if n := histCount(t, m, "lizard_restore_queue_seconds", "error"); n != uint64(len(gaveUp)) {
		t.Errorf("lizard_restore_queue_seconds{outcome=error} counted %d; want %d", n, len(gaveUp))
	}
}

// TestRestoreQueueResume: a resume queues too, and one whose caller goes
// away while it waits leaves its sandbox paused.
func TestRestoreQueueResume(t *testing.T) {
	e := nodetest.New(t, func(c *node.Config) { c.MaxRestores = 1 })
	ctx := context.Background()
	a, b := e.Create(t, nodetest.Plan(0)), e.Create(t, nodetest.Plan(0))
	for _, id := range []string{a.ID, b.ID} {
		if _, err := e.Node.Pause(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	release := make(chan struct{})
	restore := e.Runtime.RestoreFunc
	e.Runtime.RestoreFunc = func(ctx context.Context, spec sandbox.Spec, dir string) error {
		<-release
		return restore(ctx, spec, dir)
	}
	first := make(chan error, 1)
	go func() { _, err := e.Node.Resume(ctx, a.ID, nil); first <- err }()
	nodetest.WaitFor(t, "the first resume to restore", func() bool { return e.Row(t, a.ID).State == api.StateRunning || e.Row(t, a.ID).GuestAddr != "" })
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if sb, err := e.Node.Resume(cctx, b.ID, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a resume that waited past its deadline = %+v, %v; want context.DeadlineExceeded", sb, err)
	}
	if got := e.Row(t, b.ID); got.State != api.StatePaused || got.GuestAddr != "" {
		t.Errorf("sandbox whose resume gave up in the queue = %s at %q; want paused without an address", got.State, got.GuestAddr)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first resume: %v", err)
	}
	if sb, err := e.Node.Resume(ctx, b.ID, nil); err != nil || sb.State != api.StateRunning {
		t.Errorf("resume after the queue emptied = %+v, %v; want running", sb, err)
	}
}

// TestRestoreQueueFork: a fork of more copies than --max-restores, of a
// paused parent (whose resume queues too), takes its turns and makes them
// all.
func TestRestoreQueueFork(t *testing.T) {
	e := nodetest.New(t, func(c *node.Config) { c.MaxRestores = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	parent := e.Create(t, nodetest.Plan(0))
	if _, err := e.Node.Pause(ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	got, err := e.Node.Fork(ctx, parent.ID, nodetest.Plan(0), 3)
	if err != nil || len(got) != 3 {
		t.Fatalf("Fork of 3 under a limit of 1 = %d copies, %v; want 3", len(got), err)
	}
	for _, sb := range got {
		if !e.Runtime.IsRunning(sb.ID) {
			t.Errorf("copy %s does not run", sb.ID)
		}
	}
}

// gauge is the value of metric name's series whose one label is value.
func gauge(t *testing.T, m *metrics.Metrics, name, value string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			if s.GetLabel()[0].GetValue() == value {
				return s.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// histCount is how many observations histogram name's series whose one
// label is value holds.
func histCount(t *testing.T, m *metrics.Metrics, name, value string) uint64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			if s.GetLabel()[0].GetValue() == value {
				return s.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}
