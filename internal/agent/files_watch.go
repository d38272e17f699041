package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/api"
)

// Bounds on file watching, per sandbox: every watched directory is an
// inotify watch, kernel (gVisor's Sentry) memory the sandbox's code does
// not pay for, so a client asking for a recursive watch of / or opening
// watches in a loop is stopped here rather than by the Sentry.
const (
	maxWatchStreams = 64
	maxWatchDirs    = 8192
)

// watchBudget counts the watch streams and watched directories of the
// sandbox.
type watchBudget struct {
	mu      sync.Mutex
	streams int
	dirs    int
}

func (b *watchBudget) openStream() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.streams >= maxWatchStreams {
		return false
	}
	b.streams++
	return true
}

func (b *watchBudget) closeStream() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.streams--
}

// takeDir reserves one watched directory.
func (b *watchBudget) takeDir() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dirs >= maxWatchDirs {
		return false
	}
	b.dirs++
	return true
}

func (b *watchBudget) giveDir() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dirs--
}

// errTooManyDirs: the tree to watch has more directories than the
// sandbox's budget has left.
var errTooManyDirs = fmt.Errorf("more than %d directories are watched in this sandbox; watch a smaller tree", maxWatchDirs)

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_ONLYDIR

// watcher turns one inotify instance's events on a directory (and, when
// recursive, every directory below it, followed as they come and go) into
// FileEvents named relative to the directory.
type watcher struct {
	f         *os.File // the inotify instance, non-blocking: Close wakes a Read
	recursive bool
	budget    *watchBudget
	root      string
	rootWD    int32
	dirs      map[int32]string // watch descriptor -> directory relative to root ("" for root)
	// uploads holds the rename cookies of upload temporaries moved away
	// and whether each made its file (true) or replaced one, until the
	// move's other half names the file.
	uploads map[uint32]bool
}

// maxPendingUploads bounds uploads: a rename's two halves come together,
// so more pending means halves that never came (moved out of the tree).
const maxPendingUploads = 64

func newWatcher(root string, recursive bool, budget *watchBudget) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("starting inotify: %w", err)
	}
	w := &watcher{f: os.NewFile(uintptr(fd), "inotify"), recursive: recursive, budget: budget, root: root, dirs: map[int32]string{}}
	wd, err := w.add("")
	if err != nil {
		w.close()
		return nil, err
	}
	w.rootWD = wd
	if recursive {
		if err := w.addBelow("", nil); err != nil {
			w.close()
			return nil, err
		}
	}
	return w, nil
}

// add watches directory rel.
func (w *watcher) add(rel string) (int32, error) {
	if !w.budget.takeDir() {
		return 0, errTooManyDirs
	}
	// Not following symlinks: a link in the tree must not extend the
	// watch to wherever it points.
	dir := filepath.Join(w.root, rel)
	var wd int
	err := mayRead(dir)
	if err == nil {
		err = w.ctl(func(fd int) (err error) {
			wd, err = unix.InotifyAddWatch(fd, dir, watchMask|unix.IN_DONT_FOLLOW)
			return err
		})
	}
	if err != nil {
		w.budget.giveDir()
		return 0, err
	}
	if _, ok := w.dirs[int32(wd)]; ok {
		// Already watched (the same directory seen twice in a walk).
		w.budget.giveDir()
	}
	w.dirs[int32(wd)] = rel
	return int32(wd), nil
}

// mayRead returns an error unless the calling thread's user may read
// directory dir: Linux's inotify_add_watch asks for read permission, but
// gVisor's Sentry does not, so a watch run as the sandbox user (watch)
// would otherwise see the names made in a directory it may not list.
func mayRead(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "watch", Path: dir, Err: err}
	}
	return unix.Close(fd)
}

// addBelow watches every directory below rel. With emit, entries found
// are reported as created: they may have been made between rel's creation
// and its watch, unseen otherwise (mkdir -p a/b && touch a/b/f).
func (w *watcher) addBelow(rel string, emit func(name string, d fs.DirEntry)) error {
	return filepath.WalkDir(filepath.Join(w.root, rel), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			// Gone meanwhile, or unreadable: nothing to watch there.
			return nil
		}
		sub, _ := filepath.Rel(w.root, p)
		if sub == rel {
			return nil
		}
		if emit != nil && !(strings.HasPrefix(d.Name(), uploadTemp) && !d.IsDir()) {
			emit(sub, d)
		}
		if !d.IsDir() {
			return nil
		}
		if _, err := w.add(sub); errors.Is(err, errTooManyDirs) {
			return err
		}
		return nil
	})
}

