package node_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
	"github.com/lizard-build/lizard/internal/sandbox"
)

func ms(v int64) *int64 { return &v }

func pause(t *testing.T, e *nodetest.Env, id string) node.Sandbox {
	t.Helper()
	sb, err := e.Node.Pause(context.Background(), id)
	if err != nil {
		t.Fatalf("Pause: %v", err)
	}
	return sb
}

func TestPauseThenResume(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(60_000))
	e.Clock.Add(20 * time.Second)

	p := pause(t, e, sb.ID)
	if p.State != api.StatePaused || p.ExpiresAt != nil || p.TimeoutMs != 60_000 || p.HostAddr != "" || p.GuestAddr != "" {
		t.Errorf("paused = %+v; want paused, no deadline, timeoutMs kept, slot released", p)
	}
	pz, err := e.Store.GetPause(ctx, sb.ID)
	if err != nil || pz.RemainingMs == nil || *pz.RemainingMs != 40_000 || pz.ImageDir != e.Image(sb.ID) {
		t.Fatalf("pause record = %+v, %v; want 40000 ms remaining and image %s", pz, err, e.Image(sb.ID))
	}
	if e.Runtime.IsRunning(sb.ID) || !nodetest.Exists(e.Image(sb.ID)) {
		t.Errorf("after pause: running=%v image=%v; want stopped with its image on disk", e.Runtime.IsRunning(sb.ID), nodetest.Exists(e.Image(sb.ID)))
	}
	if ev := e.Events(sb.ID); len(ev) != 2 || ev[1].Kind != node.Stopped || ev[1].State != api.StatePaused {
		t.Errorf("events = %+v; want Started, then Stopped as paused", ev)
	}
	// Its slot is free: a new sandbox gets slot 0.
	if other := e.Create(t, nodetest.Plan(0)); other.GuestAddr != "169.254.128.2" {
		t.Errorf("sandbox created during the pause got %s; want slot 0's 169.254.128.2", other.GuestAddr)
	}

	e.Clock.Add(time.Hour) // time paused does not count
	r, err := e.Node.Resume(ctx, sb.ID, nil)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if want := e.Clock.Now().Add(40 * time.Second); r.State != api.StateRunning || r.ExpiresAt == nil || !r.ExpiresAt.Equal(want) {
		t.Errorf("resumed = state %s expiresAt %v; want running, expiring at %v (the 40 s it had left)", r.State, r.ExpiresAt, want)
	}
	if r.GuestAddr != "169.254.128.6" {
		t.Errorf("resumed guest address = %q; want the free slot 1's 169.254.128.6", r.GuestAddr)
	}
	rs := e.Runtime.Restores()
	if len(rs) != 1 || rs[0].Dir != e.Image(sb.ID) || rs[0].Spec.ID != sb.ID || rs[0].Spec.Network.GuestAddr.String() != r.GuestAddr {
		t.Errorf("restores = %+v; want %s from its image at its new address", rs, sb.ID)
	}
	if !e.Runtime.IsRunning(sb.ID) || nodetest.Exists(e.Image(sb.ID)) {
		t.Errorf("after resume: running=%v image=%v; want running with the image removed", e.Runtime.IsRunning(sb.ID), nodetest.Exists(e.Image(sb.ID)))
	}
	if n := e.Agent.ReseedCount(); n != 0 {
		t.Errorf("resume without a lizardToken reseeded %d times; want 0 (same sandbox, same seeds)", n)
	}
	if ev := e.Events(sb.ID); len(ev) != 3 || ev[2].Kind != node.Started || ev[2].GuestAddr != r.GuestAddr {
		t.Errorf("events = %+v; want Started again at %s", ev, r.GuestAddr)
	}

	// A resume may set a new timeout instead of the time left.
	pause(t, e, sb.ID)
	r, err = e.Node.Resume(ctx, sb.ID, ms(5000))
	if want := e.Clock.Now().Add(5 * time.Second); err != nil || r.TimeoutMs != 5000 || r.ExpiresAt == nil || !r.ExpiresAt.Equal(want) {
		t.Errorf("Resume(timeoutMs 5000) = %+v, %v; want timeoutMs 5000 expiring at %v", r, err, want)
	}
	// A sandbox that never expires stays so through a pause.
	forever := e.Create(t, nodetest.Plan(0))
	pause(t, e, forever.ID)
	if r, err := e.Node.Resume(ctx, forever.ID, nil); err != nil || r.ExpiresAt != nil {
		t.Errorf("resumed timeoutMs 0 sandbox = %+v, %v; want no deadline", r, err)
	}
}

