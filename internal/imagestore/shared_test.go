package imagestore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/lizard-build/lizard/internal/imagestore"
)

// fakeShared names every image's lizard-heap/heap shared, as the gvisor
// runtime does a --share-heap image's; kept is the node's own copy.
type fakeShared struct{ kept string }

func (f fakeShared) SharedFiles(dir string) (map[string]string, error) {
	p := filepath.Join(dir, "lizard-heap", "heap")
	if _, err := os.Stat(p); err != nil {
		return nil, nil
	}
	sum, err := imagestore.HashFile(p)
	if err != nil {
		return nil, err
	}
	return map[string]string{"lizard-heap/heap": sum}, nil
}

func (f fakeShared) KeptFile(sum string) string {
	if f.kept == "" {
		return ""
	}
	if got, _ := imagestore.HashFile(f.kept); got != sum {
		return ""
	}
	return f.kept
}

// countingBucket counts the bytes put and got under each key's prefix.
type countingBucket struct {
	imagestore.Bucket
	mu       sync.Mutex
	put, got map[string]int64
}

func counting(b imagestore.Bucket) *countingBucket {
	return &countingBucket{Bucket: b, put: map[string]int64{}, got: map[string]int64{}}
}

func top(key string) string { return strings.SplitN(key, "/", 2)[0] }

func (c *countingBucket) Put(ctx context.Context, key string, r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.put[top(key)] += int64(len(data))
	c.mu.Unlock()
	return c.Bucket.Put(ctx, key, bytes.NewReader(data))
}

func (c *countingBucket) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := c.Bucket.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	c.mu.Lock()
	c.got[top(key)] += int64(len(data))
	c.mu.Unlock()
	return io.NopCloser(bytes.NewReader(data)), err
}

func (c *countingBucket) take() (put, got map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	put, got = c.put, c.got
	c.put, c.got = map[string]int64{}, map[string]int64{}
	return put, got
}

// sharedImage makes an image directory holding heap (the same file in
// every image of a template) and pages of its own.
func sharedImage(t *testing.T, heap string, pages string) string {
	dir := filepath.Join(t.TempDir(), "img")
	must(t, os.MkdirAll(filepath.Join(dir, "lizard-heap"), 0o755))
	must(t, os.Link(heap, filepath.Join(dir, "lizard-heap", "heap")))
	must(t, os.WriteFile(filepath.Join(dir, "pages.img"), []byte(pages), 0o600))
	return dir
}

// heapFile makes a template's heap: 16 MiB of address space, 6 MiB of
// data, the rest holes.
func heapFile(t *testing.T) (string, []byte) {
	p := filepath.Join(t.TempDir(), "heap")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o444)
	must(t, err)
	want := make([]byte, 16<<20)
	for _, at := range []int64{0, 8 << 20, 13 << 20} {
		chunk := randBytes(2 << 20)
		_, err := f.WriteAt(chunk, at)
		must(t, err)
		copy(want[at:], chunk)
	}
	must(t, f.Truncate(16<<20))
	must(t, f.Close())
	return p, want
}

// sameImage fails unless dir holds pages and the heap want.
func sameImage(t *testing.T, dir, pages string, want []byte) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(dir, "pages.img")); err != nil || string(b) != pages {
		t.Fatalf("pages.img = %q, %v; want %q", b, err, pages)
	}
	got, err := os.ReadFile(filepath.Join(dir, "lizard-heap", "heap"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the heap arrived with %d bytes (%v); want the %d put, the same", len(got), err, len(want))
	}
	if fi, err := os.Stat(filepath.Join(dir, "lizard-heap", "heap")); err != nil || fi.Mode().Perm() != 0o444 {
		t.Fatalf("the heap arrived %v, %v; want mode 0444", fi, err)
	}
}

