package control

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
)

// MaxSnapshotsPerProject bounds a project's snapshots. Each is an image
// of its sandbox's memory and files on the server's disk, which no other
// bound counts: without it one key's snapshots could take the disk down
// to the server's --min-free-disk-mb, where every project's pauses and
// snapshots fail.
const MaxSnapshotsPerProject = 100

// snapshotNameRE is what a snapshot's name may be: E2B's names as its
// SDKs' users write them (letters, digits, '-', '_', '.'), 128 at most.
var snapshotNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Snapshot saves projectID's running sandbox id (resuming it if paused)
// without stopping it, named req.Name when it is set: the name moves from
// the project's snapshot that held it, if any, to this one.
func (c *Control) Snapshot(ctx context.Context, projectID, id string, req api.SnapshotRequest) (api.Snapshot, error) {
	if req.Name != "" && !snapshotNameRE.MatchString(req.Name) {
		return api.Snapshot{}, errdefs.Invalidf("name: %q is not a snapshot name: want 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit", req.Name)
	}
	sb, err := c.lookup(ctx, projectID, id)
	if err != nil {
		return api.Snapshot{}, err
	}
	have, err := c.cfg.Store.ListSnapshots(ctx, projectID)
	if err != nil {
		return api.Snapshot{}, err
	}
	if len(have) >= MaxSnapshotsPerProject {
		return api.Snapshot{}, overBound(fmt.Sprintf("project %s already has %d snapshots, its maximum; delete one it no longer needs to make room", projectID, MaxSnapshotsPerProject))
	}
	if len(sb.Shape.Volumes) > 0 {
		return api.Snapshot{}, &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf("sandbox %s mounts volumes, and a snapshot cannot hold their data "+
			"(it would restore against whatever they hold later); fork it instead (the copies mount the same volumes), or snapshot a sandbox without volumes", id)}
	}
	sn := store.Snapshot{ID: "snap-" + node.NewID(), ProjectID: projectID, SandboxID: id, Template: sb.Template,
		CreatedAt: c.now(), Shape: sb.Shape.Record(), Durable: c.cfg.ImagesOnDisk, Name: req.Name}
	if sn.ImageDir, sn.SizeBytes, err = c.node.Snapshot(ctx, id, sn.ID); err != nil {
		return api.Snapshot{}, err
	}
	if !sn.Shape.Recorded {
		// A row from before shapes were stored runs with the defaults.
		sn.Shape = node.Plan{Limits: c.cfg.Limits, Internet: c.cfg.Internet}.Shape()
		sn.Shape.Token = sb.Shape.Token
	}
	if err := c.cfg.Store.CreateSnapshot(context.WithoutCancel(ctx), sn); err != nil {
		c.node.RemoveImage(context.WithoutCancel(ctx), sn.ImageDir)
		return api.Snapshot{}, err
	}
	return snapshotAPI(sn), nil
}

func snapshotAPI(sn store.Snapshot) api.Snapshot {
	return api.Snapshot{SnapshotID: sn.ID, SandboxID: sn.SandboxID, ProjectID: sn.ProjectID, Template: template.Name(sn.Template),
		CreatedAt: sn.CreatedAt, SizeBytes: sn.SizeBytes, Durable: sn.Durable, Name: sn.Name}
}

// lookup is the project's snapshot of ID id, or else the one named id.
func (ss Snapshots) lookup(ctx context.Context, id string) (store.Snapshot, error) {
	c, projectID := ss.c, ss.project
	sn, err := c.cfg.Store.GetSnapshot(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && sn.ProjectID != projectID {
		if named, ok, nerr := ss.named(ctx, id); nerr != nil || ok {
			return named, nerr
		}
		return store.Snapshot{}, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("snapshot %s not found in project %s", id, projectID)}
	}
	return sn, err
}

