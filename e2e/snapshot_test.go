package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// py runs code in sandbox id and returns its stdout, failing on any error.
func py(t *testing.T, c *client.Client, id, code string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := c.Execute(ctx, id, api.ExecuteRequest{Code: code}, nil)
	if err != nil {
		t.Fatalf("Execute(%q) in %s: %v", code, id, err)
	}
	if run.Error != nil {
		t.Fatalf("Execute(%q) in %s: %s: %s", code, id, run.Error.Name, run.Error.Message)
	}
	return strings.TrimSpace(run.Stdout)
}

func state(t *testing.T, c *client.Client, id string) string {
	t.Helper()
	sb, err := c.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatalf("GetSandbox(%s): %v", id, err)
	}
	return sb.State
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func TestPauseResume(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_pause")
	ctx := context.Background()
	sb := newSandbox(t, c, api.CreateSandboxRequest{TimeoutMs: msp(600_000)})
	id := sb.SandboxID
	py(t, c, id, "import os\nx = 41\nos.makedirs('/home/user/work', exist_ok=True)\nos.chdir('/home/user/work')\nopen('kept.txt', 'w').write('on disk')")

	p, err := c.PauseSandbox(ctx, id)
	if err != nil {
		t.Fatalf("PauseSandbox: %v", err)
	}
	if p.State != api.StatePaused || p.ExpiresAt != nil || !p.Durable {
		t.Fatalf("paused sandbox = state %s expiresAt %v durable %v, want paused with no deadline, durable (the disk is the image store)", p.State, p.ExpiresAt, p.Durable)
	}
	image := filepath.Join(s.dataDir, "images", id)
	if !exists(filepath.Join(image, "checkpoint.img")) {
		t.Fatalf("no checkpoint image in %s", image)
	}
	if got := state(t, c, id); got != api.StatePaused {
		t.Fatalf("GET after pause: state %s, want paused (GET must not resume)", got)
	}
	if p2, err := c.PauseSandbox(ctx, id); err != nil || p2.State != api.StatePaused {
		t.Errorf("pausing again = %v, %v; want paused, no error", p2, err)
	}

	r, err := c.ResumeSandbox(ctx, id, api.ResumeRequest{})
	if err != nil {
		t.Fatalf("ResumeSandbox: %v", err)
	}
	if r.State != api.StateRunning || r.ExpiresAt == nil || time.Until(*r.ExpiresAt) < 500*time.Second {
		t.Errorf("resumed = state %s expiresAt %v, want running with ~600 s left", r.State, r.ExpiresAt)
	}
	if got := py(t, c, id, "import os\nprint(x + 1, os.getcwd(), open('kept.txt').read())"); got != "42 /home/user/work on disk" {
		t.Errorf("after resume: %q, want variables, cwd and files kept", got)
	}
	if exists(image) {
		t.Errorf("image %s still there after resume", image)
	}

	t.Run("auto-resume on a call", func(t *testing.T) {
		if _, err := c.PauseSandbox(ctx, id); err != nil {
			t.Fatalf("PauseSandbox: %v", err)
		}
		if got := py(t, c, id, "print(x)"); got != "41" {
			t.Errorf("call on a paused sandbox printed %q, want 41", got)
		}
		if got := state(t, c, id); got != api.StateRunning {
			t.Errorf("state after the call: %s, want running", got)
		}
		if _, err := c.PauseSandbox(ctx, id); err != nil {
			t.Fatalf("PauseSandbox: %v", err)
		}
		if got := execOK(t, c, id, "cat", "/home/user/work/kept.txt"); got != "on disk" {
			t.Errorf("exec on a paused sandbox: %q", got)
		}
	})

	t.Run("restart keeps a paused sandbox", func(t *testing.T) {
		if _, err := c.PauseSandbox(ctx, id); err != nil {
			t.Fatalf("PauseSandbox: %v", err)
		}
		s.restart()
		if got := state(t, c, id); got != api.StatePaused {
			t.Fatalf("after restart: state %s, want paused", got)
		}
		if got := py(t, c, id, "print(x)"); got != "41" {
			t.Errorf("after restart and resume: %q, want 41", got)
		}
	})

	t.Run("kill a paused sandbox removes its image", func(t *testing.T) {
		if _, err := c.PauseSandbox(ctx, id); err != nil {
			t.Fatalf("PauseSandbox: %v", err)
		}
		if err := c.KillSandbox(ctx, id); err != nil {
			t.Fatalf("KillSandbox: %v", err)
		}
		if exists(image) {
			t.Errorf("image %s left after kill", image)
		}
		if got := state(t, c, id); got != api.StateKilled {
			t.Errorf("state %s, want killed", got)
		}
	})
}

