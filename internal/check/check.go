// Package check finds what a `lizard serve` data directory and its host
// hold that nothing accounts for — rows whose images are gone, images no
// row names, network namespaces, veths, nftables tables, cgroups and loop
// devices no running sandbox owns, volumes without a record, template
// builds nothing uses, step cache entries of deleted templates, runsc
// builds and agent copies the gVisor runtime keeps that no image or
// sandbox names — and removes exactly those (`lizard admin check
// [--repair]`, docs/operations.md).
//
// Machine-wide names (a namespace lizard-ID, a veth, a table, a cgroup
// /lizard/ID) are this data directory's only when the gVisor runtime's
// owner record of ID names its runtime directory, or, without a record,
// when ID is a sandbox of its store: many Lizards may run on one machine
// (the e2e tests run many at once, a restored backup may run beside its
// original with the same sandbox IDs), and a check never lists, let alone
// removes, what another one holds.
package check

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/backup"
	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/recipe"
	"github.com/lizard-build/lizard/internal/sandbox/gvisor"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/volume"
)

// Kinds of findings.
const (
	RowWithoutImage     = "row without image"
	ImageInStoreOnly    = "image only in the image store"
	ImageWithoutRow     = "image without row"
	SharedUnused        = "image store object no image names"
	Namespace           = "network namespace"
	Veth                = "veth"
	Table               = "nftables table"
	Cgroup              = "cgroup"
	LoopDevice          = "loop device"
	VolumeWithoutRow    = "volume without owner"
	VolumeMounted       = "volume mounted by no sandbox"
	TemplateBuildUnused = "template build nobody uses"
	RunscUnused         = "runsc build no image needs"
	FilesUnused         = "agent copy no sandbox uses"
	TemplateStepsUnused = "template step cache entries of no template"
)

// Finding is one thing nothing accounts for, and how --repair removes it.
type Finding struct {
	Kind string `json:"kind"`
	// What names it: a path, an interface, a table, a sandbox or
	// snapshot ID.
	What string `json:"what"`
	// Why it is a leftover.
	Why    string `json:"why"`
	repair func(ctx context.Context) error
}

// Repair removes what f names.
func (f Finding) Repair(ctx context.Context) error {
	if err := f.repair(ctx); err != nil {
		return fmt.Errorf("repairing %s %s: %w", f.Kind, f.What, err)
	}
	return nil
}

// Config says which data directory to check.
type Config struct {
	DataDir  string // absolute
	CacheDir string // the template cache the server uses, absolute
	Store    *store.Store
	// Files are the server's lizard-agent and lizard-client, whose kept
	// copies are never listed (its next boot would copy them again).
	Files []string
	// Images is the server's --image-store (nil: none given). A paused
	// sandbox or snapshot whose image is gone from this disk but durable
	// there is not lost: its row is pointed at the store's copy, which
	// its resume (or a create from it) fetches.
	Images *imagestore.Store
}

// Check lists what cfg's data directory and this host hold that nothing
// accounts for, in a stable order. It changes nothing.
func Check(ctx context.Context, cfg Config) ([]Finding, error) {
	c := checker{Config: cfg}
	var err error
	if c.rows, err = cfg.Store.ListSandboxes(ctx, store.Filter{}); err != nil {
		return nil, err
	}
	for _, step := range []func(context.Context) error{c.images, c.shared, c.host, c.loops, c.volumes, c.templates, c.kept} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	sort.SliceStable(c.out, func(i, j int) bool {
		if c.out[i].Kind != c.out[j].Kind {
			return c.out[i].Kind < c.out[j].Kind
		}
		return c.out[i].What < c.out[j].What
	})
	return c.out, nil
}

type checker struct {
	Config
	rows []store.Sandbox
	out  []Finding
	// unseen counts the paused sandboxes and snapshots whose images are
	// not on this disk but elsewhere (another node's): what they name is
	// unknown. One whose image should be here and is not is lost
	// (RowWithoutImage) and names nothing.
	unseen int
}

func (c *checker) add(kind, what, why string, repair func(context.Context) error) {
	c.out = append(c.out, Finding{Kind: kind, What: what, Why: why, repair: repair})
}

// running reports whether sb holds the machine-wide names of a sandbox:
// starting or running, not ended.
func running(sb store.Sandbox) bool {
	return sb.Live() && sb.State != api.StatePaused
}

