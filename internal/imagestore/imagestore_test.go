package imagestore_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
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
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/imagestore/disk"
	"github.com/lizard-build/lizard/internal/imagestore/s3"
	"github.com/lizard-build/lizard/internal/testenv"
)

// testKey seals the tests' images; otherKey is another node's.
var testKey, otherKey = newKey(), newKey()

func newKey() *imagestore.Key {
	secret := make([]byte, 32)
	rand.Read(secret)
	k, err := imagestore.NewKey(secret)
	if err != nil {
		panic(err)
	}
	return k
}

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
		s := imagestore.New(b, testKey)
		src := image(t, 3*s3.PartSize+123)
		m, err := s.Put(ctx, "snapshots/snap-1", src)
		must(t, err)
		if m.Size < 3*s3.PartSize || len(m.ID) != 64 {
			t.Fatalf("manifest %+v: want the sealed object's size and the image's ID", m)
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
		s := imagestore.New(b, testKey)
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
		s := imagestore.New(b, testKey)
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

// sealed is one chunk's bytes in the object.
const sealed = imagestore.ChunkSize + imagestore.Overhead

// TestTamperedObject: an object altered in any way — a byte, cut short
// (mid-chunk or at a chunk's end), a chunk dropped, reordered or added,
// emptied — is ErrTampered, and nothing is left where the image was to
// go.
func TestTamperedObject(t *testing.T) {
	for _, tc := range []struct {
		name  string
		alter func([]byte) []byte
	}{
		{"flipped byte", func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b }},
		{"flipped byte of the last chunk", func(b []byte) []byte { b[len(b)-20] ^= 1; return b }},
		{"truncated mid-chunk", func(b []byte) []byte { return b[:len(b)/2] }},
		{"truncated at a chunk's end", func(b []byte) []byte { return b[:2*sealed] }},
		{"last chunk dropped", func(b []byte) []byte { return b[:len(b)-(len(b)%sealed)] }},
		{"chunks swapped", func(b []byte) []byte {
			c := append([]byte(nil), b[:sealed]...)
			copy(b[:sealed], b[sealed:2*sealed])
			copy(b[sealed:2*sealed], c)
			return b
		}},
		{"chunk repeated", func(b []byte) []byte { return append(b[:sealed:sealed], b...) }},
		{"bytes appended", func(b []byte) []byte { return append(b, make([]byte, 100)...) }},
		{"emptied", func([]byte) []byte { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEach(t, func(t *testing.T, b imagestore.Bucket) {
				ctx := context.Background()
				s := imagestore.New(b, testKey)
				m, err := s.Put(ctx, "snapshots/s", image(t, 3*imagestore.ChunkSize+1000))
				must(t, err)
				data := object(t, b, m.Object)
				must(t, b.Put(ctx, m.Object, bytes.NewReader(tc.alter(data))))
				dst := filepath.Join(t.TempDir(), "got")
				if _, err := s.Get(ctx, "snapshots/s", dst); !errors.Is(err, imagestore.ErrTampered) || !imagestore.IsLost(err) || !strings.Contains(err.Error(), "snapshots/s") {
					t.Fatalf("Get of a %s object: %v, want ErrTampered naming the image", tc.name, err)
				}
				if ents, _ := os.ReadDir(filepath.Dir(dst)); len(ents) != 0 {
					t.Fatalf("a failed Get left %v", ents)
				}
			})
		})
	}
}

func object(t *testing.T, b imagestore.Bucket, key string) []byte {
	t.Helper()
	rc, err := b.Get(context.Background(), key)
	must(t, err)
	defer rc.Close()
	data, err := io.ReadAll(rc)
	must(t, err)
	return data
}

