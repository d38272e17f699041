package node

// Durable images (docs/storage.md). A pause or a snapshot answers once its
// image is on this node's disk; RunUploader then copies it to the image
// store and records it durable, retrying while the store is away, so
// durability catches up when it is back. An image that is not on this
// node's disk (its sandbox was paused on a node since lost, its snapshot
// taken on another) is fetched from the store through the image cache.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/keylock"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/store"
)

// UploadInterval is how often RunUploader looks for images not yet durable
// when nothing woke it.
const UploadInterval = 2 * time.Second

// Names of images in the image store (placement prefers the nodes whose
// disk holds one: cluster.Router).
func PausedImage(sandboxID string) string    { return "paused/" + sandboxID }
func SnapshotImage(snapshotID string) string { return "snapshots/" + snapshotID }

// durableNow is whether an image is durable as soon as it is on this
// node's disk: when the node's disk is the image store, under `lizard
// serve`. A cluster node without an image store has nothing durable: its
// paused sandboxes wait for it when it is lost.
func (im *images) durableNow() bool { return im.remote == nil && im.store.Node() == "" }

// local reports whether image is on this node's disk.
func (im *images) local(image string) bool {
	return im.dataDir != "" && strings.HasPrefix(filepath.Clean(image), im.dataDir+string(filepath.Separator))
}

// wake has runUploader look for new images now.
func (im *images) wake() {
	select {
	case im.kick <- struct{}{}:
	default:
	}
}

// images keeps this node's checkpoint images: on its disk, under
// DataDir, and with an image store (Config.Images) durable there too. The
// node's disk bound (MinFreeDisk) is kept here, for images and volumes.
type images struct {
	dataDir string
	minFree int64
	store   *store.Store
	remote  *imagestore.Store
	cache   *imagestore.Cache
	metrics *metrics.Metrics
	locks   *keylock.Map
	log     *slog.Logger
	kick    chan struct{} // wakes runUploader
	passes  *uploadPasses
	// secret is a sandbox's agent secret (Local.agentSecret).
	secret func(id string) string
}

// RunUploader makes this node's images durable until ctx ends: the images
// of its paused sandboxes and of its snapshots that the store does not
// hold yet are uploaded, one at a time, and recorded durable.
func (n *Local) RunUploader(ctx context.Context) { n.images.runUploader(ctx) }

// runUploader makes this node's images durable until ctx ends: the images
// of its paused sandboxes and of its snapshots that the store does not
// hold yet are uploaded, one at a time, and recorded durable.
func (im *images) runUploader(ctx context.Context) {
	if im.remote == nil {
		return
	}
	t := time.NewTicker(UploadInterval)
	defer t.Stop()
	failing, resealed := false, false
	for {
		pass := im.passes.begin()
		// One list of this node's paused sandboxes for both: an image
		// paused meanwhile is one dropMovedImages finds its row names
		// this node for.
		paused, err := im.store.ListPaused(ctx, nil)
		if err == nil && !resealed {
			err = im.resealUnsealed(ctx, paused)
			resealed = err == nil
		}
		if err == nil {
			err = im.uploadPending(ctx, paused)
			if derr := im.dropMovedImages(ctx, paused); derr != nil && ctx.Err() == nil {
				im.log.Warn("removing the images of sandboxes that moved off this node", "err", derr)
			}
		}
		im.passes.end(pass, err)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			im.log.Error("making images durable failed; retrying", "store", im.remote.Bucket().String(), "err", err)
			failing = true
		case err == nil && failing:
			im.log.Info("images durable again", "store", im.remote.Bucket().String())
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-im.kick:
		}
	}
}

// uploadPasses counts runUploader's passes and keeps the outcome of the
// last one to end, so that a move waiting for its image to be durable
// (MoveOut) ends as soon as a pass that began after its pause fails — the
// store is away — instead of waiting out MoveWait with the sandbox's lock,
// and the calls queued on it, held.
type uploadPasses struct {
	mu      sync.Mutex
	begun   uint64
	ended   uint64 // the last pass to end
	lastErr error  // its failure, nil if it succeeded
}

// begin counts a pass begun and returns its number.
func (u *uploadPasses) begin() uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.begun++
	return u.begun
}

func (u *uploadPasses) end(pass uint64, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.ended, u.lastErr = pass, err
}

// count is the number of passes begun so far.
func (u *uploadPasses) count() uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.begun
}

// failedSince returns the failure of the last pass to end if that pass
// began after pass number after; nil otherwise.
func (u *uploadPasses) failedSince(after uint64) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ended > after {
		return u.lastErr
	}
	return nil
}

// uploadPending uploads the images of paused that are not durable yet;
// it returns the first upload's failure (the store is away: the others
// would fail alike).
func (im *images) uploadPending(ctx context.Context, paused []store.Pause) error {
	for _, p := range paused {
		if p.Durable || p.PausedAt == nil || !im.local(p.ImageDir) {
			continue
		}
		sb, err := im.store.GetSandbox(ctx, p.SandboxID)
		if err != nil {
			return err
		}
		if len(sb.Shape.Volumes) > 0 {
			// It restores only where its volumes are, on this node's
			// disk: an image elsewhere would serve nothing.
			continue
		}
		if err := im.upload(ctx, PausedImage(p.SandboxID), p.ImageDir); err != nil {
			return err
		}
		ok, err := im.store.SetPauseDurable(ctx, p.SandboxID, *p.PausedAt)
		if err != nil {
			return err
		}
		if ok {
			im.log.Info("paused sandbox durable", "sandbox_id", p.SandboxID)
		}
		// Not ok: resumed or paused again meanwhile; the next pause's
		// upload replaces this one, the end of the sandbox deletes it.
	}
	snaps, err := im.store.ListSnapshots(ctx, "")
	if err != nil {
		return err
	}
	for _, sn := range snaps {
		if sn.Durable || !im.local(sn.ImageDir) {
			continue
		}
		if err := im.upload(ctx, SnapshotImage(sn.ID), sn.ImageDir); err != nil {
			return err
		}
		if ok, err := im.store.SetSnapshotDurable(ctx, sn.ID); err != nil {
			return err
		} else if !ok {
			// Deleted while it uploaded.
			im.forget(SnapshotImage(sn.ID))
		} else {
			im.log.Info("snapshot durable", "snapshot_id", sn.ID)
		}
	}
	return nil
}

