package testenv

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TreeManifest describes every entry under root, root itself as ".", by
// its path: type and mode (set-id and sticky bits included), owner, size
// and content hash, link target, device numbers, its hard links (how many,
// and the first path of the group) and extended attributes; with times,
// its modification time too. Two trees are alike, to a test of a copy or
// a restore, when their manifests are equal.
func TreeManifest(t testing.TB, root string, times bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	inodes := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		var b strings.Builder
		fmt.Fprintf(&b, "%v %d:%d", fi.Mode(), st.Uid, st.Gid)
		if times {
			fmt.Fprintf(&b, " %d", fi.ModTime().UnixNano())
		}
		switch {
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %d %x", len(data), sha256.Sum256(data))
		case fi.Mode().Type() == fs.ModeSymlink:
			l, _ := os.Readlink(p)
			fmt.Fprintf(&b, " -> %s", l)
		case fi.Mode()&(fs.ModeDevice|fs.ModeCharDevice) != 0:
			fmt.Fprintf(&b, " dev %d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		if !fi.IsDir() && st.Nlink > 1 {
			if first, ok := inodes[st.Ino]; ok {
				fmt.Fprintf(&b, " linked to %s", first)
			} else {
				inodes[st.Ino] = rel
			}
			fmt.Fprintf(&b, " %d links", st.Nlink)
		}
		x, err := xattrs(p)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		b.WriteString(x)
		out[rel] = b.String()
		return nil
	})
	if err != nil {
		t.Fatalf("describing the tree %s: %v", root, err)
	}
	return out
}

// xattrs is p's extended attributes, " name=hexvalue" each, by name.
func xattrs(p string) (string, error) {
	size, err := unix.Llistxattr(p, nil)
	if err != nil || size == 0 {
		if err == unix.ENOTSUP {
			err = nil
		}
		return "", err
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(p, buf)
	if err != nil {
		return "", err
	}
	names := strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00")
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		vsize, err := unix.Lgetxattr(p, n, nil)
		if err != nil {
			return "", err
		}
		v := make([]byte, vsize)
		vsize, err = unix.Lgetxattr(p, n, v)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, " %s=%x", n, v[:vsize])
	}
	return b.String(), nil
}

// TreeDiff lists, one line a path, where manifest b differs from a (paths
// in skip aside); empty when they are alike.
func TreeDiff(a, b map[string]string, skip ...string) string {
	var lines []string
	for p, x := range a {
		if y, ok := b[p]; !slices.Contains(skip, p) && (!ok || x != y) {
			lines = append(lines, fmt.Sprintf("%s: %q, then %q", p, x, y))
		}
	}
	for p, y := range b {
		if _, ok := a[p]; !ok && !slices.Contains(skip, p) {
			lines = append(lines, fmt.Sprintf("%s: only in the second (%q)", p, y))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
