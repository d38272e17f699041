package check

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/imagestore/disk"
)

// heapShared names an image's lizard-heap/heap shared, as the gvisor
// runtime does.
type heapShared struct{}

func (heapShared) SharedFiles(dir string) (map[string]string, error) {
	p := filepath.Join(dir, "lizard-heap", "heap")
	if _, err := os.Stat(p); err != nil {
		return nil, nil
	}
	sum, err := imagestore.HashFile(p)
	return map[string]string{"lizard-heap/heap": sum}, err
}

func (heapShared) KeptFile(string) string { return "" }

// TestSharedUnused: the image store's shared objects no image names are
// listed and --repair removes them; one an image names stays, and so does
// the image.
func TestSharedUnused(t *testing.T) {
	ctx := context.Background()
	key, err := imagestore.NewKey(bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	bucket := &disk.Bucket{Root: t.TempDir()}
	images := imagestore.New(bucket, key)
	images.Share(heapShared{})
	put := func(name, heap string) imagestore.Manifest {
		dir := filepath.Join(t.TempDir(), "img")
		if err := os.MkdirAll(filepath.Join(dir, "lizard-heap"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "lizard-heap", "heap"), []byte(heap), 0o444); err != nil {
			t.Fatal(err)
		}
		m, err := images.Put(ctx, name, dir)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	kept := put("paused/a", "the heap of a template")
	gone := put("paused/b", "the heap of an older build")
	if err := images.Delete(ctx, "paused/b"); err != nil {
		t.Fatal(err)
	}

	c := checker{Config: Config{Images: images}}
	if err := c.shared(ctx); err != nil {
		t.Fatal(err)
	}
	want := "shared/" + gone.Shared[0].SHA256
	if len(c.out) != 1 || c.out[0].Kind != SharedUnused || c.out[0].What != want {
		t.Fatalf("findings %+v; want %s alone", c.out, want)
	}
	if err := c.out[0].Repair(ctx); err != nil {
		t.Fatal(err)
	}
	keys, err := bucket.List(ctx, "shared/")
	if err != nil || len(keys) != 1 || keys[0] != "shared/"+kept.Shared[0].SHA256 {
		t.Fatalf("after the repair the store holds %v, %v; want the object paused/a names", keys, err)
	}
	if _, err := images.Get(ctx, "paused/a", filepath.Join(t.TempDir(), "got")); err != nil {
		t.Fatalf("paused/a after the repair: %v", err)
	}
}
