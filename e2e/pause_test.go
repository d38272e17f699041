package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// TestPauseDuringCall pauses a sandbox while a 5 s run_code is in flight.
// The node waits for calls in flight (up to its PauseWait, 10 s by
// default) before checkpointing, so the call's result must arrive intact
// and only then the sandbox pause; the variables it set survive a resume.
func TestPauseDuringCall(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_pausecall")
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	id := sb.SandboxID

	type result struct {
		x   *client.Execution
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		x, err := c.Execute(ctx, id, api.ExecuteRequest{Code: "import time\nbefore = 1\ntime.sleep(5)\nafter = 2\nprint('slept')"}, nil)
		done <- result{x, err, time.Now()}
	}()
	time.Sleep(1 * time.Second) // the call is in the kernel now
	p, err := c.PauseSandbox(context.Background(), id)
	paused := time.Now()
	r := <-done
	if r.err != nil {
		t.Fatalf("the call in flight during a pause failed: %v", r.err)
	}
	if r.x.Error != nil || strings.TrimSpace(r.x.Stdout) != "slept" {
		t.Fatalf("the call in flight during a pause = stdout %q error %+v; want its full result", r.x.Stdout, r.x.Error)
	}
	if err != nil {
		// The alternative contract: a clear conflict, the call unharmed.
		if !isStatus(err, 409) || !strings.Contains(err.Error(), "call running") {
			t.Fatalf("PauseSandbox during a call: %v; want it to wait for the call, or a 409 naming the call", err)
		}
		t.Fatalf("PauseSandbox during a 5 s call gave 409 (%v); the node waits up to 10 s, so it should have waited", err)
	}
	if p.State != api.StatePaused {
		t.Fatalf("PauseSandbox = state %s; want paused", p.State)
	}
	if paused.Before(r.at.Add(-time.Second)) {
		t.Errorf("the pause returned at %s, before the call ended at %s: it did not wait", paused.Format(time.StampMilli), r.at.Format(time.StampMilli))
	}
	if got := py(t, c, id, "print(before, after)"); got != "1 2" {
		t.Errorf("after resume the call's variables = %q; want \"1 2\"", got)
	}
}

// TestPauseCheckpointUnwritable pauses a sandbox whose image directory is a
// read-only bind mount (root ignores permissions, not a read-only mount):
// the pause fails with a clear error and the sandbox keeps running with
// its variables.
func TestPauseCheckpointUnwritable(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_ckptfail")
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	id := sb.SandboxID
	py(t, c, id, "kept = 'still here'\nopen('/home/user/f.txt', 'w').write('file kept')")

	images := filepath.Join(s.dataDir, "images")
	if err := os.MkdirAll(images, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "--bind", images, images).CombinedOutput(); err != nil {
		t.Fatalf("bind-mounting %s: %v: %s", images, err, out)
	}
	t.Cleanup(func() { exec.Command("umount", images).Run() })
	if out, err := exec.Command("mount", "-o", "remount,bind,ro", images).CombinedOutput(); err != nil {
		t.Fatalf("remounting %s read-only: %v: %s", images, err, out)
	}

	_, err := c.PauseSandbox(context.Background(), id)
	if err == nil {
		t.Fatal("PauseSandbox with an unwritable image directory succeeded")
	}
	if !strings.Contains(err.Error(), "checkpointing sandbox") || !strings.Contains(err.Error(), "keeps running") {
		t.Errorf("PauseSandbox error = %v; want one saying the checkpoint failed and the sandbox keeps running\n%s", err, s.logs())
	}
	if got := state(t, c, id); got != api.StateRunning {
		t.Fatalf("state after the failed pause = %s; want running", got)
	}
	if got := py(t, c, id, "print(kept, open('/home/user/f.txt').read())"); got != "still here file kept" {
		t.Errorf("after the failed pause = %q; want the variable and the file", got)
	}
	if entries, _ := os.ReadDir(images); len(entries) != 0 {
		t.Errorf("the failed pause left %d entries in %s", len(entries), images)
	}
	// With the directory writable again, the pause works.
	if out, err := exec.Command("umount", images).CombinedOutput(); err != nil {
		t.Fatalf("umount %s: %v: %s", images, err, out)
	}
	if p, err := c.PauseSandbox(context.Background(), id); err != nil || p.State != api.StatePaused {
		t.Fatalf("PauseSandbox once writable = %v, %v; want paused", p, err)
	}
	if got := py(t, c, id, "print(kept)"); got != "still here" {
		t.Errorf("after pause and resume kept = %q", got)
	}
}
