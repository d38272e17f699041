package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

// ckptRuntime adds checkpoints to the fake runtime: an image is a
// directory holding one file naming the sandbox it was taken from, and a
// restore needs that file.
type ckptRuntime struct {
	*fakeRuntime
	CheckpointFunc func(ctx context.Context, id, dir string, leaveRunning bool) error
	RestoreFunc    func(ctx context.Context, spec sandbox.Spec, dir string) error
	restores       atomic.Int32
}

func (c *ckptRuntime) Checkpoint(ctx context.Context, id, dir string, leaveRunning bool) error {
	return c.CheckpointFunc(ctx, id, dir, leaveRunning)
}

func (c *ckptRuntime) Restore(ctx context.Context, spec sandbox.Spec, dir string) error {
	c.restores.Add(1)
	return c.RestoreFunc(ctx, spec, dir)
}

type snapEnv struct {
	*env
	ck      *ckptRuntime
	data    string
	reseeds atomic.Int32
}

// newSnapEnv is newEnv with a data directory, checkpoints and an agent
// that also answers /reseed.
func newSnapEnv(t *testing.T, mutate ...func(*Config)) *snapEnv {
	t.Helper()
	s := &snapEnv{data: t.TempDir()}
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.WriteHeader(200)
		case "/reseed":
			s.reseeds.Add(1)
			w.WriteHeader(204)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(agent.Close)
	s.env = newEnv(t, append([]func(*Config){func(c *Config) {
		c.DataDir = s.data
		c.AgentAddr = func(string, string) string { return agent.Listener.Addr().String() }
		fr := c.Runtime.(*fakeRuntime)
		s.ck = &ckptRuntime{fakeRuntime: fr}
		s.ck.CheckpointFunc = func(_ context.Context, id, dir string, _ bool) error {
			if !fr.isRunning(id) {
				return errors.New("checkpoint: sandbox not running")
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, "checkpoint.img"), []byte(id), 0o600)
		}
		s.ck.RestoreFunc = func(_ context.Context, spec sandbox.Spec, dir string) error {
			if _, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil {
				return err
			}
			fr.mu.Lock()
			defer fr.mu.Unlock()
			fr.running[spec.ID] = spec
			return nil
		}
		c.Runtime = s.ck
	}}, mutate...)...)
	return s
}

func (s *snapEnv) row(t *testing.T, id string) store.Sandbox {
	t.Helper()
	sb, err := s.st.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatalf("GetSandbox(%s): %v", id, err)
	}
	return sb
}

func (s *snapEnv) image(id string) string { return filepath.Join(s.data, "images", id) }

