// Package backup copies what a `lizard serve` data directory holds to a
// backup directory while the server runs, and restores such a backup onto
// a clean data directory (`lizard admin backup` and `lizard admin restore`,
// docs/operations.md).
//
// A backup is a directory:
//
//	manifest.json   written last: a backup without it is incomplete
//	lizard.db       the store, copied online (store.BackupTo: VACUUM INTO)
//	agent.key       what each sandbox's agent secret is derived from; a
//	                paused sandbox's image holds its agent's secret
//	egress-ca/      the per-sandbox authorities secrets are injected under
//	gvisor/files/   the agents (and CLIs) sandboxes were booted with, which
//	                their images restore with (KeptFiles)
//	gvisor/runsc/   the runsc builds the server ran with, by build, which
//	                their images restore with (KeptRunsc)
//	audit.log
//	images/ID       the images of the sandboxes paused in lizard.db
//	snapshots/ID    the images of its snapshots
//	volumes/        the volumes' ext4 images (sparse)
//	templates/PROJECT/NAME.json   custom templates' recipes
//
// With the server's image store (Options.Images), the images it holds
// durably are only named in the manifest: the backup is incremental.
//
// The secrets key, which opens the sealed secrets in lizard.db (and the
// images in an image store), is not in it: the operator names where it
// goes (Options.SecretsKeyTo), so that one leaked backup is not both.
package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/sandbox/gvisor"
	"github.com/lizard-build/lizard/internal/secrets"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/version"
)

// ManifestFile names a backup's manifest, written last.
const ManifestFile = "manifest.json"

// Manifest describes a backup: what made it, from where, and what it holds.
type Manifest struct {
	// Version is the Lizard that made it; Schema its store's schema.
	Version   string    `json:"version"`
	Schema    int       `json:"schema"`
	CreatedAt time.Time `json:"createdAt"`
	// DataDir is the data directory it was taken from, absolute: the
	// store's image paths name it, and a restore moves them.
	DataDir string `json:"dataDir"`
	// SecretsKey says where the secrets key went: "apart" (written where
	// the operator said), "not copied" or "none" (the data directory had
	// none).
	SecretsKey string `json:"secretsKey"`
	// Paused and Snapshots are the IDs whose images it holds.
	Paused    []string `json:"paused"`
	Snapshots []string `json:"snapshots"`
	Volumes   []string `json:"volumes"`
	// Templates are the recipes it holds, as PROJECT/NAME.
	Templates []string `json:"templates"`
	// InImageStore are the images it does not hold because the image
	// store does (Options.Images): their names there, paused/ID and
	// snapshots/ID. A restore leaves them there.
	InImageStore []string `json:"inImageStore,omitempty"`
	// Missing are images the store named that were gone when copied (the
	// sandbox resumed or ended, the snapshot deleted, meanwhile).
	Missing []string `json:"missing,omitempty"`
}

// Options say what Backup copies and where.
type Options struct {
	DataDir string
	To      string
	// SecretsKeyTo is a file the secrets key is written to (0600); ""
	// copies it nowhere.
	SecretsKeyTo string
	// Images is the server's image store, or nil: the durable images it
	// holds are recorded, not copied (an incremental backup).
	Images *imagestore.Store
}

