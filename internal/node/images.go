package node

// Checkpoint images on disk: DataDir/images/<sandboxID> of paused
// sandboxes, DataDir/snapshots/<snapshotID> of snapshots (and fork-*
// while a fork restores from it).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/trace"
)

func (im *images) pausedDir() string    { return filepath.Join(im.dataDir, "images") }
func (im *images) snapshotsDir() string { return filepath.Join(im.dataDir, "snapshots") }

func (im *images) needData() error {
	if im.dataDir == "" {
		return &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: "this server keeps no checkpoint images (no data directory configured)"}
	}
	return nil
}

// roomFor refuses what (a create, a pause, ...) with ErrDiskFull when
// DataDir's disk has less than MinFreeDisk free: checked up front, so that
// a call that would fill the disk leaves nothing half-written, and the
// store keeps the room to record state changes. It looks each time
// (statfs is cheap), so the server recovers as soon as space is freed.
func (im *images) roomFor(what string) error {
	if im.dataDir == "" || im.minFree <= 0 {
		return nil
	}
	free, err := FreeBytes(im.dataDir)
	if err != nil {
		im.log.Warn("reading the data directory's free space", "err", err)
		return nil // unknown: the write itself will tell
	}
	if free >= im.minFree {
		return nil
	}
	return &errdefs.Error{Kind: errdefs.ErrDiskFull, Msg: fmt.Sprintf("cannot %s: the server's disk is full (%d MB free, under the %d MB it keeps free to record state changes: --min-free-disk-mb); %s",
		what, free>>20, im.minFree>>20, errdefs.DiskFullAdvice)}
}

// FreeBytes is the space on dir's file system available to new files.
func FreeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// Snapshot implements Node; a paused sandbox is resumed first.
func (n *Local) Snapshot(ctx context.Context, id, snapshotID string) (_ string, _ int64, err error) {
	defer func(begin time.Time) { n.cfg.Metrics.SandboxOp(metrics.OpSnapshot, time.Since(begin), err) }(time.Now())
	ctx, sp := trace.Start(ctx, "node.snapshot", trace.Sandbox(id))
	defer func() { trace.End(sp, err) }()
	if err := n.images.needData(); err != nil {
		return "", 0, err
	}
	if err := n.images.roomFor("snapshot a sandbox"); err != nil {
		return "", 0, err
	}
	unlock := n.locks.Lock(id)
	defer unlock()
	sb, err := n.reachable(ctx, id, true, "")
	if err != nil {
		return "", 0, err
	}
	begin := time.Now()
	dir := filepath.Join(n.images.snapshotsDir(), snapshotID)
	if err := n.checkpoint(ctx, id, dir); err != nil {
		return "", 0, err
	}
	size := imagestore.DirSize(dir)
	n.images.wake()
	n.log.Info("snapshot taken", "sandbox_id", id, "snapshot_id", snapshotID, "size_bytes", size,
		"took", time.Since(begin).Round(time.Millisecond))
	n.bus.emit(Event{Kind: Snapshotted, SandboxID: id, ProjectID: sb.ProjectID, SnapshotID: snapshotID, Token: sb.Shape.Token})
	return dir, size, nil
}

// RemoveImage implements Node: a snapshot's image goes from the image
// store too.
func (n *Local) RemoveImage(ctx context.Context, image string) error {
	local := n.images.local(image)
	if filepath.Dir(filepath.Clean(image)) == n.images.snapshotsDir() || !local {
		// Not on this disk: a snapshot a restore left in the image store
		// (backup.ImageStoreNode), named by its name there.
		n.images.forget(SnapshotImage(filepath.Base(image)))
	}
	if !local {
		return nil
	}
	if err := os.RemoveAll(image); err != nil {
		return fmt.Errorf("removing image %s: %w", image, err)
	}
	return nil
}

// Checkpoint saves running sandbox id into dir, leaving it running; the
// warm pool makes template snapshots with it.
func (n *Local) Checkpoint(ctx context.Context, id, dir string) error {
	unlock := n.locks.Lock(id)
	defer unlock()
	return n.checkpoint(ctx, id, dir)
}

// sourceFile, in an image, names the sandbox it was taken from: a copy's
// agent holds that sandbox's secret until it is reseeded.
const sourceFile = "lizard-source"

// authFile, in an image, is the secret its agent holds (that of the
// sandbox it was taken from, derived from the agent key of the node that
// took it): another node, whose key differs, reseeds the agent with it.
// It adds nothing to what the image holds: the agent's memory has it.
const authFile = "lizard-agent-auth"

// imageSource is the ID of the sandbox image was taken from, or "" for an
// image from before sources were recorded (whose agent takes no secret).
func imageSource(image string) string {
	b, err := os.ReadFile(filepath.Join(image, sourceFile))
	if err != nil {
		return ""
	}
	return string(b)
}

// imageAuth is the secret image's agent holds: recorded in the image, or
// for an image from before that was recorded, derived here as the node
// that took it did.
func (im *images) imageAuth(image string) string {
	if b, err := os.ReadFile(filepath.Join(image, authFile)); err == nil {
		return string(b)
	}
	if source := imageSource(image); source != "" {
		return im.secret(source)
	}
	return ""
}

