package control

// Persistent volumes (docs/volumes.md): project-scoped names, checked
// here; their filesystems live on the node (Node.MakeVolume). A volume
// cannot be deleted while a live sandbox — running or paused — mounts it:
// volMu orders deletes after the creates and forks that are recording
// mounts of it.

import (
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/store"
)

// Bounds on volumes.
const (
	DefaultVolumeMb  = 1024
	MinVolumeMb      = 16
	MaxVolumesPerBox = 8
)

var volumeNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// reservedPaths are where Lizard or the system keep what a sandbox needs.
// A volume mounted at one, inside one or over an ancestor of one would
// hide it behind the volume's content: at /opt, a volume holding
// lizard/bin/lizard-agent put a program of the caller's where the agent
// runs as root. Lizard's own files (node.AgentPath, node.LizardPath) are
// inside these, and the runtimes mount them after volumes besides.
var reservedPaths = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/opt/lizard", "/proc",
	"/root", "/run", "/sbin", "/sys", "/tmp", "/usr", "/var"}

// maxPathComponent is NAME_MAX: a longer name fails at mount, in the
// runtime, as a server error.
const maxPathComponent = 255

func checkVolumeName(name string) error {
	if !volumeNameRE.MatchString(name) {
		return errdefs.Invalidf("volume name %q: want 1 to 63 of a-z, 0-9, '-' and '_', starting with a letter or digit", name)
	}
	return nil
}

func (vol Volumes) maxMb() int64 {
	c := vol.c
	if c.cfg.MaxVolumeBytes > 0 {
		return c.cfg.MaxVolumeBytes >> 20
	}
	return 10240
}

// Create makes a volume for the project.
func (vol Volumes) Create(ctx context.Context, req api.CreateVolumeRequest) (api.Volume, error) {
	c, projectID := vol.c, vol.project
	if err := checkVolumeName(req.Name); err != nil {
		return api.Volume{}, err
	}
	mb := req.SizeMb
	if mb == 0 {
		mb = DefaultVolumeMb
	}
	if max := vol.maxMb(); mb < MinVolumeMb || mb > max {
		return api.Volume{}, errdefs.Invalidf("sizeMb %d is out of range: want %d to %d (the server's --max-volume-mb)", mb, MinVolumeMb, max)
	}
	v := store.Volume{ID: "vol_" + node.NewID(), ProjectID: projectID, Name: req.Name, SizeBytes: mb << 20, CreatedAt: c.now()}
	if err := vol.record(ctx, v); err != nil {
		return api.Volume{}, err
	}
	if err := c.node.MakeVolume(ctx, v.ID, v.SizeBytes); err != nil {
		if derr := c.cfg.Store.Volumes().Delete(context.WithoutCancel(ctx), v.ID); derr != nil {
			c.log.Error("removing the record of a volume that could not be made", "volume_id", v.ID, "err", derr)
		}
		return api.Volume{}, err
	}
	c.audit("volume.create", "project_id", projectID, "volume", v.Name, "volume_id", v.ID, "size_mb", mb)
	return volumeAPI(v), nil
}

// record records v within its project's bounds. The count and the
// insert are one step, so that concurrent creates cannot pass a bound
// together: under the project's admission lock (node.Quota.Lock), which
// sandbox admission takes too: in the shared database (the record's
// transaction, store.CreateAdmitted) and, on SQLite, in this process.
func (vol Volumes) record(ctx context.Context, v store.Volume) error {
	c := vol.c
	release, err := c.cfg.Quota.Lock(ctx, v.ProjectID)
	if err != nil {
		return err
	}
	defer release()
	if err := vol.room(ctx, v.SizeBytes); err != nil {
		return err
	}
	if err := c.cfg.Store.Volumes().Create(ctx, v); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf("project %s already has a volume named %q; choose another name or delete it first", v.ProjectID, v.Name)}
		}
		return err
	}
	return nil
}

// room checks that the project may have one more volume of size
// bytes; the caller holds the project's admission lock.
func (vol Volumes) room(ctx context.Context, size int64) error {
	c, projectID := vol.c, vol.project
	vols, err := c.cfg.Store.Volumes().List(ctx, projectID)
	if err != nil {
		return fmt.Errorf("counting volumes: %w", err)
	}
	var total int64
	for _, v := range vols {
		total += v.SizeBytes
	}
	if max := c.cfg.MaxVolumes; max > 0 && len(vols) >= max {
		return overBound(fmt.Sprintf("project %s already has %d volumes, its maximum (the server's --max-volumes-per-project); delete one it no longer needs to make room",
			projectID, len(vols)))
	}
	if max := c.cfg.MaxVolumeTotalBytes; max > 0 && total+size > max {
		return overBound(fmt.Sprintf("project %s has %d MiB of volumes; %d MiB more would pass its maximum of %d MiB in all (the server's --max-volume-total-mb); delete a volume or ask for a smaller one",
			projectID, total>>20, size>>20, max>>20))
	}
	return c.cfg.Quota.DiskRoom(ctx, projectID, size, "a volume of "+mib(size))
}

func overBound(msg string) error {
	return &errdefs.Error{Kind: errdefs.ErrRateLimited, Msg: msg}
}

func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }

func volumeAPI(v store.Volume) api.Volume {
	return api.Volume{Name: v.Name, VolumeID: v.ID, SizeMb: v.SizeBytes >> 20, CreatedAt: v.CreatedAt}
}