// TestForgedManifest: what the red-team did — the object rewritten and
// its manifest recomputed to match — and the other ways to point a
// manifest at bytes the key did not seal: all ErrTampered, nothing
// unpacked.
func TestForgedManifest(t *testing.T) {
	evil := tarOf(t, "pages.img", "attacker's memory")
	evilSum := sha256.Sum256(evil)
	for _, tc := range []struct {
		name  string
		forge func(t *testing.T, b imagestore.Bucket, m, other imagestore.Manifest)
		want  error
	}{
		{"object replaced, manifest recomputed as before sealing", func(t *testing.T, b imagestore.Bucket, m, _ imagestore.Manifest) {
			must(t, b.Put(context.Background(), m.Object, bytes.NewReader(evil)))
			body, _ := json.Marshal(map[string]any{"object": m.Object, "sha256": hex.EncodeToString(evilSum[:]), "size": len(evil)})
			must(t, b.Put(context.Background(), "snapshots/a/manifest.json", bytes.NewReader(body)))
		}, imagestore.ErrUnsealed},
		{"object resealed with the attacker's key, manifest signed with it and our key's ID", func(t *testing.T, b imagestore.Bucket, m, _ imagestore.Manifest) {
			mine := imagestore.New(b, otherKey)
			_, err := mine.PutTar(context.Background(), "snapshots/a", evil)
			must(t, err)
			env := envelopeOf(t, b, "snapshots/a")
			env["keyId"] = testKey.ID()
			putJSON(t, b, "snapshots/a/manifest.json", env)
		}, imagestore.ErrTampered},
		{"manifest's size changed", func(t *testing.T, b imagestore.Bucket, m, _ imagestore.Manifest) {
			env := envelopeOf(t, b, "snapshots/a")
			var mm map[string]any
			must(t, json.Unmarshal(env["manifest"].([]byte), &mm))
			mm["size"] = m.Size + 1
			env["manifest"], _ = json.Marshal(mm)
			putJSON(t, b, "snapshots/a/manifest.json", env)
		}, imagestore.ErrTampered},
		{"another image's manifest copied over", func(t *testing.T, b imagestore.Bucket, _, _ imagestore.Manifest) {
			must(t, b.Put(context.Background(), "snapshots/a/manifest.json", bytes.NewReader(object(t, b, "snapshots/b/manifest.json"))))
		}, imagestore.ErrTampered},
		{"another image's object copied over", func(t *testing.T, b imagestore.Bucket, m, other imagestore.Manifest) {
			must(t, b.Put(context.Background(), m.Object, bytes.NewReader(object(t, b, other.Object))))
		}, imagestore.ErrTampered},
		{"sealed with another node's key", func(t *testing.T, b imagestore.Bucket, _, _ imagestore.Manifest) {
			_, err := imagestore.New(b, otherKey).Put(context.Background(), "snapshots/a", image(t, 1000))
			must(t, err)
		}, imagestore.ErrWrongKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEach(t, func(t *testing.T, b imagestore.Bucket) {
				ctx := context.Background()
				s := imagestore.New(b, testKey)
				m, err := s.Put(ctx, "snapshots/a", image(t, 2*imagestore.ChunkSize))
				must(t, err)
				other, err := s.Put(ctx, "snapshots/b", image(t, 2*imagestore.ChunkSize))
				must(t, err)
				tc.forge(t, b, m, other)
				dst := filepath.Join(t.TempDir(), "got")
				_, err = s.Get(ctx, "snapshots/a", dst)
				if !errors.Is(err, tc.want) || !errors.Is(err, imagestore.ErrTampered) || !strings.Contains(err.Error(), "snapshots/a") {
					t.Fatalf("Get: %v; want %v naming the image", err, tc.want)
				}
				if ents, _ := os.ReadDir(filepath.Dir(dst)); len(ents) != 0 {
					t.Fatalf("a failed Get left %v", ents)
				}
				// The other image is untouched.
				_, err = s.Get(ctx, "snapshots/b", filepath.Join(t.TempDir(), "b"))
				must(t, err)
			})
		})
	}
}