// Get returns the project's snapshot id.
func (ss Snapshots) Get(ctx context.Context, id string) (api.Snapshot, error) {
	sn, err := ss.lookup(ctx, id)
	if err != nil {
		return api.Snapshot{}, err
	}
	return snapshotAPI(sn), nil
}

// List returns the project's snapshots, newest first.
func (ss Snapshots) List(ctx context.Context) ([]api.Snapshot, error) {
	c, projectID := ss.c, ss.project
	rows, err := c.cfg.Store.ListSnapshots(ctx, projectID)
	if err != nil {
		return nil, err
	}
	out := []api.Snapshot{}
	for i := len(rows) - 1; i >= 0; i-- {
		out = append(out, snapshotAPI(rows[i]))
	}
	return out, nil
}

// Delete removes the project's snapshot id and its image, once the
// restores from it under way have ended. Sandboxes created from it are
// not affected.
func (ss Snapshots) Delete(ctx context.Context, id string) error {
	c := ss.c
	sn, err := ss.lookup(ctx, id)
	if err != nil {
		return err
	}
	id = sn.ID // id may be its name
	c.snapMu.Lock()
	defer c.snapMu.Unlock()
	if err := c.cfg.Store.DeleteSnapshot(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if err := c.node.RemoveImage(ctx, sn.ImageDir); err != nil {
		return fmt.Errorf("removing image of snapshot %s: %w", id, err)
	}
	c.log.Info("snapshot deleted", "snapshot_id", id)
	if c.cfg.Builder != nil {
		c.builds.collectTemplate(context.WithoutCancel(ctx), sn.Template)
	}
	return nil
}

// createFromSnapshot is Create with req.SnapshotID set: the snapshot's
// sandbox restored, shaped as it was, admitted like any create.
func (c *Control) createFromSnapshot(ctx context.Context, projectID, parent string, req api.CreateSandboxRequest) (api.Sandbox, error) {
	sn, err := c.Project(projectID).Snapshots().lookup(ctx, req.SnapshotID)
	if err != nil {
		return api.Sandbox{}, err
	}
	if req.Template != "" && req.Template != template.Name(sn.Template) {
		return api.Sandbox{}, errdefs.Invalidf("template %q differs from snapshot %s's template %q; leave it out", req.Template, sn.ID, template.Name(sn.Template))
	}
	if len(req.Envs) > 0 || req.LizardToken {
		return api.Sandbox{}, errdefs.Invalidf("envs and lizardToken cannot be set when creating from a snapshot: the restored processes keep the snapshot's environment")
	}
	if len(req.Volumes) > 0 {
		return api.Sandbox{}, errdefs.Invalidf("volumes cannot be mounted in a sandbox created from a snapshot: gVisor restores an image only into the mounts it was taken with; create the sandbox from its template instead")
	}
	p, err := c.copyPlan(projectID, sn.Template, sn.Shape, req.TimeoutMs, req.Metadata, req.OnTimeout)
	if err != nil {
		return api.Sandbox{}, err
	}
	if err := c.noWider(ctx, parent, p.Internet, p.Network); err != nil {
		return api.Sandbox{}, err
	}
	c.snapMu.RLock() // Snapshots.Delete waits for the restore
	defer c.snapMu.RUnlock()
	// Deleted before we held the lock? Then it is not found, as if the
	// delete had come first (it did).
	if sn, err = c.Project(projectID).Snapshots().lookup(ctx, req.SnapshotID); err != nil {
		return api.Sandbox{}, err
	}
	p.Image, p.ParentID, p.SnapshotID = sn.ImageDir, parent, sn.ID
	p.PublicPorts = p.PublicPorts || req.PublicPorts
	if req.PortsHost != "" {
		if p.PortsHost, err = portsHost(req.PortsHost); err != nil {
			return api.Sandbox{}, err
		}
	}
	if err := c.fits(ctx, projectID, 1, p.Limits.DiskBytes); err != nil {
		return api.Sandbox{}, err
	}
	sb, err := c.node.Create(ctx, p)
	if err != nil {
		return api.Sandbox{}, err
	}
	return c.toAPI(sb), nil
}

// Fork makes req.Count new sandboxes, each a copy of the project's running
// sandbox id (resumed first if paused) with its own address and reseeded
// random generators. All or nothing: if one fork fails, none is kept.
func (c *Control) Fork(ctx context.Context, projectID, id string, req api.ForkRequest) ([]api.Sandbox, error) {
	return c.ForkBy(ctx, projectID, "", id, req)
}

// ForkBy is Fork asked for with the lizardToken of sandbox parent ("":
// with a project key): the copies are its children (CreateBy).
func (c *Control) ForkBy(ctx context.Context, projectID, parent, id string, req api.ForkRequest) ([]api.Sandbox, error) {
	if err := c.childTimeout(parent, &req.TimeoutMs); err != nil {
		return nil, err
	}
	if req.Count == 0 {
		req.Count = 1
	}
	if req.Count < 1 || req.Count > node.MaxForks {
		return nil, errdefs.Invalidf("count %d is out of range: want 1 to %d", req.Count, node.MaxForks)
	}
	sb, err := c.lookup(ctx, projectID, id)
	if err != nil {
		return nil, err
	}
	if len(sb.Shape.Volumes) > 0 {
		// The copies mount the parent's volumes: none may go meanwhile.
		c.volMu.RLock()
		defer c.volMu.RUnlock()
	}
	p, err := c.copyPlan(projectID, sb.Template, sb.Shape.Record(), req.TimeoutMs, req.Metadata, "")
	if err != nil {
		return nil, err
	}
	if err := c.noWider(ctx, parent, p.Internet, p.Network); err != nil {
		return nil, err
	}
	if err := c.fits(ctx, projectID, req.Count, p.Limits.DiskBytes); err != nil {
		return nil, err
	}
	p.ParentID = parent
	sbs, err := c.node.Fork(ctx, id, p, req.Count)
	if err != nil {
		return nil, err
	}
	out := make([]api.Sandbox, len(sbs))
	for i, s := range sbs {
		out[i] = c.toAPI(s)
	}
	return out, nil
}

// copyPlan is the plan of a copy of a sandbox (a snapshot's, a fork's
// parent) of template tmpl shaped sh. It gets no lizardToken: a copy
// holding its parent's key would act as its parent.
func (c *Control) copyPlan(projectID, tmpl string, sh store.Shape, timeoutMs *int64, meta map[string]string, onTimeout string) (node.Plan, error) {
	p, err := c.plan(projectID, api.CreateSandboxRequest{Template: tmpl, TimeoutMs: timeoutMs, Metadata: meta, OnTimeout: onTimeout})
	if err != nil {
		return p, err
	}
	if sh.Recorded {
		p.Limits.MemoryBytes, p.Limits.CPUs, p.Limits.DiskBytes = sh.MemoryBytes, sh.CPUs, sh.DiskBytes
		p.Limits.Pids, p.Limits.OpenFiles, p.Limits.Processes = sh.Pids, sh.OpenFiles, sh.Processes
		p.Internet = sh.Internet
	}
	p.PublicPorts, p.PortsHost = sh.PublicPorts, sh.PortsHost
	p.Network = sh.Network // a copy keeps its original's policy, none included
	return p, nil
}

// named is the project's snapshot named name, if one is.
func (ss Snapshots) named(ctx context.Context, name string) (store.Snapshot, bool, error) {
	c, projectID := ss.c, ss.project
	if name == "" {
		return store.Snapshot{}, false, nil
	}
	rows, err := c.cfg.Store.ListSnapshots(ctx, projectID)
	if err != nil {
		return store.Snapshot{}, false, err
	}
	for _, sn := range rows {
		if sn.Name == name {
			return sn, true, nil
		}
	}
	return store.Snapshot{}, false, nil
}
