package imagestore_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/imagestore/disk"
	"github.com/lizard-build/lizard/internal/imagestore/s3"
	"github.com/lizard-build/lizard/internal/testenv"
)

// backends is the conformance table: every test runs against each.
var backends = []struct {
	name string
	open func(t *testing.T) imagestore.Bucket
}{
	{"disk", func(t *testing.T) imagestore.Bucket { return &disk.Bucket{Root: t.TempDir()} }},
	{"s3", func(t *testing.T) imagestore.Bucket {
		srv := testenv.S3Server(t)
		u, _ := url.Parse("s3://" + srv.Bucket + "/some/prefix")
		b, err := s3.Open(u, srv.Getenv)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
}

func forEach(t *testing.T, fn func(t *testing.T, b imagestore.Bucket)) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			b := be.open(t)
			if err := b.Check(context.Background()); err != nil {
				t.Fatalf("Check: %v", err)
			}
			fn(t, b)
		})
	}
}

// image makes an image directory: a big file (three multipart parts on
// S3), a small one, a subdirectory and a symlink.
func image(t *testing.T, big int) string {
	dir := filepath.Join(t.TempDir(), "img")
	must(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o700))
	data := make([]byte, big)
	rand.Read(data)
	must(t, os.WriteFile(filepath.Join(dir, "pages.img"), data, 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "sub", "meta"), []byte("meta"), 0o644))
	must(t, os.Symlink("sub/meta", filepath.Join(dir, "link")))
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// same fails unless directories a and b hold the same files.
func same(t *testing.T, a, b string) {
	t.Helper()
	for _, rel := range []string{"pages.img", "sub/meta"} {
		x, err1 := os.ReadFile(filepath.Join(a, rel))
		y, err2 := os.ReadFile(filepath.Join(b, rel))
		if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
			t.Fatalf("%s differs between %s and %s (%v, %v)", rel, a, b, err1, err2)
		}
	}
	if l, err := os.Readlink(filepath.Join(b, "link")); err != nil || l != "sub/meta" {
		t.Fatalf("link = %q, %v; want sub/meta", l, err)
	}
}

func TestRoundTrip(t *testing.T) {
	forEach(t, func(t *testing.T, b imagestore.Bucket) {
		ctx := context.Background()
		s := imagestore.New(b)
		src := image(t, 3*s3.PartSize+123)
		m, err := s.Put(ctx, "snapshots/snap-1", src)
		must(t, err)
		if m.Size < 3*s3.PartSize || len(m.SHA256) != 64 {
			t.Fatalf("manifest %+v: want the tar's size and checksum", m)
		}
		dst := filepath.Join(t.TempDir(), "got")
		if _, err := s.Get(ctx, "snapshots/snap-1", dst); err != nil {
			t.Fatal(err)
		}
		same(t, src, dst)
		if _, err := s.Get(ctx, "snapshots/snap-1", dst); err == nil {
			t.Fatal("Get into an existing directory worked; want an error")
		}
		if _, err := s.Get(ctx, "snapshots/nope", filepath.Join(t.TempDir(), "x")); !errors.Is(err, imagestore.ErrNotFound) {
			t.Fatalf("Get of a missing image: %v, want ErrNotFound", err)
		}
	})
}

func TestReplaceKeepsOneVersion(t *testing.T) {
	forEach(t, func(t *testing.T, b imagestore.Bucket) {
		ctx := context.Background()
		s := imagestore.New(b)
		_, err := s.Put(ctx, "paused/sb", image(t, 1000))
		must(t, err)
		src := image(t, 2000)
		m, err := s.Put(ctx, "paused/sb", src)
		must(t, err)
		dst := filepath.Join(t.TempDir(), "got")
		_, err = s.Get(ctx, "paused/sb", dst)
		must(t, err)
		same(t, src, dst)
		keys, err := b.List(ctx, "paused/sb/")
		must(t, err)
		if len(keys) != 2 || !contains(keys, m.Object) {
			t.Fatalf("keys after a replace = %v, want the manifest and %s only", keys, m.Object)
		}
	})
}

