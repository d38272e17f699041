// Package disk is the image store backend of a directory: each object a
// file under Root. It is what the image store is on a node's own disk, and
// on a directory every node mounts (NFS), where images outlive a node.
package disk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/lizard-build/lizard/internal/imagestore"
)

// Bucket keeps objects as files under Root.
type Bucket struct {
	Root string
}

var _ imagestore.Bucket = (*Bucket)(nil)

func (b *Bucket) path(key string) string { return filepath.Join(b.Root, filepath.FromSlash(key)) }

// Put implements imagestore.Bucket: the file is written beside its place
// and renamed there, so a reader sees it whole or not at all.
func (b *Bucket) Put(ctx context.Context, key string, r io.Reader) error {
	p := b.path(key)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("storing %s: %w", key, err)
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".put-*")
	if err != nil {
		return fmt.Errorf("storing %s: %w", key, err)
	}
	_, err = io.Copy(f, ctxReader{ctx, r})
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close())
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("storing %s: %w", key, err)
	}
	return nil
}

// Get implements imagestore.Bucket.
func (b *Bucket) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	f, err := os.Open(b.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading %s: %w", key, imagestore.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", key, err)
	}
	return f, nil
}

// Delete implements imagestore.Bucket.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	if err := os.Remove(b.path(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting %s: %w", key, err)
	}
	return nil
}

// List implements imagestore.Bucket.
func (b *Bucket) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	err := filepath.WalkDir(b.Root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), ".put-") {
			return nil
		}
		rel, err := filepath.Rel(b.Root, p)
		if err != nil {
			return err
		}
		if k := filepath.ToSlash(rel); strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", prefix, err)
	}
	return keys, nil
}

// Check implements imagestore.Bucket: Root must be a writable directory.
func (b *Bucket) Check(ctx context.Context) error {
	if err := os.MkdirAll(b.Root, 0o700); err != nil {
		return fmt.Errorf("--image-store %s: %w", b.Root, err)
	}
	f, err := os.CreateTemp(b.Root, ".put-check-*")
	if err != nil {
		return fmt.Errorf("--image-store %s is not writable: %w", b.Root, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

func (b *Bucket) String() string { return "file://" + b.Root }

// ctxReader ends a copy when ctx does.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