func TestPauseResumeStates(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	running := e.Create(t, nodetest.Plan(60_000))
	paused := e.Create(t, nodetest.Plan(0))
	pause(t, e, paused.ID)
	killed := e.Create(t, nodetest.Plan(0))
	if err := e.Node.Kill(ctx, killed.ID); err != nil {
		t.Fatal(err)
	}
	pauseOp := func(id string) (node.Sandbox, error) { return e.Node.Pause(ctx, id) }
	resumeOp := func(id string) (node.Sandbox, error) { return e.Node.Resume(ctx, id, nil) }
	tests := []struct {
		name      string
		op        func(string) (node.Sandbox, error)
		id        string
		wantState string
		wantErr   error
	}{
		{"pause a paused sandbox is a no-op", pauseOp, paused.ID, api.StatePaused, nil},
		{"pause an ended sandbox", pauseOp, killed.ID, "", errdefs.ErrGone},
		{"pause an unknown sandbox", pauseOp, "nosuch", "", errdefs.ErrNotFound},
		{"resume a running sandbox is a no-op", resumeOp, running.ID, api.StateRunning, nil},
		{"resume an ended sandbox", resumeOp, killed.ID, "", errdefs.ErrGone},
		{"resume an unknown sandbox", resumeOp, "nosuch", "", errdefs.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			restores, kills := len(e.Runtime.Restores()), e.Runtime.Kills()
			got, err := tt.op(tt.id)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("got %v; want %v", err, tt.wantErr)
				}
			} else if err != nil || got.State != tt.wantState {
				t.Errorf("got state %q, %v; want %q", got.State, err, tt.wantState)
			}
			if n, k := len(e.Runtime.Restores()), e.Runtime.Kills(); n != restores || k != kills {
				t.Errorf("the runtime restored %d and killed %d; want neither", n-restores, k-kills)
			}
		})
	}
	// The no-op resume kept the running sandbox's deadline.
	if got := e.Row(t, running.ID); got.ExpiresAt == nil || !got.ExpiresAt.Equal(*running.ExpiresAt) {
		t.Errorf("running sandbox after a no-op resume expires at %v; want %v", got.ExpiresAt, running.ExpiresAt)
	}
	if !e.Runtime.IsRunning(running.ID) || e.Runtime.IsRunning(paused.ID) {
		t.Error("the runtime changed under no-op pause and resume")
	}
	// Without a data directory there is nothing to pause to.
	plain := nodetest.New(t, func(c *node.Config) { c.DataDir = "" })
	sb := plain.Create(t, nodetest.Plan(0))
	if _, err := plain.Node.Pause(ctx, sb.ID); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Pause without DataDir = %v; want ErrUnavailable", err)
	}
}