// A half-written upload (a crash, a cancelled call) is never read: the
// manifest still names the last whole one.
func TestHalfWrittenUploadUnused(t *testing.T) {
	forEach(t, func(t *testing.T, b imagestore.Bucket) {
		ctx := context.Background()
		s := imagestore.New(b)
		src := image(t, 5000)
		_, err := s.Put(ctx, "paused/sb", src)
		must(t, err)
		// What a crash in the middle of the next upload leaves.
		must(t, b.Put(ctx, "paused/sb/data-crashed.tar", strings.NewReader("half a tar")))
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.Put(cancelled, "paused/sb", image(t, 6000)); err == nil {
			t.Fatal("Put with a cancelled context worked")
		}
		dst := filepath.Join(t.TempDir(), "got")
		_, err = s.Get(ctx, "paused/sb", dst)
		must(t, err)
		same(t, src, dst)
	})
}

// A corrupted or truncated object is ErrCorrupt, and nothing is left
// where the image was to go.
func TestCorruptObject(t *testing.T) {
	for _, tc := range []struct {
		name  string
		alter func([]byte) []byte
	}{
		{"flipped byte", func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b }},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }},
		{"emptied", func([]byte) []byte { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEach(t, func(t *testing.T, b imagestore.Bucket) {
				ctx := context.Background()
				s := imagestore.New(b)
				m, err := s.Put(ctx, "snapshots/s", image(t, 100000))
				must(t, err)
				rc, err := b.Get(ctx, m.Object)
				must(t, err)
				data, err := io.ReadAll(rc)
				rc.Close()
				must(t, err)
				must(t, b.Put(ctx, m.Object, bytes.NewReader(tc.alter(data))))
				dst := filepath.Join(t.TempDir(), "got")
				if _, err := s.Get(ctx, "snapshots/s", dst); !errors.Is(err, imagestore.ErrCorrupt) || !imagestore.IsLost(err) {
					t.Fatalf("Get of a %s object: %v, want ErrCorrupt", tc.name, err)
				}
				if ents, _ := os.ReadDir(filepath.Dir(dst)); len(ents) != 0 {
					t.Fatalf("a failed Get left %v", ents)
				}
			})
		})
	}
}

func TestDelete(t *testing.T) {
	forEach(t, func(t *testing.T, b imagestore.Bucket) {
		ctx := context.Background()
		s := imagestore.New(b)
		_, err := s.Put(ctx, "snapshots/a", image(t, 100))
		must(t, err)
		_, err = s.Put(ctx, "snapshots/ab", image(t, 100))
		must(t, err)
		must(t, s.Delete(ctx, "snapshots/a"))
		if _, err := s.Stat(ctx, "snapshots/a"); !errors.Is(err, imagestore.ErrNotFound) {
			t.Fatalf("Stat after Delete: %v, want ErrNotFound", err)
		}
		if _, err := s.Stat(ctx, "snapshots/ab"); err != nil {
			t.Fatalf("deleting snapshots/a touched snapshots/ab: %v", err)
		}
		must(t, s.Delete(ctx, "snapshots/a")) // absent: not an error
	})
}

func TestBadNames(t *testing.T) {
	s := imagestore.New(&disk.Bucket{Root: t.TempDir()})
	for _, name := range []string{"", "/abs", "../up", "a/../../b", "a//b", "a/"} {
		if _, err := s.Put(context.Background(), name, t.TempDir()); err == nil {
			t.Errorf("Put(%q) worked; want an error", name)
		}
	}
}

