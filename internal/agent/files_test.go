package agent

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"golang.org/x/sys/unix"

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

func TestFilesStatDetails(t *testing.T) {
	ta := newTestAgent(t, nil)
	must(t, os.WriteFile(filepath.Join(ta.home, "f"), []byte("abc"), 0o640))
	must(t, os.Chmod(filepath.Join(ta.home, "f"), 0o640))
	must(t, os.Symlink("f", filepath.Join(ta.home, "link")))
	must(t, os.Symlink("nowhere", filepath.Join(ta.home, "dangling")))
	me, _ := user.Current()
	var info api.EntryInfo
	ta.json(t, "GET", "/files/stat?path=f", nil, &info, http.StatusOK)
	if info.Type != "file" || info.Size != 3 || info.Mode != 0o640 || info.Permissions != "-rw-r-----" || info.SymlinkTarget != "" {
		t.Errorf("stat f = %+v, want a 3-byte file, mode 0640, -rw-r-----, no target", info)
	}
	if me != nil && info.Owner != me.Username {
		t.Errorf("stat f: owner %q, want %q", info.Owner, me.Username)
	}
	if info.Group == "" {
		t.Errorf("stat f: no group")
	}
	// A symlink is described itself, with where it points, dangling or not.
	for name, target := range map[string]string{"link": "f", "dangling": "nowhere"} {
		ta.json(t, "GET", "/files/stat?path="+name, nil, &info, http.StatusOK)
		if info.Type != "symlink" || info.SymlinkTarget != target || !strings.HasPrefix(info.Permissions, "l") {
			t.Errorf("stat %s = %+v, want a symlink to %s", name, info, target)
		}
	}
	ta.json(t, "GET", "/files/stat?path=.", nil, &info, http.StatusOK)
	if info.Type != "dir" || !strings.HasPrefix(info.Permissions, "d") {
		t.Errorf("stat . = %+v, want a dir", info)
	}
}

func TestPermissions(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		want string
	}{
		{0o644, "-rw-r--r--"},
		{os.ModeDir | 0o755, "drwxr-xr-x"},
		{os.ModeSymlink | 0o777, "lrwxrwxrwx"},
		{os.ModeSetuid | 0o755, "-rwsr-xr-x"},
		{os.ModeSetgid | 0o640, "-rw-r-S---"},
		{os.ModeDir | os.ModeSticky | 0o1777, "drwxrwxrwt"},
		{os.ModeNamedPipe | 0o600, "prw-------"},
	} {
		if got := permissions(tc.mode); got != tc.want {
			t.Errorf("permissions(%v) = %s, want %s", tc.mode, got, tc.want)
		}
	}
}

func TestFilesRename(t *testing.T) {
	ta := newTestAgent(t, nil)
	must(t, os.WriteFile(filepath.Join(ta.home, "a"), []byte("A"), 0o644))
	must(t, os.WriteFile(filepath.Join(ta.home, "b"), []byte("B"), 0o644))
	must(t, os.MkdirAll(filepath.Join(ta.home, "d/full"), 0o755))
	must(t, os.WriteFile(filepath.Join(ta.home, "d/full/x"), nil, 0o644))
	must(t, os.Symlink("a", filepath.Join(ta.home, "ln")))

	var info api.EntryInfo
	ta.json(t, "POST", "/files/rename?path=a&to=d/a2", nil, &info, http.StatusOK)
	if info.Path != filepath.Join(ta.home, "d/a2") || info.Name != "a2" || info.Type != "file" {
		t.Errorf("rename answered %+v", info)
	}
	if b, err := os.ReadFile(filepath.Join(ta.home, "d/a2")); string(b) != "A" {
		t.Errorf("d/a2 holds %q (%v), want A", b, err)
	}
	// A file at the destination is replaced, as rename(2) does.
	ta.json(t, "POST", "/files/rename?path=b&to=d/a2", nil, &info, http.StatusOK)
	if b, _ := os.ReadFile(filepath.Join(ta.home, "d/a2")); string(b) != "B" {
		t.Errorf("d/a2 holds %q after renaming b over it, want B", b)
	}
	// A symlink moves as itself: the link, not its target.
	ta.json(t, "POST", "/files/rename?path=ln&to=ln2", nil, &info, http.StatusOK)
	if info.Type != "symlink" || info.SymlinkTarget != "a" {
		t.Errorf("renamed symlink = %+v, want a symlink to a", info)
	}
	for _, tc := range []struct {
		query  string
		status int
		words  string
	}{
		{"path=missing&to=x", http.StatusNotFound, "missing does not exist"},
		{"path=d/a2&to=nodir/x", http.StatusNotFound, "nodir does not exist"},
		{"path=d/a2&to=d/full", http.StatusBadRequest, "path:"},
		{"path=d&to=d/full/inside", http.StatusBadRequest, "path:"},
		{"path=d/a2&to=", http.StatusBadRequest, "to: must not be empty"},
		{"path=/&to=x", http.StatusBadRequest, "refusing to rename /"},
	} {
		status, body := ta.do(t, "POST", "/files/rename?"+tc.query, nil)
		if status != tc.status || !strings.Contains(string(body), tc.words) {
			t.Errorf("rename %s: %d %s, want %d with %q", tc.query, status, body, tc.status, tc.words)
		}
	}
}