// images: the paused sandboxes and snapshots whose images on this disk are
// gone, and the images under DATA/images and DATA/snapshots no row names.
func (c *checker) images(ctx context.Context) error {
	st := c.Store
	paused, err := st.ListPaused(ctx, nil)
	if err != nil {
		return err
	}
	snaps, err := st.ListSnapshots(ctx, "")
	if err != nil {
		return err
	}
	named := map[string]bool{}
	local := func(image string) (string, bool) {
		_, p := store.SplitImageRef(image)
		p = filepath.Clean(p)
		return p, strings.HasPrefix(p, c.DataDir+"/")
	}
	for _, p := range paused {
		path, ok := local(p.ImageDir)
		if p.PausedAt == nil {
			continue // never paused (its on-timeout only)
		}
		if !ok {
			c.unseen++
			continue // elsewhere
		}
		named[path] = true
		if !exists(path) {
			id, name := p.SandboxID, node.PausedImage(p.SandboxID)
			held, err := c.held(ctx, p.Durable, name)
			switch {
			case err != nil:
				return err
			case held:
				c.add(ImageInStoreOnly, "paused sandbox "+id, "its image "+path+" is gone from this disk but durable in the image store: it stays paused, its resume fetches it from there", func(ctx context.Context) error {
					return st.SetPauseImage(ctx, id, store.ImageRef(backup.ImageStoreNode, name))
				})
			default:
				c.add(RowWithoutImage, "paused sandbox "+id, "its image "+path+" is gone"+c.nowhere(p.Durable)+": it cannot resume", c.unlessStored(p.Durable, func(ctx context.Context) error {
					return st.EndSandbox(ctx, id, api.StateFailed, "its image was lost (lizard admin check --repair)", time.Now())
				}))
			}
		}
	}
	for _, sn := range snaps {
		path, ok := local(sn.ImageDir)
		if !ok {
			c.unseen++
			continue
		}
		named[path] = true
		if !exists(path) {
			id, name := sn.ID, node.SnapshotImage(sn.ID)
			held, err := c.held(ctx, sn.Durable, name)
			switch {
			case err != nil:
				return err
			case held:
				c.add(ImageInStoreOnly, "snapshot "+id, "its image "+path+" is gone from this disk but durable in the image store: it stays, a create from it fetches it from there", func(ctx context.Context) error {
					return st.SetSnapshotImage(ctx, id, store.ImageRef(backup.ImageStoreNode, name))
				})
			default:
				c.add(RowWithoutImage, "snapshot "+id, "its image "+path+" is gone"+c.nowhere(sn.Durable)+": nothing can be created from it", c.unlessStored(sn.Durable, func(ctx context.Context) error {
					return st.DeleteSnapshot(ctx, id)
				}))
			}
		}
	}
	for _, dir := range []string{"images", "snapshots"} {
		ents, err := os.ReadDir(filepath.Join(c.DataDir, dir))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		for _, e := range ents {
			path := filepath.Join(c.DataDir, dir, e.Name())
			if named[path] {
				continue
			}
			c.add(ImageWithoutRow, path, "no paused sandbox or snapshot names it", func(context.Context) error {
				return os.RemoveAll(path)
			})
		}
	}
	return nil
}

// shared: the image store's shared objects (a --share-heap template's
// heap, kept once for all its images: imagestore/shared.go) that no
// image's manifest names any more, all of them deleted. Deleting an image
// leaves them, as others may name them. The check runs with this server
// stopped; another node of the cluster uploading an image of that heap
// puts the object back once its manifest is published, but one that
// publishes between the listing and the delete would have its image
// refused where it is read from the store, hence the why.
func (c *checker) shared(ctx context.Context) error {
	if c.Images == nil {
		return nil
	}
	unused, err := c.Images.UnusedShared(ctx)
	if imagestore.IsLost(err) {
		// An image that does not open may name any: none is unused
		// for sure. Its own row's check says what it is.
		return nil
	}
	if err != nil {
		return err
	}
	for _, key := range unused {
		c.add(SharedUnused, key, "no image in the image store names it (best repaired with every node of the cluster stopped)", func(ctx context.Context) error {
			return c.Images.RemoveShared(ctx, key)
		})
	}
	return nil
}

// held reports whether the image store holds image name, which its row
// says is durable. One the store does not have, or has damaged, is lost
// (a resume would fail on it too); a store that does not answer fails the
// check, which ends nothing it cannot be sure of.
func (c *checker) held(ctx context.Context, durable bool, name string) (bool, error) {
	if c.Images == nil || !durable {
		return false, nil
	}
	_, err := c.Images.Stat(ctx, name)
	switch {
	case err == nil:
		return true, nil
	case imagestore.IsLost(err):
		return false, nil
	}
	return false, fmt.Errorf("asking the image store whether it holds %s: %w (retry when it answers: nothing whose image it may hold is ended meanwhile)", name, err)
}