func TestCacheBoundedLRU(t *testing.T) {
	forEach(t, func(t *testing.T, b imagestore.Bucket) {
		ctx := context.Background()
		s := imagestore.New(b)
		for _, n := range []string{"a", "b", "c"} {
			_, err := s.Put(ctx, "snapshots/"+n, image(t, 1000))
			must(t, err)
		}
		dir := t.TempDir()
		c, err := imagestore.NewCache(s, dir, 2500, slog.Default())
		must(t, err)
		get := func(name string) (string, func()) {
			p, release, err := c.Get(ctx, "snapshots/"+name)
			must(t, err)
			return p, release
		}
		pa, ra := get("a")
		_, rb := get("b")
		rb()
		_, rc := get("c") // over the bound: b goes (a is in use)
		rc()
		if _, err := os.Stat(pa); err != nil {
			t.Fatalf("an image in use was evicted: %v", err)
		}
		ra()
		if ents, _ := os.ReadDir(dir); len(ents) != 2 || c.Size() > 2500 {
			t.Fatalf("cache holds %d images, %d bytes; want 2 within 2500", len(ents), c.Size())
		}
		// A new version of a name is fetched, not served from the cache.
		src := image(t, 1200)
		_, err = s.Put(ctx, "snapshots/a", src)
		must(t, err)
		p, release, err := c.Get(ctx, "snapshots/a")
		must(t, err)
		defer release()
		same(t, src, p)
		// A restart takes in what the cache holds.
		c2, err := imagestore.NewCache(s, dir, 2500, slog.Default())
		must(t, err)
		if c2.Size() != c.Size() {
			t.Fatalf("reopened cache holds %d bytes, want %d", c2.Size(), c.Size())
		}
	})
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestHostileImage: an image's tar comes from whoever can write the
// bucket, with a manifest that matches it. Unpacking it as root must
// never write, chmod or link anything outside the target, nor make a
// set-ID file, a device or terabytes from a sparse header.
func TestHostileImage(t *testing.T) {
	type entry struct {
		hdr  tar.Header
		body string
	}
	reg := func(name, body string) entry {
		return entry{tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))}, body}
	}
	outside := t.TempDir()
	must(t, os.Chmod(outside, 0o700))
	victim := filepath.Join(outside, "victim")
	must(t, os.WriteFile(victim, []byte("host"), 0o600))
	for _, tc := range []struct {
		name    string
		entries []entry
	}{
		{"dot-dot", []entry{reg("../escaped", "x")}},
		{"absolute", []entry{reg(outside+"/escaped", "x")}},
		{"write through an absolute link", []entry{
			{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "a", Linkname: outside}}, reg("a/escaped", "x")}},
		{"write through a relative link", []entry{
			{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "d", Mode: 0o755}},
			{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "d/l", Linkname: "../../../../../../../../../../" + outside}},
			reg("d/l/escaped", "x")}},
		{"chmod through a link", []entry{
			{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "a", Linkname: outside}},
			{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "a", Mode: 0o777}}}},
		{"mkdir through a link", []entry{
			{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "a", Linkname: outside}},
			{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "a/escaped", Mode: 0o777}}}},
		{"file over a link", []entry{
			{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "a", Linkname: victim}}, reg("a", "x")}},
		{"hard link to a host file", []entry{
			{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "a", Linkname: victim}}}},
		{"device", []entry{
			{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "mem", Mode: 0o666, Devmajor: 1, Devminor: 1}}}},
		{"fifo", []entry{{hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "f", Mode: 0o666}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, e := range tc.entries {
				e.hdr.Format = tar.FormatPAX
				must(t, tw.WriteHeader(&e.hdr))
				_, err := tw.Write([]byte(e.body))
				must(t, err)
			}
			must(t, tw.Close())
			dst := filepath.Join(t.TempDir(), "got")
			_, err := putRaw(t, buf.Bytes()).Get(context.Background(), "snapshots/evil", dst)
			if !errors.Is(err, imagestore.ErrCorrupt) {
				t.Fatalf("Get of a hostile image: %v, want ErrCorrupt", err)
			}
			ents, _ := os.ReadDir(outside)
			fi, _ := os.Stat(outside)
			if b, _ := os.ReadFile(victim); len(ents) != 1 || string(b) != "host" || fi.Mode().Perm() != 0o700 {
				t.Fatalf("Get (%v) touched %s: %v, victim %q, mode %v", err, outside, ents, b, fi.Mode())
			}
			if ents, _ := os.ReadDir(filepath.Dir(dst)); len(ents) != 0 {
				t.Fatalf("a failed Get left %v", ents)
			}
		})
	}
	t.Run("sparse", func(t *testing.T) {
		// A GNU 0.1 sparse file standing for a terabyte of zeros and
		// one byte: a PAX header ('x') Go's writer will not make, so
		// written as a file and retyped.
		recs := ""
		for _, kv := range [][2]string{{"GNU.sparse.numblocks", "1"}, {"GNU.sparse.map", "1099511627775,1"}, {"GNU.sparse.size", "1099511627776"}} {
			r := " " + kv[0] + "=" + kv[1] + "\n"
			n := len(r) + 2
			for len(fmt.Sprint(n))+len(r) != n {
				n++
			}
			recs += fmt.Sprint(n) + r
		}
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "PaxHeaders/big", Mode: 0o644, Size: int64(len(recs)), Format: tar.FormatUSTAR}))
		tw.Write([]byte(recs))
		must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "big", Mode: 0o644, Size: 1, Format: tar.FormatUSTAR}))
		tw.Write([]byte("x"))
		must(t, tw.Close())
		data := buf.Bytes()
		data[156] = tar.TypeXHeader
		copy(data[148:156], "        ")
		sum := 0
		for _, c := range data[:512] {
			sum += int(c)
		}
		copy(data[148:156], fmt.Sprintf("%06o\x00 ", sum))
		dst := filepath.Join(t.TempDir(), "got")
		if _, err := putRaw(t, data).Get(context.Background(), "snapshots/evil", dst); !errors.Is(err, imagestore.ErrCorrupt) {
			t.Fatalf("Get of a sparse file: %v, want ErrCorrupt", err)
		}
	})
	t.Run("set-ID bits dropped", func(t *testing.T) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "su", Mode: 0o6755 | 0o1000, Size: 1, Format: tar.FormatPAX}))
		tw.Write([]byte("x"))
		must(t, tw.Close())
		dst := filepath.Join(t.TempDir(), "got")
		_, err := putRaw(t, buf.Bytes()).Get(context.Background(), "snapshots/evil", dst)
		must(t, err)
		fi, err := os.Stat(filepath.Join(dst, "su"))
		must(t, err)
		if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			t.Fatalf("mode %v keeps a set-ID bit", fi.Mode())
		}
	})
}