// Get returns the project's volume called name.
func (vol Volumes) Get(ctx context.Context, name string) (api.Volume, error) {
	v, err := vol.lookup(ctx, name)
	if err != nil {
		return api.Volume{}, err
	}
	return volumeAPI(v), nil
}

func (vol Volumes) lookup(ctx context.Context, name string) (store.Volume, error) {
	c, projectID := vol.c, vol.project
	v, err := c.cfg.Store.Volumes().Get(ctx, projectID, name)
	if errors.Is(err, store.ErrNotFound) {
		return v, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("volume %q not found in project %s; create it with POST /v1/volumes", name, projectID)}
	}
	return v, err
}

// List returns the project's volumes by name.
func (vol Volumes) List(ctx context.Context) ([]api.Volume, error) {
	c, projectID := vol.c, vol.project
	vs, err := c.cfg.Store.Volumes().List(ctx, projectID)
	if err != nil {
		return nil, err
	}
	out := make([]api.Volume, 0, len(vs))
	for _, v := range vs {
		out = append(out, volumeAPI(v))
	}
	return out, nil
}

// Delete deletes the project's volume called name and its data;
// ErrConflict while a live sandbox mounts it.
func (vol Volumes) Delete(ctx context.Context, name string) error {
	c, projectID := vol.c, vol.project
	c.volMu.Lock()
	defer c.volMu.Unlock()
	v, err := vol.lookup(ctx, name)
	if err != nil {
		return err
	}
	live, err := c.cfg.Store.ListSandboxes(ctx, store.Filter{ProjectID: projectID, LiveOnly: true})
	if err != nil {
		return err
	}
	var users []string
	for _, sb := range live {
		for _, m := range sb.Shape.Volumes {
			if m.ID == v.ID {
				users = append(users, sb.ID+" ("+sb.State+")")
			}
		}
	}
	if len(users) > 0 {
		return &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf("volume %q is mounted by sandbox %s; kill %s first",
			name, strings.Join(users, ", "), map[bool]string{true: "them", false: "it"}[len(users) > 1])}
	}
	if err := c.node.RemoveVolume(ctx, v.ID); err != nil {
		return err
	}
	if err := c.cfg.Store.Volumes().Delete(context.WithoutCancel(ctx), v.ID); err != nil {
		return err
	}
	c.audit("volume.delete", "project_id", projectID, "volume", v.Name, "volume_id", v.ID)
	return nil
}

// mounts checks a create's volumes and resolves them to the project's.
func (vol Volumes) mounts(ctx context.Context, req []api.VolumeMount) ([]store.VolumeMount, error) {
	if len(req) > MaxVolumesPerBox {
		return nil, errdefs.Invalidf("volumes has %d entries; at most %d are allowed", len(req), MaxVolumesPerBox)
	}
	var out []store.VolumeMount
	for i, m := range req {
		if err := checkVolumeName(m.Name); err != nil {
			return nil, err
		}
		if err := checkMountPath(m.Path); err != nil {
			return nil, err
		}
		for _, o := range req[:i] {
			switch {
			case o.Name == m.Name:
				return nil, errdefs.Invalidf("volume %q is listed twice; mount each volume once", m.Name)
			case within(m.Path, o.Path) || within(o.Path, m.Path):
				return nil, errdefs.Invalidf("volume paths %s and %s overlap; give each volume a path of its own", o.Path, m.Path)
			}
		}
		v, err := vol.lookup(ctx, m.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, store.VolumeMount{ID: v.ID, Name: v.Name, Path: m.Path})
	}
	return out, nil
}

// checkMountPath allows absolute, clean paths that neither are nor lie
// inside nor contain a reserved directory. /home/user, the user's home,
// is allowed: the volume then is the home (docs/volumes.md).
func checkMountPath(p string) error {
	switch {
	case p == "" || len(p) > 1024 || !strings.HasPrefix(p, "/") || strings.ContainsFunc(p, badPathRune):
		return errdefs.Invalidf("volume path %q: want an absolute path of at most 1024 bytes without control characters, ',' or ':', such as /home/user/data", p)
	case path.Clean(p) != p:
		return errdefs.Invalidf("volume path %q is not clean (no '..', '.', '//' or trailing '/'): use %s", p, path.Clean(p))
	case p == "/":
		return errdefs.Invalidf("volume path %q: a volume cannot be mounted at the root; use a directory such as /home/user/data", p)
	}
	for _, c := range strings.Split(p[1:], "/") {
		if len(c) > maxPathComponent {
			return errdefs.Invalidf("volume path %q has a name of %d bytes; at most %d are allowed", p, len(c), maxPathComponent)
		}
	}
	for _, r := range reservedPaths {
		switch {
		case within(p, r):
			return errdefs.Invalidf("volume path %q is inside %s, which the sandbox's system or Lizard needs: use a directory such as /home/user/data or /mnt/data", p, r)
		case within(r, p):
			return errdefs.Invalidf("volume path %q would hide %s, which the sandbox's system or Lizard needs: use a directory such as /home/user/data or /mnt/data", p, r)
		}
	}
	return nil
}

// badPathRune: control characters break mount tables and logs; ',' and ':'
// the runtimes' mount options.
func badPathRune(r rune) bool { return r < 0x20 || r == 0x7f || r == ',' || r == ':' }

// within reports whether p is dir or under it.
func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
