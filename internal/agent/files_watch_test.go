package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
)

// watchStream is an open GET /files/watch.
type watchStream struct {
	events chan api.FileEvent
	cancel context.CancelFunc
	done   chan struct{}
}

func (ta *testAgent) watchDir(t *testing.T, query string) *watchStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	resp := ta.send(t, ctx, "GET", "/files/watch?"+query, nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		cancel()
		t.Fatalf("watch %s: status %d, type %q", query, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ws := &watchStream{events: make(chan api.FileEvent, 1024), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(ws.done)
		defer close(ws.events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev api.FileEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Errorf("watch line %q: %v", sc.Text(), err)
				return
			}
			ws.events <- ev
		}
	}()
	t.Cleanup(func() { cancel(); <-ws.done })
	return ws
}

// expect waits for the events in want, in order, others allowed between.
func (ws *watchStream) expect(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	var seen []string
	for len(want) > 0 {
		select {
		case ev, ok := <-ws.events:
			if !ok {
				t.Fatalf("stream ended; saw %v, still want %v", seen, want)
			}
			if ev.Time.IsZero() {
				t.Errorf("event %+v has no time", ev)
			}
			got := ev.Type + " " + ev.Name
			seen = append(seen, got)
			if got == want[0] {
				want = want[1:]
			}
		case <-deadline:
			t.Fatalf("after 5 s saw %v, still want %v", seen, want)
		}
	}
}