func (s *snapEnv) create(t *testing.T, req api.CreateSandboxRequest) api.Sandbox {
	t.Helper()
	sb, err := s.m.Create(context.Background(), "p1", req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return sb
}

func (s *snapEnv) pause(t *testing.T, id string) {
	t.Helper()
	if _, err := s.m.Pause(context.Background(), "p1", id); err != nil {
		t.Fatalf("Pause: %v", err)
	}
}

func TestPauseThenResume(t *testing.T) {
	s := newSnapEnv(t)
	ctx := context.Background()
	sb := s.create(t, api.CreateSandboxRequest{TimeoutMs: ms(60_000)})
	s.clock.Add(20 * time.Second)

	p, err := s.m.Pause(ctx, "p1", sb.SandboxID)
	if err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if p.State != api.StatePaused || p.ExpiresAt != nil || p.TimeoutMs != 60_000 {
		t.Errorf("paused = state %s expiresAt %v timeoutMs %d; want paused, no deadline, timeoutMs kept", p.State, p.ExpiresAt, p.TimeoutMs)
	}
	row := s.row(t, sb.SandboxID)
	if row.HostAddr != "" || row.GuestAddr != "" {
		t.Errorf("paused row addresses = %q %q; want none (slot released)", row.HostAddr, row.GuestAddr)
	}
	pz, err := s.st.GetPause(ctx, sb.SandboxID)
	if err != nil || pz.RemainingMs == nil || *pz.RemainingMs != 40_000 || pz.ImageDir != s.image(sb.SandboxID) {
		t.Fatalf("pause record = %+v, %v; want 40000 ms remaining and image %s", pz, err, s.image(sb.SandboxID))
	}
	if s.rt.isRunning(sb.SandboxID) || !pathExists(s.image(sb.SandboxID)) {
		t.Errorf("after pause: running=%v image=%v; want stopped with its image on disk", s.rt.isRunning(sb.SandboxID), pathExists(s.image(sb.SandboxID)))
	}
	if _, err := s.m.AgentURL(ctx, "p1", sb.SandboxID); !errors.Is(err, ErrConflict) {
		t.Errorf("AgentURL of a paused sandbox = %v; want ErrConflict", err)
	}
	// Its slot is free: a new sandbox gets slot 0.
	other := s.create(t, api.CreateSandboxRequest{})
	if got := s.row(t, other.SandboxID).GuestAddr; got != "169.254.128.2" {
		t.Errorf("sandbox created during the pause got %s; want slot 0's 169.254.128.2", got)
	}

	s.clock.Add(time.Hour) // time paused does not count
	r, err := s.m.Resume(ctx, "p1", sb.SandboxID, api.ResumeRequest{})
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if want := s.clock.Now().Add(40 * time.Second); r.State != api.StateRunning || r.ExpiresAt == nil || !r.ExpiresAt.Equal(want) {
		t.Errorf("resumed = state %s expiresAt %v; want running, expiring at %v (the 40 s it had left)", r.State, r.ExpiresAt, want)
	}
	if got := s.row(t, sb.SandboxID).GuestAddr; got != "169.254.128.6" {
		t.Errorf("resumed guest address = %q; want the free slot 1's 169.254.128.6", got)
	}
	if !s.rt.isRunning(sb.SandboxID) || pathExists(s.image(sb.SandboxID)) {
		t.Errorf("after resume: running=%v image=%v; want running with the image removed", s.rt.isRunning(sb.SandboxID), pathExists(s.image(sb.SandboxID)))
	}
	if n := s.reseeds.Load(); n != 0 {
		t.Errorf("resume without a lizardToken reseeded %d times; want 0 (same sandbox, same seeds)", n)
	}

	// A resume may set a new timeout instead of the time left.
	s.pause(t, sb.SandboxID)
	r, err = s.m.Resume(ctx, "p1", sb.SandboxID, api.ResumeRequest{TimeoutMs: ms(5000)})
	if want := s.clock.Now().Add(5 * time.Second); err != nil || r.TimeoutMs != 5000 || r.ExpiresAt == nil || !r.ExpiresAt.Equal(want) {
		t.Errorf("Resume(timeoutMs 5000) = %+v, %v; want timeoutMs 5000 expiring at %v", r, err, want)
	}
	// A sandbox that never expires stays so through a pause.
	forever := s.create(t, api.CreateSandboxRequest{TimeoutMs: ms(0)})
	s.pause(t, forever.SandboxID)
	if r, err := s.m.Resume(ctx, "p1", forever.SandboxID, api.ResumeRequest{}); err != nil || r.ExpiresAt != nil {
		t.Errorf("resumed timeoutMs 0 sandbox = %+v, %v; want no deadline", r, err)
	}
}

func TestPauseResumeStates(t *testing.T) {
	s := newSnapEnv(t)
	ctx := context.Background()
	running := s.create(t, api.CreateSandboxRequest{TimeoutMs: ms(60_000)})
	paused := s.create(t, api.CreateSandboxRequest{})
	s.pause(t, paused.SandboxID)
	killed := s.create(t, api.CreateSandboxRequest{})
	if err := s.m.Kill(ctx, "p1", killed.SandboxID); err != nil {
		t.Fatal(err)
	}
	pause := func(id string) (api.Sandbox, error) { return s.m.Pause(ctx, "p1", id) }
	resume := func(id string) (api.Sandbox, error) { return s.m.Resume(ctx, "p1", id, api.ResumeRequest{}) }
	tests := []struct {
		name      string
		op        func(string) (api.Sandbox, error)
		id        string
		wantState string
		wantErr   error
	}{
		{"pause a paused sandbox is a no-op", pause, paused.SandboxID, api.StatePaused, nil},
		{"pause an ended sandbox", pause, killed.SandboxID, "", ErrGone},
		{"pause in another project", func(id string) (api.Sandbox, error) { return s.m.Pause(ctx, "p2", id) }, running.SandboxID, "", ErrNotFound},
		{"resume a running sandbox is a no-op", resume, running.SandboxID, api.StateRunning, nil},
		{"resume an ended sandbox", resume, killed.SandboxID, "", ErrGone},
		{"resume in another project", func(id string) (api.Sandbox, error) {
			return s.m.Resume(ctx, "p2", id, api.ResumeRequest{})
		}, paused.SandboxID, "", ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkpoints := s.ck.restores.Load()
			got, err := tt.op(tt.id)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("got %v; want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.State != tt.wantState {
				t.Errorf("got state %q, %v; want %q", got.State, err, tt.wantState)
			}
			if n := s.ck.restores.Load(); n != checkpoints {
				t.Errorf("a no-op restored %d times", n-checkpoints)
			}
		})
	}
	// The no-op resume kept the running sandbox's deadline.
	if got, _ := s.m.Get(ctx, "p1", running.SandboxID); got.ExpiresAt == nil || !got.ExpiresAt.Equal(*running.ExpiresAt) {
		t.Errorf("running sandbox after a no-op resume expires at %v; want %v", got.ExpiresAt, running.ExpiresAt)
	}
	if !s.rt.isRunning(running.SandboxID) || s.rt.isRunning(paused.SandboxID) {
		t.Error("the runtime changed under no-op pause/resume or another project's calls")
	}
	// Without a data directory there is nothing to pause to.
	plain := newEnv(t)
	sb, _ := plain.m.Create(ctx, "p1", api.CreateSandboxRequest{})
	if _, err := plain.m.Pause(ctx, "p1", sb.SandboxID); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Pause without DataDir = %v; want ErrUnavailable", err)
	}
}