// TestFilesLargeBoundedMemory streams a file far larger than the bound
// through PUT and GET and checks the heap never held more than a few MiB
// of it.
func TestFilesLargeBoundedMemory(t *testing.T) {
	ta := newTestAgent(t, nil)
	const size = 384 << 20
	const bound = 16 << 20
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	peak := base
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	src := io.LimitReader(rand.Reader, size)
	h := sha256.New()
	var info api.EntryInfo
	ta.json(t, "PUT", "/files?path=big.bin", io.TeeReader(src, h), &info, http.StatusOK)
	sum := h.Sum(nil)
	resp := ta.send(t, t.Context(), "GET", "/files?path=big.bin", nil)
	h.Reset()
	n, err := io.Copy(h, resp.Body)
	resp.Body.Close()
	close(stop)
	<-sampled
	if err != nil || n != size || !bytes.Equal(h.Sum(nil), sum) || info.Size != size {
		t.Fatalf("round trip: wrote %d, read %d bytes (%v), digests equal %v", info.Size, n, err, bytes.Equal(h.Sum(nil), sum))
	}
	if grew := int64(peak) - int64(base); grew > bound {
		t.Errorf("the heap grew by %d MiB moving a %d MiB file, want at most %d MiB", grew>>20, size>>20, bound>>20)
	}
	t.Logf("heap grew by at most %.1f MiB moving %d MiB", float64(int64(peak)-int64(base))/(1<<20), size>>20)
}

func TestDisk(t *testing.T) {
	ta := newTestAgent(t, nil)
	var d api.DiskUsage
	ta.json(t, "GET", api.AgentDiskPath, nil, &d, http.StatusOK)
	var st unix.Statfs_t
	must(t, unix.Statfs("/", &st))
	if total := int64(st.Blocks) * int64(st.Bsize); d.TotalBytes != total || d.UsedBytes < 0 || d.UsedBytes > d.TotalBytes {
		t.Errorf("GET /disk = %+v, want total %d (statfs /) and 0 <= used <= total", d, total)
	}
}

// sizesWriter records the size of each write.
type sizesWriter struct{ sizes []int }

func (w *sizesWriter) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return len(p), nil
}

// trickle returns at most n bytes per read, as an upload's body does.
type trickle struct {
	r io.Reader
	n int
}

func (t trickle) Read(p []byte) (int, error) { return t.r.Read(p[:min(len(p), t.n)]) }

func TestCopyFileWholeChunks(t *testing.T) {
	for _, size := range []int{0, 1, copyChunk, 3*copyChunk + 5} {
		var w sizesWriter
		n, err := copyFile(&w, trickle{bytes.NewReader(make([]byte, size)), 32 << 10})
		if err != nil || n != int64(size) {
			t.Fatalf("copyFile of %d bytes: %d, %v", size, n, err)
		}
		for i, s := range w.sizes {
			if s != copyChunk && i != len(w.sizes)-1 {
				t.Errorf("%d bytes: write %d of %d was %d bytes, want %d (all but the last whole)", size, i, len(w.sizes), s, copyChunk)
			}
		}
		if want := (size + copyChunk - 1) / copyChunk; len(w.sizes) != want {
			t.Errorf("%d bytes in %d writes, want %d", size, len(w.sizes), want)
		}
	}
	// A body cut short is an error, not the end of the file.
	_, err := copyFile(&sizesWriter{}, io.MultiReader(bytes.NewReader(make([]byte, 10)), iotest.ErrReader(io.ErrUnexpectedEOF)))
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("copyFile of a cut body: %v, want ErrUnexpectedEOF", err)
	}
}

