package agent

import (
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/api"
)

// TestFilesMetadata: an upload's metadata is kept as the file's user.e2b.*
// attributes and shown by the upload, stat, list and rename; an upload
// without any leaves none of the old file's; one set in the sandbox
// (setxattr) shows too; bad metadata is a 400 that writes nothing.
func TestFilesMetadata(t *testing.T) {
	ta := newTestAgent(t, nil)
	want := map[string]string{"author": "mish", "Purpose": "up load"}
	q := url.Values{"path": {"m.txt"}}
	for k, v := range want {
		q.Set("metadata["+k+"]", v)
	}
	var info api.EntryInfo
	ta.json(t, "PUT", "/files?"+q.Encode(), []byte("x"), &info, http.StatusOK)
	if !maps.Equal(info.Metadata, want) {
		t.Fatalf("upload answered metadata %v, want %v", info.Metadata, want)
	}
	p := filepath.Join(ta.home, "m.txt")
	v := make([]byte, 64)
	if n, err := unix.Getxattr(p, "user.e2b.author", v); err != nil || string(v[:n]) != "mish" {
		t.Fatalf("user.e2b.author = %q (%v), want mish", v[:max(n, 0)], err)
	}
	ta.json(t, "GET", "/files/stat?path=m.txt", nil, &info, http.StatusOK)
	if !maps.Equal(info.Metadata, want) {
		t.Errorf("stat: metadata %v, want %v", info.Metadata, want)
	}
	var list api.EntryList
	ta.json(t, "GET", "/files/list?path=.", nil, &list, http.StatusOK)
	found := false
	for _, e := range list.Entries {
		if e.Name == "m.txt" {
			found = maps.Equal(e.Metadata, want)
		}
	}
	if !found {
		t.Errorf("list: no m.txt with metadata %v in %+v", want, list.Entries)
	}
	ta.json(t, "POST", "/files/rename?path=m.txt&to=n.txt", nil, &info, http.StatusOK)
	if !maps.Equal(info.Metadata, want) {
		t.Errorf("rename: metadata %v, want %v", info.Metadata, want)
	}
	// Replaced without metadata: none of the old file's is left. (A
	// fresh info each time: decoding leaves a map the answer omits.)
	info = api.EntryInfo{}
	ta.json(t, "PUT", "/files?path=n.txt", []byte("y"), &info, http.StatusOK)
	if info.Metadata != nil {
		t.Errorf("overwrite without metadata answered %v, want none", info.Metadata)
	}
	info = api.EntryInfo{}
	ta.json(t, "GET", "/files/stat?path=n.txt", nil, &info, http.StatusOK)
	if info.Metadata != nil {
		t.Errorf("stat after overwrite: %v, want none", info.Metadata)
	}
	// Set in the sandbox: shown, the prefix off; other user.* names and
	// values that are not text are not metadata.
	must(t, os.WriteFile(p, []byte("z"), 0o644))
	must(t, unix.Setxattr(p, "user.e2b.tag", []byte("set inside"), 0))
	must(t, unix.Setxattr(p, "user.other", []byte("not ours"), 0))
	must(t, unix.Setxattr(p, "user.e2b.bin", []byte{0xff, 0}, 0))
	info = api.EntryInfo{}
	ta.json(t, "GET", "/files/stat?path=m.txt", nil, &info, http.StatusOK)
	if w := map[string]string{"tag": "set inside"}; !maps.Equal(info.Metadata, w) {
		t.Errorf("stat of attributes set inside: %v, want %v", info.Metadata, w)
	}

	for _, tc := range []struct{ query, words string }{
		{"metadata[bad%0Akey]=v", "not printable"},
		{"metadata[k]=bad%0Avalue", "not printable"},
		{"metadata[]=v", "want 1 to 246 bytes"},
		{"metadata[k]=a&metadata[k]=b", "given 2 times"},
		{"metadata[k=v", "want metadata[key]=value"},
		{"metadata[k]=" + strings.Repeat("v", 4090), "at most 4096"},
	} {
		status, body := ta.do(t, "PUT", "/files?path=refused.txt&"+tc.query, []byte("x"))
		if status != http.StatusBadRequest || !strings.Contains(string(body), tc.words) {
			t.Errorf("PUT with %s: %d %s, want 400 with %q", tc.query, status, body, tc.words)
		}
	}
	if _, err := os.Stat(filepath.Join(ta.home, "refused.txt")); !os.IsNotExist(err) {
		t.Errorf("a refused upload made refused.txt (%v)", err)
	}
}

// TestFilesWatchEntries: with includeEntry a watch's create, write and
// chmod events carry the file's entry, read beside the event (its
// metadata too, and, with resolveSymlinks, a link as stat resolves it);
// a remove carries none; without it no event does.
func TestFilesWatchEntries(t *testing.T) {
	ta := newTestAgent(t, nil)
	dir := filepath.Join(ta.home, "w")
	must(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	ws := ta.watchDir(t, "path=w&recursive=true&includeEntry=true&resolveSymlinks=true")
	plain := ta.watchDir(t, "path=w")
	next := func(ws *watchStream, typ, name string) api.FileEvent {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case ev := <-ws.events:
				if ev.Type == typ && ev.Name == name {
					return ev
				}
			case <-deadline:
				t.Fatalf("no %s %s in 5 s", typ, name)
			}
		}
	}
	ta.json(t, "PUT", "/files?path=w/sub/a.txt&metadata[k]=v", []byte("1"), nil, http.StatusOK)
	ev := next(ws, api.FileWrite, "sub/a.txt")
	if ev.Entry == nil || ev.Entry.Path != filepath.Join(dir, "sub/a.txt") || ev.Entry.Type != "file" || ev.Entry.Metadata["k"] != "v" {
		t.Errorf("write's entry = %+v, want sub/a.txt, a file with metadata k=v", ev.Entry)
	}
	must(t, os.Symlink("sub/a.txt", filepath.Join(dir, "ln")))
	if ev := next(ws, api.FileCreate, "ln"); ev.Entry == nil || ev.Entry.Type != "file" || ev.Entry.SymlinkTarget != filepath.Join(dir, "sub/a.txt") {
		t.Errorf("a link's create entry = %+v, want resolved to the file", ev.Entry)
	}
	must(t, os.Remove(filepath.Join(dir, "ln")))
	if ev := next(ws, api.FileRemove, "ln"); ev.Entry != nil {
		t.Errorf("remove carries an entry: %+v", ev.Entry)
	}
	must(t, os.WriteFile(filepath.Join(dir, "b"), nil, 0o644))
	if ev := next(plain, api.FileCreate, "b"); ev.Entry != nil {
		t.Errorf("a watch without includeEntry sent an entry: %+v", ev.Entry)
	}
	if status, body := ta.do(t, "GET", "/files/watch?path=w&includeEntry=maybe", nil); status != http.StatusBadRequest || !strings.Contains(string(body), "includeEntry") {
		t.Errorf("includeEntry=maybe: %d %s, want 400", status, body)
	}
}
