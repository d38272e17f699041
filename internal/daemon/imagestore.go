package daemon

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"time"

	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/imagestore/disk"
	"github.com/lizard-build/lizard/internal/imagestore/s3"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/secrets"
)

// imageStoreFlags say where checkpoint images outlive their node
// (docs/storage.md); serve and node take them.
type imageStoreFlags struct {
	URL     string // "": the node's disk
	CacheMb int64
}

func (f *imageStoreFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.URL, "image-store", "", "where paused sandboxes' and snapshots' images are kept so that they outlive this machine: s3://BUCKET/PREFIX (endpoint, region and credentials from AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or file:///DIR (a directory every node mounts); default: the node's own disk only (docs/storage.md)")
	fs.Int64Var(&f.CacheMb, "image-cache-mb", 10240, "disk the cache of images fetched from --image-store may take, MiB; the least recently used go first")
}

func (f *imageStoreFlags) validate() error {
	if f.URL == "" {
		return nil
	}
	if f.CacheMb < 1 {
		return cli.Usagef("--image-cache-mb %d: want at least 1", f.CacheMb)
	}
	u, err := url.Parse(f.URL)
	if err != nil || (u.Scheme != "s3" && u.Scheme != "file") {
		return cli.Usagef("--image-store %q: want s3://BUCKET/PREFIX or file:///DIR", f.URL)
	}
	if u.Scheme == "file" && (u.Host != "" || !filepath.IsAbs(u.Path)) {
		return cli.Usagef("--image-store %q: want file:///ABSOLUTE/DIR", f.URL)
	}
	return nil
}

// open returns the image store and the node's cache of it in dataDir, or
// nils for the node's disk. It refuses a store it cannot use (no bucket,
// wrong credentials, unreachable), naming the setting at fault, so that a
// node never runs believing its images durable when they cannot be.
//
// Images are sealed with a key derived from the operator's secrets key
// (docs/storage.md#sealing): every node of a cluster has it the same way,
// and the bucket never holds it. A node given a store and no key refuses
// to start rather than keep images in clear.
func (f *imageStoreFlags) open(ctx context.Context, dataDir string, getenv func(string) string, secretsKey *secrets.Key, log *slog.Logger) (*imagestore.Store, *imagestore.Cache, error) {
	st, err := f.store(ctx, getenv, secretsKey)
	if st == nil || err != nil {
		return nil, nil, err
	}
	cache, err := imagestore.NewCache(st, filepath.Join(dataDir, "image-cache"), f.CacheMb<<20, log)
	if err != nil {
		return nil, nil, err
	}
	log.Info("image store", "store", st.Bucket().String(), "cache_mb", f.CacheMb, "image_key", st.KeyID())
	return st, cache, nil
}

// store opens the image store alone (nil for the node's disk), checked
// as open's: what `lizard admin backup` asks which images it holds.
func (f *imageStoreFlags) store(ctx context.Context, getenv func(string) string, secretsKey *secrets.Key) (*imagestore.Store, error) {
	if f.URL == "" {
		return nil, nil
	}
	if secretsKey == nil {
		return nil, cli.Usagef("--image-store seals images with a key derived from the secrets key: give this node the one every node and api process has (--secrets-key-file or %s; docs/storage.md#sealing)", secrets.KeyEnv)
	}
	key, err := imagestore.NewKey(secretsKey.Derive("image store"))
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(f.URL)
	if err != nil {
		return nil, err
	}
	var b imagestore.Bucket
	switch u.Scheme {
	case "s3":
		if b, err = s3.Open(u, getenv); err != nil {
			return nil, err
		}
	default:
		b = &disk.Bucket{Root: u.Path}
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := b.Check(cctx); err != nil {
		return nil, fmt.Errorf("checking the image store: %w", err)
	}
	return imagestore.New(b, key), nil
}

// shareImages has the image store keep the files the runtime names as
// shared once per content (a --share-heap template's heap, in every image
// of every sandbox of the template: imagestore/shared.go), not in each
// image's upload.
func shareImages(images *imagestore.Store, rt sandbox.Runtime) {
	if sh, ok := rt.(imagestore.Shared); ok && images != nil {
		images.Share(sh)
	}
}