// TestPauseFails checks that a pause whose checkpoint cannot be written
// says so, hides the cause, and leaves the sandbox running as it was.
func TestPauseFails(t *testing.T) {
	tests := []struct {
		name  string
		setup func(e *nodetest.Env)
	}{
		{"checkpoint fails", func(e *nodetest.Env) {
			e.Runtime.CheckpointFunc = func(_ context.Context, _, dir string, _ bool) error {
				os.MkdirAll(dir, 0o700)
				os.WriteFile(filepath.Join(dir, "partial"), []byte("x"), 0o600)
				return errors.New("write pages: no space left on device")
			}
		}},
		{"image directory unusable", func(e *nodetest.Env) {
			// A file where the images directory should be: nothing can be written.
			if err := os.WriteFile(filepath.Join(e.DataDir, "images"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := nodetest.New(t)
			ctx := context.Background()
			sb := e.Create(t, nodetest.Plan(60_000))
			tt.setup(e)
			_, err := e.Node.Pause(ctx, sb.ID)
			msg := errdefs.Message(err)
			if err == nil || !strings.Contains(msg, "checkpointing sandbox") || !strings.Contains(msg, "keeps running") || strings.Contains(msg, "no space") {
				t.Fatalf("Pause = %v (message %q); want a checkpoint error saying it keeps running, without the cause", err, msg)
			}
			got := e.Row(t, sb.ID)
			if got.State != api.StateRunning || got.ExpiresAt == nil || !got.ExpiresAt.Equal(*sb.ExpiresAt) {
				t.Errorf("after a failed pause: state %s expiresAt %v; want running with the same deadline %v", got.State, got.ExpiresAt, sb.ExpiresAt)
			}
			if !e.Runtime.IsRunning(sb.ID) || e.Runtime.WasKilled(sb.ID) || nodetest.Exists(e.Image(sb.ID)) {
				t.Errorf("after a failed pause: running=%v killed=%v image=%v; want running, never killed, no partial image",
					e.Runtime.IsRunning(sb.ID), e.Runtime.WasKilled(sb.ID), nodetest.Exists(e.Image(sb.ID)))
			}
			if call, err := e.Node.Acquire(ctx, sb.ID); err != nil {
				t.Errorf("Acquire after a failed pause: %v", err)
			} else {
				call.Release()
			}
		})
	}
}

func TestResumeRestoreFails(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(0))
	pause(t, e, sb.ID)
	e.Runtime.RestoreFunc = func(context.Context, sandbox.Spec, string) error { return errors.New("restore: bad image") }
	_, err := e.Node.Resume(ctx, sb.ID, nil)
	if !errors.Is(err, errdefs.ErrGone) || !strings.Contains(errdefs.Message(err), "could not be resumed") {
		t.Fatalf("Resume = %v; want ErrGone saying it could not be resumed", err)
	}
	row := e.Row(t, sb.ID)
	if row.State != api.StateFailed || row.EndedAt == nil || !strings.Contains(row.EndReason, "corrupt") {
		t.Errorf("row = %s ended %v reason %q; want failed with a reason about the image", row.State, row.EndedAt, row.EndReason)
	}
	if nodetest.Exists(e.Image(sb.ID)) || e.Runtime.IsRunning(sb.ID) {
		t.Errorf("after a failed resume: image=%v running=%v; want neither", nodetest.Exists(e.Image(sb.ID)), e.Runtime.IsRunning(sb.ID))
	}
	// Its slot is free again.
	if next := e.Create(t, nodetest.Plan(0)); next.GuestAddr != "169.254.128.2" {
		t.Errorf("next sandbox got %s; want slot 0's 169.254.128.2", next.GuestAddr)
	}
}

// TestResumeOtherBuild: an image another runtime build made (an upgrade
// changed runsc) is refused with a 409 naming the way out, and nothing is
// lost: the sandbox stays paused with its image, and resumes once the
// runtime can restore it.
func TestResumeOtherBuild(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(0))
	pause(t, e, sb.ID)
	restore := e.Runtime.RestoreFunc
	e.Runtime.RestoreFunc = func(context.Context, sandbox.Spec, string) error {
		return fmt.Errorf("restoring sandbox %s: %w: made by runsc build gvisor-old", sb.ID, sandbox.ErrOtherBuild)
	}
	_, err := e.Node.Resume(ctx, sb.ID, nil)
	if k, _ := errdefs.Classify(err); k.Status != 409 || !strings.Contains(errdefs.Message(err), "gvisor-old") || !strings.Contains(errdefs.Message(err), "memory: false") {
		t.Fatalf("Resume = %v (status %d); want a 409 naming the build and the way out", err, k.Status)
	}
	if row := e.Row(t, sb.ID); row.State != api.StatePaused || row.EndedAt != nil || !nodetest.Exists(e.Image(sb.ID)) || e.Runtime.IsRunning(sb.ID) {
		t.Fatalf("after a refused resume: state %s ended %v image=%v running=%v; want paused with its image", row.State, row.EndedAt, nodetest.Exists(e.Image(sb.ID)), e.Runtime.IsRunning(sb.ID))
	}
	// Its slot was freed: the next create gets slot 0.
	next := e.Create(t, nodetest.Plan(0))
	if next.GuestAddr != "169.254.128.2" {
		t.Errorf("next sandbox got %s; want slot 0's 169.254.128.2", next.GuestAddr)
	}
	e.Runtime.RestoreFunc = restore
	if got, err := e.Node.Resume(ctx, sb.ID, nil); err != nil || got.State != api.StateRunning {
		t.Fatalf("Resume with the build that made it = %+v, %v; want running", got, err)
	}
}