// TestSharedOnce: two images holding one heap upload it once — the
// second's upload is its own bytes alone — and each reads back whole:
// from the store on a node without the heap, linked from the node's own
// copy (nothing downloaded) where it has one. Deleting one image leaves
// the object the other names; UnusedShared lists it once none does.
func TestSharedOnce(t *testing.T) {
	forEach(t, func(t *testing.T, b imagestore.Bucket) {
		ctx := context.Background()
		cb := counting(b)
		heap, want := heapFile(t)
		s := imagestore.New(cb, testKey)
		s.Share(fakeShared{kept: heap})

		a, err := s.Put(ctx, "paused/sb-a", sharedImage(t, heap, "pages of a"))
		must(t, err)
		first, _ := cb.take()
		m, err := s.Put(ctx, "paused/sb-b", sharedImage(t, heap, "pages of b"))
		must(t, err)
		second, _ := cb.take()
		t.Logf("first image: %d bytes uploaded (%d shared), second: %d bytes", first["paused"]+first["shared"], first["shared"], second["paused"]+second["shared"])
		if first["shared"] < 6<<20 || second["shared"] != 0 || second["paused"] > 64<<10 {
			t.Fatalf("uploads: first %v, second %v; want the heap's 6 MiB of data once, the second image its own bytes alone", first, second)
		}
		if a.SharedUploaded != first["shared"] || m.SharedUploaded != 0 {
			t.Fatalf("SharedUploaded = %d, %d; want %d, 0", a.SharedUploaded, m.SharedUploaded, first["shared"])
		}
		if len(m.Shared) != 1 || m.Shared[0].Path != "lizard-heap/heap" || a.Shared[0] != m.Shared[0] {
			t.Fatalf("manifests name %+v and %+v; want both the one heap", a.Shared, m.Shared)
		}

		// Another node, without the heap: downloaded once per image.
		other := imagestore.New(cb, testKey)
		other.Share(fakeShared{})
		for name, pages := range map[string]string{"paused/sb-a": "pages of a", "paused/sb-b": "pages of b"} {
			dst := filepath.Join(t.TempDir(), "got")
			_, err := other.Get(ctx, name, dst)
			must(t, err)
			sameImage(t, dst, pages, want)
		}
		if _, got := cb.take(); got["shared"] < 2*6<<20 {
			t.Fatalf("downloaded %v; want the heap from the store for each image", got)
		}

		// This node: its own copy linked, nothing of the heap downloaded.
		dst := filepath.Join(t.TempDir(), "got")
		_, err = s.Get(ctx, "paused/sb-b", dst)
		must(t, err)
		sameImage(t, dst, "pages of b", want)
		if _, got := cb.take(); got["shared"] != 0 {
			t.Fatalf("downloaded %v; want none of the heap this node keeps", got)
		}
		fi1, _ := os.Stat(heap)
		fi2, _ := os.Stat(filepath.Join(dst, "lizard-heap", "heap"))
		if fi1.Sys().(*syscall.Stat_t).Ino != fi2.Sys().(*syscall.Stat_t).Ino {
			t.Fatal("the heap is not a link of the node's own copy")
		}

		// A store that shares nothing (a backup's, a recipe's) reads the
		// same images.
		dst = filepath.Join(t.TempDir(), "got")
		_, err = imagestore.New(b, testKey).Get(ctx, "paused/sb-a", dst)
		must(t, err)
		sameImage(t, dst, "pages of a", want)

		must(t, s.Delete(ctx, "paused/sb-a"))
		if unused, err := s.UnusedShared(ctx); err != nil || len(unused) != 0 {
			t.Fatalf("UnusedShared with sb-b naming the heap = %v, %v; want none", unused, err)
		}
		dst = filepath.Join(t.TempDir(), "got")
		_, err = other.Get(ctx, "paused/sb-b", dst)
		must(t, err)
		sameImage(t, dst, "pages of b", want)
		must(t, s.Delete(ctx, "paused/sb-b"))
		unused, err := s.UnusedShared(ctx)
		if err != nil || len(unused) != 1 || unused[0] != "shared/"+m.Shared[0].SHA256 {
			t.Fatalf("UnusedShared with no image left = %v, %v; want the heap's object", unused, err)
		}
		must(t, s.RemoveShared(ctx, unused[0]))
		if s.RemoveShared(ctx, "paused/x/manifest.json") == nil {
			t.Fatal("RemoveShared removed what is not a shared object")
		}
		if keys, _ := b.List(ctx, ""); len(keys) != 0 {
			t.Fatalf("the bucket holds %v; want nothing", keys)
		}
	})
}