// putRaw stores tar stream data as image snapshots/evil with a manifest
// that matches it, as a party writing the bucket could.
func putRaw(t *testing.T, data []byte) *imagestore.Store {
	t.Helper()
	b := &disk.Bucket{Root: t.TempDir()}
	ctx := context.Background()
	sum := sha256.Sum256(data)
	must(t, b.Put(ctx, "snapshots/evil/data-1.tar", bytes.NewReader(data)))
	m, _ := json.Marshal(imagestore.Manifest{Object: "snapshots/evil/data-1.tar", SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))})
	must(t, b.Put(ctx, "snapshots/evil/manifest.json", bytes.NewReader(m)))
	return imagestore.New(b)
}

// TestManifestNamesOtherObject: a manifest naming an object that is not
// its image's own (another image's, or a path out of a disk bucket) is
// corrupt, and nothing is read from it.
func TestManifestNamesOtherObject(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	b := &disk.Bucket{Root: filepath.Join(root, "bucket")}
	s := imagestore.New(b)
	m, err := s.Put(ctx, "snapshots/other", image(t, 100))
	must(t, err)
	for _, obj := range []string{m.Object, "../outside.tar", "snapshots/evil/data-1/../../other/" + path.Base(m.Object), "snapshots/evil/data-x/y.tar"} {
		body, _ := json.Marshal(imagestore.Manifest{Object: obj, SHA256: m.SHA256, Size: m.Size})
		must(t, b.Put(ctx, "snapshots/evil/manifest.json", bytes.NewReader(body)))
		dst := filepath.Join(t.TempDir(), "got")
		if _, err := s.Get(ctx, "snapshots/evil", dst); !errors.Is(err, imagestore.ErrCorrupt) {
			t.Errorf("Get through a manifest naming %q: %v; want ErrCorrupt", obj, err)
		}
	}
}

// endless is a bucket whose objects never end (zeros: the tar's end,
// then padding forever), as a broken or hostile server could serve.
type endless struct {
	imagestore.Bucket
	served atomic.Int64
}

func (e *endless) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if strings.HasSuffix(key, "manifest.json") {
		return e.Bucket.Get(ctx, key)
	}
	return io.NopCloser(&zeros{n: &e.served}), nil
}

type zeros struct{ n *atomic.Int64 }

func (z *zeros) Read(p []byte) (int, error) {
	clear(p)
	z.n.Add(int64(len(p)))
	return len(p), nil
}

// TestEndlessObject: a download stops a byte past the manifest's size,
// corrupt, rather than reading an endless object on.
func TestEndlessObject(t *testing.T) {
	ctx := context.Background()
	b := &endless{Bucket: &disk.Bucket{Root: t.TempDir()}}
	m, err := imagestore.New(b.Bucket).Put(ctx, "snapshots/s", image(t, 1000))
	must(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := imagestore.New(b).Get(ctx, "snapshots/s", filepath.Join(t.TempDir(), "got"))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, imagestore.ErrCorrupt) || b.served.Load() > m.Size+1<<20 {
			t.Fatalf("Get of an endless object: %v after %d bytes; want ErrCorrupt within the manifest's %d", err, b.served.Load(), m.Size)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Get of an endless object still reading after 10 s")
	}
}