func TestPauseCheckpointFails(t *testing.T) {
	s := newSnapEnv(t)
	ctx := context.Background()
	sb := s.create(t, api.CreateSandboxRequest{TimeoutMs: ms(60_000)})
	s.ck.CheckpointFunc = func(_ context.Context, _, dir string, _ bool) error {
		os.MkdirAll(dir, 0o700)
		os.WriteFile(filepath.Join(dir, "partial"), []byte("x"), 0o600)
		return errors.New("write pages: no space left on device")
	}
	_, err := s.m.Pause(ctx, "p1", sb.SandboxID)
	if err == nil || !strings.Contains(Message(err), "checkpointing sandbox") || !strings.Contains(Message(err), "keeps running") {
		t.Fatalf("Pause = %v (message %q); want a checkpoint error saying it keeps running", err, Message(err))
	}
	if strings.Contains(Message(err), "no space") {
		t.Errorf("client message %q shows the internal cause", Message(err))
	}
	got, _ := s.m.Get(ctx, "p1", sb.SandboxID)
	if got.State != api.StateRunning || got.ExpiresAt == nil || !got.ExpiresAt.Equal(*sb.ExpiresAt) {
		t.Errorf("after a failed pause: state %s expiresAt %v; want running with the same deadline %v", got.State, got.ExpiresAt, sb.ExpiresAt)
	}
	if !s.rt.isRunning(sb.SandboxID) || s.rt.wasKilled(sb.SandboxID) || pathExists(s.image(sb.SandboxID)) {
		t.Errorf("after a failed pause: running=%v killed=%v image=%v; want running, never killed, no partial image",
			s.rt.isRunning(sb.SandboxID), s.rt.wasKilled(sb.SandboxID), pathExists(s.image(sb.SandboxID)))
	}
	if _, err := s.m.AgentURL(ctx, "p1", sb.SandboxID); err != nil {
		t.Errorf("AgentURL after a failed pause: %v", err)
	}
}

