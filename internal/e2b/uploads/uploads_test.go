package uploads

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"
)

type file struct {
	name, body, link string
	typ              byte
	mode             int64
}

func archive(t *testing.T, gz bool, files ...file) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w *tar.Writer
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = tar.NewWriter(zw)
	} else {
		w = tar.NewWriter(&buf)
	}
	for _, f := range files {
		h := &tar.Header{Name: f.name, Typeflag: f.typ, Mode: f.mode, Linkname: f.link, Size: int64(len(f.body))}
		if f.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if f.typ == tar.TypeReg {
			w.Write([]byte(f.body))
		}
	}
	w.Close()
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes()
}

// folder is what e2b 2.63's tar_file_stream("folder", ...) made of a
// directory with a file, a symbolic link and a subdirectory with an
// executable; its hashes are what the SDK's calculate_files_hash printed.
var folder = []file{
	{name: "folder/", typ: tar.TypeDir, mode: 0o755},
	{name: "folder/sub/", typ: tar.TypeDir, mode: 0o755},
	{name: "folder/sub/b.sh", typ: tar.TypeReg, mode: 0o755, body: "x"},
	{name: "folder/symlink.txt", typ: tar.TypeSymlink, mode: 0o777, link: "test.txt"},
	{name: "folder/test.txt", typ: tar.TypeReg, mode: 0o644, body: "This is a test file."},
}

const folderHash = "53e3b9e8959428f32ba96cec70312a76d1905037a34a2922362dda65137e72b3" // COPY folder /app/

func open(t *testing.T, l Limits) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), l)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPutReadAndTheSDKsHash(t *testing.T) {
	s := open(t, DefaultLimits)
	if s.Has("proj_a", folderHash) {
		t.Fatal("Has before Put: true")
	}
	if err := s.Put("proj_a", folderHash, bytes.NewReader(archive(t, true, folder...))); err != nil {
		t.Fatal(err)
	}
	if !s.Has("proj_a", folderHash) {
		t.Fatal("Has after Put: false")
	}
	entries, err := s.Read("proj_a", folderHash)
	if err != nil {
		t.Fatal(err)
	}
	if got := FilesHash("folder", "/app/", entries); got != folderHash {
		t.Errorf("FilesHash = %s, want the SDK's %s", got, folderHash)
	}
	if got := FilesHash("folder", "/elsewhere/", entries); got == folderHash {
		t.Error("FilesHash does not depend on the destination")
	}
	// Another project neither has it nor reads it.
	if s.Has("proj_b", folderHash) {
		t.Error("another project Has the upload")
	}
	if _, err := s.Read("proj_b", folderHash); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("another project's Read: %v, want invalid (no such upload)", err)
	}
}

func TestRefused(t *testing.T) {
	l := DefaultLimits
	l.MaxBytes, l.MaxEntries = 20_000, 3
	big := strings.Repeat("a", 30_000)
	cases := []struct {
		name string
		body []byte
		kind error
		msg  string
	}{
		{"climbs out", archive(t, true, file{name: "../etc/passwd", typ: tar.TypeReg, body: "x"}), errdefs.ErrInvalid, "without .."},
		{"climbs out inside", archive(t, false, file{name: "a/../../b", typ: tar.TypeReg, body: "x"}), errdefs.ErrInvalid, "without .."},
		{"absolute", archive(t, false, file{name: "/etc/passwd", typ: tar.TypeReg, body: "x"}), errdefs.ErrInvalid, "relative path"},
		{"hard link", archive(t, false, file{name: "a", typ: tar.TypeReg, body: "x"}, file{name: "b", typ: tar.TypeLink, link: "a"}), errdefs.ErrInvalid, "hard links"},
		{"device", archive(t, false, file{name: "null", typ: tar.TypeChar}), errdefs.ErrInvalid, "devices"},
		{"too many entries", archive(t, false, file{name: "a", typ: tar.TypeDir}, file{name: "b", typ: tar.TypeDir}, file{name: "c", typ: tar.TypeDir}, file{name: "d", typ: tar.TypeDir}), errdefs.ErrInvalid, "more than 3"},
		{"over the bound as sent", archive(t, false, file{name: "a", typ: tar.TypeReg, body: big}), errdefs.ErrTooLarge, "over 20000 bytes"},
		{"a bomb: over the bound unpacked", archive(t, true, file{name: "a", typ: tar.TypeReg, body: strings.Repeat("a", 100_000)}), errdefs.ErrTooLarge, "once unpacked"},
		{"not a tar", []byte("hello, this is not an archive at all, but it is long enough to be read as a header of one..."), errdefs.ErrInvalid, "not a tar"},
		{"empty", archive(t, false), errdefs.ErrInvalid, "no files"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, l)
			err := s.Put("proj_a", folderHash, bytes.NewReader(c.body))
			if !errors.Is(err, c.kind) || !strings.Contains(errdefs.Message(err), c.msg) {
				t.Fatalf("Put: %v, want %v saying %q", err, c.kind, c.msg)
			}
			if s.Has("proj_a", folderHash) {
				t.Error("a refused upload was kept")
			}
		})
	}
}

func TestBounds(t *testing.T) {
	one := archive(t, false, file{name: "a", typ: tar.TypeReg, body: strings.Repeat("a", 3000)})
	hash := func(i int) string { return strings.Repeat(string("0123456789"[i]), 64) }
	l := DefaultLimits
	l.MaxProjectBytes, l.MaxNodeBytes = int64(2*len(one)), int64(3*len(one))
	s := open(t, l)
	for i := 0; i < 2; i++ {
		if err := s.Put("proj_a", hash(i), bytes.NewReader(one)); err != nil {
			t.Fatal(err)
		}
	}
	// Replacing one is no more.
	if err := s.Put("proj_a", hash(0), bytes.NewReader(one)); err != nil {
		t.Fatalf("replacing an upload: %v", err)
	}
	if err := s.Put("proj_a", hash(2), bytes.NewReader(one)); !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "project proj_a keeps") {
		t.Fatalf("past the project's bound: %v, want too large naming it", err)
	}
	if err := s.Put("proj_b", hash(3), bytes.NewReader(one)); err != nil {
		t.Fatal(err)
	}
	if err := s.Put("proj_c", hash(4), bytes.NewReader(one)); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("past the node's bound: %v, want unavailable", err)
	}
	// Unused for the TTL, they go.
	s.now = func() time.Time { return time.Now().Add(l.TTL + time.Minute) }
	if s.Has("proj_a", hash(0)) {
		t.Error("an expired upload is there")
	}
	s.Sweep()
	if err := s.Put("proj_c", hash(4), bytes.NewReader(one)); err != nil {
		t.Fatalf("after the sweep: %v", err)
	}
}

func TestBadNames(t *testing.T) {
	s := open(t, DefaultLimits)
	for _, h := range []string{"", "../../etc", strings.Repeat("A", 64), strings.Repeat("a", 63)} {
		if err := s.Put("proj_a", h, strings.NewReader("x")); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Put with hash %q: %v, want invalid", h, err)
		}
	}
	if err := s.Put("../x", folderHash, strings.NewReader("x")); err == nil {
		t.Error("a project ID with / named a directory")
	}
}