// written reports whether d, found in a directory just watched, is a
// file with content: it was written before the watch could see it.
func written(d fs.DirEntry) bool {
	if !d.Type().IsRegular() {
		return false
	}
	fi, err := d.Info()
	return err == nil && fi.Size() > 0
}

// forget stops watching rel and every directory below it (moved away).
func (w *watcher) forget(rel string) {
	for wd, dir := range w.dirs {
		if dir == rel || strings.HasPrefix(dir, rel+"/") {
			_ = w.ctl(func(fd int) error {
				_, err := unix.InotifyRmWatch(fd, uint32(wd))
				return err
			})
			delete(w.dirs, wd)
			w.budget.giveDir()
		}
	}
}

// ctl runs fn on the instance's descriptor, which a concurrent Close (the
// client gone) cannot close, and another file take the number of, meanwhile.
func (w *watcher) ctl(fn func(fd int) error) error {
	rc, err := w.f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

func (w *watcher) close() {
	w.f.Close()
	w.budget.mu.Lock()
	w.budget.dirs -= len(w.dirs)
	w.budget.mu.Unlock()
	w.dirs = nil
}

// read waits for events and passes each to emit. It returns false when
// the watch has ended: the watched directory was removed or moved away,
// or the instance was closed.
func (w *watcher) read(buf []byte, emit func(api.FileEvent)) bool {
	n, err := w.f.Read(buf)
	if err != nil || n < unix.SizeofInotifyEvent {
		return false
	}
	now := time.Now().UTC()
	live := true
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
		off += unix.SizeofInotifyEvent + int(ev.Len)
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			// The Sentry dropped events: the stream cannot say what
			// happened, so it ends and the client may watch again.
			return false
		}
		dir, known := w.dirs[ev.Wd]
		if !known {
			continue // a watch removed a moment ago
		}
		if ev.Mask&unix.IN_IGNORED != 0 {
			delete(w.dirs, ev.Wd)
			w.budget.giveDir()
			if ev.Wd == w.rootWD {
				live = false
			}
			continue
		}
		if ev.Mask&unix.IN_DELETE_SELF != 0 {
			// Reported by its parent's IN_DELETE; the root's ends the
			// stream with its IN_IGNORED.
			continue
		}
		rel := filepath.Join(dir, name)
		isDir := ev.Mask&unix.IN_ISDIR != 0
		send := func(typ, name string) { emit(api.FileEvent{Type: typ, Name: name, Time: now}) }
		if strings.HasPrefix(name, uploadTemp) && !isDir {
			// An upload's temporary file (writeFile): its own events are
			// not the caller's file's, and nobody knows its name; its
			// rename over the file is reported as the file's below.
			if ev.Mask&unix.IN_MOVED_FROM != 0 {
				if len(w.uploads) >= maxPendingUploads || w.uploads == nil {
					w.uploads = map[uint32]bool{}
				}
				w.uploads[ev.Cookie] = strings.HasPrefix(name, uploadTempNew)
			}
			continue
		}
		if made, ok := w.uploads[ev.Cookie]; ok && ev.Cookie != 0 && ev.Mask&unix.IN_MOVED_TO != 0 {
			// An upload put in place: the events of the in-place write
			// E2B's envd makes (open, chown, write), so that both of
			// Lizard's surfaces and E2B's show a files.write the same:
			// a new file's create, chmod, write; a replaced one's chmod,
			// write (its truncation), write.
			delete(w.uploads, ev.Cookie)
			if made {
				send(api.FileCreate, rel)
				send(api.FileChmod, rel)
			} else {
				send(api.FileChmod, rel)
				send(api.FileWrite, rel)
			}
			send(api.FileWrite, rel)
			continue
		}
		switch {
		case ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			send(api.FileCreate, rel)
			if isDir && w.recursive {
				if _, err := w.add(rel); err == nil {
					_ = w.addBelow(rel, func(name string, d fs.DirEntry) {
						send(api.FileCreate, name)
						if written(d) {
							// Its writes came before its directory's
							// watch: say it has them, as a watch in
							// place would have (a make_dir then a
							// write, a client waiting for the write).
							send(api.FileWrite, name)
						}
					})
				}
			}
		case ev.Mask&unix.IN_MODIFY != 0:
			send(api.FileWrite, rel)
		case ev.Mask&unix.IN_DELETE != 0:
			send(api.FileRemove, rel)
		case ev.Mask&unix.IN_MOVED_FROM != 0:
			send(api.FileRename, rel)
			if isDir && w.recursive {
				w.forget(rel)
			}
		case ev.Mask&unix.IN_ATTRIB != 0:
			send(api.FileChmod, rel)
		}
	}
	return live
}

