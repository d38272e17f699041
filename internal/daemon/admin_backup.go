package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/lizard-build/lizard/internal/backup"
	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/secrets"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
)

// adminBackup is `lizard admin backup --to DIR`: a copy of a data directory
// taken while its server runs (internal/backup, docs/operations.md).
func adminBackup(ctx context.Context, e cli.Env, args []string) error {
	fs := cli.NewFlags(e, "admin backup")
	dataDir := fs.String("data-dir", "data", "the server's data directory")
	to := fs.String("to", "", "the backup's directory (new, or empty), or s3://BUCKET/PREFIX (a new prefix; sealed with the secrets key, credentials as --image-store's)")
	keyTo := fs.String("secrets-key-to", "", "a file (new) to write the secrets key to, kept apart from the backup; without it the key is not copied and the backup's secrets open only with the key you keep")
	imageStore := fs.String("image-store", "", "the server's --image-store: the images it holds durably are recorded, not copied (an incremental backup); it opens them with the secrets key")
	keyFile := fs.String("secrets-key-file", "", "the server's --secrets-key-file, for --image-store (default: env "+secrets.KeyEnv+", else DATA/"+secrets.KeyFile+")")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("lizard admin backup takes no arguments, got %q", fs.Args())
	}
	if *to == "" {
		return cli.Usagef("lizard admin backup needs --to DIR")
	}
	if os.Getenv(envDatabaseURL) != "" {
		return errors.New("a cluster's PostgreSQL database is backed up with pg_dump, its nodes' disks by their image store: docs/operations.md")
	}
	if _, err := os.Stat(filepath.Join(*dataDir, store.FileName)); err != nil {
		return fmt.Errorf("no store in %s: give --data-dir the server's data directory", *dataDir)
	}
	st, err := store.Open(ctx, *dataDir)
	if err != nil {
		return fmt.Errorf("opening the store in %s: %w", *dataDir, err)
	}
	defer st.Close()
	opt := backup.Options{DataDir: *dataDir, To: *to, SecretsKeyTo: *keyTo}
	serverKey := func(what string) (*secrets.Key, error) { return serverSecretsKey(*dataDir, *keyFile, what) }
	if opt.Images, err = serverImageStore(ctx, *imageStore, *dataDir, *keyFile); err != nil {
		return err
	}
	var remote *imagestore.Store
	if strings.HasPrefix(*to, "s3://") {
		key, err := serverKey("--to " + *to)
		if err != nil {
			return err
		}
		if remote, err = backupBucket(ctx, *to, key); err != nil {
			return err
		}
		if _, err := remote.Stat(ctx, backupImage); !errors.Is(err, imagestore.ErrNotFound) {
			return fmt.Errorf("%s holds a backup already (or cannot be read: %v): back up to a new prefix", *to, err)
		}
		// Staged beside the data directory, on its disk, then
		// uploaded as one sealed image.
		abs, err := filepath.Abs(*dataDir)
		if err != nil {
			return err
		}
		staging, err := os.MkdirTemp(filepath.Dir(abs), ".lizard-backup-")
		if err != nil {
			return fmt.Errorf("staging the backup: %w", err)
		}
		defer os.RemoveAll(staging)
		opt.To = filepath.Join(staging, "backup")
	}
	m, err := backup.Backup(ctx, st, opt)
	if err != nil {
		return fmt.Errorf("backing up %s: %w", *dataDir, err)
	}
	if remote != nil {
		im, err := remote.Put(ctx, backupImage, opt.To)
		if err != nil {
			return fmt.Errorf("uploading the backup to %s: %w", *to, err)
		}
		fmt.Fprintf(e.Stdout, "Uploaded %d bytes, sealed with the secrets key: restore needs it (--secrets-key-from).\n", im.Size)
	}
	fmt.Fprintf(e.Stdout, "Backed up %s to %s: the store (schema %d), %d paused sandboxes' and %d snapshots' images, %d volumes, %d template recipes.\n",
		m.DataDir, *to, m.Schema, len(m.Paused), len(m.Snapshots), len(m.Volumes), len(m.Templates))
	if len(m.InImageStore) > 0 {
		fmt.Fprintf(e.Stdout, "Left in the image store, recorded: %d images (%s).\n", len(m.InImageStore), strings.Join(m.InImageStore, ", "))
	}
	switch m.SecretsKey {
	case "apart":
		fmt.Fprintf(e.Stdout, "The secrets key is in %s, not in the backup: keep it apart, and give it to restore (--secrets-key-from).\n", *keyTo)
	case "not copied":
		fmt.Fprintf(e.Stdout, "The secrets key (%s/secrets.key) was not copied (--secrets-key-to FILE): without it the backup's secrets do not open.\n", *dataDir)
	}
	if len(m.Missing) > 0 {
		fmt.Fprintf(e.Stdout, "Gone before they were copied (resumed, ended or deleted meanwhile): %s.\n", strings.Join(m.Missing, ", "))
	}
	return nil
}