func TestCorruptImage(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_corrupt")
	ctx := context.Background()
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	py(t, c, sb.SandboxID, "x = 1")
	if _, err := c.PauseSandbox(ctx, sb.SandboxID); err != nil {
		t.Fatalf("PauseSandbox: %v", err)
	}
	image := filepath.Join(s.dataDir, "images", sb.SandboxID)
	if err := os.WriteFile(filepath.Join(image, "checkpoint.img"), []byte("not a checkpoint"), 0o600); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	_, err := c.ResumeSandbox(rctx, sb.SandboxID, api.ResumeRequest{})
	if !errors.Is(err, client.ErrGone) || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("resume of a corrupt image: %v, want gone mentioning the corrupt image", err)
	}
	got, err := c.GetSandbox(ctx, sb.SandboxID)
	if err != nil || got.State != api.StateFailed {
		t.Errorf("after a failed resume: %+v, %v; want failed", got, err)
	}
	if exists(image) {
		t.Errorf("image %s left after a failed resume", image)
	}
}

func TestForkAndSnapshot(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_fork")
	ctx := context.Background()
	parent := newSandbox(t, c, api.CreateSandboxRequest{})
	pid := parent.SandboxID
	py(t, c, pid, "import random, numpy\nx = 'parent'\nopen('/home/user/f.txt', 'w').write('shared')")

	forks, err := c.Fork(ctx, pid, api.ForkRequest{Count: 3, Metadata: map[string]string{"role": "fork"}})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	for _, f := range forks {
		t.Cleanup(func() { c.KillSandbox(context.Background(), f.SandboxID) })
	}
	if len(forks) != 3 {
		t.Fatalf("Fork(3) made %d sandboxes", len(forks))
	}
	seen := map[string]string{}
	for _, f := range forks {
		if f.SandboxID == pid || f.State != api.StateRunning || f.Metadata["role"] != "fork" {
			t.Errorf("fork %+v: want a new running sandbox with its metadata", f)
		}
		if got := py(t, c, f.SandboxID, "print(x, open('/home/user/f.txt').read())"); got != "parent shared" {
			t.Errorf("fork %s sees %q, want the parent's variable and file", f.SandboxID, got)
		}
		r := py(t, c, f.SandboxID, "print(random.random(), numpy.random.rand())")
		if prev, ok := seen[r]; ok {
			t.Errorf("forks %s and %s drew the same random numbers %s", prev, f.SandboxID, r)
		}
		seen[r] = f.SandboxID
	}
	child := forks[0].SandboxID
	py(t, c, child, "x = 'child'")
	py(t, c, pid, "y = 'parent only'")
	if got := py(t, c, pid, "print(x)"); got != "parent" {
		t.Errorf("parent's x = %q after the child set it, want parent", got)
	}
	if got := py(t, c, child, "print(x, 'y' in dir())"); got != "child False" {
		t.Errorf("child sees %q, want its own x and no y", got)
	}

	t.Run("snapshot, create from it, snapshot of the restored", func(t *testing.T) {
		sn, err := c.Snapshot(ctx, child)
		if err != nil {
			t.Fatalf("Snapshot: %v", err)
		}
		if sn.SandboxID != child || sn.ProjectID != "proj_fork" || sn.SizeBytes <= 0 || sn.Template != "interpreter" {
			t.Errorf("snapshot = %+v", sn)
		}
		if got := state(t, c, child); got != api.StateRunning {
			t.Errorf("snapshotted sandbox is %s, want still running", got)
		}
		if got, err := c.Snapshots().Get(ctx, sn.SnapshotID); err != nil || got.SnapshotID != sn.SnapshotID {
			t.Errorf("Snapshots().Get = %+v, %v", got, err)
		}
		if list, err := c.Snapshots().List(ctx); err != nil || len(list) != 1 || list[0].SnapshotID != sn.SnapshotID {
			t.Errorf("Snapshots().List = %+v, %v; want the one snapshot", list, err)
		}
		var made []string
		for range 2 { // the same snapshot restores more than once
			sb := newSandbox(t, c, api.CreateSandboxRequest{SnapshotID: sn.SnapshotID})
			made = append(made, sb.SandboxID)
			if got := py(t, c, sb.SandboxID, "print(x)"); got != "child" {
				t.Errorf("sandbox from snapshot sees x = %q, want child", got)
			}
		}
		sn2, err := c.Snapshot(ctx, made[0])
		if err != nil {
			t.Fatalf("snapshot of a restored sandbox: %v", err)
		}
		again := newSandbox(t, c, api.CreateSandboxRequest{SnapshotID: sn2.SnapshotID})
		if got := py(t, c, again.SandboxID, "print(x)"); got != "child" {
			t.Errorf("sandbox from a snapshot of a restored sandbox sees %q", got)
		}
		for _, id := range []string{sn.SnapshotID, sn2.SnapshotID} {
			if err := c.Snapshots().Delete(ctx, id); err != nil {
				t.Errorf("Snapshots().Delete: %v", err)
			}
			if exists(filepath.Join(s.dataDir, "snapshots", id)) {
				t.Errorf("snapshot %s left its image", id)
			}
			if _, err := c.Snapshots().Get(ctx, id); !errors.Is(err, client.ErrNotFound) {
				t.Errorf("Snapshots().Get after delete: %v, want not found", err)
			}
		}
	})

	// Fork images are temporary.
	if entries, _ := os.ReadDir(filepath.Join(s.dataDir, "snapshots")); len(entries) != 0 {
		t.Errorf("snapshots dir holds %d entries after the forks and deletes, want none", len(entries))
	}
}

func msp(ms int64) *int64 { return &ms }
