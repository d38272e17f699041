package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/testenv"
)

// smallDisk makes an ext4 file system of size bytes on a loop device,
// mounted on a fresh directory, and returns that directory. The mount and
// the loop device go when the test ends, even if it fails: cleanups run
// last-registered first, so a server started on it afterwards stops before
// the unmount.
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	testenv.RequiresRoot(t)
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "mnt")
	sh := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	// -m 0: no blocks kept for root, which the server is.
	sh("mkfs.ext4", "-q", "-F", "-m", "0", img)
	dev := sh("losetup", "--find", "--show", img)
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("detaching %s: %v\n%s", dev, err, out)
		}
	})
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	sh("mount", dev, mnt)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("unmounting %s: %v\n%s", mnt, err, out)
		}
	})
	return mnt
}

func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// TestDiskFull: a server whose data directory's disk fills up (a file
// written from the host) refuses what would grow disk use — create, volume
// create, pause — with 507 disk_full and words saying what to do, while
// every sandbox runs on, state changes (setTimeout) still work in the room
// --min-free-disk-mb kept, and a pause refused leaves its sandbox running
// with no partial image. Once the file is deleted the same calls work,
// without a restart; lizard_disk_free_bytes follows the disk throughout.
func TestDiskFull(t *testing.T) {
	const minFreeMb = 64
	mnt := smallDisk(t, 800<<20)
	metricsAddr := freeAddr(t)
	// The template cache stays in the shared cache directory; template
	// snapshots (images in the data directory) are off so that the small
	// disk holds only what the test makes.
	s := &server{t: t, bin: testenv.Binary(t, "lizard"), dataDir: filepath.Join(mnt, "data"), pool: takePool(t),
		args: []string{"--template-snapshot=false", fmt.Sprintf("--min-free-disk-mb=%d", minFreeMb), "--metrics-listen", metricsAddr}}
	testenv.Binary(t, "lizard-agent")
	testenv.Binary(t, "lizard-client")
	s.runsc = testenv.Binary(t, "runsc")
	s.listen = freeAddr(t)
	s.url = "http://" + s.listen
	s.start()
	t.Cleanup(s.shutdown)

	c := s.createProject("disk")
	ctx := context.Background()
	running := newSandbox(t, c, api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
	toPause := newSandbox(t, c, api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
	run(t, c, running.SandboxID, "python", "kept = 21")

	murl := "http://" + metricsAddr + "/metrics"
	diskMetric := func() float64 {
		t.Helper()
		v, ok := scrape(t, murl)[`lizard_disk_free_bytes{dir="data"}`]
		if !ok {
			t.Error(`lizard_disk_free_bytes{dir="data"} is missing from /metrics`)
		}
		return v
	}

	// The host fills the disk but for half the room the server keeps.
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filler) })
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, freeBytes(t, mnt)-minFreeMb/2<<20); err != nil {
		t.Fatalf("filling the disk: %v", err)
	}
	f.Close()
	free := freeBytes(t, mnt)
	if got := diskMetric(); got > minFreeMb<<20 || got < float64(free)/2 || got > float64(free)*2 {
		t.Errorf("lizard_disk_free_bytes{dir=\"data\"} on the full disk = %.0f; want about %d", got, free)
	}

	refused := func(what string, err error) {
		t.Helper()
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != http.StatusInsufficientStorage || ce.Code != api.CodeDiskFull ||
			!errors.Is(err, client.ErrDiskFull) || !strings.Contains(ce.Message, "disk is full") || !strings.Contains(ce.Message, "free") {
			t.Errorf("%s on a full disk = %v; want 507 disk_full saying the disk is full and what to free", what, err)
		}
	}
	_, err = c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	refused("create", err)
	_, err = c.Volumes().Create(ctx, api.CreateVolumeRequest{Name: "full", SizeMb: 16})
	refused("volume create", err)
	_, err = c.PauseSandbox(ctx, toPause.SandboxID)
	refused("pause", err)
	_, err = c.Fork(ctx, running.SandboxID, api.ForkRequest{})
	refused("fork", err)

	// What only records a state change has the room kept for it, and
	// every sandbox runs on: the one a pause was refused for included,
	// with no partial image left.
	if sb, err := c.SetTimeout(ctx, running.SandboxID, 300_000); err != nil || sb.TimeoutMs != 300_000 {
		t.Errorf("setTimeout on a full disk = %+v, %v; want it done", sb, err)
	}
	if sb, err := c.GetSandbox(ctx, toPause.SandboxID); err != nil || sb.State != api.StateRunning {
		t.Errorf("the sandbox whose pause was refused = %+v, %v; want it running", sb, err)
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "images", toPause.SandboxID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused pause left an image: %v", err)
	}
	if ex := run(t, c, running.SandboxID, "python", "kept * 2"); len(ex.Results) == 0 || ex.Results[0].Data != "42" {
		t.Errorf("code in a running sandbox on a full disk: %+v; want 42", ex.Results)
	}
	run(t, c, toPause.SandboxID, "python", "1 + 1")

	// The host takes the room kept too: whatever the store can still
	// write, no call is a 500, and the sandboxes run on.
	rest := filepath.Join(mnt, "rest")
	t.Cleanup(func() { os.Remove(rest) })
	if f, err := os.Create(rest); err != nil {
		t.Fatal(err)
	} else {
		syscall.Fallocate(int(f.Fd()), 0, 0, freeBytes(t, mnt)) // all there is, near enough
		f.Close()
	}
	_, err = c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	refused("create on a disk with no room", err)
	_, err = c.PauseSandbox(ctx, toPause.SandboxID)
	refused("pause on a disk with no room", err)
	for i := range 3 {
		var ce *client.Error
		_, err := c.SetTimeout(ctx, running.SandboxID, int64(400_000+i))
		if err != nil && (!errors.As(err, &ce) || ce.Status != http.StatusInsufficientStorage) {
			t.Errorf("setTimeout on a disk with no room = %v; want it done or 507 disk_full", err)
		}
		t.Logf("setTimeout on a disk with no room: %v", err)
	}
	if ex := run(t, c, running.SandboxID, "python", "kept * 2"); len(ex.Results) == 0 || ex.Results[0].Data != "42" {
		t.Errorf("code in a running sandbox on a disk with no room: %+v; want 42", ex.Results)
	}
	if err := os.Remove(rest); err != nil {
		t.Fatal(err)
	}

	// Space freed: the same calls work, no restart.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if got := diskMetric(); got < minFreeMb<<20 {
		t.Errorf("lizard_disk_free_bytes{dir=\"data\"} once freed = %.0f; want over %d", got, minFreeMb<<20)
	}
	if _, err := c.SetTimeout(ctx, running.SandboxID, 600_000); err != nil {
		t.Errorf("setTimeout once space is freed: %v", err)
	}
	again := newSandbox(t, c, api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
	run(t, c, again.SandboxID, "python", "1 + 1")
	if _, err := c.Volumes().Create(ctx, api.CreateVolumeRequest{Name: "freed", SizeMb: 16}); err != nil {
		t.Errorf("volume create once space is freed: %v", err)
	} else if err := c.Volumes().Delete(ctx, "freed"); err != nil {
		t.Errorf("deleting the volume: %v", err)
	}
	if sb, err := c.PauseSandbox(ctx, toPause.SandboxID); err != nil || sb.State != api.StatePaused {
		t.Errorf("pause once space is freed = %+v, %v; want paused", sb, err)
	}
	for _, id := range []string{running.SandboxID, toPause.SandboxID, again.SandboxID} {
		if err := c.KillSandbox(ctx, id); err != nil {
			t.Errorf("kill %s: %v", id, err)
		}
	}
	// Nothing of the server may hold the mount when the test unmounts it.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if list, err := c.ListSandboxes(ctx, client.ListOptions{}); err == nil && len(list) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}