// diskFile, in an image, marks it as a sandbox's disk alone (saveDisk):
// no memory to restore; the sandbox boots fresh over it at resume.
const diskFile = "lizard-disk-only"

// envFile, in a disk-only image, is the environment its agent gave code
// (JSON, api.AgentEnv), which the fresh boot at resume gives it again. It
// adds nothing to what a memory image holds: the agent's memory has it.
const envFile = "lizard-env.json"

// diskOnly reports whether image is a disk alone (saveDisk).
func diskOnly(image string) bool {
	_, err := os.Stat(filepath.Join(image, diskFile))
	return err == nil
}

// saveDisk saves running sandbox id's disk alone into dir, leaving it
// running; on failure as checkpoint.
func (n *Local) saveDisk(ctx context.Context, id, dir string) error {
	ds, ok := n.cfg.Runtime.(sandbox.DiskSaver)
	if !ok {
		return errdefs.Invalidf("the %s runtime cannot pause sandbox %s keeping its disk alone; pause it with its memory", n.cfg.Runtime.Name(), id)
	}
	err := os.MkdirAll(filepath.Dir(dir), 0o700)
	if err == nil {
		var env []string
		env, err = n.agents.Env(ctx, id)
		if err == nil {
			err = ds.SaveDisk(ctx, id, dir)
		}
		if err == nil {
			b, _ := json.Marshal(api.AgentEnv{Env: env})
			err = os.WriteFile(filepath.Join(dir, envFile), b, 0o600)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, diskFile), nil, 0o600)
		}
		if err != nil {
			removeDir(n.log.With("sandbox_id", id), "a failed disk save's image", dir)
		}
	}
	if err != nil {
		if n.diesWithin(context.WithoutCancel(ctx), id, time.Second) {
			return n.endDead(ctx, id, "while its disk was being saved", err)
		}
		return &errdefs.Error{Msg: fmt.Sprintf("saving the disk of sandbox %s failed (disk full? the server log says why); it keeps running", id),
			Cause: err}
	}
	return nil
}

// savedEnv is the environment disk-only image holds, with over on top
// (later wins, one entry a name): what its fresh boot is given. Entries a
// boot cannot take (no name, a NUL) and the agent's own settings are
// dropped.
func savedEnv(image string, over []string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(image, envFile))
	if err != nil {
		return nil, err
	}
	var e api.AgentEnv
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("reading %s: %w", envFile, err)
	}
	at := map[string]int{}
	var env []string
	for _, kv := range append(e.Env, over...) {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) || strings.HasPrefix(k, "LIZARD_AGENT_") {
			continue
		}
		if i, seen := at[k]; seen {
			env[i] = kv
			continue
		}
		at[k] = len(env)
		env = append(env, kv)
	}
	return env, nil
}

// checkpoint saves running sandbox id into dir, leaving it running. On
// failure dir is removed and the error says why in words for the caller.
func (n *Local) checkpoint(ctx context.Context, id, dir string) error {
	err := os.MkdirAll(filepath.Dir(dir), 0o700)
	if err == nil {
		err = n.cfg.Runtime.Checkpoint(ctx, id, dir, true)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, sourceFile), []byte(id), 0o600)
		}
		if err == nil && len(n.cfg.AgentKey) > 0 {
			err = os.WriteFile(filepath.Join(dir, authFile), []byte(n.agents.secret(id)), 0o600)
		}
		if err != nil {
			removeDir(n.log.With("sandbox_id", id), "a failed checkpoint's image", dir)
		}
	}
	if err != nil {
		if n.diesWithin(context.WithoutCancel(ctx), id, time.Second) {
			// Not the disk: the sandbox died under the checkpoint, and
			// nothing will answer in it again.
			return n.endDead(ctx, id, "while being checkpointed", err)
		}
		return &errdefs.Error{Msg: fmt.Sprintf("checkpointing sandbox %s failed (disk full? the server log says why); it keeps running", id),
			Cause: err}
	}
	return nil
}

// removeImage removes what a paused sandbox left on disk; end calls it.
func (im *images) removeImage(id string) {
	if im.dataDir == "" {
		return
	}
	if err := os.RemoveAll(filepath.Join(im.pausedDir(), id)); err != nil {
		im.log.Error("removing the image of an ended sandbox", "sandbox_id", id, "err", err)
	}
	im.forget(PausedImage(id))
}

// sweepImages removes images no paused sandbox or snapshot accounts for
// (left by a crash in the middle of a pause or a fork).
func (im *images) sweepImages(ctx context.Context) error {
	if im.dataDir == "" {
		return nil
	}
	paused, err := im.store.ListPaused(ctx, nil)
	if err != nil {
		return err
	}
	snaps, err := im.store.ListSnapshots(ctx, "")
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, p := range paused {
		keep[filepath.Clean(p.ImageDir)] = true
	}
	for _, sn := range snaps {
		keep[filepath.Clean(sn.ImageDir)] = true
	}
	var errs []error
	for _, parent := range []string{im.pausedDir(), im.snapshotsDir()} {
		entries, err := os.ReadDir(parent)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		for _, e := range entries {
			p := filepath.Join(parent, e.Name())
			if !keep[p] {
				im.log.Warn("removing orphan checkpoint image", "dir", p)
				errs = append(errs, os.RemoveAll(p))
			}
		}
	}
	return errors.Join(errs...)
}
