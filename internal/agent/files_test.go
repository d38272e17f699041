package agent

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/lizard-build/lizard/api"
)

func writeTestFile(path string, b []byte) error { return os.WriteFile(path, b, 0o644) }

func TestFilesBinaryRoundTrip(t *testing.T) {
	ta := newTestAgent(t, nil)
	const size = 20<<20 + 123
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	var info api.EntryInfo
	// Streamed from a reader: the request has no Content-Length.
	ta.json(t, "PUT", "/files?path=deep/er/blob.bin", io.MultiReader(bytes.NewReader(data)), &info, http.StatusOK)
	wantPath := filepath.Join(ta.home, "deep/er/blob.bin")
	if info.Path != wantPath || info.Name != "blob.bin" || info.Type != "file" || info.Size != size || info.Mode != 0o644 {
		t.Errorf("PUT answered %+v, want %s, file, %d bytes, mode 0644", info, wantPath, size)
	}
	resp := ta.send(t, t.Context(), "GET", "/files?path="+wantPath, nil)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("GET: status %d, type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(data); n != size || !bytes.Equal(h.Sum(nil), want[:]) {
		t.Errorf("read back %d bytes with a different digest, want %d identical bytes", n, size)
	}
	// Overwriting keeps the file's mode.
	if err := os.Chmod(wantPath, 0o755); err != nil {
		t.Fatal(err)
	}
	ta.json(t, "PUT", "/files?path=deep/er/blob.bin", []byte("#!/bin/sh\n"), &info, http.StatusOK)
	if info.Size != 10 || info.Mode != 0o755 {
		t.Errorf("overwrite answered %+v, want 10 bytes, mode 0755", info)
	}
}

func TestFilesTree(t *testing.T) {
	ta := newTestAgent(t, nil)
	var info api.EntryInfo
	ta.json(t, "POST", "/files/mkdir?path=a/b/c", nil, &info, http.StatusOK)
	if info.Type != "dir" || info.Path != filepath.Join(ta.home, "a/b/c") {
		t.Errorf("mkdir answered %+v", info)
	}
	ta.json(t, "POST", "/files/mkdir?path=a/b/c", nil, &info, http.StatusOK) // exists: fine
	for _, name := range []string{"zeta.txt", "alpha.txt", "Beta.txt"} {
		ta.json(t, "PUT", "/files?path=a/"+name, name, nil, http.StatusOK)
	}
	if err := os.Symlink("alpha.txt", filepath.Join(ta.home, "a/link")); err != nil {
		t.Fatal(err)
	}
	var list api.EntryList
	ta.json(t, "GET", "/files/list?path=a", nil, &list, http.StatusOK)
	var got []string
	for _, e := range list.Entries {
		got = append(got, e.Name+":"+e.Type)
	}
	want := []string{"Beta.txt:file", "alpha.txt:file", "b:dir", "link:symlink", "zeta.txt:file"}
	if len(got) != len(want) {
		t.Fatalf("list = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("list[%d] = %s, want %s", i, got[i], want[i])
		}
	}
	ta.json(t, "GET", "/files/stat?path="+filepath.Join(ta.home, "a/zeta.txt"), nil, &info, http.StatusOK)
	if info.Size != int64(len("zeta.txt")) || info.Type != "file" || info.ModTime.IsZero() {
		t.Errorf("stat = %+v", info)
	}
	// Writing through the symlink updates its target.
	ta.json(t, "PUT", "/files?path=a/link", "via link", nil, http.StatusOK)
	if b, _ := os.ReadFile(filepath.Join(ta.home, "a/alpha.txt")); string(b) != "via link" {
		t.Errorf("target holds %q after writing through the link", b)
	}
	if status, _ := ta.do(t, "DELETE", "/files?path=a", nil); status != http.StatusNoContent {
		t.Errorf("DELETE tree: status %d, want 204", status)
	}
	if status, _ := ta.do(t, "GET", "/files/stat?path=a", nil); status != http.StatusNotFound {
		t.Errorf("stat after delete: status %d, want 404", status)
	}
}