// TestReasons: the metric's label for each refusal.
func TestReasons(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("x: %w", imagestore.ErrUnsealed), "unsealed"},
		{fmt.Errorf("x: %w", imagestore.ErrWrongKey), "wrong_key"},
		{fmt.Errorf("x: %w", imagestore.ErrTampered), "tampered"},
		{imagestore.ErrCorrupt, ""},
		{nil, ""},
	} {
		if got := imagestore.Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestEncryptedAtRest: no byte of the image is in the bucket in clear.
func TestEncryptedAtRest(t *testing.T) {
	forEach(t, func(t *testing.T, b imagestore.Bucket) {
		ctx := context.Background()
		s := imagestore.New(b, testKey)
		src := image(t, 1000)
		marker := "lizard-marker-" + hex.EncodeToString(randBytes(8))
		must(t, os.WriteFile(filepath.Join(src, "memory"), bytes.Repeat([]byte(marker), 1000), 0o600))
		m, err := s.Put(ctx, "paused/sb", src)
		must(t, err)
		keys, err := b.List(ctx, "paused/sb/")
		must(t, err)
		for _, k := range keys {
			if data := object(t, b, k); bytes.Contains(data, []byte(marker)) || bytes.Contains(data, []byte("pages.img")) {
				t.Fatalf("object %s holds the image's bytes in clear", k)
			}
		}
		if m.Size < 1000*int64(len(marker)) {
			t.Fatalf("object is %d bytes, less than the image", m.Size)
		}
	})
}

// TestChunkBoundaries: tars ending just before, at and just after a
// chunk's end round-trip (at the end, the last chunk is an empty one).
func TestChunkBoundaries(t *testing.T) {
	ctx := context.Background()
	s := imagestore.New(&disk.Bucket{Root: t.TempDir()}, testKey)
	for _, size := range []int{2*imagestore.ChunkSize - 512, 2 * imagestore.ChunkSize, 2*imagestore.ChunkSize + 512} {
		// USTAR: a 512-byte header, the body in 512-byte blocks, two
		// blocks of end.
		body := strings.Repeat("x", size-3*512)
		data := tarOf(t, "f", body)
		if len(data) != size {
			t.Fatalf("tar of %d bytes, want %d", len(data), size)
		}
		_, err := s.PutTar(ctx, "snapshots/edge", data)
		must(t, err)
		dst := filepath.Join(t.TempDir(), "got")
		_, err = s.Get(ctx, "snapshots/edge", dst)
		must(t, err)
		if got, err := os.ReadFile(filepath.Join(dst, "f")); err != nil || string(got) != body {
			t.Fatalf("a %d-byte tar: read back %d bytes, %v", size, len(got), err)
		}
	}
}

// TestOldFormat: an image stored before sealing (a tar and a manifest
// with its SHA-256) is refused, naming why, and nothing is unpacked.
func TestOldFormat(t *testing.T) {
	s := putRaw(t, tarOf(t, "pages.img", "old"))
	dst := filepath.Join(t.TempDir(), "got")
	_, err := s.Get(context.Background(), "snapshots/evil", dst)
	if !errors.Is(err, imagestore.ErrUnsealed) || !imagestore.IsLost(err) || !strings.Contains(err.Error(), "docs/storage.md") {
		t.Fatalf("Get of an unsealed image: %v; want ErrUnsealed pointing at the docs", err)
	}
	if _, err := os.Stat(dst); err == nil {
		t.Fatal("an unsealed image was unpacked")
	}
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// tarOf is a USTAR tar of one file.
func tarOf(t *testing.T, name, body string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body)), Format: tar.FormatUSTAR}))
	_, err := tw.Write([]byte(body))
	must(t, err)
	must(t, tw.Close())
	return buf.Bytes()
}

// envelopeOf reads image name's manifest.json.
func envelopeOf(t *testing.T, b imagestore.Bucket, name string) map[string]any {
	var env struct {
		Format, KeyID, MAC string
		Manifest           []byte
	}
	must(t, json.Unmarshal(object(t, b, name+"/manifest.json"), &env))
	return map[string]any{"format": env.Format, "keyId": env.KeyID, "mac": env.MAC, "manifest": env.Manifest}
}

func putJSON(t *testing.T, b imagestore.Bucket, key string, v any) {
	body, err := json.Marshal(v)
	must(t, err)
	must(t, b.Put(context.Background(), key, bytes.NewReader(body)))
}