func TestFilesWatch(t *testing.T) {
	ta := newTestAgent(t, nil)
	dir := filepath.Join(ta.home, "w")
	must(t, os.MkdirAll(filepath.Join(dir, "old"), 0o755))
	ws := ta.watchDir(t, "path=w&recursive=true")

	must(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("1"), 0o644))
	ws.expect(t, "create a.txt", "write a.txt")
	must(t, os.Chmod(filepath.Join(dir, "a.txt"), 0o600))
	ws.expect(t, "chmod a.txt")
	must(t, os.Rename(filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")))
	ws.expect(t, "rename a.txt", "create b.txt")
	must(t, os.Remove(filepath.Join(dir, "b.txt")))
	ws.expect(t, "remove b.txt")
	// A directory there at the start is watched.
	must(t, os.WriteFile(filepath.Join(dir, "old/f"), nil, 0o644))
	ws.expect(t, "create old/f")
	// So is one made later, with what was made in it before its watch.
	must(t, os.MkdirAll(filepath.Join(dir, "new/deeper"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "new/deeper/g"), []byte("x"), 0o644))
	ws.expect(t, "create new", "create new/deeper/g")
	must(t, os.WriteFile(filepath.Join(dir, "new/deeper/g"), []byte("y"), 0o644))
	ws.expect(t, "write new/deeper/g")
	// A directory renamed inside the tree is followed under its new name.
	must(t, os.Rename(filepath.Join(dir, "new"), filepath.Join(dir, "renamed")))
	ws.expect(t, "rename new", "create renamed")
	must(t, os.WriteFile(filepath.Join(dir, "renamed/deeper/h"), nil, 0o644))
	ws.expect(t, "create renamed/deeper/h")

	// Removing the watched directory ends the stream cleanly.
	must(t, os.RemoveAll(dir))
	select {
	case <-ws.done:
	case <-time.After(5 * time.Second):
		t.Fatal("stream still open 5 s after its directory was removed")
	}
	ta.Agent.files.watches.mu.Lock()
	streams, dirs := ta.Agent.files.watches.streams, ta.Agent.files.watches.dirs
	ta.Agent.files.watches.mu.Unlock()
	if streams != 0 || dirs != 0 {
		t.Errorf("after the stream: %d streams, %d watched directories counted, want 0 and 0", streams, dirs)
	}
}

func TestFilesWatchNotRecursive(t *testing.T) {
	ta := newTestAgent(t, nil)
	must(t, os.MkdirAll(filepath.Join(ta.home, "sub"), 0o755))
	ws := ta.watchDir(t, "path="+ta.home)
	must(t, os.WriteFile(filepath.Join(ta.home, "sub/hidden"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(ta.home, "seen"), nil, 0o644))
	ws.expect(t, "create seen")
	// Closing the stream (the client gone) frees its watch.
	ws.cancel()
	<-ws.done
	deadline := time.Now().Add(5 * time.Second)
	for {
		ta.Agent.files.watches.mu.Lock()
		streams := ta.Agent.files.watches.streams
		ta.Agent.files.watches.mu.Unlock()
		if streams == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d watch streams still counted 5 s after the client went away", streams)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFilesWatchBadInput(t *testing.T) {
	ta := newTestAgent(t, nil)
	must(t, os.WriteFile(filepath.Join(ta.home, "file"), nil, 0o644))
	for _, tc := range []struct {
		query  string
		status int
		words  string
	}{
		{"path=missing", http.StatusNotFound, "does not exist"},
		{"path=file", http.StatusBadRequest, "is not a directory"},
		{"path=", http.StatusBadRequest, "path: must not be empty"},
		{"path=.&recursive=maybe", http.StatusBadRequest, "recursive: must be true or false"},
	} {
		status, body := ta.do(t, "GET", "/files/watch?"+tc.query, nil)
		if status != tc.status || !strings.Contains(string(body), tc.words) {
			t.Errorf("watch %s: %d %s, want %d with %q", tc.query, status, body, tc.status, tc.words)
		}
	}
	// Past the budget of streams, a watch is refused with words.
	for range maxWatchStreams {
		ta.watchDir(t, "path=.")
	}
	status, body := ta.do(t, "GET", "/files/watch?path=.", nil)
	if status != http.StatusConflict || !strings.Contains(string(body), "watches are open") {
		t.Errorf("watch %d+1: %d %s, want 409 naming the bound", maxWatchStreams, status, body)
	}
}

func TestFilesWatchTooManyDirs(t *testing.T) {
	ta := newTestAgent(t, nil)
	ta.Agent.files.watches.mu.Lock()
	ta.Agent.files.watches.dirs = maxWatchDirs - 3 // as if other streams held them
	ta.Agent.files.watches.mu.Unlock()
	for i := range 5 {
		must(t, os.MkdirAll(filepath.Join(ta.home, "t", fmt.Sprint(i)), 0o755))
	}
	status, body := ta.do(t, "GET", "/files/watch?path=t&recursive=true", nil)
	if status != http.StatusConflict || !strings.Contains(string(body), "watch a smaller tree") {
		t.Errorf("recursive watch over the budget: %d %s, want 409 with words", status, body)
	}
	ta.Agent.files.watches.mu.Lock()
	dirs := ta.Agent.files.watches.dirs
	ta.Agent.files.watches.mu.Unlock()
	if dirs != maxWatchDirs-3 {
		t.Errorf("after the refused watch %d directories are counted, want %d", dirs, maxWatchDirs-3)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestFilesWatchUploads: a watch sees PUT /files (the SDKs' write) as the
// file's own events, as E2B's envd's in-place write makes them — a new
// file's create, chmod, write; a replaced one's chmod, write, write — and
// never the temporary file the upload goes through, on both surfaces.
func TestFilesWatchUploads(t *testing.T) {
	ta := newTestAgent(t, nil)
	must(t, os.MkdirAll(filepath.Join(ta.home, "w/sub"), 0o755))
	ws := ta.watchDir(t, "path=w&recursive=true")
	// quiet collects the events until none came for a while.
	quiet := func() []string {
		var got []string
		for {
			select {
			case ev := <-ws.events:
				got = append(got, ev.Type+" "+ev.Name)
			case <-time.After(300 * time.Millisecond):
				return got
			}
		}
	}
	for _, tc := range []struct {
		name, path string
		want       []string
	}{
		{"new file", "w/watched.txt", []string{"create watched.txt", "chmod watched.txt", "write watched.txt"}},
		{"replaced file", "w/watched.txt", []string{"chmod watched.txt", "write watched.txt", "write watched.txt"}},
		{"in a subdirectory", "w/sub/f", []string{"create sub/f", "chmod sub/f", "write sub/f"}},
	} {
		ta.json(t, "PUT", "/files?path="+tc.path, "content of "+tc.name, nil, http.StatusOK)
		if got := quiet(); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: a watch saw %q, want %q", tc.name, got, tc.want)
		}
	}
	// An upload refused midway leaves no event: its temporary file was never
	// the caller's.
	ta.Agent.files.maxBytes = 4
	ta.do(t, "PUT", "/files?path=w/big.txt", "more than four bytes")
	if got := quiet(); len(got) != 0 {
		t.Errorf("a refused upload: a watch saw %q, want nothing", got)
	}
	// A file a program makes is reported as inotify says.
	must(t, os.WriteFile(filepath.Join(ta.home, "w/plain"), []byte("x"), 0o644))
	ws.expect(t, "create plain", "write plain")
}

// TestWatchNewDirReportsWrites: a directory made under a recursive watch
// whose files were made and written before the watch reached it (the
// watcher reads the directory's creation after they are there) reports each
// file created and, if it has content, written — as a watch in place would
// have. E2B's suite makes a directory, writes a file in it and asks for the
// write at once; under load the write came before the directory's watch.
func TestWatchNewDirReportsWrites(t *testing.T) {
	root := t.TempDir()
	w, err := newWatcher(root, true, &watchBudget{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	must(t, os.MkdirAll(filepath.Join(root, "n/deeper"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "n/deeper/f.txt"), []byte("x"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "n/empty"), nil, 0o644))

	var got []string
	if !w.read(make([]byte, 64<<10), func(ev api.FileEvent) { got = append(got, ev.Type+" "+ev.Name) }) {
		t.Fatal("the watch ended")
	}
	want := []string{"create n", "create n/deeper", "create n/deeper/f.txt", "write n/deeper/f.txt", "create n/empty"}
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}
