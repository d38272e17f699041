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
	"github.com/lizard-build/lizard/internal/imagestore"
)

// TestPauseDiskOnly pauses one sandbox with its memory, then with its disk
// alone (memory: false): the second image is smaller, and the resume
// boots fresh over the disk — its files stay, its kernel's variables go.
// Then a sandbox created with pauseMemory false auto-pauses at its timeout
// keeping its disk alone. The figures it logs are the measurements of
// docs/lifecycle.md.
func TestPauseDiskOnly(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_fspause")
	ctx := context.Background()
	sb := newSandbox(t, c, api.CreateSandboxRequest{TimeoutMs: msp(600_000), Metadata: map[string]string{"who": "fspause"},
		Envs: map[string]string{"MY_VAR": "kept"}})
	id := sb.SandboxID
	image := filepath.Join(s.dataDir, "images", id)
	py(t, c, id, "x = 41\nopen('/home/user/kept.txt', 'w').write('on disk')")

	// With memory, as a baseline in the same run.
	begin := time.Now()
	if _, err := c.PauseSandbox(ctx, id); err != nil {
		t.Fatalf("PauseSandbox: %v", err)
	}
	memPause := time.Since(begin)
	memSize := imagestore.DirSize(image)
	// Its image holds no disk alone to boot from: a reboot is refused,
	// not answered with the memory restored.
	no := false
	if _, err := c.ResumeSandbox(ctx, id, api.ResumeRequest{Memory: &no}); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "paused with its memory") {
		t.Errorf("resume with memory false of a memory pause: %v; want 409 naming it", err)
	}
	begin = time.Now()
	if _, err := c.ResumeSandbox(ctx, id, api.ResumeRequest{}); err != nil {
		t.Fatalf("ResumeSandbox: %v", err)
	}
	memResume := time.Since(begin)
	if got := py(t, c, id, "print(x)"); got != "41" {
		t.Fatalf("after a pause with memory: %q, want the variable kept", got)
	}

	begin = time.Now()
	p, err := c.PauseSandboxWith(ctx, id, api.PauseRequest{Memory: &no})
	if err != nil {
		t.Fatalf("PauseSandbox(memory false): %v", err)
	}
	diskPause := time.Since(begin)
	if p.State != api.StatePaused {
		t.Fatalf("state %s, want paused", p.State)
	}
	diskSize := imagestore.DirSize(image)
	if exists(filepath.Join(image, "checkpoint.img")) {
		t.Errorf("a pause with memory false left a memory checkpoint in %s", image)
	}
	if diskSize <= 0 || diskSize >= memSize {
		t.Errorf("image with the disk alone is %d bytes, with memory %d; want smaller", diskSize, memSize)
	}
	begin = time.Now()
	if _, err := c.ResumeSandbox(ctx, id, api.ResumeRequest{Memory: &no}); err != nil {
		t.Fatalf("ResumeSandbox(memory false) after a disk-only pause: %v", err)
	}
	diskResume := time.Since(begin)
	if got := py(t, c, id, "import os\nprint(open('/home/user/kept.txt').read(), 'x' in globals(), os.environ['MY_VAR'], os.environ['LIZARD_SANDBOX_ID'])"); got != "on disk False kept "+id {
		t.Errorf("after a disk-only resume: %q, want the file and env kept and the variable gone", got)
	}
	got, err := c.GetSandbox(ctx, id)
	if err != nil || got.SandboxID != id || got.Metadata["who"] != "fspause" || got.State != api.StateRunning {
		t.Errorf("after a disk-only resume: %+v, %v; want the same ID and metadata, running", got, err)
	}
	if exists(image) {
		t.Errorf("image %s still there after resume", image)
	}
	// A sandbox booted over its disk is checkpointed and restored as any
	// other: paused with its memory, and snapshotted into a new sandbox.
	py(t, c, id, "y = 7")
	if _, err := c.PauseSandboxWith(ctx, id, api.PauseRequest{Memory: new(true)}); err != nil {
		t.Fatalf("PauseSandbox(memory true) after a disk-only resume: %v", err)
	}
	if got := py(t, c, id, "print(y, open('/home/user/kept.txt').read())"); got != "7 on disk" {
		t.Errorf("memory pause after a disk-only resume: %q, want the variable and the file", got)
	}
	snap, err := c.Snapshot(ctx, id)
	if err != nil {
		t.Fatalf("Snapshot after a disk-only resume: %v", err)
	}
	copyOf := newSandbox(t, c, api.CreateSandboxRequest{SnapshotID: snap.SnapshotID})
	if got := py(t, c, copyOf.SandboxID, "print(y, open('/home/user/kept.txt').read())"); got != "7 on disk" {
		t.Errorf("a snapshot's sandbox after a disk-only resume: %q, want the variable and the file", got)
	}
	t.Logf("memory pause: image %d bytes, pause %s, resume %s; disk-only pause: image %d bytes, pause %s, resume %s",
		memSize, memPause.Round(time.Millisecond), memResume.Round(time.Millisecond),
		diskSize, diskPause.Round(time.Millisecond), diskResume.Round(time.Millisecond))

	t.Run("auto-pause with pauseMemory false", func(t *testing.T) {
		a := newSandbox(t, c, api.CreateSandboxRequest{TimeoutMs: msp(3000), OnTimeout: api.OnTimeoutPause, PauseMemory: &no})
		execOK(t, c, a.SandboxID, "sh", "-c", "echo auto > /home/user/auto.txt")
		deadline := time.Now().Add(30 * time.Second)
		for state(t, c, a.SandboxID) != api.StatePaused {
			if time.Now().After(deadline) {
				t.Fatalf("not paused 30 s after its 3 s timeout")
			}
			time.Sleep(200 * time.Millisecond)
		}
		aImage := filepath.Join(s.dataDir, "images", a.SandboxID)
		if exists(filepath.Join(aImage, "checkpoint.img")) || !exists(aImage) {
			t.Errorf("auto-pause image %s: want the disk alone, no memory checkpoint", aImage)
		}
		if got := strings.TrimSpace(execOK(t, c, a.SandboxID, "cat", "/home/user/auto.txt")); got != "auto" {
			t.Errorf("after the auto-pause's resume: %q, want the file kept", got)
		}
	})
}