// storeUnasked reports whether a durable image may be in an image store
// the check was not given: the server ran with one (DATA/image-cache is
// its cache of it). Under `lizard serve` without one, every image is
// durable on its disk alone.
func (c *checker) storeUnasked(durable bool) bool {
	return durable && c.Images == nil && exists(filepath.Join(c.DataDir, "image-cache"))
}

// nowhere says where else a lost image was looked for.
func (c *checker) nowhere(durable bool) string {
	switch {
	case c.storeUnasked(durable):
		return " from this disk (the image store was not asked: --image-store)"
	case c.Images != nil:
		return " and not in the image store"
	}
	return ""
}

// unlessStored is repair, unless the image may be in an image store the
// check was not given: then the repair refuses, ending nothing.
func (c *checker) unlessStored(durable bool, repair func(context.Context) error) func(context.Context) error {
	if !c.storeUnasked(durable) {
		return repair
	}
	return func(context.Context) error {
		return errors.New("the server ran with an image store, which may hold this image: give lizard admin check the server's --image-store (and its secrets key) so that it asks")
	}
}

// host: the network namespaces, veths, nftables tables and cgroups of
// sandboxes of this data directory that are not running.
func (c *checker) host(ctx context.Context) error {
	runtimeDir := filepath.Join(c.DataDir, "gvisor")
	row := map[string]store.Sandbox{}
	for _, sb := range c.rows {
		row[sb.ID] = sb
	}
	owned, err := gvisor.Owners(runtimeDir)
	if err != nil {
		return fmt.Errorf("listing sandbox owner records: %w", err)
	}
	ids := map[string]bool{}
	for _, id := range owned {
		ids[id] = true
	}
	for id := range row {
		if gvisor.Owner(id) == "" { // unclaimed: ours by the row; else the record's
			ids[id] = true
		}
	}
	present, err := netns.ReadPresent()
	if err != nil {
		return err
	}
	for id := range ids {
		sb, ok := row[id]
		if ok && running(sb) {
			continue
		}
		var why string
		if ok {
			why = fmt.Sprintf("sandbox %s is %s", id, sb.State)
		} else {
			why = "sandbox " + id + " has no row in this store; its owner record names " + runtimeDir
		}
		network := func(context.Context) error { return netns.Remove(id) }
		if present.Namespaces[id] {
			c.add(Namespace, netns.Name(id), why, network)
		}
		if present.Veth(id) {
			c.add(Veth, netns.VethName(id), why, network)
		}
		if present.Tables[id] {
			c.add(Table, "inet "+netns.TableName(id), why, network)
		}
		for _, d := range gvisor.Cgroups(id) {
			c.add(Cgroup, d, why, func(ctx context.Context) error { return gvisor.RemoveLeftovers(ctx, runtimeDir, id) })
		}
	}
	return nil
}

// loops: loop devices backed by a file under DATA/volumes that nothing
// mounts (a volume's mount that died half-way, or was torn down without
// its loop device).
func (c *checker) loops(ctx context.Context) error {
	mounted, err := mountSources()
	if err != nil {
		return err
	}
	for dev, backing := range volume.LoopDevices() {
		if !strings.HasPrefix(backing, filepath.Join(c.DataDir, "volumes")+"/") || mounted[dev] {
			continue
		}
		c.add(LoopDevice, dev, "it is attached to "+backing+", which nothing mounts", func(context.Context) error { return detach(dev) })
	}
	return nil
}

