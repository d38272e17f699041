package backup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/recipe"
	"github.com/lizard-build/lizard/internal/secrets"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
)

// RestoreOptions say which backup goes where.
type RestoreOptions struct {
	From    string
	DataDir string
	// SecretsKeyFrom is the secrets key's file, written to the data
	// directory's secrets.key; "" restores none (give the server
	// --secrets-key-file instead).
	SecretsKeyFrom string
	// CacheDir is the template cache the restored server uses: the custom
	// templates whose builds it holds are recorded as this data
	// directory's.
	CacheDir string
}

// Restored is what a restore did, beyond copying.
type Restored struct {
	Manifest Manifest
	// Ended are the sandboxes that were running (or starting) when the
	// backup was taken: a backup holds no running sandbox, so their rows
	// end, failed, saying so.
	Ended []string
	// Unbuilt are custom templates (PROJECT/NAME) whose build is not in
	// the template cache: `lizard template build -f` their recipe in the
	// backup's templates/ again.
	Unbuilt []string
}

// ImageStoreNode is the node an image left in the image store is recorded
// on by a restore: none, so that it is fetched.
const ImageStoreNode = "image-store"

// endReason is what a sandbox that was running at the backup ends with.
const endReason = "it was running when the backup it was restored from was taken; a backup keeps paused sandboxes, not running ones"

// Restore copies the backup in opt.From onto opt.DataDir, which must hold
// no store: the store (migrated forward if the backup is older), the
// images, volumes and keys. The image paths in the store are moved to the
// new directory, and the sandboxes that were running end, so that the
// server started on it resumes the paused ones and starts no other's.
func Restore(ctx context.Context, opt RestoreOptions) (Restored, error) {
	var r Restored
	m, err := ReadManifest(opt.From)
	if err != nil {
		return r, err
	}
	r.Manifest = m
	dataDir, err := filepath.Abs(opt.DataDir)
	if err != nil {
		return r, err
	}
	if _, err := os.Lstat(filepath.Join(dataDir, store.FileName)); err == nil {
		return r, fmt.Errorf("%s already holds a store (%s): restore onto a new, empty data directory", dataDir, store.FileName)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return r, err
	}
	if opt.SecretsKeyFrom != "" {
		if _, err := secrets.LoadKey(opt.SecretsKeyFrom); err != nil {
			return r, err
		}
	}
	for _, name := range []string{store.FileName, "agent.key", "egress-ca", "audit.log", "images", "snapshots", "volumes", KeptFiles, KeptRunsc} {
		src := filepath.Join(opt.From, name)
		if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dataDir, name)), 0o700); err != nil {
			return r, err
		}
		if err := cp(ctx, src, filepath.Join(dataDir, name)); err != nil {
			return r, fmt.Errorf("restoring %s: %w", name, err)
		}
	}
	if err := linkImageHeaps(dataDir); err != nil {
		return r, err
	}
	if opt.SecretsKeyFrom != "" {
		if _, err := copyKey(opt.SecretsKeyFrom, filepath.Join(dataDir, secrets.KeyFile)); err != nil {
			return r, err
		}
	}
	st, err := store.Open(ctx, dataDir)
	if err != nil {
		return r, fmt.Errorf("opening the restored store: %w", err)
	}
	defer st.Close()
	if _, err := st.MoveImages(ctx, m.DataDir, dataDir); err != nil {
		return r, err
	}
	// An image left in the image store is named by a path of no data
	// directory, so that the node fetches it from there (as it does an
	// image of another node's) rather than look for it on its disk.
	for _, name := range m.InImageStore {
		ref := store.ImageRef(ImageStoreNode, name)
		var err error
		if id, ok := strings.CutPrefix(name, node.PausedImage("")); ok {
			err = st.SetPauseImage(ctx, id, ref)
		} else if id, ok := strings.CutPrefix(name, node.SnapshotImage("")); ok {
			err = st.SetSnapshotImage(ctx, id, ref)
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return r, err
		}
	}
	live, err := st.ListSandboxes(ctx, store.Filter{LiveOnly: true})
	if err != nil {
		return r, err
	}
	for _, sb := range live {
		if sb.State == api.StatePaused {
			continue
		}
		if err := st.EndSandbox(ctx, sb.ID, api.StateFailed, endReason, time.Now()); err != nil && !errors.Is(err, store.ErrConflict) {
			return r, fmt.Errorf("ending sandbox %s, running at the backup: %w", sb.ID, err)
		}
		r.Ended = append(r.Ended, sb.ID)
	}
	tpls, err := st.Templates().List(ctx, "")
	if err != nil {
		return r, err
	}
	b := recipe.New(recipe.Config{CacheDir: opt.CacheDir, DataDir: dataDir})
	for _, t := range tpls {
		if _, built := template.LayerRootFS(opt.CacheDir, recipe.LayerKey(t.Key)); !built {
			r.Unbuilt = append(r.Unbuilt, t.ProjectID+"/"+t.Name)
			continue
		}
		if err := b.Hold(t.Key); err != nil {
			return r, err
		}
	}
	return r, nil
}
