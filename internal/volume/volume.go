// Package volume keeps persistent volumes on a node's disk (docs/volumes.md):
// each volume is one ext4 image file, sparse, of the volume's size, loop-
// mounted on the host (nodev, nosuid) at a directory of its own, which
// sandboxes that mount the volume get as a bind mount through their gofer.
// The size is the filesystem's, so a full volume is ENOSPC inside the
// sandbox, whatever the code there does; the host's own files are never
// reachable from it: the sandbox sees only the inside of the mount, and
// gVisor resolves its paths and symlinks itself.
package volume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// MinBytes is the smallest volume: ext4's metadata and journal need a
// few MiB of it.
const MinBytes = 16 << 20

// Owner is the uid and gid that own a new volume's root directory: the
// sandbox user, so code writes there without root.
const Owner = 1000

// Manager makes, mounts and removes the volumes under Dir.
type Manager struct {
	Dir string
}

var idRE = regexp.MustCompile(`^vol_[a-z0-9]{1,40}$`)

func (m *Manager) check(id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("volume ID %q is not one Lizard makes", id)
	}
	return nil
}

// Image is volume id's image file.
func (m *Manager) Image(id string) string { return filepath.Join(m.Dir, id+".img") }

// Path is where volume id is mounted on the host, the source of
// sandboxes' bind mounts.
func (m *Manager) Path(id string) string { return filepath.Join(m.Dir, id) }

// Create makes volume id: an ext4 filesystem of size bytes in a sparse
// image (disk is spent as files are written), mounted at Path. On error
// nothing is left.
func (m *Manager) Create(ctx context.Context, id string, size int64) (err error) {
	if err := m.check(id); err != nil {
		return err
	}
	if size < MinBytes {
		return fmt.Errorf("volume %s: %d bytes is under the minimum %d", id, size, MinBytes)
	}
	if err := os.MkdirAll(m.Dir, 0o700); err != nil {
		return fmt.Errorf("creating volume %s: %w", id, err)
	}
	img := m.Image(id)
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating volume %s: %w", id, err)
	}
	defer func() {
		if err != nil {
			m.Remove(context.WithoutCancel(ctx), id)
		}
	}()
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("creating volume %s: %w", id, err)
	}
	// No reserved blocks: the whole size is the user's. The root
	// directory belongs to the sandbox user.
	owner := strconv.Itoa(Owner)
	if _, err := run(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-E", "root_owner="+owner+":"+owner, "-L", id[:min(len(id), 16)], img); err != nil {
		return fmt.Errorf("creating volume %s: %w", id, err)
	}
	if err := m.Mount(ctx, id); err != nil {
		return err
	}
	// lost+found is ext4's, root's, and of no use to the sandbox user.
	os.Remove(filepath.Join(m.Path(id), "lost+found"))
	return nil
}

// Mounted reports whether volume id is mounted at Path.
func (m *Manager) Mounted(id string) bool {
	var st, parent unix.Stat_t
	if unix.Stat(m.Path(id), &st) != nil || unix.Stat(m.Dir, &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// Mount mounts volume id at Path unless it already is (a server restarted
// while sandboxes used it). nodev and nosuid: whatever a sandbox leaves
// in the volume, the host never honours a device node or a setuid bit
// from it.
func (m *Manager) Mount(ctx context.Context, id string) error {
	if err := m.check(id); err != nil {
		return err
	}
	if m.Mounted(id) {
		return nil
	}
	if _, err := os.Stat(m.Image(id)); err != nil {
		return fmt.Errorf("mounting volume %s: %w", id, err)
	}
	if err := os.Mkdir(m.Path(id), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("mounting volume %s: %w", id, err)
	}
	if _, err := run(ctx, "mount", "-t", "ext4", "-o", "loop,nodev,nosuid", m.Image(id), m.Path(id)); err != nil {
		return fmt.Errorf("mounting volume %s: %w", id, err)
	}
	return nil
}

// Unmount unmounts volume id (its loop device goes with it). Not mounted
// is not an error.
func (m *Manager) Unmount(id string) error {
	if err := m.check(id); err != nil {
		return err
	}
	unmounted := false
	for i := 0; m.Mounted(id); i++ {
		err := unix.Unmount(m.Path(id), 0)
		if err == nil {
			unmounted = true
			break
		}
		if !errors.Is(err, unix.EBUSY) || i >= 20 {
			return fmt.Errorf("unmounting volume %s: %w", id, err)
		}
		// A gofer that just ended may still hold it for a moment.
		time.Sleep(100 * time.Millisecond)
	}
	if unmounted {
		waitLoopFreed(m.Image(id), loopFreeWait)
	}
	return nil
}

// loopFreeWait bounds how long Unmount waits for the loop device of the
// image it unmounted to go.
const loopFreeWait = 5 * time.Second

// waitLoopFreed waits until no loop device is attached to image, at most
// timeout. The mount's loop device is cleared by the kernel after the
// unmount, from a work queue, and later still while udev's probe holds
// it open: a check right after an unmount found it attached to an image
// nothing mounts. One still attached after timeout is held open by
// another process, and `lizard admin check` lists it.
func waitLoopFreed(image string, timeout time.Duration) {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !loopAttached(image) {
			return
		}
	}
}

// loopAttached reports whether a loop device is attached to image.
func loopAttached(image string) bool {
	for _, backing := range LoopDevices() {
		if backing == image {
			return true
		}
	}
	return false
}

// LoopDevices returns the host's attached loop devices (/dev/loopN), each
// with the file it is attached to (one deleted since, by its old path).
func LoopDevices() map[string]string {
	out := map[string]string{}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			out["/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f)))] = strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		}
	}
	return out
}

// Remove unmounts volume id and deletes its image and mount point: its
// data is gone.
func (m *Manager) Remove(ctx context.Context, id string) error {
	if err := m.Unmount(id); err != nil {
		return err
	}
	// The mount point is empty once unmounted: Remove, never RemoveAll,
	// so that a mount still there is never emptied.
	if err := os.Remove(m.Path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing volume %s: %w", id, err)
	}
	if err := os.Remove(m.Image(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing volume %s: %w", id, err)
	}
	return nil
}

// UnmountAll unmounts every volume mounted under Dir, except those in
// keep (volumes running sandboxes use).
func (m *Manager) UnmountAll(keep map[string]bool) error {
	ents, err := os.ReadDir(m.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || keep[e.Name()] || !idRE.MatchString(e.Name()) {
			continue
		}
		errs = append(errs, m.Unmount(e.Name()))
	}
	return errors.Join(errs...)
}

func run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// ValidID reports whether id is a volume's ID (vol_...), as the names in
// Dir are.
func ValidID(id string) bool { return idRE.MatchString(id) }