// adminRestore is `lizard admin restore --from DIR`: a backup onto a new
// data directory, for a `lizard serve` started on it next.
func adminRestore(ctx context.Context, e cli.Env, args []string) error {
	fs := cli.NewFlags(e, "admin restore")
	from := fs.String("from", "", "the backup's directory or s3://BUCKET/PREFIX (lizard admin backup --to)")
	dataDir := fs.String("data-dir", "data", "the new data directory: empty, or not there yet")
	keyFrom := fs.String("secrets-key-from", "", "the secrets key's file (lizard admin backup --secrets-key-to), written to DATA/secrets.key; leave it out when the server is given --secrets-key-file")
	cacheDefault := template.DefaultCacheDir
	if d := os.Getenv("LIZARD_CACHE_DIR"); d != "" {
		cacheDefault = d
	}
	cacheDir := fs.String("cache-dir", cacheDefault, "the template cache the server will use (env LIZARD_CACHE_DIR)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("lizard admin restore takes no arguments, got %q", fs.Args())
	}
	if *from == "" {
		return cli.Usagef("lizard admin restore needs --from DIR")
	}
	src := *from
	if strings.HasPrefix(*from, "s3://") {
		if *keyFrom == "" {
			return cli.Usagef("a backup in %s is sealed with the secrets key: give it with --secrets-key-from FILE", *from)
		}
		key, err := secrets.LoadKey(*keyFrom)
		if err != nil {
			return err
		}
		b, err := backupBucket(ctx, *from, key)
		if err != nil {
			return err
		}
		abs, err := filepath.Abs(*dataDir)
		if err != nil {
			return err
		}
		staging, err := os.MkdirTemp(filepath.Dir(abs), ".lizard-restore-")
		if err != nil {
			return fmt.Errorf("staging the backup: %w", err)
		}
		defer os.RemoveAll(staging)
		src = filepath.Join(staging, "backup")
		if _, err := b.Get(ctx, backupImage, src); err != nil {
			if errors.Is(err, imagestore.ErrNotFound) {
				return fmt.Errorf("%s holds no backup (lizard admin backup --to %s makes one)", *from, *from)
			}
			return fmt.Errorf("downloading the backup from %s: %w", *from, err)
		}
	}
	r, err := backup.Restore(ctx, backup.RestoreOptions{From: src, DataDir: *dataDir, SecretsKeyFrom: *keyFrom, CacheDir: *cacheDir})
	if err != nil {
		return fmt.Errorf("restoring %s: %w", *from, err)
	}
	m := r.Manifest
	fmt.Fprintf(e.Stdout, "Restored the backup of %s (Lizard %s, %s) into %s: %d paused sandboxes, %d snapshots, %d volumes.\n",
		m.DataDir, m.Version, m.CreatedAt.Format("2006-01-02 15:04:05Z"), *dataDir, len(m.Paused), len(m.Snapshots), len(m.Volumes))
	if len(r.Ended) > 0 {
		fmt.Fprintf(e.Stdout, "Ended %d sandboxes that were running at the backup (a backup keeps paused ones): %s.\n", len(r.Ended), strings.Join(r.Ended, ", "))
	}
	if len(r.Unbuilt) > 0 {
		fmt.Fprintf(e.Stdout, "Custom templates whose build is not in %s (build each again: POST /v1/templates with the recipe in %s/templates/PROJECT/NAME.json): %s.\n",
			*cacheDir, *from, strings.Join(r.Unbuilt, ", "))
	}
	if *keyFrom == "" && m.SecretsKey != "none" {
		fmt.Fprintln(e.Stdout, "No secrets key was restored: start the server with the backup's key (--secrets-key-file), or its secrets do not open.")
	}
	if len(m.InImageStore) > 0 {
		fmt.Fprintf(e.Stdout, "%d images were left in the image store: start the server with the same --image-store and secrets key.\n", len(m.InImageStore))
	}
	fmt.Fprintf(e.Stdout, "Start it with: lizard serve --data-dir %s\n", *dataDir)
	return nil
}

// serverSecretsKey loads the secrets key of the server of dataDir, for
// what: keyFile (its --secrets-key-file), else the environment's, else
// DATA/secrets.key.
func serverSecretsKey(dataDir, keyFile, what string) (*secrets.Key, error) {
	sf := secretsFlags{KeyFile: keyFile}
	key, err := sf.key(dataDir, false)
	if err == nil && key == nil {
		key, err = secrets.LoadKey(filepath.Join(dataDir, secrets.KeyFile))
	}
	if err != nil {
		return nil, fmt.Errorf("loading the secrets key for %s: %w", what, err)
	}
	return key, nil
}

// serverImageStore opens u, the --image-store of the server of dataDir
// (nil when u is ""), with its secrets key: what `lizard admin backup` and
// `lizard admin check` ask which images it holds.
func serverImageStore(ctx context.Context, u, dataDir, keyFile string) (*imagestore.Store, error) {
	if u == "" {
		return nil, nil
	}
	f := imageStoreFlags{URL: u, CacheMb: 1}
	if err := f.validate(); err != nil {
		return nil, err
	}
	key, err := serverSecretsKey(dataDir, keyFile, "--image-store")
	if err != nil {
		return nil, err
	}
	return f.store(ctx, os.Getenv, key)
}

// backupImage is the name of a backup in an S3 prefix: one image of the
// image store's format (a tar, sealed with a key derived from the secrets
// key, its manifest written last), so that a half-uploaded backup is
// never taken for one and the bucket holds no agent key in clear.
const backupImage = "backup"

// backupBucket opens s3://BUCKET/PREFIX as an image store sealed with key,
// checked as --image-store's is.
func backupBucket(ctx context.Context, u string, key *secrets.Key) (*imagestore.Store, error) {
	f := imageStoreFlags{URL: u, CacheMb: 1}
	if err := f.validate(); err != nil {
		return nil, cli.Usagef("%s: want s3://BUCKET/PREFIX", u)
	}
	return f.store(ctx, os.Getenv, key)
}