// resealUnsealed uploads again, sealed, the durable images on this node's
// disk that the store holds unsealed, as a Lizard from before images were
// sealed stored them, so that another node can restore them
// (docs/storage.md#images-from-before-sealing). It runs once a start.
func (im *images) resealUnsealed(ctx context.Context, paused []store.Pause) error {
	reseal := func(name, dir string) error {
		_, err := im.remote.Stat(ctx, name)
		if !errors.Is(err, imagestore.ErrUnsealed) {
			if imagestore.IsLost(err) {
				err = nil // the uploader's or a resume's to answer
			}
			return err
		}
		im.log.Info("sealing an image the image store held unsealed", "image", name)
		return im.upload(ctx, name, dir)
	}
	for _, p := range paused {
		if p.Durable && p.PausedAt != nil && im.local(p.ImageDir) {
			if err := reseal(PausedImage(p.SandboxID), p.ImageDir); err != nil {
				return err
			}
		}
	}
	snaps, err := im.store.ListSnapshots(ctx, "")
	if err != nil {
		return err
	}
	for _, sn := range snaps {
		if sn.Durable && im.local(sn.ImageDir) {
			if err := reseal(SnapshotImage(sn.ID), sn.ImageDir); err != nil {
				return err
			}
		}
	}
	return nil
}

func (im *images) upload(ctx context.Context, name, dir string) error {
	begin := time.Now()
	m, err := im.remote.Put(ctx, name, dir)
	if err != nil {
		return err
	}
	im.log.Info("image uploaded to the image store", "image", name, "size_bytes", m.Size, "shared_uploaded_bytes", m.SharedUploaded,
		"took", time.Since(begin).Round(time.Millisecond))
	return nil
}

// forget deletes image name from the store in the background (an ended
// sandbox's, a deleted snapshot's); what fails to go is only space.
func (im *images) forget(name string) {
	if im.remote == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := im.remote.Delete(ctx, name); err != nil {
			im.log.Warn("deleting an image from the image store", "image", name, "err", err)
		}
	}()
}

// regularOnly fails unless dir holds only directories and regular files,
// as every checkpoint's image does. Whoever can write the image store can
// write an image and its manifest; a link in it would have the runtime
// restore, and this node read (the agent's secret file), a file of the
// host's instead.
func regularOnly(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			return fmt.Errorf("%w: %s is a link or a special file, not part of a checkpoint", imagestore.ErrCorrupt, rel)
		}
		return err
	})
}

// fetch returns a local directory of image name, which another node made:
// from the image cache, fetched from the store if the cache lacks it. A
// download that fails its check is fetched once more (a transfer cut
// short fails it too); an image that fails it again, or is missing, is
// reported lost (lost true), one the store could not serve (away) is
// ErrUnavailable. An image that failed its authentication is counted
// (lizard_images_rejected_total) and logged: someone may have altered the
// bucket.
func (im *images) fetch(ctx context.Context, name string) (dir string, release func(), lost bool, err error) {
	if im.remote == nil {
		return "", nil, false, &errdefs.Error{Kind: errdefs.ErrUnavailable,
			Msg: "the image is on another node's disk and this node has no image store (--image-store)"}
	}
	for try := 0; ; try++ {
		dir, release, err = im.cache.Get(ctx, name)
		if err == nil {
			if err = regularOnly(dir); err != nil {
				release()
				return "", nil, true, fmt.Errorf("image %s: %w", name, err)
			}
			return dir, release, false, nil
		}
		again := errors.Is(err, imagestore.ErrCorrupt) || imagestore.Reason(err) == "tampered"
		if again && try == 0 && ctx.Err() == nil {
			im.log.Warn("an image from the image store failed its check; fetching it again", "image", name, "err", err)
			continue
		}
		if reason := imagestore.Reason(err); reason != "" {
			im.metrics.ImageRejected(reason)
			im.log.Error("an image from the image store failed its authentication; nothing of it is restored", "image", name, "reason", reason, "err", err)
		}
		if imagestore.IsLost(err) {
			return "", nil, true, err
		}
		return "", nil, false, &errdefs.Error{Kind: errdefs.ErrUnavailable, Cause: err,
			Msg: fmt.Sprintf("the image store did not serve image %s; retry when it is back", name)}
	}
}

// lostWhy says why image name, which fetch reported lost with err, cannot
// be restored, for the caller and the sandbox's end.
func lostWhy(name string, err error) string {
	switch imagestore.Reason(err) {
	case "unsealed":
		return fmt.Sprintf("its image %s in the image store was stored unsealed, by a Lizard from before images were sealed, and is refused (docs/storage.md#images-from-before-sealing)", name)
	case "wrong_key":
		return fmt.Sprintf("its image %s in the image store was sealed with another key than this node's (docs/storage.md#sealing)", name)
	case "tampered":
		return fmt.Sprintf("its image %s in the image store failed its authentication (altered in the bucket); nothing of it was restored", name)
	}
	return fmt.Sprintf("its image %s was lost from the image store", name)
}