// collectingBucket runs a removal of unused shared objects (UnusedShared,
// then RemoveShared of each, as `lizard admin check --repair` does) the
// moment an image's data starts to upload: after the upload found its
// shared object in the bucket, before its manifest names it.
type collectingBucket struct {
	imagestore.Bucket
	s       *imagestore.Store
	removed []string
}

func (c *collectingBucket) Put(ctx context.Context, key string, r io.Reader) error {
	if strings.Contains(key, "/data-") {
		unused, err := c.s.UnusedShared(ctx)
		if err != nil {
			return err
		}
		for _, k := range unused {
			if err := c.s.RemoveShared(ctx, k); err != nil {
				return err
			}
			c.removed = append(c.removed, k)
		}
	}
	return c.Bucket.Put(ctx, key, r)
}

// TestSharedRemovedMidUpload: a removal of unused shared objects that
// runs while an image of that heap uploads (the only image naming it
// deleted just before) takes the object the upload found; the upload,
// once its manifest is published, finds it gone and uploads it again,
// and the image reads back whole on a node without the heap.
func TestSharedRemovedMidUpload(t *testing.T) {
	forEach(t, func(t *testing.T, b imagestore.Bucket) {
		ctx := context.Background()
		heap, want := heapFile(t)
		cb := &collectingBucket{Bucket: b}
		s := imagestore.New(cb, testKey)
		cb.s = s
		s.Share(fakeShared{kept: heap})
		_, err := s.Put(ctx, "paused/sb-a", sharedImage(t, heap, "pages of a"))
		must(t, err)
		must(t, s.Delete(ctx, "paused/sb-a"))
		cb.removed = nil

		m, err := s.Put(ctx, "paused/sb-b", sharedImage(t, heap, "pages of b"))
		must(t, err)
		if len(cb.removed) != 1 || cb.removed[0] != "shared/"+m.Shared[0].SHA256 {
			t.Fatalf("the removal took %v; want the heap's object, which no manifest named then", cb.removed)
		}
		if m.SharedUploaded < 6<<20 {
			t.Fatalf("SharedUploaded = %d; want the heap's 6 MiB uploaded again", m.SharedUploaded)
		}
		other := imagestore.New(b, testKey)
		other.Share(fakeShared{})
		dst := filepath.Join(t.TempDir(), "got")
		_, err = other.Get(ctx, "paused/sb-b", dst)
		must(t, err)
		sameImage(t, dst, "pages of b", want)
	})
}

// TestSharedOld: images without shared files read as before — one made
// by a store that shares nothing (a Lizard before, the heap in its tar)
// read by one that shares, and one whose heap the runtime does not name.
func TestSharedOld(t *testing.T) {
	forEach(t, func(t *testing.T, b imagestore.Bucket) {
		ctx := context.Background()
		heap, want := heapFile(t)
		old := imagestore.New(b, testKey)
		m, err := old.Put(ctx, "paused/old", sharedImage(t, heap, "old pages"))
		must(t, err)
		if len(m.Shared) != 0 || m.Size < 6<<20 {
			t.Fatalf("a store sharing nothing: manifest %+v; want the heap in the image", m)
		}
		s := imagestore.New(b, testKey)
		s.Share(fakeShared{kept: heap})
		dst := filepath.Join(t.TempDir(), "got")
		_, err = s.Get(ctx, "paused/old", dst)
		must(t, err)
		sameImage(t, dst, "old pages", want)

		src := image(t, 1000) // no heap
		m, err = s.Put(ctx, "paused/plain", src)
		must(t, err)
		if len(m.Shared) != 0 {
			t.Fatalf("an image without a heap names %+v", m.Shared)
		}
		dst = filepath.Join(t.TempDir(), "got")
		_, err = s.Get(ctx, "paused/plain", dst)
		must(t, err)
		same(t, src, dst)
	})
}