func TestDelete(t *testing.T) {
	forEach(t, func(t *testing.T, b imagestore.Bucket) {
		ctx := context.Background()
		s := imagestore.New(b, testKey)
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
	s := imagestore.New(&disk.Bucket{Root: t.TempDir()}, testKey)
	for _, name := range []string{"", "/abs", "../up", "a/../../b", "a//b", "a/"} {
		if _, err := s.Put(context.Background(), name, t.TempDir()); err == nil {
			t.Errorf("Put(%q) worked; want an error", name)
		}
	}
}

func TestCacheBoundedLRU(t *testing.T) {
	forEach(t, func(t *testing.T, b imagestore.Bucket) {
		ctx := context.Background()
		s := imagestore.New(b, testKey)
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

// TestHostileImage: an image's tar that opens with the key was still
// written by another node, which may be compromised. Unpacking it as root must
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
			_, err := putSealed(t, buf.Bytes()).Get(context.Background(), "snapshots/evil", dst)
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
		if _, err := putSealed(t, data).Get(context.Background(), "snapshots/evil", dst); !errors.Is(err, imagestore.ErrCorrupt) {
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
		_, err := putSealed(t, buf.Bytes()).Get(context.Background(), "snapshots/evil", dst)
		must(t, err)
		fi, err := os.Stat(filepath.Join(dst, "su"))
		must(t, err)
		if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			t.Fatalf("mode %v keeps a set-ID bit", fi.Mode())
		}
	})
}

// putSealed stores tar stream data as image snapshots/evil sealed with
// the key, as a holder of it could (another node, compromised).
func putSealed(t *testing.T, data []byte) *imagestore.Store {
	t.Helper()
	s := imagestore.New(&disk.Bucket{Root: t.TempDir()}, testKey)
	_, err := s.PutTar(context.Background(), "snapshots/evil", data)
	must(t, err)
	return s
}

// putRaw stores tar stream data as image snapshots/evil as a Lizard
// from before sealing did: in clear, with a manifest of its SHA-256.
func putRaw(t *testing.T, data []byte) *imagestore.Store {
	t.Helper()
	b := &disk.Bucket{Root: t.TempDir()}
	ctx := context.Background()
	sum := sha256.Sum256(data)
	must(t, b.Put(ctx, "snapshots/evil/data-1.tar", bytes.NewReader(data)))
	m, _ := json.Marshal(map[string]any{"object": "snapshots/evil/data-1.tar", "sha256": hex.EncodeToString(sum[:]), "size": len(data)})
	must(t, b.Put(ctx, "snapshots/evil/manifest.json", bytes.NewReader(m)))
	return imagestore.New(b, testKey)
}

// TestManifestNamesOtherObject: a manifest naming an object that is not
// its image's own (another image's, or a path out of a disk bucket) is
// corrupt, and nothing is read from it, even under a good MAC.
func TestManifestNamesOtherObject(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	b := &disk.Bucket{Root: filepath.Join(root, "bucket")}
	s := imagestore.New(b, testKey)
	m, err := s.Put(ctx, "snapshots/other", image(t, 100))
	must(t, err)
	for _, obj := range []string{m.Object, "../outside.tar", "snapshots/evil/data-1/../../other/" + path.Base(m.Object), "snapshots/evil/data-x/y.tar"} {
		must(t, s.PutManifest(ctx, "snapshots/evil", imagestore.Manifest{Object: obj, ID: m.ID, Size: m.Size}))
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

// TestEndlessObject: a download stops at the first chunk that does not
// open, and never past a byte beyond the manifest's size, rather than
// reading an endless object on.
func TestEndlessObject(t *testing.T) {
	ctx := context.Background()
	b := &endless{Bucket: &disk.Bucket{Root: t.TempDir()}}
	m, err := imagestore.New(b.Bucket, testKey).Put(ctx, "snapshots/s", image(t, 1000))
	must(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := imagestore.New(b, testKey).Get(ctx, "snapshots/s", filepath.Join(t.TempDir(), "got"))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, imagestore.ErrTampered) || b.served.Load() > m.Size+1<<21 {
			t.Fatalf("Get of an endless object: %v after %d bytes; want ErrTampered within the manifest's %d", err, b.served.Load(), m.Size)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Get of an endless object still reading after 10 s")
	}
}

// BenchmarkPutGet256MiB uploads and downloads a 256 MiB image through a
// disk bucket: the cost of sealing against the copy itself
// (docs/storage.md#figures).
func BenchmarkPutGet256MiB(b *testing.B) {
	ctx := context.Background()
	src := filepath.Join(b.TempDir(), "img")
	if err := os.Mkdir(src, 0o700); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 256<<20)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(src, "pages.img"), data, 0o600); err != nil {
		b.Fatal(err)
	}
	s := imagestore.New(&disk.Bucket{Root: b.TempDir()}, testKey)
	b.SetBytes(int64(len(data)))
	for i := 0; b.Loop(); i++ {
		if _, err := s.Put(ctx, "snapshots/bench", src); err != nil {
			b.Fatal(err)
		}
		dst := filepath.Join(b.TempDir(), fmt.Sprint(i))
		if _, err := s.Get(ctx, "snapshots/bench", dst); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(dst)
	}
}

// TestHoles: a file with holes (a template's shared heap, 142 MB of
// address space and ~72 MB of data) travels as its data alone and
// arrives with the same bytes and its holes, on every backend; an image
// of files without holes is the tar it always was (TestRoundTrip, and
// tarOf's plain entries read as before).
func TestHoles(t *testing.T) {
	forEach(t, func(t *testing.T, b imagestore.Bucket) {
		ctx := context.Background()
		s := imagestore.New(b, testKey)
		src := filepath.Join(t.TempDir(), "img")
		must(t, os.MkdirAll(filepath.Join(src, "lizard-heap"), 0o755))
		const size = 64 << 20
		heap := filepath.Join(src, "lizard-heap", "heap")
		f, err := os.OpenFile(heap, os.O_CREATE|os.O_WRONLY, 0o444)
		must(t, err)
		// Data at the start, in the middle and at the end; a hole
		// at the very end too (the file's size past its last data).
		want := make([]byte, size)
		for _, at := range []int64{0, 9 << 20, 40<<20 + 4096, size - 8<<20} {
			chunk := randBytes(2 << 20)
			_, err := f.WriteAt(chunk, at)
			must(t, err)
			copy(want[at:], chunk)
		}
		must(t, f.Truncate(size))
		must(t, f.Close())
		must(t, os.WriteFile(filepath.Join(src, "pages.img"), []byte("pages"), 0o600))

		m, err := s.Put(ctx, "paused/sb-1", src)
		must(t, err)
		if m.Size > 9<<20 {
			t.Errorf("the sealed image is %d bytes for 8 MiB of data in a %d-byte file: its holes were sent", m.Size, size)
		}
		t.Logf("a %d MiB file with 8 MiB of data: a %d-byte image", size>>20, m.Size)
		dst := filepath.Join(t.TempDir(), "got")
		_, err = s.Get(ctx, "paused/sb-1", dst)
		must(t, err)
		got, err := os.ReadFile(filepath.Join(dst, "lizard-heap", "heap"))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("the heap arrived with %d bytes (%v); want the %d put, the same", len(got), err, size)
		}
		fi, err := os.Stat(filepath.Join(dst, "lizard-heap", "heap"))
		must(t, err)
		if blocks := fi.Sys().(*syscall.Stat_t).Blocks * 512; blocks > 12<<20 || fi.Mode().Perm() != 0o444 {
			t.Errorf("the heap arrived taking %d bytes on disk, mode %v; want its holes kept, mode 0444", blocks, fi.Mode())
		}
		if b, err := os.ReadFile(filepath.Join(dst, "pages.img")); err != nil || string(b) != "pages" {
			t.Errorf("pages.img = %q, %v", b, err)
		}
	})
}

// TestHostileHoles: a file-with-holes entry whose map does not hold
// (extents out of order, past the file, more than the data, a count
// larger than the entry) is refused before anything is written.
func TestHostileHoles(t *testing.T) {
	ext := func(pairs ...uint64) []byte {
		b := binary.BigEndian.AppendUint64(nil, uint64(len(pairs)/2))
		for _, v := range pairs {
			b = binary.BigEndian.AppendUint64(b, v)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		size string
		body []byte
	}{
		{"overlapping", "100", append(ext(0, 4, 2, 4), "abcdefgh"...)},
		{"past the end", "100", append(ext(98, 4), "abcd"...)},
		{"wrapping", "100", append(ext(1<<63, 1<<63+4), "abcd"...)},
		{"more data than mapped", "100", append(ext(0, 4), "abcdefgh"...)},
		{"count past the entry", "100", append(binary.BigEndian.AppendUint64(nil, 1<<40), "abcd"...)},
		{"no size", "", append(ext(0, 4), "abcd"...)},
		{"short", "100", []byte{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			hdr := &tar.Header{Typeflag: 'H', Name: "heap", Mode: 0o644, Size: int64(len(tc.body)), Format: tar.FormatPAX}
			if tc.size != "" {
				hdr.PAXRecords = map[string]string{"LIZARD.holes.size": tc.size}
			}
			must(t, tw.WriteHeader(hdr))
			_, err := tw.Write(tc.body)
			must(t, err)
			must(t, tw.Close())
			dst := filepath.Join(t.TempDir(), "got")
			if _, err := putSealed(t, buf.Bytes()).Get(context.Background(), "snapshots/evil", dst); !errors.Is(err, imagestore.ErrCorrupt) {
				t.Fatalf("Get: %v, want ErrCorrupt", err)
			}
			if ents, _ := os.ReadDir(filepath.Dir(dst)); len(ents) != 0 {
				t.Fatalf("a failed Get left %v", ents)
			}
		})
	}
}

// TestDirSizeLinks: an image's size leaves out a file with other links
// (its template's heap, a link of the node's kept copy): removing the
// image frees none of it.
func TestDirSizeLinks(t *testing.T) {
	dir := t.TempDir()
	kept := filepath.Join(t.TempDir(), "heap")
	must(t, os.WriteFile(kept, make([]byte, 1<<20), 0o444))
	must(t, os.WriteFile(filepath.Join(dir, "pages.img"), []byte("pages"), 0o600))
	must(t, os.Mkdir(filepath.Join(dir, "lizard-heap"), 0o755))
	must(t, os.Link(kept, filepath.Join(dir, "lizard-heap", "heap")))
	if got := imagestore.DirSize(dir); got != 5 {
		t.Errorf("DirSize = %d; want 5, the linked heap left out", got)
	}
	must(t, os.Remove(kept))
	if got := imagestore.DirSize(dir); got != 5+1<<20 {
		t.Errorf("DirSize with the heap the image's alone = %d; want %d", got, 5+1<<20)
	}
}