// Backup copies the data directory opt.DataDir, whose store is st, to
// opt.To, which must not exist or be empty. The server may be running: the
// store is copied in one read transaction, then the images the copy names.
func Backup(ctx context.Context, st *store.Store, opt Options) (Manifest, error) {
	var m Manifest
	dataDir, err := filepath.Abs(opt.DataDir)
	if err != nil {
		return m, err
	}
	if err := emptyDir(opt.To); err != nil {
		return m, err
	}
	db := filepath.Join(opt.To, store.FileName)
	if err := st.BackupTo(ctx, db); err != nil {
		return m, err
	}
	// The copy, not the live store, says what to copy: its rows and the
	// images copied with them are of one moment.
	c, err := store.OpenFile(ctx, db)
	if err != nil {
		return m, fmt.Errorf("opening the store's copy: %w", err)
	}
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	m = Manifest{Version: version.Version, CreatedAt: time.Now().UTC(), DataDir: dataDir,
		Paused: []string{}, Snapshots: []string{}, Volumes: []string{}, Templates: []string{}}
	if m.Schema, err = c.Version(ctx); err != nil {
		return m, err
	}
	b := copier{st: c, dataDir: dataDir, opt: opt, m: &m}
	for _, part := range []func(context.Context) error{b.images, b.volumes, b.recipes} {
		if err := part(ctx); err != nil {
			return m, err
		}
	}
	// Closed before the manifest says the backup is whole: the copy's own
	// WAL (opening it wrote one) is folded into lizard.db and removed.
	err = c.Close()
	c = nil
	if err != nil {
		return m, fmt.Errorf("closing the store's copy: %w", err)
	}
	for _, name := range []string{"agent.key", "egress-ca", "audit.log", KeptFiles, KeptRunsc} {
		src := filepath.Join(dataDir, name)
		if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(opt.To, name)), 0o700); err != nil {
			return m, err
		}
		if err := cp(ctx, src, filepath.Join(opt.To, name)); err != nil {
			return m, fmt.Errorf("copying %s: %w", name, err)
		}
	}
	if err := linkImageHeaps(opt.To); err != nil {
		return m, err
	}
	if m.SecretsKey, err = copyKey(filepath.Join(dataDir, secrets.KeyFile), opt.SecretsKeyTo); err != nil {
		return m, err
	}
	return m, writeManifest(opt.To, m)
}

// linkImageHeaps makes the template heaps the images under dir hold
// (--share-heap) links of the kept copies in dir's KeptFiles again: cp -a
// of each image apart made each a file of its own, ~72 MB each.
func linkImageHeaps(dir string) error {
	var images []string
	for _, kind := range []string{"images", "snapshots"} {
		ents, _ := os.ReadDir(filepath.Join(dir, kind))
		for _, e := range ents {
			images = append(images, filepath.Join(dir, kind, e.Name()))
		}
	}
	return gvisor.LinkImageHeaps(filepath.Join(dir, filepath.Dir(KeptFiles)), images)
}

// KeptFiles is where, in a data directory, the gVisor runtime keeps the
// agents and CLIs sandboxes were booted with: a paused sandbox's image
// restores only with the agent it was made with (gvisor's files.go).
const KeptFiles = "gvisor/files"

// KeptRunsc is where, in a data directory, the gVisor runtime keeps each
// runsc build it ran with: an image restores only with the build that
// made it (gvisor's runsc.go), and the restored machine may run another.
const KeptRunsc = "gvisor/runsc"

// copier copies what the store's copy st names into opt.To, recording it
// in m: one method for each kind of thing a backup holds.
type copier struct {
	st      *store.Store
	dataDir string
	opt     Options
	m       *Manifest
}

// stored records an image already in the image store (durable, and found
// there) rather than copying it.
func (b copier) stored(ctx context.Context, durable bool, name string) bool {
	if b.opt.Images == nil || !durable {
		return false
	}
	if _, err := b.opt.Images.Stat(ctx, name); err != nil {
		return false // not there, or not one that opens: copied instead
	}
	b.m.InImageStore = append(b.m.InImageStore, name)
	return true
}

// images copies the paused sandboxes' and snapshots' images.
func (b copier) images(ctx context.Context) error {
	m := b.m
	paused, err := b.st.ListPaused(ctx, nil)
	if err != nil {
		return err
	}
	for _, p := range paused {
		if p.PausedAt != nil && b.stored(ctx, p.Durable, node.PausedImage(p.SandboxID)) {
			continue
		}
		if ok, err := copyImage(ctx, b.dataDir, p.ImageDir, b.opt.To, "images"); err != nil {
			return fmt.Errorf("copying the image of paused sandbox %s: %w", p.SandboxID, err)
		} else if ok {
			m.Paused = append(m.Paused, p.SandboxID)
		} else if p.ImageDir != "" {
			m.Missing = append(m.Missing, "paused sandbox "+p.SandboxID)
		}
	}
	snaps, err := b.st.ListSnapshots(ctx, "")
	if err != nil {
		return err
	}
	for _, sn := range snaps {
		if b.stored(ctx, sn.Durable, node.SnapshotImage(sn.ID)) {
			continue
		}
		if ok, err := copyImage(ctx, b.dataDir, sn.ImageDir, b.opt.To, "snapshots"); err != nil {
			return fmt.Errorf("copying the image of snapshot %s: %w", sn.ID, err)
		} else if ok {
			m.Snapshots = append(m.Snapshots, sn.ID)
		} else {
			m.Missing = append(m.Missing, "snapshot "+sn.ID)
		}
	}
	return nil
}

