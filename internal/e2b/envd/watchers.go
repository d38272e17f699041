package envd

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/e2b/envd/proto/filesystem"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// Polled watches (CreateWatcher, GetWatcherEvents, RemoveWatcher), which
// E2B's synchronous Python SDK uses for files.watch_dir: the server holds
// the watch and keeps its events until the client asks for them. Each
// holds a call to its sandbox open for its life, which a pause or the
// sandbox's end ends; the next poll then reports why.

// Bounds: a watcher keeps at most maxWatcherEvents unread events and
// maxWatcherBytes of them (the oldest go first: a path may be 4 KiB, and
// code in the sandbox makes the events); a sandbox has at most
// maxSandboxWatchers, a project maxProjectWatchers and the server
// maxWatchers, so that one project cannot take them all; a watcher that
// ended is forgotten endedWatcherTTL later if nobody asked for why.
const (
	maxWatcherEvents   = 10_000
	maxWatcherBytes    = 1 << 20
	maxSandboxWatchers = 64
	maxProjectWatchers = 256
	maxWatchers        = 4096
)

var endedWatcherTTL = 5 * time.Minute

type watchers struct {
	mu   sync.Mutex
	byID map[string]*watcher
}

func newWatchers() *watchers { return &watchers{byID: map[string]*watcher{}} }

type watcher struct {
	project, sandbox string
	stop             context.CancelFunc

	mu     sync.Mutex
	events []*filesystem.FilesystemEvent
	bytes  int   // the events' size
	err    error // why the watch ended; nil while it runs
}

func (w *watcher) add(ev *filesystem.FilesystemEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := proto.Size(ev)
	for len(w.events) > 0 && (len(w.events) >= maxWatcherEvents || w.bytes+n > maxWatcherBytes) {
		w.bytes -= proto.Size(w.events[0])
		w.events = w.events[1:]
	}
	w.events = append(w.events, ev)
	w.bytes += n
}

func (w *watcher) end(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

// take returns the events kept since the last take, or why the watch
// ended once they have all been taken.
func (w *watcher) take() ([]*filesystem.FilesystemEvent, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.events) == 0 && w.err != nil {
		return nil, w.err
	}
	ev := w.events
	w.events, w.bytes = nil, 0
	return ev, nil
}

func (f *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	// The watch outlives this request: its call is cancelled by
	// RemoveWatcher, or ends with the sandbox.
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s, err := f.h.open(following(wctx))
	if err != nil {
		stop()
		return nil, rpcError(err)
	}
	m := req.Msg
	as := user(req.Header())
	dir, err := s.agent.Stat(s.ctx, as, m.GetPath())
	if err == nil {
		var ws Stream[api.FileEvent]
		ws, err = s.agent.Watch(s.ctx, as, dir.Path, m.GetRecursive(), m.GetIncludeEntry())
		if err == nil {
			w := &watcher{project: s.project, sandbox: s.sandbox, stop: stop}
			id, err := f.h.watchers.add(w)
			if err != nil {
				ws.Close()
				s.release()
				stop()
				return nil, rpcError(err)
			}
			go func() {
				defer s.release()
				defer stop()
				defer ws.Close()
				for {
					ev, err := ws.Next()
					if err != nil {
						w.end(watchEnd(s, err))
						time.AfterFunc(endedWatcherTTL, func() { f.h.watchers.forget(id, w) })
						return
					}
					if e := fsEvent(ev); e != nil {
						w.add(e)
					}
				}
			}()
			return connect.NewResponse(&filesystem.CreateWatcherResponse{WatcherId: id}), nil
		}
	}
	err = s.fail(err)
	s.release()
	stop()
	return nil, err
}

func (ws *watchers) add(w *watcher) (string, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	n, inProject := 0, 0
	for _, o := range ws.byID {
		if o.project == w.project {
			inProject++
			if o.sandbox == w.sandbox {
				n++
			}
		}
	}
	if n >= maxSandboxWatchers {
		return "", &errdefs.Error{Kind: errdefs.ErrRateLimited, Msg: fmt.Sprintf("sandbox %s has %d watchers, its most; stop some (RemoveWatcher) or watch with WatchDir", w.sandbox, maxSandboxWatchers)}
	}
	if inProject >= maxProjectWatchers {
		return "", &errdefs.Error{Kind: errdefs.ErrRateLimited, Msg: fmt.Sprintf("project %s has %d watchers, its most; stop some (RemoveWatcher) or watch with WatchDir", w.project, maxProjectWatchers)}
	}
	if len(ws.byID) >= maxWatchers {
		return "", &errdefs.Error{Kind: errdefs.ErrRateLimited, Msg: fmt.Sprintf("this server holds %d watchers, its most; stop some (RemoveWatcher) or watch with WatchDir", maxWatchers)}
	}
	id := rand.Text()
	ws.byID[id] = w
	return id, nil
}

// forget drops watcher id if it is still w.
func (ws *watchers) forget(id string, w *watcher) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.byID[id] == w {
		delete(ws.byID, id)
	}
}

// get returns the watcher id of the request's sandbox.
func (f *filesystemService) get(ctx context.Context, id string) (*watcher, error) {
	s, err := f.h.open(ctx)
	if err != nil {
		return nil, err
	}
	s.release()
	f.h.watchers.mu.Lock()
	w, ok := f.h.watchers.byID[id]
	f.h.watchers.mu.Unlock()
	if !ok || w.project != s.project || w.sandbox != s.sandbox {
		return nil, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("watcher %s not found", id)}
	}
	return w, nil
}

func (ws *watchers) remove(id string) {
	ws.mu.Lock()
	w, ok := ws.byID[id]
	delete(ws.byID, id)
	ws.mu.Unlock()
	if ok {
		w.stop()
	}
}

func (f *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	id := req.Msg.GetWatcherId()
	w, err := f.get(ctx, id)
	if err != nil {
		return nil, rpcError(err)
	}
	events, err := w.take()
	if err != nil {
		// It has said why it ended: it is gone now.
		f.h.watchers.remove(id)
		var ce *connect.Error
		if errors.As(err, &ce) {
			return nil, ce
		}
		return nil, rpcError(err)
	}
	return connect.NewResponse(&filesystem.GetWatcherEventsResponse{Events: events}), nil
}

func (f *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	id := req.Msg.GetWatcherId()
	if _, err := f.get(ctx, id); err != nil {
		return nil, rpcError(err)
	}
	f.h.watchers.remove(id)
	return connect.NewResponse(&filesystem.RemoveWatcherResponse{}), nil
}