// TestFilesReadRealLength: a file's content is sent to its real end, not
// cut to its stat's size (/proc files stat as 0 bytes; a file may grow as
// it is read), and the connection outlives the answer, so the caller's
// next request on it does not fail.
func TestFilesReadRealLength(t *testing.T) {
	ta := newTestAgent(t, nil)
	want, err := os.ReadFile("/proc/self/mountinfo") // the agent's: the same process
	if err != nil || len(want) == 0 {
		t.Fatalf("reading /proc/self/mountinfo here: %d bytes, %v", len(want), err)
	}
	if fi, err := os.Stat("/proc/self/mountinfo"); err != nil || fi.Size() != 0 {
		t.Fatalf("/proc/self/mountinfo stats as %v, %v; the test wants a file that stats as 0 bytes", fi, err)
	}
	// One connection, watched: the server closing it after the answer is
	// what failed the next command.
	var closed atomic.Int32
	srv := httptest.NewUnstartedServer(ta.Agent.Handler())
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	client := srv.Client()
	get := func(path string) []byte {
		t.Helper()
		resp, err := client.Get(srv.URL + "/files?path=" + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d, %v", path, resp.StatusCode, err)
		}
		return b
	}
	if got := get("/proc/self/mountinfo"); !bytes.Equal(got, want) {
		t.Errorf("read /proc/self/mountinfo: %d bytes, want its %d", len(got), len(want))
	}
	// A file over one chunk is streamed to its end as well.
	big := bytes.Repeat([]byte("0123456789abcdef"), copyChunk/16*2+7)
	must(t, os.WriteFile(filepath.Join(ta.home, "big"), big, 0o644))
	if got := get(filepath.Join(ta.home, "big")); !bytes.Equal(got, big) {
		t.Errorf("read big: %d bytes, want %d", len(got), len(big))
	}
	get(filepath.Join(ta.home, "big"))
	time.Sleep(100 * time.Millisecond) // a close after the answer comes now
	if n := closed.Load(); n != 0 {
		t.Errorf("the agent closed %d connections after reading files; want them kept for the next request", n)
	}
}

// TestFilesResolveSymlinks: with resolveSymlinks (E2B's surface asks for
// it), a symlink is described by what it resolves to, as E2B's envd does:
// its target's type and mode, and the target's absolute path with every
// link resolved; a dangling one is other, mode 0, naming itself. Without
// it a symlink is described itself (TestFilesStatDetails).
func TestFilesResolveSymlinks(t *testing.T) {
	ta := newTestAgent(t, nil)
	h := ta.home
	must(t, os.MkdirAll(filepath.Join(h, "d/real"), 0o750))
	must(t, os.Chmod(filepath.Join(h, "d/real"), 0o750))
	must(t, os.WriteFile(filepath.Join(h, "d/real/f"), []byte("abc"), 0o640))
	must(t, os.Chmod(filepath.Join(h, "d/real/f"), 0o640))
	must(t, os.Symlink("real/f", filepath.Join(h, "d/link")))
	must(t, os.Symlink("link", filepath.Join(h, "d/chain")))
	must(t, os.Symlink(filepath.Join(h, "d/real"), filepath.Join(h, "d/dirlink")))
	must(t, os.Symlink("nowhere", filepath.Join(h, "d/dangling")))
	realHome, err := filepath.EvalSymlinks(h)
	must(t, err)
	f := filepath.Join(realHome, "d/real/f")
	want := map[string]struct {
		typ    string
		mode   uint32
		target string
	}{
		"link":     {"file", 0o640, f},
		"chain":    {"file", 0o640, f},
		"dirlink":  {"dir", 0o750, filepath.Join(realHome, "d/real")},
		"dangling": {"other", 0, filepath.Join(h, "d/dangling")},
		"real":     {"dir", 0o750, ""},
	}
	check := func(how string, info api.EntryInfo) {
		t.Helper()
		w, ok := want[info.Name]
		if !ok {
			t.Errorf("%s: unexpected entry %+v", how, info)
			return
		}
		if info.Type != w.typ || info.Mode != w.mode || info.SymlinkTarget != w.target || info.Path != filepath.Join(h, "d", info.Name) {
			t.Errorf("%s %s = type %s mode %o target %q path %s; want %s %o %q", how, info.Name, info.Type, info.Mode, info.SymlinkTarget, info.Path, w.typ, w.mode, w.target)
		}
		if w.target != "" && !strings.HasPrefix(info.Permissions, "l") {
			t.Errorf("%s %s: permissions %q, want the link's own (l...)", how, info.Name, info.Permissions)
		}
	}
	for name := range want {
		var info api.EntryInfo
		ta.json(t, "GET", "/files/stat?resolveSymlinks=true&path=d/"+name, nil, &info, http.StatusOK)
		check("stat", info)
	}
	var list api.EntryList
	ta.json(t, "GET", "/files/list?resolveSymlinks=true&path=d", nil, &list, http.StatusOK)
	if len(list.Entries) != len(want) {
		t.Errorf("list: %d entries, want %d", len(list.Entries), len(want))
	}
	for _, e := range list.Entries {
		check("list", e)
	}
	ta.json(t, "GET", "/files/stat?path=d/link", nil, &list.Entries[0], http.StatusOK)
	if e := list.Entries[0]; e.Type != "symlink" || e.SymlinkTarget != "real/f" {
		t.Errorf("stat without resolveSymlinks = %+v, want the link itself", e)
	}
	if status, body := ta.do(t, "GET", "/files/stat?resolveSymlinks=maybe&path=d", nil); status != http.StatusBadRequest || !strings.Contains(string(body), "resolveSymlinks") {
		t.Errorf("resolveSymlinks=maybe: %d %s, want 400 naming it", status, body)
	}
}