// TestAdversarialDiskOnlyPause: a sandbox's saved disk is its own writes,
// which it controls. Symlinks to host paths and a disk filled to its limit
// are saved and put back inside the new sandbox's overlay by the Sentry,
// never unpacked on the host: the host's files stay as they were, the
// links resolve inside the sandbox, and the sandbox boots.
func TestAdversarialDiskOnlyPause(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_fspause_adv")
	ctx := context.Background()
	host := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(host, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := newSandbox(t, c, api.CreateSandboxRequest{TimeoutMs: msp(300_000), DiskMb: new(int64(64))})
	id := sb.SandboxID
	execOK(t, c, id, "sh", "-c", "ln -s "+host+" /home/user/to-host && ln -s ../../../../.."+host+" /home/user/up && "+
		"mkdir -p "+filepath.Dir(host)+" && echo sandbox > /home/user/to-host && mkdir -p /home/user/big && "+
		"{ dd if=/dev/zero of=/home/user/big/fill bs=1M count=100 2>/dev/null; true; }")
	no := false
	begin := time.Now()
	if _, err := c.PauseSandboxWith(ctx, id, api.PauseRequest{Memory: &no}); err != nil {
		t.Fatalf("PauseSandbox(memory false): %v", err)
	}
	t.Logf("a full 64 MiB disk: image %d bytes, pause %s", imagestore.DirSize(filepath.Join(s.dataDir, "images", id)), time.Since(begin).Round(time.Millisecond))
	begin = time.Now()
	if _, err := c.ResumeSandbox(ctx, id, api.ResumeRequest{}); err != nil {
		t.Fatalf("ResumeSandbox: %v", err)
	}
	t.Logf("resume %s", time.Since(begin).Round(time.Millisecond))
	if b, err := os.ReadFile(host); err != nil || string(b) != "host" {
		t.Errorf("host file after the pause: %q, %v; want it untouched", b, err)
	}
	// The link is kept; its target was the sandbox's own /tmp, which a
	// boot clears: it resolves to nothing, never to the host's file.
	if got := strings.TrimSpace(execOK(t, c, id, "sh", "-c", "readlink /home/user/to-host; cat /home/user/to-host /home/user/up 2>/dev/null; true")); got != host {
		t.Errorf("after the disk-only resume: %q; want the link alone, resolving inside the sandbox", got)
	}
	if b, err := os.ReadFile(host); err != nil || string(b) != "host" {
		t.Errorf("host file after the resume: %q, %v; want it untouched", b, err)
	}
	// Its kernel answers on the full disk too. The default kernel's start
	// at boot may fail there (IPython's profile directory), at once since
	// its exit no longer waits on a lock (agent.TestPythonKernelOnFullDisk;
	// it stalled for the 2-minute start timeout 1 time in 4), and the
	// call starts another.
	if got := py(t, c, id, "print(1 + 1)"); got != "2" {
		t.Errorf("code after the disk-only resume of a full disk: %q", got)
	}
}
