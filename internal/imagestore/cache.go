package imagestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lizard-build/lizard/internal/keylock"
)

// Cache keeps the images a node fetched from a Store on its disk, at most
// MaxBytes of them, dropping the least recently used first. An entry is
// one version of an image (its manifest's object), so a name written
// again is fetched again, never served stale.
type Cache struct {
	store *Store
	dir   string
	max   int64
	log   *slog.Logger
	locks keylock.Map

	mu      sync.Mutex
	entries map[string]*entry // by object key
	total   int64
}

type entry struct {
	size int64
	used time.Time
	pins int
}

// NewCache returns the cache in dir of store's images, taking in what
// dir already holds (from before a restart). max <= 0 bounds nothing.
func NewCache(store *Store, dir string, max int64, log *slog.Logger) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("making the image cache %s: %w", dir, err)
	}
	c := &Cache{store: store, dir: dir, max: max, log: log, entries: map[string]*entry{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the image cache %s: %w", dir, err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		obj, err := url.PathUnescape(e.Name())
		if err != nil || strings.Contains(e.Name(), ".part-") || !e.IsDir() {
			os.RemoveAll(p) // a download cut short by a crash
			continue
		}
		fi, _ := e.Info()
		size := DirSize(p)
		c.entries[obj] = &entry{size: size, used: fi.ModTime()}
		c.total += size
	}
	return c, nil
}

func (c *Cache) path(object string) string { return filepath.Join(c.dir, url.PathEscape(object)) }

// Get returns the directory of image name's current version, fetching it
// if the cache lacks it. The directory stays until release is called.
func (c *Cache) Get(ctx context.Context, name string) (dir string, release func(), err error) {
	m, err := c.store.Stat(ctx, name)
	if err != nil {
		return "", nil, err
	}
	unlock := c.locks.Lock(m.Object)
	defer unlock()
	dir = c.path(m.Object)
	if !c.pin(m.Object) {
		begin := time.Now()
		if _, err := c.store.Get(ctx, name, dir); err != nil {
			return "", nil, err
		}
		size := DirSize(dir)
		c.log.Info("image fetched from the image store", "image", name, "size_bytes", size, "took", time.Since(begin).Round(time.Millisecond))
		c.mu.Lock()
		c.entries[m.Object] = &entry{size: size, used: time.Now(), pins: 1}
		c.total += size
		c.mu.Unlock()
		c.evict()
	}
	var once sync.Once
	return dir, func() { once.Do(func() { c.unpin(m.Object) }) }, nil
}

// Has reports whether the cache holds image name's version m.
func (c *Cache) Has(m Manifest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries[m.Object] != nil
}

func (c *Cache) pin(object string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[object]
	if e == nil {
		return false
	}
	e.pins++
	e.used = time.Now()
	return true
}

func (c *Cache) unpin(object string) {
	c.mu.Lock()
	if e := c.entries[object]; e != nil {
		e.pins--
	}
	c.mu.Unlock()
	c.evict()
}

// evict drops the least recently used entries not in use until the cache
// holds at most max bytes.
func (c *Cache) evict() {
	if c.max <= 0 {
		return
	}
	c.mu.Lock()
	var victims []string
	if c.total > c.max {
		keys := make([]string, 0, len(c.entries))
		for k := range c.entries {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return c.entries[keys[i]].used.Before(c.entries[keys[j]].used) })
		for _, k := range keys {
			if c.total <= c.max {
				break
			}
			if e := c.entries[k]; e.pins == 0 {
				c.total -= e.size
				delete(c.entries, k)
				victims = append(victims, k)
			}
		}
	}
	c.mu.Unlock()
	for _, k := range victims {
		if err := os.RemoveAll(c.path(k)); err != nil {
			c.log.Error("removing an image from the cache", "object", k, "err", err)
		}
	}
}

// Names returns the names of the images the cache holds, the most
// recently used first, at most max of them.
func (c *Cache) Names(max int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	objs := make([]string, 0, len(c.entries))
	for k := range c.entries {
		objs = append(objs, k)
	}
	sort.Slice(objs, func(i, j int) bool { return c.entries[objs[i]].used.After(c.entries[objs[j]].used) })
	var out []string
	for _, o := range objs[:min(len(objs), max)] {
		if i := strings.LastIndex(o, "/data-"); i > 0 {
			out = append(out, o[:i])
		}
	}
	return out
}

// Size is the bytes the cache holds.
func (c *Cache) Size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// DirSize is the bytes the files under dir hold: an image's size on disk.
// A file with other links is not counted, as removing the image frees
// none of it: the template's heap a --share-heap image holds is a hard
// link of the node's kept copy (~142 MB).
func DirSize(dir string) int64 {
	var size int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
					return nil
				}
				size += fi.Size()
			}
		}
		return nil
	})
	return size
}

// IsLost reports whether err means the image cannot be had from the store
// (absent, or corrupt as stored), as opposed to the store being away.
func IsLost(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrTampered)
}
