package node

// Persistent volumes on this machine (package volume). The control plane
// keeps their records and decides who may use them; the node makes,
// mounts and removes their filesystems. A volume stays mounted on the host
// while the server runs, so that creates, resumes and forks that mount it
// only add a bind mount.

import (
	"context"
	"errors"
	"fmt"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/store"
)

var errNoVolumes = &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: "this server keeps no persistent volumes: its runtime backend cannot mount them (the qemu backend cannot yet; run lizard serve with --runtime gvisor)"}

// OverDisk is the refusal of what, which would promise projectID, already
// promised p, more disk than max (the server's --max-disk-per-project-mb).
func OverDisk(projectID string, p store.Promised, what string, max int64) error {
	return &errdefs.Error{Kind: errdefs.ErrRateLimited, Msg: fmt.Sprintf("project %s is promised %d MiB of disk (live sandboxes: %d, %d MiB; volumes: %d, %d MiB); %s would pass its maximum of %d MiB (the server's --max-disk-per-project-mb); kill sandboxes or delete volumes it no longer needs",
		projectID, p.Total()>>20, p.Sandboxes, p.SandboxBytes>>20, p.Volumes, p.VolumeBytes>>20, what, max>>20)}
}

// MakeVolume implements Node.
func (n *Local) MakeVolume(ctx context.Context, id string, size int64) error {
	if n.cfg.Volumes == nil {
		return errNoVolumes
	}
	if err := n.images.roomFor("make a volume"); err != nil {
		return err
	}
	if err := n.images.roomForVolume(size); err != nil {
		return err
	}
	if err := n.cfg.Volumes.Create(ctx, id, size); err != nil {
		return &errdefs.Error{Msg: "making the volume's filesystem failed; the server log says why", Cause: err}
	}
	return nil
}

// roomForVolume refuses, with ErrDiskFull, a volume of size bytes that
// DataDir's disk could not hold beside MinFreeDisk. A volume's image is
// sparse: making one spends almost nothing, so roomFor would let any size
// through (a 10 GiB volume cost 69 MB), while code in a sandbox may write
// all of it. The size promised is what is checked; other volumes' unwritten
// space is not added up (the projects' bounds keep it in proportion).
func (im *images) roomForVolume(size int64) error {
	if im.dataDir == "" {
		return nil
	}
	free, err := FreeBytes(im.dataDir)
	if err != nil {
		im.log.Warn("reading the data directory's free space", "err", err)
		return nil // unknown: a write will tell
	}
	if free-im.minFree >= size {
		return nil
	}
	return &errdefs.Error{Kind: errdefs.ErrDiskFull, Msg: fmt.Sprintf("cannot make a volume of %d MiB: the server's disk has %d MiB free and keeps %d MiB of it (--min-free-disk-mb); ask for a smaller volume, or ask the operator to free disk space",
		size>>20, free>>20, im.minFree>>20)}
}

// RemoveVolume implements Node.
func (n *Local) RemoveVolume(ctx context.Context, id string) error {
	if n.cfg.Volumes == nil {
		return errNoVolumes
	}
	if err := n.cfg.Volumes.Remove(ctx, id); err != nil {
		return &errdefs.Error{Msg: "removing the volume's filesystem failed; the server log says why", Cause: err}
	}
	return nil
}

// MountVolumes mounts every recorded volume that is not mounted yet: at
// start, after a restart or a reboot, before paused sandboxes that use
// them may resume.
func (n *Local) MountVolumes(ctx context.Context) error {
	if n.cfg.Volumes == nil {
		return nil
	}
	vols, err := n.cfg.Store.Volumes().List(ctx, "")
	if err != nil {
		return err
	}
	var errs []error
	for _, v := range vols {
		if err := n.cfg.Volumes.Mount(ctx, v.ID); err != nil {
			errs = append(errs, fmt.Errorf("volume %s of project %s: %w", v.Name, v.ProjectID, err))
		}
	}
	return errors.Join(errs...)
}

// UnmountVolumes unmounts, at shutdown, the volumes no running sandbox
// uses; the others stay mounted under the sandboxes that outlive the
// server, and the next start finds them so.
func (n *Local) UnmountVolumes(ctx context.Context) error {
	if n.cfg.Volumes == nil {
		return nil
	}
	live, err := n.cfg.Store.ListSandboxes(ctx, store.Filter{LiveOnly: true})
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, sb := range live {
		if sb.State == api.StatePaused {
			continue
		}
		for _, v := range sb.Shape.Volumes {
			keep[v.ID] = true
		}
	}
	return n.cfg.Volumes.UnmountAll(keep)
}
