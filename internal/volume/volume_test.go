package volume

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/internal/testenv"
)

// TestManager makes a volume on this machine: an ext4 filesystem of its
// size, owned by the sandbox user, mounted nodev,nosuid; mounting again is
// a no-op; Remove and UnmountAll leave nothing.
func TestManager(t *testing.T) {
	testenv.RequiresRoot(t)
	ctx := context.Background()
	m := &Manager{Dir: filepath.Join(t.TempDir(), "volumes")}
	t.Cleanup(func() { m.UnmountAll(nil) })
	for _, id := range []string{"../x", "vol_", "vol_A", "x"} {
		if err := m.Create(ctx, id, MinBytes); err == nil {
			t.Errorf("Create(%q): no error; want the ID refused", id)
		}
	}
	if err := m.Create(ctx, "vol_small", MinBytes-1); err == nil {
		t.Error("Create under MinBytes: no error")
	}
	const id = "vol_test1"
	if err := m.Create(ctx, id, 32<<20); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if !m.Mounted(id) {
		t.Fatal("not mounted after Create")
	}
	var st unix.Statfs_t
	if err := unix.Statfs(m.Path(id), &st); err != nil {
		t.Fatal(err)
	}
	if size := int64(st.Blocks) * st.Bsize; size < 20<<20 || size > 32<<20 {
		t.Errorf("filesystem size %d; want about 32 MiB", size)
	}
	if st.Flags&unix.ST_NODEV == 0 || st.Flags&unix.ST_NOSUID == 0 {
		t.Errorf("mount flags %#x; want nodev and nosuid", st.Flags)
	}
	fi, err := os.Stat(m.Path(id))
	if err != nil {
		t.Fatal(err)
	}
	if s := fi.Sys().(*syscall.Stat_t); s.Uid != Owner || s.Gid != Owner {
		t.Errorf("root owned by %d:%d; want %d:%d", s.Uid, s.Gid, Owner, Owner)
	}
	if ents, _ := os.ReadDir(m.Path(id)); len(ents) != 0 {
		t.Errorf("a new volume holds %v; want it empty (no lost+found)", ents)
	}
	if err := os.WriteFile(filepath.Join(m.Path(id), "f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A restart's UnmountAll keeps the ones in use, and Mount brings the
	// others back with their files.
	if err := m.UnmountAll(map[string]bool{id: true}); err != nil || !m.Mounted(id) {
		t.Fatalf("UnmountAll keeping it: %v, mounted %v", err, m.Mounted(id))
	}
	if err := m.UnmountAll(nil); err != nil || m.Mounted(id) {
		t.Fatalf("UnmountAll: %v, mounted %v", err, m.Mounted(id))
	}
	if err := m.Mount(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := m.Mount(ctx, id); err != nil {
		t.Fatalf("Mount when mounted: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(m.Path(id), "f")); err != nil || string(b) != "kept" {
		t.Errorf("after a remount: %q, %v", b, err)
	}
	if err := m.Create(ctx, id, 32<<20); err == nil {
		t.Error("Create of an existing ID: no error")
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if ents, _ := os.ReadDir(m.Dir); len(ents) != 0 || m.Mounted(id) {
		t.Errorf("after Remove: %v left, mounted %v", ents, m.Mounted(id))
	}
}