// TestSharedTampered: a shared object the key did not seal as that
// content (a byte altered, another content's object copied over it, cut
// short) is ErrTampered; one a holder of the key sealed with other bytes
// than its name's, or gone, is ErrCorrupt; a manifest naming a shared
// file outside the image, or a tar holding the file too, is ErrCorrupt.
// Every one is lost, and nothing is left where the image was to go.
func TestSharedTampered(t *testing.T) {
	forEach(t, func(t *testing.T, b imagestore.Bucket) {
		ctx := context.Background()
		heap, _ := heapFile(t)
		s := imagestore.New(b, testKey)
		s.Share(fakeShared{})
		m, err := s.Put(ctx, "paused/sb", sharedImage(t, heap, "pages"))
		must(t, err)
		key := "shared/" + m.Shared[0].SHA256
		good := object(t, b, key)
		otherHeap, _ := heapFile(t)
		otherSum, err := imagestore.HashFile(otherHeap)
		must(t, err)
		must(t, s.PutSharedFile(ctx, otherSum, otherHeap))
		otherObj := object(t, b, "shared/"+otherSum)

		get := func(t *testing.T, want error) {
			t.Helper()
			dst := filepath.Join(t.TempDir(), "got")
			_, err := s.Get(ctx, "paused/sb", dst)
			if !errors.Is(err, want) || !imagestore.IsLost(err) {
				t.Fatalf("Get: %v; want %v", err, want)
			}
			if ents, _ := os.ReadDir(filepath.Dir(dst)); len(ents) != 0 {
				t.Fatalf("a failed Get left %v", ents)
			}
		}
		for _, tc := range []struct {
			name  string
			alter func(t *testing.T)
			want  error
		}{
			{"flipped byte", func(t *testing.T) {
				bad := bytes.Clone(good)
				bad[len(bad)/2] ^= 1
				must(t, b.Put(ctx, key, bytes.NewReader(bad)))
			}, imagestore.ErrTampered},
			{"flipped ID", func(t *testing.T) {
				bad := bytes.Clone(good)
				bad[0] ^= 1
				must(t, b.Put(ctx, key, bytes.NewReader(bad)))
			}, imagestore.ErrTampered},
			{"cut short", func(t *testing.T) { must(t, b.Put(ctx, key, bytes.NewReader(good[:len(good)/2]))) }, imagestore.ErrTampered},
			{"another content's object", func(t *testing.T) { must(t, b.Put(ctx, key, bytes.NewReader(otherObj))) }, imagestore.ErrTampered},
			{"other bytes sealed under the name", func(t *testing.T) { must(t, s.PutSharedFile(ctx, m.Shared[0].SHA256, otherHeap)) }, imagestore.ErrCorrupt},
			{"gone", func(t *testing.T) { must(t, b.Delete(ctx, key)) }, imagestore.ErrCorrupt},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.alter(t)
				get(t, tc.want)
				must(t, b.Put(ctx, key, bytes.NewReader(good)))
			})
		}

		// Manifests a holder of the key could write.
		for _, tc := range []struct {
			name   string
			shared imagestore.SharedFile
		}{
			{"outside the image", imagestore.SharedFile{Path: "../heap", SHA256: m.Shared[0].SHA256}},
			{"absolute", imagestore.SharedFile{Path: "/etc/heap", SHA256: m.Shared[0].SHA256}},
			{"no sum", imagestore.SharedFile{Path: "lizard-heap/heap", SHA256: "../../x"}},
			{"held by the tar too", imagestore.SharedFile{Path: "pages.img", SHA256: m.Shared[0].SHA256}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				bad := m
				bad.Shared = []imagestore.SharedFile{tc.shared}
				must(t, s.PutManifest(ctx, "paused/sb", bad))
				get(t, imagestore.ErrCorrupt)
			})
		}
	})
}
