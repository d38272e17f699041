package gvisor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/imagestore/disk"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sandbox/sandboxtest"
)

// TestHeapDir: a sandbox with a heap directory (Spec.HeapDir) sees the
// file dropped there from the host at api.HeapMount, and cannot write it
// or create files beside it, though it runs as root; the mount point is
// not left in the shared template. Its checkpoint keeps the file by
// content and the image's record names the copy, which a restore mounts
// (the template's directory gone by then) with the same bytes, which a
// pause-like checkpoint of the restored sandbox names again, which
// Named keeps from `admin check --repair`. Every image holds the heap too
// (a link of the kept copy): with the kept copy gone, as on another node,
// a restore keeps the image's and reads the same bytes; an image whose
// heap was altered is refused with ErrImage, nothing kept or mounted, and
// one without either with ErrOtherBuild.
func TestHeapDir(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	rootfs := sandboxtest.BuildRootFS(t)
	heapDir := t.TempDir()
	heap := filepath.Join(api.HeapMount, api.HeapFile)
	// Pages of data around a hole, as the kernel's dump leaves them.
	content := bytes.Repeat([]byte("heap"), 1024)
	content = append(append(content, make([]byte, 8192)...), bytes.Repeat([]byte("tail"), 1024)...)

	a := sandboxtest.Spec(rootfs)
	a.HeapDir = heapDir
	t.Cleanup(func() { r.Kill(ctx, a.ID) })
	if err := r.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := sandboxtest.WaitReady(a.Network, sandboxtest.ReadyTimeout); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(rootfs, ".lizard")); err == nil {
		t.Errorf("the heap's mount point was left in the template %s", rootfs)
	}
	// Written after the boot, as the template's kernel dumps its heap
	// once its preloads are in.
	tmp := filepath.Join(heapDir, ".heap.tmp")
	if err := os.WriteFile(tmp, content, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(heapDir, api.HeapFile)); err != nil {
		t.Fatal(err)
	}
	read := func(n sandbox.Network, who string) {
		t.Helper()
		got, err := sandboxtest.Do(n, "GET", "/file?path="+heap, nil)
		if err != nil || got != string(content) {
			t.Fatalf("%s reads %s: %d bytes, %v; want the %d bytes written", who, heap, len(got), err, len(content))
		}
	}
	read(a.Network, "the sandbox")
	for _, p := range []string{heap, filepath.Join(api.HeapMount, "new")} {
		got, err := sandboxtest.Do(a.Network, "PUT", "/file?path="+p, []byte("mine"))
		if err == nil || !strings.Contains(got, "read-only file system") {
			t.Errorf("the sandbox's root writing %s: %q, %v; want EROFS", p, got, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(heapDir, api.HeapFile)); !bytes.Equal(b, content) {
		t.Errorf("the heap file changed on the host")
	}
	if _, err := os.Lstat(filepath.Join(heapDir, "new")); err == nil {
		t.Errorf("the sandbox made a file in the heap directory")
	}

	image := filepath.Join(t.TempDir(), "template")
	if err := r.Checkpoint(ctx, a.ID, image, false); err != nil {
		t.Fatal(err)
	}
	rec, err := readRecord(filepath.Join(image, imageRecordName))
	if err != nil || rec.Heap == "" || rec.HeapDir != "" {
		t.Fatalf("the image's record = %+v, %v; want it to name a kept heap alone", rec, err)
	}
	kept := filepath.Join(r.filesDir(), rec.Heap)
	if b, err := os.ReadFile(filepath.Join(kept, api.HeapFile)); err != nil || !bytes.Equal(b, content) {
		t.Fatalf("the kept heap %s: %d bytes, %v; want the heap's", kept, len(b), err)
	}
	// The image holds it too: a link of the kept copy.
	keptFi, err := os.Stat(filepath.Join(kept, api.HeapFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(image, imageHeapName, api.HeapFile)); err != nil || !os.SameFile(fi, keptFi) {
		t.Errorf("the image's heap: %v, %v; want a hard link of the kept copy", fi, err)
	}
	// The template build's directory goes; the images have their copy.
	if err := os.RemoveAll(heapDir); err != nil {
		t.Fatal(err)
	}

	b := restoreReady(ctx, t, r, rootfs, image)
	read(b.Network, "the restored sandbox")
	if got, err := sandboxtest.Do(b.Network, "PUT", "/file?path="+heap, []byte("mine")); err == nil || !strings.Contains(got, "read-only file system") {
		t.Errorf("the restored sandbox writing %s: %q, %v; want EROFS", heap, got, err)
	}
	paused := filepath.Join(t.TempDir(), "paused")
	if err := r.Checkpoint(ctx, b.ID, paused, false); err != nil {
		t.Fatal(err)
	}
	if rec2, err := readRecord(filepath.Join(paused, imageRecordName)); err != nil || rec2.Heap != rec.Heap {
		t.Fatalf("the restored sandbox's image's record = %+v, %v; want it to name heap %s", rec2, err, rec.Heap)
	}
	if b, err := os.ReadFile(filepath.Join(paused, imageHeapName, api.HeapFile)); err != nil || !bytes.Equal(b, content) {
		t.Fatalf("the restored sandbox's image's heap: %d bytes, %v; want the heap's", len(b), err)
	}
	_, files, err := Named(r.root, []string{paused})
	if key, _, _ := strings.Cut(rec.Heap, "/"); err != nil || !files[key] {
		t.Errorf("Named = %v, %v; want it to name the kept heap %s", files, err, key)
	}

	c := restoreReady(ctx, t, r, rootfs, paused)
	read(c.Network, "the resumed sandbox")
	if err := r.Kill(ctx, c.ID); err != nil {
		t.Fatal(err)
	}

	// Moved through the image store (a durable pause) to a node that
	// never kept the heap: the image's own copy arrives, is kept and
	// mounted. The runtime names the heap shared, so the store keeps it
	// once: a second image of it uploads none of it.
	key, err := imagestore.NewKey(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	store := imagestore.New(&disk.Bucket{Root: t.TempDir()}, key)
	store.Share(r)
	m, err := store.Put(ctx, "paused/sb", paused)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Shared) != 1 || m.Shared[0].Path != imageHeapName+"/"+api.HeapFile || "heap-"+m.Shared[0].SHA256[:16] != rec.Heap || m.SharedUploaded == 0 {
		t.Fatalf("the image's manifest names %+v, %d bytes uploaded; want the heap %s, sent", m.Shared, m.SharedUploaded, rec.Heap)
	}
	if m2, err := store.Put(ctx, "paused/sb2", paused); err != nil || m2.SharedUploaded != 0 || m2.Shared[0] != m.Shared[0] {
		t.Fatalf("a second image of the heap: %+v, %v; want it named, none of it uploaded", m2, err)
	}
	if got := r.KeptFile(m.Shared[0].SHA256); got != filepath.Join(kept, api.HeapFile) {
		t.Fatalf("KeptFile = %q; want the kept copy", got)
	}
	if err := os.RemoveAll(kept); err != nil {
		t.Fatal(err)
	}
	if got := r.KeptFile(m.Shared[0].SHA256); got != "" {
		t.Fatalf("KeptFile with the copy gone = %q; want none", got)
	}
	moved := filepath.Join(t.TempDir(), "moved")
	if _, err := store.Get(ctx, "paused/sb", moved); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(moved, imageHeapName, api.HeapFile)); err != nil || !bytes.Equal(b, content) {
		t.Fatalf("the heap through the image store: %d bytes, %v; want the heap's", len(b), err)
	}
	d := sandboxtest.Spec(rootfs)
	t.Cleanup(func() { r.Kill(ctx, d.ID) })
	if err := r.Restore(ctx, d, moved); err != nil {
		t.Fatalf("restore with the kept heap gone: %v; want the image's own heap kept and mounted", err)
	}
	if err := sandboxtest.WaitReady(d.Network, sandboxtest.ReadyTimeout); err != nil {
		t.Fatal(err)
	}
	read(d.Network, "the sandbox resumed where its heap was not kept")
	if b, err := os.ReadFile(filepath.Join(kept, api.HeapFile)); err != nil || !bytes.Equal(b, content) {
		t.Fatalf("the heap kept again from the image %s: %d bytes, %v; want the heap's", kept, len(b), err)
	}
	if err := r.Kill(ctx, d.ID); err != nil {
		t.Fatal(err)
	}

	// An image whose heap is not the one its record names is refused,
	// nothing of it kept or mounted; one with no heap at all where none
	// is kept is another build's.
	tampered := filepath.Join(t.TempDir(), "tampered")
	if err := os.CopyFS(tampered, os.DirFS(moved)); err != nil {
		t.Fatal(err)
	}
	altered := bytes.Clone(content)
	altered[100] ^= 1
	own := filepath.Join(tampered, imageHeapName, api.HeapFile)
	if err := os.Remove(own); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(own, altered, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(kept); err != nil {
		t.Fatal(err)
	}
	e := sandboxtest.Spec(rootfs)
	t.Cleanup(func() { r.Kill(ctx, e.ID) })
	err = r.Restore(ctx, e, tampered)
	if !errors.Is(err, sandbox.ErrImage) || !strings.Contains(err.Error(), rec.Heap) {
		t.Errorf("restore of an image with a heap altered = %v; want ErrImage naming %s", err, rec.Heap)
	}
	if heaps, _ := filepath.Glob(filepath.Join(r.filesDir(), "heap-*")); len(heaps) > 0 || r.owns(e.ID) {
		t.Errorf("after the refused restore: kept heaps %v, sandbox made %v; want none", heaps, r.owns(e.ID))
	}
	if err := os.RemoveAll(filepath.Join(tampered, imageHeapName)); err != nil {
		t.Fatal(err)
	}
	err = r.Restore(ctx, e, tampered)
	if !errors.Is(err, sandbox.ErrOtherBuild) || !strings.Contains(err.Error(), rec.Heap) {
		t.Errorf("restore of an image without its heap, none kept = %v; want ErrOtherBuild naming %s", err, rec.Heap)
	}
}

// TestCopySparse: the heap kept on another filesystem than its template's
// is a copy with the same bytes and its zero pages left holes.
func TestCopySparse(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	data := append(append(bytes.Repeat([]byte{1}, 5000), make([]byte, 1<<22)...), 7)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := copySparse(src, dst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("copy: %d bytes, %v; want the %d written", len(got), err, len(data))
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dst, &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 >= 1<<22 {
		t.Errorf("the copy takes %d bytes on disk of %d: its zero pages were written", st.Blocks*512, len(data))
	}
}

// TestHeapMount: the heap directory is a read-only bind (which --overlay2
// leaves bare) at api.HeapMount in every layout, after Lizard's own files;
// none without a heap directory.
func TestHeapMount(t *testing.T) {
	spec := sandbox.Spec{ID: "h", Template: sandbox.Artifact{RootFS: "/r"}, Args: []string{"/a"},
		Files: []sandbox.File{{Source: "/bin/lizard-agent", Target: "/opt/lizard/bin/lizard-agent"}}}
	for _, lay := range []layout{layoutTmpfs, layoutBounded, layoutVolumes, layoutVolumesFirst} {
		for _, m := range ociSpec(spec, "/run/netns/x", "/tmp/x", lay).Mounts {
			if m.Destination == api.HeapMount {
				t.Errorf("layout %d without a heap directory mounts %+v", lay, m)
			}
		}
		spec.HeapDir = "/cache/heap"
		mounts := ociSpec(spec, "/run/netns/x", "/tmp/x", lay).Mounts
		spec.HeapDir = ""
		last := mounts[len(mounts)-1]
		if last.Destination != api.HeapMount || last.Type != "bind" || last.Source != "/cache/heap" || !slices.Equal(last.Options, []string{"rbind", "ro"}) {
			t.Errorf("layout %d's last mount = %+v; want a read-only bind of the heap directory at %s", lay, last, api.HeapMount)
		}
	}
}

// TestCopyOnWritePage: in a sandbox with a heap directory, a write to a
// private mapping of a file (the shared heap's) copies the page written
// alone into the sandbox's memory, as Linux does (runsc
// --lizard-copy-written-pages, build/runsc/cow-4k.patch); runsc copied the
// 2 MiB-aligned range around it, and a heap written all over by reference
// counts came back as private copies within a few calls. Other sandboxes
// keep runsc's 2 MiB copies, which fault less.
func TestCopyOnWritePage(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	rootfs := sandboxtest.BuildRootFS(t)
	heapDir := t.TempDir()
	data := bytes.Repeat([]byte{1}, 8<<20)
	for _, p := range []string{filepath.Join(heapDir, api.HeapFile), filepath.Join(rootfs, "data", "big")} {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name, heapDir, path, want string
	}{
		{"the shared heap", heapDir, filepath.Join(api.HeapMount, api.HeapFile), "4"},
		{"a sandbox without one", "", "/data/big", "2048"},
	} {
		spec := sandboxtest.Spec(rootfs)
		spec.HeapDir = tt.heapDir
		t.Cleanup(func() { r.Kill(ctx, spec.ID) })
		if err := r.Create(ctx, spec); err != nil {
			t.Fatal(err)
		}
		if err := sandboxtest.WaitReady(spec.Network, sandboxtest.ReadyTimeout); err != nil {
			t.Fatal(err)
		}
		got, err := sandboxtest.Do(spec.Network, "POST", "/cow?path="+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("%s: one byte written in a private mapping of an 8 MiB file made %s kB of it private copies; want %s", tt.name, got, tt.want)
		}
	}
}

// TestCanShareHeap: `make runsc`'s build can run a sandbox sharing a heap;
// a runsc without --lizard-copy-written-pages is refused, saying how to
// build one.
func TestCanShareHeap(t *testing.T) {
	r := newTestRuntime(t)
	if err := r.CanShareHeap(context.Background()); err != nil {
		t.Errorf("CanShareHeap with %s: %v", r.runsc, err)
	}
	old := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(old, []byte("#!/bin/sh\necho '  -platform string'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r2 := &Runtime{runsc: old}
	if err := r2.CanShareHeap(context.Background()); err == nil || !strings.Contains(err.Error(), "make runsc") {
		t.Errorf("CanShareHeap with a runsc without the flag: %v; want an error saying to build it with make runsc", err)
	}
}