func TestKillPausedRemovesImage(t *testing.T) {
	e := nodetest.New(t)
	sb := e.Create(t, nodetest.Plan(0))
	pause(t, e, sb.ID)
	if err := e.Node.Kill(context.Background(), sb.ID); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if got := e.Row(t, sb.ID); got.State != api.StateKilled || nodetest.Exists(e.Image(sb.ID)) {
		t.Errorf("killed paused sandbox: state %s image=%v; want killed, no image", got.State, nodetest.Exists(e.Image(sb.ID)))
	}
}

// TestResumeToken checks that a lizardToken sandbox is announced again on
// its new host address when resumed, and its agent told the new API URL.
func TestResumeToken(t *testing.T) {
	e := nodetest.New(t, func(c *node.Config) {
		c.TokenAPI = func(host string) ([]string, int) { return []string{"LIZARD_API_URL=http://" + host + ":7777"}, 7777 }
	})
	ctx := context.Background()
	p := nodetest.Plan(0)
	p.Token = true
	sb := e.Create(t, p)
	pause(t, e, sb.ID)
	// Another sandbox takes the slot the paused one leaves.
	e.Create(t, nodetest.Plan(0))
	r, err := e.Node.Resume(ctx, sb.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := e.Runtime.Restores()[0].Spec
	if spec.Network.APIPort != 7777 || spec.Network.HostAddr.String() != r.HostAddr || r.HostAddr == sb.HostAddr {
		t.Errorf("restored on %s with API port %d; want port 7777 on the new host address %s", spec.Network.HostAddr, spec.Network.APIPort, r.HostAddr)
	}
	ev := e.Events(sb.ID)
	if len(ev) != 3 || ev[1].Kind != node.Stopped || ev[2].Kind != node.Started || !ev[2].Token || ev[2].HostAddr != r.HostAddr {
		t.Errorf("events = %+v; want Stopped at the pause, Started with a token on %s at the resume", ev, r.HostAddr)
	}
	rs := e.Agent.Reseeds(sb.ID)
	wantURL := "http://" + r.HostAddr + ":7777"
	if len(rs) != 1 || rs[0].Envs["LIZARD_API_URL"] != wantURL || !rs[0].KeepSeeds {
		t.Errorf("reseeds after resume = %+v; want LIZARD_API_URL=%s keeping seeds", rs, wantURL)
	}
}

// TestResumeImageMissing: a paused sandbox whose pause recorded no image
// cannot be resumed. It ends failed saying so (410), nothing is restored,
// and its address slot is free again.
func TestResumeImageMissing(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(0))
	if err := e.Store.PauseSandbox(ctx, sb.ID, "", nil, e.Clock.Now(), false); err != nil {
		t.Fatalf("PauseSandbox: %v", err)
	}
	_, err := e.Node.Resume(ctx, sb.ID, nil)
	if !errors.Is(err, errdefs.ErrGone) || !strings.Contains(errdefs.Message(err), "its checkpoint image is missing") {
		t.Fatalf("Resume = %v; want ErrGone saying its checkpoint image is missing", err)
	}
	row := e.Row(t, sb.ID)
	if row.State != api.StateFailed || row.EndReason != "its checkpoint image is missing" {
		t.Errorf("row = %s reason %q; want failed, its checkpoint image is missing", row.State, row.EndReason)
	}
	if n := len(e.Runtime.Restores()); n != 0 || e.Runtime.IsRunning(sb.ID) {
		t.Errorf("restores %d, running=%v; want none and not running", n, e.Runtime.IsRunning(sb.ID))
	}
	if ev := e.Events(sb.ID); len(ev) == 0 || ev[len(ev)-1].Kind != node.Stopped || ev[len(ev)-1].State != api.StateFailed {
		t.Errorf("events = %+v; want the last Stopped as failed", ev)
	}
	if next := e.Create(t, nodetest.Plan(0)); next.GuestAddr != "169.254.128.2" {
		t.Errorf("next sandbox got %s; want slot 0's 169.254.128.2", next.GuestAddr)
	}
}