func TestResumeRestoreFails(t *testing.T) {
	s := newSnapEnv(t)
	ctx := context.Background()
	sb := s.create(t, api.CreateSandboxRequest{})
	s.pause(t, sb.SandboxID)
	s.ck.RestoreFunc = func(context.Context, sandbox.Spec, string) error { return errors.New("restore: bad image") }
	_, err := s.m.Resume(ctx, "p1", sb.SandboxID, api.ResumeRequest{})
	if !errors.Is(err, ErrGone) || !strings.Contains(Message(err), "could not be resumed") {
		t.Fatalf("Resume = %v; want ErrGone saying it could not be resumed", err)
	}
	row := s.row(t, sb.SandboxID)
	if row.State != api.StateFailed || row.EndedAt == nil || !strings.Contains(row.EndReason, "corrupt") {
		t.Errorf("row = %s ended %v reason %q; want failed with a reason about the image", row.State, row.EndedAt, row.EndReason)
	}
	if pathExists(s.image(sb.SandboxID)) || s.rt.isRunning(sb.SandboxID) {
		t.Errorf("after a failed resume: image=%v running=%v; want neither", pathExists(s.image(sb.SandboxID)), s.rt.isRunning(sb.SandboxID))
	}
	// Its slot is free again.
	next := s.create(t, api.CreateSandboxRequest{})
	if got := s.row(t, next.SandboxID).GuestAddr; got != "169.254.128.2" {
		t.Errorf("next sandbox got %s; want slot 0's 169.254.128.2", got)
	}
}

func TestForkCount(t *testing.T) {
	tests := []struct {
		count   int
		want    int
		wantErr error
	}{
		{0, 1, nil},
		{1, 1, nil},
		{3, 3, nil},
		{MaxForks, MaxForks, nil},
		{MaxForks + 1, 0, ErrInvalid},
		{400, 0, ErrInvalid},
		{-1, 0, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("count %d", tt.count), func(t *testing.T) {
			s := newSnapEnv(t)
			ctx := context.Background()
			parent := s.create(t, api.CreateSandboxRequest{Metadata: map[string]string{"role": "parent"}})
			got, err := s.m.Fork(ctx, "p1", parent.SandboxID, api.ForkRequest{Count: tt.count, Metadata: map[string]string{"role": "fork"}})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(Message(err), "out of range") {
					t.Errorf("Fork(count %d) = %v; want %v saying out of range", tt.count, err, tt.wantErr)
				}
				if n := s.ck.restores.Load(); n != 0 {
					t.Errorf("an invalid fork restored %d sandboxes", n)
				}
				return
			}
			if err != nil || len(got) != tt.want {
				t.Fatalf("Fork(count %d) = %d sandboxes, %v; want %d", tt.count, len(got), err, tt.want)
			}
			seen := map[string]bool{parent.SandboxID: true}
			for _, f := range got {
				if f.State != api.StateRunning || f.Metadata["role"] != "fork" || seen[f.SandboxID] || !s.rt.isRunning(f.SandboxID) {
					t.Errorf("fork %+v; want a new running sandbox with the fork's metadata", f)
				}
				seen[f.SandboxID] = true
			}
			if n := s.reseeds.Load(); int(n) != tt.want {
				t.Errorf("reseeded %d forks; want %d", n, tt.want)
			}
			if !s.rt.isRunning(parent.SandboxID) {
				t.Error("the parent stopped running")
			}
			if left, _ := os.ReadDir(filepath.Join(s.data, "snapshots")); len(left) != 0 {
				t.Errorf("the fork's image was left on disk: %d entries", len(left))
			}
		})
	}
}