// watch streams the changes under a directory as NDJSON FileEvents until
// the client goes away or the directory does. The response's headers go
// out once the watch is in place: a client that has them sees every
// change made after. The whole watch runs as the call's user, on a thread
// of its own (fsuser.go): every directory it adds, then and as they are
// made, is one that user may read.
func (fa *fileAPI) watch(w http.ResponseWriter, r *http.Request) {
	u, p, ok := fa.fileCall(w, r)
	if !ok {
		return
	}
	recursive := false
	if v := r.URL.Query().Get("recursive"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			invalid(w, "recursive", "must be true or false, not %q", v)
			return
		}
		recursive = b
	}
	// Each event's entry, when asked for, is read as the event is sent:
	// by the agent beside the file, not by a caller's stat a round trip
	// later, when a polling caller may have asked for events already.
	var describe func(*api.FileEvent)
	if v := r.URL.Query().Get("includeEntry"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			invalid(w, "includeEntry", "must be true or false, not %q", v)
			return
		}
		resolve, ok := resolveSymlinks(w, r)
		if !ok {
			return
		}
		if b {
			// One name cache for the stream, its owners looked up before
			// the first event: in a sandbox, reading /etc/passwd and
			// /etc/group for each event made a polled watcher's events
			// come milliseconds after the write that made them.
			names := new(idNames)
			if fi, err := os.Stat(p); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					names.user(st.Uid)
					names.group(st.Gid)
				}
			}
			describe = func(ev *api.FileEvent) { ev.Entry = eventEntry(p, *ev, resolve, names) }
		}
	}
	if err := u.do(func() error { fa.watchAs(w, r, u, p, recursive, describe); return nil }); err != nil {
		u.fileError(w, p, err)
	}
}

func (fa *fileAPI) watchAs(w http.ResponseWriter, r *http.Request, u fsUser, p string, recursive bool, describe func(*api.FileEvent)) {
	fi, err := os.Stat(p)
	if err != nil {
		u.fileError(w, p, err)
		return
	}
	if !fi.IsDir() {
		invalid(w, "path", "%s is not a directory: watch the directory that holds it", p)
		return
	}
	if !fa.watches.openStream() {
		writeError(w, http.StatusConflict, api.CodeConflict, "%d watches are open in this sandbox already; close one first", maxWatchStreams)
		return
	}
	defer fa.watches.closeStream()
	wt, err := newWatcher(p, recursive, &fa.watches)
	if errors.Is(err, errTooManyDirs) {
		writeError(w, http.StatusConflict, api.CodeConflict, "watching %s: %v", p, err)
		return
	}
	if err != nil {
		u.fileError(w, p, err)
		return
	}
	defer wt.close()
	stop := context.AfterFunc(r.Context(), func() { wt.f.Close() })
	defer stop()

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	enc := json.NewEncoder(w)
	buf := make([]byte, 64<<10)
	for {
		var werr error
		live := wt.read(buf, func(ev api.FileEvent) {
			if describe != nil {
				describe(&ev)
			}
			if werr == nil {
				werr = enc.Encode(ev)
			}
		})
		if werr == nil {
			werr = rc.Flush()
		}
		if !live || werr != nil {
			return
		}
	}
}

// eventEntry describes the file of ev under the watched directory dir,
// as stat does, for a create, write or chmod of a file still there (nil
// otherwise: a removed or renamed-away file is not at its name).
func eventEntry(dir string, ev api.FileEvent, resolve bool, names *idNames) *api.EntryInfo {
	if ev.Name == "" || (ev.Type != api.FileCreate && ev.Type != api.FileWrite && ev.Type != api.FileChmod) {
		return nil
	}
	p := filepath.Join(dir, ev.Name)
	fi, err := os.Lstat(p)
	if err != nil {
		return nil
	}
	info := entryInfo(p, fi, names)
	if resolve {
		resolveLink(&info)
	}
	readMetadata(&info)
	return &info
}
