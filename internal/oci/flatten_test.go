package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// entry is one tar entry of a test layer.
type entry struct {
	name, link string
	typ        byte
	mode       int64
	body       string
}

func dir(name string) entry { return entry{name: name, typ: tar.TypeDir, mode: 0o755} }
func file(name, body string) entry {
	return entry{name: name, typ: tar.TypeReg, mode: 0o644, body: body}
}
func symlink(name, target string) entry  { return entry{name: name, typ: tar.TypeSymlink, link: target} }
func hardlink(name, target string) entry { return entry{name: name, typ: tar.TypeLink, link: target} }

func tarOf(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if e.typ == tar.TypeChar || e.typ == tar.TypeBlock {
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			io.WriteString(tw, e.body)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func layerOf(b []byte) Layer {
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
}

func layers(t *testing.T, ls ...[]entry) []Layer {
	var out []Layer
	for _, l := range ls {
		out = append(out, layerOf(tarOf(t, l...)))
	}
	return out
}

func TestFlattenWhiteoutsOpaqueDirsHardLinks(t *testing.T) {
	target := t.TempDir()
	ls := layers(t,
		[]entry{dir("a"), file("a/x", "x"), file("a/y", "y"), dir("b"), file("b/old", "old"), dir("b/sub"), file("b/sub/old2", "o"),
			file("c", "c"), dir("d"), file("d/keep", "k"), symlink("lnk", "/etc/passwd")},
		[]entry{
			file("a/.wh.x", ""),                              // whiteout of a file
			file("b/new", "new"), file("b/.wh..wh..opq", ""), // opaque after this layer's own entry
			dir("b/sub"), file("b/sub/n", "n"), // named again: its lower contents are hidden too
			file(".wh.c", ""),       // whiteout at the root
			hardlink("d/h", "a/y"),  // a hard link to a lower layer's file
			hardlink("d/hl", "lnk"), // a hard link to a symbolic link: the link, not its target
			file("/abs", "abs"),     // a leading / is dropped, as Docker does
		},
	)
	rep, err := Flatten(context.Background(), target, ls, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a/x", "b/old", "b/sub/old2", "c"} {
		if _, err := os.Lstat(filepath.Join(target, p)); !os.IsNotExist(err) {
			t.Errorf("%s: got %v, want it removed by a whiteout", p, err)
		}
	}
	for p, want := range map[string]string{"a/y": "y", "b/new": "new", "b/sub/n": "n", "d/keep": "k", "d/h": "y", "abs": "abs"} {
		if b, err := os.ReadFile(filepath.Join(target, p)); err != nil || string(b) != want {
			t.Errorf("%s: got %q, %v; want %q", p, b, err, want)
		}
	}
	var a, h syscall.Stat_t
	syscall.Stat(filepath.Join(target, "a/y"), &a)
	syscall.Stat(filepath.Join(target, "d/h"), &h)
	if a.Ino != h.Ino || a.Nlink != 2 {
		t.Errorf("d/h: inode %d (links %d), a/y %d: want one inode with two names", h.Ino, a.Nlink, a.Ino)
	}
	if fi, err := os.Lstat(filepath.Join(target, "d/hl")); err != nil || fi.Mode().Type() != fs.ModeSymlink {
		t.Errorf("d/hl: got %v, %v; want a second name of the symbolic link", fi, err)
	}
	if _, err := os.Lstat(filepath.Join(target, ".wh.c")); !os.IsNotExist(err) {
		t.Errorf("the whiteout file itself was written: %v", err)
	}
	if rep.Whiteout != 4 { // a/x, b/old, b/sub/old2, c
		t.Errorf("whiteouts: got %d, want 4", rep.Whiteout)
	}
}

// hostTree hashes every entry under dir (names, modes, contents, link
// targets): what must not change when an image is unpacked beside it.
func hostTree(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		fmt.Fprintf(h, "%s %v %d\n", p, fi.Mode(), fi.Size())
		if d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			h.Write(b)
		}
		if d.Type() == fs.ModeSymlink {
			l, _ := os.Readlink(p)
			io.WriteString(h, l)
		}
		return nil
	})
	return fmt.Sprintf("%x", h.Sum(nil))
}