func TestForkAllOrNothing(t *testing.T) {
	s := newSnapEnv(t)
	ctx := context.Background()
	parent := s.create(t, api.CreateSandboxRequest{})
	restore := s.ck.RestoreFunc
	var n atomic.Int32
	s.ck.RestoreFunc = func(ctx context.Context, spec sandbox.Spec, dir string) error {
		if n.Add(1) == 3 {
			return errors.New("restore: out of memory")
		}
		return restore(ctx, spec, dir)
	}
	got, err := s.m.Fork(ctx, "p1", parent.SandboxID, api.ForkRequest{Count: 5})
	if err == nil || got != nil {
		t.Fatalf("Fork with one failing restore = %d sandboxes, %v; want an error and none", len(got), err)
	}
	live, _ := s.st.ListSandboxes(ctx, store.Filter{LiveOnly: true})
	if len(live) != 1 || live[0].ID != parent.SandboxID {
		t.Errorf("live rows after a failed fork = %d; want only the parent", len(live))
	}
	ids, _ := s.rt.List(ctx)
	if len(ids) != 1 || ids[0] != parent.SandboxID {
		t.Errorf("runtime sandboxes after a failed fork = %v; want only the parent", ids)
	}
	all, _ := s.st.ListSandboxes(ctx, store.Filter{})
	for _, sb := range all {
		if sb.ID != parent.SandboxID && sb.State == api.StateRunning {
			t.Errorf("fork %s left %s", sb.ID, sb.State)
		}
	}
	if left, _ := os.ReadDir(filepath.Join(s.data, "snapshots")); len(left) != 0 {
		t.Errorf("the fork's image was left on disk: %d entries", len(left))
	}
}

func TestSnapshotsPerProject(t *testing.T) {
	s := newSnapEnv(t)
	ctx := context.Background()
	sb := s.create(t, api.CreateSandboxRequest{})
	sn, err := s.m.Snapshot(ctx, "p1", sb.SandboxID)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	dir := filepath.Join(s.data, "snapshots", sn.SnapshotID)
	if !pathExists(dir) || sn.SizeBytes == 0 || !s.rt.isRunning(sb.SandboxID) {
		t.Fatalf("snapshot %+v: image=%v; want an image on disk and the sandbox still running", sn, pathExists(dir))
	}
	if _, err := s.m.Snapshot(ctx, "p2", sb.SandboxID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Snapshot of another project's sandbox = %v; want ErrNotFound", err)
	}
	for name, err := range map[string]error{
		"Get":    func() error { _, err := s.m.GetSnapshot(ctx, "p2", sn.SnapshotID); return err }(),
		"Delete": s.m.DeleteSnapshot(ctx, "p2", sn.SnapshotID),
		"Create": func() error {
			_, err := s.m.Create(ctx, "p2", api.CreateSandboxRequest{SnapshotID: sn.SnapshotID})
			return err
		}(),
	} {
		if !errors.Is(err, ErrNotFound) || !strings.Contains(Message(err), "not found in project p2") {
			t.Errorf("%s of p1's snapshot from p2 = %v; want ErrNotFound", name, err)
		}
	}
	if list, _ := s.m.ListSnapshots(ctx, "p2"); len(list) != 0 {
		t.Errorf("p2 lists %d snapshots; want 0", len(list))
	}
	if !pathExists(dir) {
		t.Fatal("another project's delete removed the image")
	}
	// Its own project creates from it, then deletes it; the copy lives on.
	cp, err := s.m.Create(ctx, "p1", api.CreateSandboxRequest{SnapshotID: sn.SnapshotID})
	if err != nil || cp.State != api.StateRunning {
		t.Fatalf("Create from snapshot = %+v, %v", cp, err)
	}
	if err := s.m.DeleteSnapshot(ctx, "p1", sn.SnapshotID); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	if pathExists(dir) {
		t.Error("DeleteSnapshot left the image directory")
	}
	if _, err := s.m.GetSnapshot(ctx, "p1", sn.SnapshotID); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetSnapshot after delete = %v; want ErrNotFound", err)
	}
	if !s.rt.isRunning(cp.SandboxID) {
		t.Error("deleting the snapshot ended a sandbox made from it")
	}
}