// volumes copies the volumes' files, sparse.
func (b copier) volumes(ctx context.Context) error {
	vols, err := b.st.Volumes().List(ctx, "")
	if err != nil {
		return err
	}
	for _, v := range vols {
		src := filepath.Join(b.dataDir, "volumes", v.ID+".img")
		if _, err := os.Stat(src); errors.Is(err, fs.ErrNotExist) {
			b.m.Missing = append(b.m.Missing, "volume "+v.ID)
			continue
		}
		if err := os.MkdirAll(filepath.Join(b.opt.To, "volumes"), 0o700); err != nil {
			return err
		}
		if err := cp(ctx, src, filepath.Join(b.opt.To, "volumes", v.ID+".img")); err != nil {
			return fmt.Errorf("copying volume %s: %w", v.ID, err)
		}
		b.m.Volumes = append(b.m.Volumes, v.ID)
	}
	return nil
}

// recipes writes each custom template's recipe (its build is remade).
func (b copier) recipes(ctx context.Context) error {
	tpls, err := b.st.Templates().List(ctx, "")
	if err != nil {
		return err
	}
	for _, t := range tpls {
		dir := filepath.Join(b.opt.To, "templates", t.ProjectID)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, t.Name+".json"), []byte(t.Recipe+"\n"), 0o600); err != nil {
			return err
		}
		b.m.Templates = append(b.m.Templates, t.ProjectID+"/"+t.Name)
	}
	return nil
}

// copyImage copies image, a directory under dataDir/kind, to to/kind;
// false if it is not there (or names no directory of dataDir's).
func copyImage(ctx context.Context, dataDir, image, to, kind string) (bool, error) {
	_, path := store.SplitImageRef(image)
	if filepath.Dir(filepath.Clean(path)) != filepath.Join(dataDir, kind) {
		return false, nil
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Join(to, kind), 0o700); err != nil {
		return false, err
	}
	return true, cp(ctx, path, filepath.Join(to, kind, filepath.Base(path)))
}

// copyKey writes the secrets key at from to the file to (0600).
func copyKey(from, to string) (string, error) {
	if _, err := os.Stat(from); errors.Is(err, fs.ErrNotExist) {
		return "none", nil
	}
	if to == "" {
		return "not copied", nil
	}
	if _, err := secrets.LoadKey(from); err != nil {
		return "", err
	}
	b, err := os.ReadFile(from)
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("writing the secrets key: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return "", fmt.Errorf("writing the secrets key: %w", err)
	}
	return "apart", f.Close()
}

// cp copies a file or a directory tree as `cp -a` does, keeping holes
// (volumes are sparse ext4 images of their full size).
func cp(ctx context.Context, src, dst string) error {
	out, err := exec.CommandContext(ctx, "cp", "-a", "--sparse=always", "--", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cp %s %s: %v: %s", src, dst, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// emptyDir makes dir, or accepts it empty.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return os.MkdirAll(dir, 0o700)
	}
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("%s is not empty: back up into a new directory", dir)
	}
	return os.Chmod(dir, 0o700)
}

func writeManifest(dir string, m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ManifestFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	// Everything before it is on disk before the manifest says it is whole.
	syncErr := syncAll(dir)
	if err := errors.Join(syncErr, f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("writing the manifest: %w", err)
	}
	return os.Rename(tmp, filepath.Join(dir, ManifestFile))
}

// syncAll flushes dir's files to disk (sync(2) of its file system).
func syncAll(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// ReadManifest reads the manifest of the backup in dir.
func ReadManifest(dir string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("%s has no %s: not a backup, or one that did not finish", dir, ManifestFile)
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("reading %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	return m, nil
}