// volumes: volume images no row names, and volumes mounted while no
// running sandbox mounts them.
func (c *checker) volumes(ctx context.Context) error {
	m := &volume.Manager{Dir: filepath.Join(c.DataDir, "volumes")}
	vols, err := c.Store.Volumes().List(ctx, "")
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, v := range vols {
		known[v.ID] = true
	}
	inUse := map[string]bool{}
	for _, sb := range c.rows {
		if running(sb) {
			for _, v := range sb.Shape.Volumes {
				inUse[v.ID] = true
			}
		}
	}
	ents, err := os.ReadDir(m.Dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	seen := map[string]bool{}
	for _, e := range ents {
		id := strings.TrimSuffix(e.Name(), ".img")
		if seen[id] || !volume.ValidID(id) {
			continue
		}
		seen[id] = true
		switch {
		case !known[id]:
			c.add(VolumeWithoutRow, filepath.Join(m.Dir, id), "no volume of this store has ID "+id, func(ctx context.Context) error { return m.Remove(ctx, id) })
		case m.Mounted(id) && !inUse[id]:
			c.add(VolumeMounted, m.Path(id), "no running sandbox mounts volume "+id, func(context.Context) error { return m.Unmount(id) })
		}
	}
	return nil
}

// templates: custom template builds this data directory holds in the
// template cache that no template, live sandbox or snapshot of its store
// uses.
func (c *checker) templates(ctx context.Context) error {
	if c.CacheDir == "" {
		return nil
	}
	b := recipe.New(recipe.Config{CacheDir: c.CacheDir, DataDir: c.DataDir})
	used, err := recipe.Uses(ctx, c.Store)
	if err != nil {
		return err
	}
	for _, key := range b.Holds() {
		if _, ok := used[key]; ok {
			continue
		}
		c.add(TemplateBuildUnused, filepath.Join(c.CacheDir, "templates", recipe.LayerKey(key)),
			"no template, live sandbox or snapshot of this store uses it (removed once no other data directory holds it)",
			func(context.Context) error { _, err := b.Release(key); return err })
	}
	// The step cache's entries this data directory's templates made or
	// used, of templates its store no longer has.
	for _, u := range b.StepUses() {
		if _, err := c.Store.Templates().Get(ctx, u.Project, u.Template); err == nil {
			continue
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		c.add(TemplateStepsUnused, fmt.Sprintf("%s (%s/%s: %d entries, %d MiB)", filepath.Join(c.CacheDir, "template-steps"), u.Project, u.Template, u.Entries, u.Bytes>>20),
			"no template of this store has that name (the entries no other template uses are removed)",
			func(context.Context) error { return b.ForgetSteps(u.Project, u.Template) })
	}
	return nil
}

// kept: the runsc builds and the copies of the agent and CLI the gVisor
// runtime keeps (DATA/gvisor/runsc/BUILD, DATA/gvisor/files/KEY) that no
// image on this disk (a paused sandbox's, a snapshot's, a template
// snapshot, an image store's cached one, or one without a row: the rows'
// images are all under DATA/images and DATA/snapshots) and no
// sandbox of the runtime names, besides the runsc build the server runs
// and the copies of its Files.
//
// None is listed while an image a row names is elsewhere (c.unseen): it
// may name any of them, and a removed build or agent would make it
// unrestorable.
func (c *checker) kept(ctx context.Context) error {
	if c.unseen > 0 {
		return nil
	}
	dir := filepath.Join(c.DataDir, "gvisor")
	var images []string
	for _, sub := range []string{"images", "snapshots", "templates", "image-cache"} {
		m, _ := filepath.Glob(filepath.Join(c.DataDir, sub, "*"))
		images = append(images, m...)
	}
	builds, files, err := gvisor.Named(dir, images)
	if err != nil {
		return err
	}
	builds[gvisor.CurrentBuild(dir)] = true
	for _, f := range c.Files {
		if key, err := gvisor.FilesKey(f); err == nil {
			files[key] = true
		}
	}
	kept, err := gvisor.KeptBuilds(dir)
	if err != nil {
		return err
	}
	for _, b := range kept {
		if builds[b] {
			continue
		}
		path := filepath.Dir(gvisor.KeptRunsc(dir, b))
		c.add(RunscUnused, path, "no image or sandbox names runsc build "+b+", and the server runs "+gvisor.CurrentBuild(dir),
			func(context.Context) error { return os.RemoveAll(path) })
	}
	copies, err := gvisor.KeptFiles(dir)
	if err != nil {
		return err
	}
	for _, k := range copies {
		if files[k] {
			continue
		}
		path := filepath.Join(dir, "files", k)
		c.add(FilesUnused, path, "no image or sandbox names it, and it is not the server's lizard-agent or lizard-client",
			func(context.Context) error { return os.RemoveAll(path) })
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// mountSources are the devices mounted in this process's mount namespace.
func mountSources() (map[string]bool, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		// ... - FSTYPE SOURCE OPTIONS
		_, after, ok := strings.Cut(line, " - ")
		if f := strings.Fields(after); ok && len(f) >= 2 {
			out[f[1]] = true
		}
	}
	return out, nil
}

// detach frees loop device dev from its backing file (losetup -d).
func detach(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	err = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
	f.Close()
	if err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("detaching %s: %w", dev, err)
	}
	// The kernel only marks a device that is open (by us, or by udev's
	// probe) to be cleared at its last close, and clears it from a work
	// queue after that: wait until it has, so that a check run right after
	// a repair does not find the device again.
	backing := filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file")
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(backing); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
	}
	return fmt.Errorf("detaching %s: still attached after 10 s, held open by another process", dev)
}