func TestKillPausedRemovesImage(t *testing.T) {
	s := newSnapEnv(t)
	ctx := context.Background()
	sb := s.create(t, api.CreateSandboxRequest{})
	s.pause(t, sb.SandboxID)
	if err := s.m.Kill(ctx, "p1", sb.SandboxID); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if got, _ := s.m.Get(ctx, "p1", sb.SandboxID); got.State != api.StateKilled || pathExists(s.image(sb.SandboxID)) {
		t.Errorf("killed paused sandbox: state %s image=%v; want killed, no image", got.State, pathExists(s.image(sb.SandboxID)))
	}
}

func TestReconcileKeepsPaused(t *testing.T) {
	s := newSnapEnv(t)
	ctx := context.Background()
	sb := s.create(t, api.CreateSandboxRequest{})
	s.pause(t, sb.SandboxID)
	orphan := s.image("crashed-mid-pause")
	os.MkdirAll(orphan, 0o700)

	m2, err := New(s.m.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Reconcile(ctx); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if got, _ := m2.Get(ctx, "p1", sb.SandboxID); got.State != api.StatePaused || !pathExists(s.image(sb.SandboxID)) {
		t.Errorf("after Reconcile: state %s image=%v; want paused with its image", got.State, pathExists(s.image(sb.SandboxID)))
	}
	if pathExists(orphan) {
		t.Error("Reconcile left an image no sandbox accounts for")
	}
	if r, err := m2.Resume(ctx, "p1", sb.SandboxID, api.ResumeRequest{}); err != nil || r.State != api.StateRunning {
		t.Errorf("Resume after Reconcile = %+v, %v; want running", r, err)
	}
}

func TestReaperAndPaused(t *testing.T) {
	s := newSnapEnv(t, func(c *Config) { c.PausedRetention = 24 * time.Hour })
	ctx := context.Background()
	sb := s.create(t, api.CreateSandboxRequest{TimeoutMs: ms(10_000)})
	s.clock.Add(5 * time.Second)
	s.pause(t, sb.SandboxID)

	s.clock.Add(time.Hour) // far past its old deadline
	s.m.Reap(ctx)
	if got, _ := s.m.Get(ctx, "p1", sb.SandboxID); got.State != api.StatePaused {
		t.Fatalf("paused sandbox past its old deadline: %s; want still paused", got.State)
	}
	s.clock.Add(23 * time.Hour) // 24 h + 1 h since the pause
	s.m.Reap(ctx)
	got, _ := s.m.Get(ctx, "p1", sb.SandboxID)
	if got.State != api.StateExpired || pathExists(s.image(sb.SandboxID)) {
		t.Errorf("paused sandbox past the retention: state %s image=%v; want expired, image removed", got.State, pathExists(s.image(sb.SandboxID)))
	}
	if row := s.row(t, sb.SandboxID); !strings.Contains(row.EndReason, "retention") {
		t.Errorf("end reason %q; want it to name the retention", row.EndReason)
	}
}

func TestOnTimeoutPause(t *testing.T) {
	s := newSnapEnv(t)
	ctx := context.Background()
	if _, err := s.m.Create(ctx, "p1", api.CreateSandboxRequest{OnTimeout: "sleep"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Create with onTimeout sleep = %v; want ErrInvalid", err)
	}
	sb := s.create(t, api.CreateSandboxRequest{TimeoutMs: ms(10_000), OnTimeout: api.OnTimeoutPause})
	killer := s.create(t, api.CreateSandboxRequest{TimeoutMs: ms(10_000)})

	// A call in flight holds the pause off until it ends.
	_, release, err := s.m.Acquire(ctx, "p1", sb.SandboxID)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	s.clock.Add(11 * time.Second)
	s.m.Reap(ctx)
	if got, _ := s.m.Get(ctx, "p1", sb.SandboxID); got.State != api.StateRunning {
		t.Errorf("onTimeout pause with a call in flight: %s; want running until the call ends", got.State)
	}
	release()
	s.m.Reap(ctx)
	got, _ := s.m.Get(ctx, "p1", sb.SandboxID)
	if got.State != api.StatePaused {
		t.Fatalf("onTimeout pause after expiry: %s; want paused", got.State)
	}
	if got, _ := s.m.Get(ctx, "p1", killer.SandboxID); got.State != api.StateExpired {
		t.Errorf("default onTimeout after expiry: %s; want expired", got.State)
	}
	// It resumes with its full timeout, here through a call.
	if _, release, err := s.m.Acquire(ctx, "p1", sb.SandboxID); err != nil {
		t.Fatalf("Acquire of the paused sandbox: %v", err)
	} else {
		release()
	}
	got, _ = s.m.Get(ctx, "p1", sb.SandboxID)
	if want := s.clock.Now().Add(10 * time.Second); got.State != api.StateRunning || got.ExpiresAt == nil || !got.ExpiresAt.Equal(want) {
		t.Errorf("resumed by a call: state %s expiresAt %v; want running until %v (its full timeout)", got.State, got.ExpiresAt, want)
	}
}

func TestPauseWaitsForCalls(t *testing.T) {
	s := newSnapEnv(t, func(c *Config) { c.PauseWait = 200 * time.Millisecond })
	ctx := context.Background()
	sb := s.create(t, api.CreateSandboxRequest{})
	_, release, err := s.m.Acquire(ctx, "p1", sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.m.Pause(ctx, "p1", sb.SandboxID)
	if !errors.Is(err, ErrConflict) || !strings.Contains(Message(err), "has a call running") {
		t.Fatalf("Pause with a call running past PauseWait = %v; want ErrConflict saying a call is running", err)
	}
	if got, _ := s.m.Get(ctx, "p1", sb.SandboxID); got.State != api.StateRunning {
		t.Errorf("state after the refused pause: %s; want running", got.State)
	}
	// A call that ends within PauseWait is waited for.
	time.AfterFunc(50*time.Millisecond, release)
	if p, err := s.m.Pause(ctx, "p1", sb.SandboxID); err != nil || p.State != api.StatePaused {
		t.Errorf("Pause while a call ends = %+v, %v; want paused", p, err)
	}
}

func pathExists(p string) bool { _, err := os.Stat(p); return err == nil }

func TestPauseImageDirUnusable(t *testing.T) {
	s := newSnapEnv(t)
	ctx := context.Background()
	sb := s.create(t, api.CreateSandboxRequest{})
	// A file where the images directory should be: nothing can be written.
	if err := os.WriteFile(filepath.Join(s.data, "images"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := s.m.Pause(ctx, "p1", sb.SandboxID)
	if err == nil || !strings.Contains(Message(err), "checkpointing sandbox") || !strings.Contains(Message(err), "keeps running") {
		t.Fatalf("Pause with no usable image directory = %v (message %q); want the checkpoint failure, not an internal error", err, Message(err))
	}
	if got, _ := s.m.Get(ctx, "p1", sb.SandboxID); got.State != api.StateRunning || !s.rt.isRunning(sb.SandboxID) {
		t.Errorf("after the failed pause: state %s running=%v; want running", got.State, s.rt.isRunning(sb.SandboxID))
	}
}
