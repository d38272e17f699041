package backup

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/imagestore/disk"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/secrets"
	"github.com/lizard-build/lizard/internal/store"
)

// dataDir is a data directory as `lizard serve` leaves one: a store with a
// paused sandbox, a running one, a snapshot, a volume and a custom
// template, their images and files, and the keys.
func dataDir(t *testing.T) (string, *store.Store) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreateProject(ctx, "p", time.Now()); err != nil {
		t.Fatal(err)
	}
	addrs := func(slot int) (string, string) { return "10.0.0.1", "10.0.0.2" }
	for _, id := range []string{"paused", "running"} {
		sb := &store.Sandbox{ID: id, ProjectID: "p", Template: "interpreter", State: api.StateStarting, CreatedAt: time.Now()}
		if err := st.CreateSandbox(ctx, sb, 8, addrs); err != nil {
			t.Fatal(err)
		}
		if err := st.MarkRunning(ctx, id, nil); err != nil {
			t.Fatal(err)
		}
	}
	write := func(rel, content string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("images/paused/pages.img", "memory of paused")
	if err := st.PauseSandbox(ctx, "paused", filepath.Join(dir, "images", "paused"), nil, time.Now(), true); err != nil {
		t.Fatal(err)
	}
	write("snapshots/snap1/pages.img", "memory of snap1")
	if err := st.CreateSnapshot(ctx, store.Snapshot{ID: "snap1", ProjectID: "p", SandboxID: "running", Template: "interpreter",
		CreatedAt: time.Now(), ImageDir: filepath.Join(dir, "snapshots", "snap1")}); err != nil {
		t.Fatal(err)
	}
	// A volume: a sparse file of 64 MiB with a few bytes written.
	if err := st.Volumes().Create(ctx, store.Volume{ID: "vol1", ProjectID: "p", Name: "data", SizeBytes: 64 << 20, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	write("volumes/vol1.img", "ext4")
	if err := os.Truncate(filepath.Join(dir, "volumes", "vol1.img"), 64<<20); err != nil {
		t.Fatal(err)
	}
	if err := st.Templates().Put(ctx, store.Template{ProjectID: "p", Name: "mytpl", Key: "k1", Base: "interpreter",
		Recipe: `{"base":"interpreter","pip":["requests"]}`, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	write("agent.key", strings.Repeat("a", 32))
	write("egress-ca/sbx/ca.pem", "ca")
	write("gvisor/files/0.1.0-0123456789abcdef/lizard-agent", "agent")
	write("gvisor/runsc/gvisor-0123456789abcdef/runsc", "runsc")
	// A --share-heap template's heap, kept, and held by both images as
	// links of the kept copy.
	write("gvisor/files/heap-0123456789abcdef/heap", "the template's heap")
	for _, img := range []string{"images/paused", "snapshots/snap1"} {
		write(img+"/lizard-runtime.json", `{"heap":"heap-0123456789abcdef"}`)
		if err := os.MkdirAll(filepath.Join(dir, img, "lizard-heap"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(filepath.Join(dir, "gvisor/files/heap-0123456789abcdef/heap"), filepath.Join(dir, img, "lizard-heap/heap")); err != nil {
			t.Fatal(err)
		}
	}
	write("audit.log", "{}\n")
	if _, err := secrets.LoadOrCreateKey(filepath.Join(dir, secrets.KeyFile)); err != nil {
		t.Fatal(err)
	}
	write("orphan-not-copied", "x")
	return dir, st
}

func TestBackupAndRestore(t *testing.T) {
	ctx := context.Background()
	src, st := dataDir(t)
	to := filepath.Join(t.TempDir(), "backup")
	keyTo := filepath.Join(t.TempDir(), "secrets.key")
	m, err := Backup(ctx, st, Options{DataDir: src, To: to, SecretsKeyTo: keyTo})
	if err != nil {
		t.Fatal(err)
	}
	if m.SecretsKey != "apart" || strings.Join(m.Paused, ",") != "paused" || strings.Join(m.Snapshots, ",") != "snap1" ||
		strings.Join(m.Volumes, ",") != "vol1" || strings.Join(m.Templates, ",") != "p/mytpl" || len(m.Missing) != 0 || m.Schema == 0 {
		t.Fatalf("manifest = %+v", m)
	}
	for _, rel := range []string{ManifestFile, store.FileName, "images/paused/pages.img", "snapshots/snap1/pages.img",
		"volumes/vol1.img", "templates/p/mytpl.json", "agent.key", "egress-ca/sbx/ca.pem", "audit.log", "gvisor/files/0.1.0-0123456789abcdef/lizard-agent"} {
		if _, err := os.Stat(filepath.Join(to, rel)); err != nil {
			t.Errorf("the backup lacks %s: %v", rel, err)
		}
	}
	for _, rel := range []string{secrets.KeyFile, "orphan-not-copied", store.FileName + "-wal", store.FileName + "-shm"} {
		if _, err := os.Stat(filepath.Join(to, rel)); err == nil {
			t.Errorf("the backup holds %s", rel)
		}
	}
	// The volume stayed sparse: 64 MiB long, a few blocks on disk.
	if fi, err := os.Stat(filepath.Join(to, "volumes/vol1.img")); err != nil || fi.Size() != 64<<20 {
		t.Errorf("the volume's copy: %v, %v; want 64 MiB", fi, err)
	} else if used := fi.Sys().(*syscall.Stat_t).Blocks * 512; used > 1<<20 {
		t.Errorf("the volume's copy takes %d bytes on disk, want it sparse", used)
	}
	heapLinked(t, to)
	if _, err := Backup(ctx, st, Options{DataDir: src, To: to}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("a backup into a full directory: %v, want it refused", err)
	}

	dst := filepath.Join(t.TempDir(), "restored")
	r, err := Restore(ctx, RestoreOptions{From: to, DataDir: dst, SecretsKeyFrom: keyTo, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(r.Ended, ",") != "running" || strings.Join(r.Unbuilt, ",") != "p/mytpl" {
		t.Errorf("restored = %+v; want running ended, p/mytpl unbuilt", r)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "gvisor/files/0.1.0-0123456789abcdef/lizard-agent")); err != nil || string(b) != "agent" {
		t.Errorf("the kept agent after the restore: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "gvisor/runsc/gvisor-0123456789abcdef/runsc")); err != nil || string(b) != "runsc" {
		t.Errorf("the kept runsc after the restore: %q, %v", b, err)
	}
	heapLinked(t, dst)
	k1, _ := os.ReadFile(filepath.Join(src, secrets.KeyFile))
	if k2, err := os.ReadFile(filepath.Join(dst, secrets.KeyFile)); err != nil || !bytes.Equal(k1, k2) {
		t.Errorf("the restored secrets key differs (%v)", err)
	}
	rst, err := store.Open(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer rst.Close()
	p, err := rst.GetPause(ctx, "paused")
	if err != nil || p.ImageDir != filepath.Join(dst, "images", "paused") {
		t.Errorf("the restored pause's image = %q, %v; want it under the new data directory", p.ImageDir, err)
	}
	if b, err := os.ReadFile(filepath.Join(p.ImageDir, "pages.img")); err != nil || string(b) != "memory of paused" {
		t.Errorf("the restored image: %q, %v", b, err)
	}
	if sn, err := rst.GetSnapshot(ctx, "snap1"); err != nil || sn.ImageDir != filepath.Join(dst, "snapshots", "snap1") {
		t.Errorf("the restored snapshot's image = %q, %v", sn.ImageDir, err)
	}
	if sb, err := rst.GetSandbox(ctx, "running"); err != nil || sb.State != api.StateFailed || sb.EndReason != endReason {
		t.Errorf("the sandbox running at the backup = %+v, %v; want failed with %q", sb, err, endReason)
	}
	if sb, err := rst.GetSandbox(ctx, "paused"); err != nil || sb.State != api.StatePaused {
		t.Errorf("the paused sandbox = %+v, %v; want paused", sb, err)
	}
	if _, err := Restore(ctx, RestoreOptions{From: to, DataDir: dst}); err == nil || !strings.Contains(err.Error(), "already holds a store") {
		t.Errorf("a restore onto a used data directory: %v, want it refused", err)
	}
	if _, err := Restore(ctx, RestoreOptions{From: t.TempDir(), DataDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "not a backup") {
		t.Errorf("a restore from a directory without a manifest: %v, want it refused", err)
	}
}

// TestBackupWithoutKey: without --secrets-key-to the key goes nowhere, and
// the manifest says so.
func TestBackupWithoutKey(t *testing.T) {
	src, st := dataDir(t)
	to := t.TempDir()
	m, err := Backup(context.Background(), st, Options{DataDir: src, To: to})
	if err != nil {
		t.Fatal(err)
	}
	if m.SecretsKey != "not copied" {
		t.Errorf("SecretsKey = %q, want not copied", m.SecretsKey)
	}
	if _, err := os.Stat(filepath.Join(to, secrets.KeyFile)); err == nil {
		t.Error("the backup holds the secrets key")
	}
}

// TestIncrementalBackup: an image the image store holds durably is
// recorded, not copied, and the restore names it in the store, where the
// node fetches it; one that is not there is copied.
func TestIncrementalBackup(t *testing.T) {
	ctx := context.Background()
	src, st := dataDir(t)
	key, err := imagestore.NewKey(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	images := imagestore.New(&disk.Bucket{Root: t.TempDir()}, key)
	if _, err := images.Put(ctx, node.PausedImage("paused"), filepath.Join(src, "images", "paused")); err != nil {
		t.Fatal(err)
	}
	to := t.TempDir()
	m, err := Backup(ctx, st, Options{DataDir: src, To: to, Images: images})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(m.InImageStore, ",") != "paused/paused" || len(m.Paused) != 0 || strings.Join(m.Snapshots, ",") != "snap1" {
		t.Fatalf("manifest = %+v; want paused/paused in the image store, snap1 copied", m)
	}
	if _, err := os.Stat(filepath.Join(to, "images", "paused")); err == nil {
		t.Error("the image the store holds was copied")
	}
	dst := t.TempDir()
	if _, err := Restore(ctx, RestoreOptions{From: to, DataDir: dst, CacheDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	rst, err := store.Open(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer rst.Close()
	if p, err := rst.GetPause(ctx, "paused"); err != nil || p.ImageDir != store.ImageRef(ImageStoreNode, "paused/paused") {
		t.Errorf("the restored pause's image = %q, %v; want it named in the image store", p.ImageDir, err)
	}
	if sn, err := rst.GetSnapshot(ctx, "snap1"); err != nil || sn.ImageDir != filepath.Join(dst, "snapshots", "snap1") {
		t.Errorf("the restored snapshot's image = %q, %v", sn.ImageDir, err)
	}
}

// heapLinked fails unless the images under dir hold their template's heap
// as links of dir's kept copy, as the data directory did: cp -a of each
// image apart makes each heap a file of its own (~72 MB each).
func heapLinked(t *testing.T, dir string) {
	t.Helper()
	kept, err := os.Stat(filepath.Join(dir, "gvisor/files/heap-0123456789abcdef/heap"))
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range []string{"images/paused", "snapshots/snap1"} {
		p := filepath.Join(dir, img, "lizard-heap/heap")
		fi, err := os.Stat(p)
		if b, _ := os.ReadFile(p); err != nil || !os.SameFile(fi, kept) || string(b) != "the template's heap" {
			t.Errorf("%s: %q, %v; want a link of the kept heap", p, b, err)
		}
	}
}
