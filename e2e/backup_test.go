package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
)

// TestBackupRestore backs up a serving `lizard serve` while two of its
// sandboxes answer calls in a loop, restores the backup onto a clean data
// directory and starts a second `lizard serve` on it beside the first: the
// project's key works there, the paused sandbox resumes with its Python
// variable, the snapshot restores with its own, the secret is listed and
// the secrets key is the one the backup wrote apart, and the sandboxes that
// were running at the backup are ended saying so. Ten sandboxes on the
// first server, as issue 38 asks (one paused, nine running and answering
// calls), two on the second.
func TestBackupRestore(t *testing.T) {
	ctx := context.Background()
	s1 := startServer(t)
	c := s1.createProject("proj_backup")
	if _, err := c.Secrets().Set(ctx, "TOKEN", api.SetSecretRequest{Value: "s3cret", Hosts: []string{"api.example.com"}}); err != nil {
		t.Fatal(err)
	}
	a := newSandbox(t, c, api.CreateSandboxRequest{})
	run(t, c, a.SandboxID, "python", "x = 42")
	if _, err := c.PauseSandbox(ctx, a.SandboxID); err != nil {
		t.Fatal(err)
	}
	b := newSandbox(t, c, api.CreateSandboxRequest{})
	run(t, c, b.SandboxID, "python", "y = 7")
	snap, err := c.Snapshot(ctx, b.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	running := []string{b.SandboxID}
	for range 8 {
		running = append(running, newSandbox(t, c, api.CreateSandboxRequest{}).SandboxID)
	}

	// Calls flow in the nine running ones while the backup runs, each paced
	// so that together they stay under the key's --requests-per-second
	// (100): a 429 is not what this tests.
	var calls, failures atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, id := range running {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				ex, err := c.Execute(cctx, id, api.ExecuteRequest{Code: "sum(range(1000))"}, nil)
				cancel()
				if err != nil || ex.Error != nil || len(ex.Results) == 0 || ex.Results[0].Data != "499500" {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprint(err, ex))
					time.Sleep(100 * time.Millisecond)
					continue
				}
				calls.Add(1)
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	before := calls.Load()
	dir := filepath.Join(t.TempDir(), "backup")
	keyFile := filepath.Join(t.TempDir(), "secrets.key")
	begin := time.Now()
	out, err := exec.Command(s1.bin, "admin", "backup", "--data-dir", s1.dataDir, "--to", dir, "--secrets-key-to", keyFile).CombinedOutput()
	took := time.Since(begin)
	during := calls.Load() - before
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("lizard admin backup: %v\n%s", err, out)
	}
	t.Logf("backup took %s, %d calls answered meanwhile:\n%s", took.Round(time.Millisecond), during, out)
	if failures.Load() > 0 {
		t.Fatalf("%d calls failed beside the backup (first: %v)", failures.Load(), firstErr.Load())
	}
	if during == 0 {
		t.Errorf("no call was answered while the backup ran (%s)", took)
	}
	for _, want := range []string{"1 paused sandboxes' and 1 snapshots' images", "The secrets key is in " + keyFile} {
		if !strings.Contains(string(out), want) {
			t.Errorf("backup said %q, want it to say %q", out, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "manifest.json")); err != nil || !bytes.Contains(b, []byte(a.SandboxID)) {
		t.Errorf("the backup's manifest: %s, %v; want it to name %s", b, err, a.SandboxID)
	}
	if _, err := os.Stat(filepath.Join(dir, "secrets.key")); err == nil {
		t.Errorf("the backup holds the secrets key it was told to keep apart")
	}

	d2 := t.TempDir()
	out, err = exec.Command(s1.bin, "admin", "restore", "--from", dir, "--data-dir", d2, "--secrets-key-from", keyFile, "--cache-dir", cacheDir()).CombinedOutput()
	if err != nil {
		t.Fatalf("lizard admin restore: %v\n%s", err, out)
	}
	t.Logf("restore:\n%s", out)
	if out, err := exec.Command(s1.bin, "admin", "restore", "--from", dir, "--data-dir", d2).CombinedOutput(); err == nil || !strings.Contains(string(out), "already holds a store") {
		t.Errorf("a second restore onto the same directory: %v %s; want it refused", err, out)
	}
	k1, _ := os.ReadFile(filepath.Join(s1.dataDir, "secrets.key"))
	if k2, err := os.ReadFile(filepath.Join(d2, "secrets.key")); err != nil || !bytes.Equal(k1, k2) {
		t.Errorf("the restored secrets key differs from the server's (%v)", err)
	}

	s2 := startServerIn(t, d2)
	c2 := s2.client(s1.keys[c])
	got, err := c2.GetSandbox(ctx, a.SandboxID)
	if err != nil || got.State != api.StatePaused {
		t.Fatalf("the paused sandbox on the restored server: %+v, %v; want paused", got, err)
	}
	t.Cleanup(func() { c2.KillSandbox(context.Background(), a.SandboxID) })
	if ex := run(t, c2, a.SandboxID, "python", "x"); len(ex.Results) != 1 || ex.Results[0].Data != "42" {
		t.Errorf("x after the restore = %v, want 42", ex.Results)
	}
	for _, id := range running {
		sb, err := c2.GetSandbox(ctx, id)
		if err != nil || sb.State != api.StateFailed {
			t.Errorf("sandbox %s, running at the backup, on the restored server: %+v, %v; want failed", id, sb, err)
		}
	}
	e := newSandbox(t, c2, api.CreateSandboxRequest{SnapshotID: snap.SnapshotID})
	if ex := run(t, c2, e.SandboxID, "python", "y"); len(ex.Results) != 1 || ex.Results[0].Data != "7" {
		t.Errorf("y in a sandbox of the restored snapshot = %v, want 7", ex.Results)
	}
	secrets, err := c2.Secrets().List(ctx)
	if err != nil || len(secrets) != 1 || secrets[0].Name != "TOKEN" {
		t.Errorf("secrets on the restored server = %+v, %v; want TOKEN", secrets, err)
	}
}

// TestBackupIncremental: with the server's image store (file:///DIR), a
// paused sandbox whose image is durable there is recorded by the backup,
// not copied, and the restored server, given the same store, fetches it
// and resumes the sandbox with its variable. One sandbox.
func TestBackupIncremental(t *testing.T) {
	ctx := context.Background()
	bucket := "file://" + t.TempDir()
	s1 := startServer(t, "--image-store", bucket)
	c := s1.createProject("proj_backup_inc")
	a := newSandbox(t, c, api.CreateSandboxRequest{})
	run(t, c, a.SandboxID, "python", "x = 41 + 1")
	if _, err := c.PauseSandboxWith(ctx, a.SandboxID, api.PauseRequest{WaitDurable: true}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "backup")
	keyFile := filepath.Join(t.TempDir(), "secrets.key")
	out, err := exec.Command(s1.bin, "admin", "backup", "--data-dir", s1.dataDir, "--to", dir, "--secrets-key-to", keyFile, "--image-store", bucket).CombinedOutput()
	if err != nil {
		t.Fatalf("lizard admin backup: %v\n%s", err, out)
	}
	t.Logf("backup:\n%s", out)
	if !strings.Contains(string(out), "Left in the image store, recorded: 1 images (paused/"+a.SandboxID+")") {
		t.Errorf("backup said %q, want the paused image left in the image store", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "images", a.SandboxID)); err == nil {
		t.Error("the backup copied the image the image store holds")
	}
	d2 := t.TempDir()
	if out, err := exec.Command(s1.bin, "admin", "restore", "--from", dir, "--data-dir", d2, "--secrets-key-from", keyFile, "--cache-dir", cacheDir()).CombinedOutput(); err != nil {
		t.Fatalf("lizard admin restore: %v\n%s", err, out)
	}
	s2 := startServerIn(t, d2, "--image-store", bucket)
	c2 := s2.client(s1.keys[c])
	t.Cleanup(func() { c2.KillSandbox(context.Background(), a.SandboxID) })
	if ex := run(t, c2, a.SandboxID, "python", "x"); len(ex.Results) != 1 || ex.Results[0].Data != "42" {
		t.Errorf("x after the restore = %v, want 42", ex.Results)
	}
}

// TestCheckRepairKeepsDurable: `lizard admin check --repair` on a server
// whose image store holds a paused sandbox's image durably keeps that
// sandbox, paused, when its copy on the server's disk is gone — its row
// points at the store's copy, and it resumes from there with its variable
// — and ends only the one whose image is nowhere. Without --image-store
// the repair ends neither (the server ran with a store it was not asked).
func TestCheckRepairKeepsDurable(t *testing.T) {
	ctx := context.Background()
	bucketDir := t.TempDir()
	bucket := "file://" + bucketDir
	s := startServer(t, "--image-store", bucket)
	c := s.createProject("proj_check_durable")
	kept, lost := newSandbox(t, c, api.CreateSandboxRequest{}), newSandbox(t, c, api.CreateSandboxRequest{})
	t.Cleanup(func() { c.KillSandbox(context.Background(), kept.SandboxID) })
	run(t, c, kept.SandboxID, "python", "x = 41 + 1")
	for _, id := range []string{kept.SandboxID, lost.SandboxID} {
		if _, err := c.PauseSandboxWith(ctx, id, api.PauseRequest{WaitDurable: true}); err != nil {
			t.Fatal(err)
		}
	}
	s.stop()
	// Both copies on the server's disk gone; the lost one's in the store
	// too.
	for _, dir := range []string{filepath.Join(s.dataDir, "images", kept.SandboxID), filepath.Join(s.dataDir, "images", lost.SandboxID), filepath.Join(bucketDir, "paused", lost.SandboxID)} {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	check := func(args ...string) (string, error) {
		out, err := exec.Command(s.bin, append([]string{"admin", "check", "--data-dir", s.dataDir}, args...)...).CombinedOutput()
		t.Logf("admin check %s: %v\n%s", strings.Join(args, " "), err, out)
		return string(out), err
	}
	if out, err := check("--repair"); err == nil || !strings.Contains(out, "give lizard admin check the server's --image-store") {
		t.Errorf("admin check --repair without --image-store = %v; want it to refuse ending the durable sandboxes, naming --image-store", err)
	}
	out, err := check("--repair", "--image-store", bucket)
	if err != nil {
		t.Fatalf("admin check --repair --image-store: %v", err)
	}
	for _, want := range []string{"image only in the image store  paused sandbox " + kept.SandboxID, "row without image              paused sandbox " + lost.SandboxID} {
		if !strings.Contains(out, want) {
			t.Errorf("admin check --repair --image-store listed\n%s\nwant a line %q", out, want)
		}
	}
	s.start()
	if ex := run(t, c, kept.SandboxID, "python", "x"); len(ex.Results) != 1 || ex.Results[0].Data != "42" {
		t.Errorf("x after the repair = %v, want 42", ex.Results)
	}
	if got, err := c.GetSandbox(ctx, lost.SandboxID); err != nil || got.State != api.StateFailed {
		t.Errorf("the sandbox whose image is nowhere = %+v, %v; want failed", got, err)
	}
}