// bomb is a gzip layer of one file of n zero bytes, written without
// holding it: n may be far past memory.
func bomb(t *testing.T, n int64) Layer {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: n})
	zero := make([]byte, 1<<20)
	for left := n; left > 0; left -= int64(len(zero)) {
		tw.Write(zero[:min(left, int64(len(zero)))])
	}
	tw.Close()
	zw.Close()
	b := buf.Bytes()
	return func() (io.ReadCloser, error) {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		return io.NopCloser(zr), err
	}
}

// TestFlattenAdversarial unpacks hostile layers beside a "host"
// directory: whatever a layer does, nothing outside the target changes,
// no device node or FIFO is made, no set-id bit given.
func TestFlattenAdversarial(t *testing.T) {
	for _, tc := range []struct {
		name    string
		layers  func(host string) []Layer
		lim     Limits
		wantErr string // "" means it unpacks
		check   func(t *testing.T, target string)
	}{
		{name: "setuid and setgid binaries", layers: func(string) []Layer {
			return layers(t, []entry{{name: "bin/su", typ: tar.TypeReg, mode: 0o4755, body: "elf"}, {name: "bin/wall", typ: tar.TypeReg, mode: 0o2755, body: "elf"}, {name: "tmp", typ: tar.TypeDir, mode: 0o1777}})
		}, check: func(t *testing.T, target string) {
			for _, p := range []string{"bin/su", "bin/wall"} {
				fi, err := os.Stat(filepath.Join(target, p))
				if err != nil || fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 || fi.Mode().Perm() != 0o755 {
					t.Errorf("%s: got %v, %v; want 0755 without set-id bits", p, fi.Mode(), err)
				}
			}
			if fi, _ := os.Stat(filepath.Join(target, "tmp")); fi.Mode()&fs.ModeSticky == 0 {
				t.Errorf("tmp: got %v, want its sticky bit kept", fi.Mode())
			}
		}},
		{name: "device nodes and FIFOs", layers: func(string) []Layer {
			return layers(t, []entry{file("dev/null", "was a file"), {name: "dev/null", typ: tar.TypeChar, mode: 0o666}, {name: "dev/sda", typ: tar.TypeBlock, mode: 0o660},
				{name: "fifo", typ: tar.TypeFifo, mode: 0o644}, hardlink("mem", "dev/sda")})
		}, check: func(t *testing.T, target string) {
			for _, p := range []string{"dev/null", "dev/sda", "fifo", "mem"} {
				if _, err := os.Lstat(filepath.Join(target, p)); !os.IsNotExist(err) {
					t.Errorf("%s: got %v, want no such entry", p, err)
				}
			}
		}},
		{name: "a file written through an absolute link to the host", layers: func(host string) []Layer {
			return layers(t, []entry{symlink("etc", host)}, []entry{file("etc/passwd", "root::0:0::/:/bin/sh")})
		}, wantErr: `is below "etc", a symbolic link`},
		{name: "a file written through a relative link out of the root", layers: func(string) []Layer {
			return layers(t, []entry{symlink("up", "../../../../../../../..")}, []entry{file("up/tmp/pwn", "x")})
		}, wantErr: "a symbolic link"},
		{name: "a link in the same layer, then a file through it", layers: func(host string) []Layer {
			return layers(t, []entry{dir("a"), symlink("a/b", host), file("a/b/pwn", "x")})
		}, wantErr: "a symbolic link"},
		{name: "a hard link to a host file through a link", layers: func(host string) []Layer {
			return layers(t, []entry{symlink("h", host), hardlink("stolen", "h/secret")})
		}, wantErr: "a symbolic link"},
		{name: "a hard link out of the root", layers: func(string) []Layer {
			return layers(t, []entry{hardlink("stolen", "../host/secret")})
		}, wantErr: ".. component"},
		{name: "a file over a link to a host file", layers: func(host string) []Layer {
			return layers(t, []entry{symlink("f", filepath.Join(host, "secret"))}, []entry{file("f", "overwritten")})
		}, check: func(t *testing.T, target string) {
			if b, err := os.ReadFile(filepath.Join(target, "f")); err != nil || string(b) != "overwritten" {
				t.Errorf("f: got %q, %v; want the layer's file in place of the link", b, err)
			}
		}},
		{name: "a directory over a link to a host directory, then a file in it", layers: func(host string) []Layer {
			return layers(t, []entry{symlink("d", host)}, []entry{dir("d"), file("d/new", "n")})
		}},
		{name: "a whiteout through a link to the host", layers: func(host string) []Layer {
			return layers(t, []entry{symlink("d", host)}, []entry{file("d/.wh.secret", "")})
		}, wantErr: "a symbolic link"},
		{name: "an opaque whiteout through a link", layers: func(host string) []Layer {
			return layers(t, []entry{symlink("d", host)}, []entry{file("d/.wh..wh..opq", "")})
		}, wantErr: "a symbolic link"},
		{name: "../ paths", layers: func(string) []Layer {
			return layers(t, []entry{file("../host/pwn", "x")})
		}, wantErr: ".. component"},
		{name: "../ hidden in the middle", layers: func(string) []Layer {
			return layers(t, []entry{dir("a"), file("a/../../host/pwn", "x")})
		}, wantErr: ".. component"},
		{name: "a whiteout of ..", layers: func(string) []Layer {
			return layers(t, []entry{dir("a"), file("a/.wh..", "")})
		}, wantErr: "names no entry"},
		{name: "a decompression bomb", layers: func(string) []Layer {
			return []Layer{bomb(t, 256<<20)}
		}, lim: Limits{Bytes: 16 << 20}, wantErr: "unpacks to more than 16777216 bytes", check: func(t *testing.T, target string) {
			if fi, err := os.Stat(filepath.Join(target, "zeros")); err == nil && fi.Size() > 16<<20 {
				t.Errorf("zeros: %d bytes written, past the bound", fi.Size())
			}
		}},
		{name: "a huge layer count", layers: func(string) []Layer {
			ls := make([]Layer, MaxLayers+1)
			for i := range ls {
				ls[i] = func() (io.ReadCloser, error) { t.Error("a layer was opened"); return nil, io.EOF }
			}
			return ls
		}, wantErr: "129 layers; at most 128"},
		{name: "too many files", layers: func(string) []Layer {
			var es []entry
			for i := range 50 {
				es = append(es, file(fmt.Sprint(i), ""))
			}
			return layers(t, es)
		}, lim: Limits{Files: 20}, wantErr: "more than 20 files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			host := filepath.Join(tmp, "host")
			target := filepath.Join(tmp, "a", "b", "target")
			os.MkdirAll(target, 0o755)
			os.MkdirAll(host, 0o755)
			os.WriteFile(filepath.Join(host, "secret"), []byte("host secret"), 0o600)
			before := hostTree(t, host)
			_, err := Flatten(context.Background(), target, tc.layers(host), tc.lim)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("got %v, want it unpacked", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
			}
			if after := hostTree(t, host); after != before {
				t.Errorf("the host directory beside the target changed")
			}
			if entries, _ := os.ReadDir(tmp); len(entries) != 2 {
				t.Errorf("%s holds %d entries, want host and a only", tmp, len(entries))
			}
			filepath.WalkDir(target, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if fi, _ := d.Info(); fi.Mode()&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeSetuid|fs.ModeSetgid) != 0 {
					t.Errorf("%s: mode %v", p, fi.Mode())
				}
				return nil
			})
			if tc.check != nil {
				tc.check(t, target)
			}
		})
	}
}
