package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/pykernel"
)

// The preloaded heap shared from a file (docs/performance.md, issue 37):
// at template build, the default kernel writes its private writable
// memory to a dump, the node copies the dump into the host directory the
// sandbox sees read-only at api.HeapMount, and the kernel maps every
// region back from that file, so that every sandbox restored from the
// checkpoint shares those pages from the host's page cache. The sandbox
// can never write the file itself: the dump leaves through this agent.

// heapMapTimeout bounds the kernel's wait for the node's copy of the dump
// (~142 MB of address space, half of it zeros), holding its GIL.
const heapMapTimeout = time.Minute

// heapSharer is a kernel that can share its heap; *pykernel.Kernel is one.
type heapSharer interface {
	ShareHeap(ctx context.Context, s pykernel.HeapShare) (api.HeapShare, error)
}

// heapShare is the one share an agent serves in its lifetime. A sandbox
// restored from the template's checkpoint inherits it spent: code that
// calls its own agent can never start one.
type heapShare struct {
	mu   sync.Mutex
	done chan struct{} // made when the share starts, closed once the kernel answered
	res  api.HeapShare
	err  error
}

// heapDump answers POST /heap/dump: it asks the default Python kernel to
// share its heap, waits until the kernel has written the dump, and
// answers the dump, which the kernel's mapping then waits for the caller
// to have written to api.HeapMount/api.HeapFile.
func (a *Agent) heapDump(w http.ResponseWriter, r *http.Request) {
	if !a.cfg.ShareHeap {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no such endpoint %s: this agent was not started to share its heap (LIZARD_AGENT_SHARE_HEAP=1)", r.URL.Path)
		return
	}
	if runtime.GOARCH != "amd64" {
		writeError(w, http.StatusNotImplemented, api.CodeUnavailable, "sharing the heap needs x86-64; this agent runs on %s: run the server without --share-heap", runtime.GOARCH)
		return
	}
	a.heap.mu.Lock()
	started := a.heap.done != nil
	if !started {
		a.heap.done = make(chan struct{})
	}
	a.heap.mu.Unlock()
	if started {
		writeError(w, http.StatusConflict, api.CodeConflict, "this sandbox's heap was shared already: it is shared once, at its template's build")
		return
	}
	k, err := a.defaultPython(r.Context())
	if err != nil {
		a.heapEnd(api.HeapShare{}, err)
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "sharing the heap: %v", err)
		return
	}
	dir, err := os.MkdirTemp("", "lizard-heap-")
	if err == nil {
		// The kernel runs as the code's user and writes there.
		err = a.launch.user.chown(dir)
	}
	if err != nil {
		a.heapEnd(api.HeapShare{}, err)
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "sharing the heap: making its dump's directory: %v", err)
		return
	}
	defer os.RemoveAll(dir)
	s := pykernel.HeapShare{
		Dump:    filepath.Join(dir, "dump"),
		Ready:   filepath.Join(dir, "ready"),
		Map:     filepath.Join(a.cfg.HeapDir, api.HeapFile),
		Timeout: heapMapTimeout,
	}
	go func() {
		// Not the request's context: the kernel's answer comes after
		// this request has ended, to /heap/wait.
		ctx, cancel := context.WithTimeout(context.Background(), heapMapTimeout+time.Minute)
		defer cancel()
		a.heapEnd(k.ShareHeap(ctx, s))
	}()
	// The kernel makes the marker once the dump's last byte is written.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(s.Ready); err == nil {
			break
		}
		select {
		case <-a.heap.done:
			writeError(w, http.StatusInternalServerError, api.CodeInternal, "%v", a.heap.err)
			return
		case <-r.Context().Done():
			return // the kernel maps nothing once its wait times out
		case <-tick.C:
		}
	}
	f, err := os.Open(s.Dump)
	if err != nil {
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "sharing the heap: %v", err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "sharing the heap: %v", err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, f); err != nil {
		a.log.Warn("sending the heap's dump", "err", err)
	}
}

// heapEnd records the kernel's answer to the share.
func (a *Agent) heapEnd(res api.HeapShare, err error) {
	a.heap.res, a.heap.err = res, err
	close(a.heap.done)
	if err != nil {
		a.log.Error("sharing the heap", "err", err)
		return
	}
	a.log.Info("shared the heap", "regions", res.Regions, "bytes", res.Bytes, "stored", res.Stored, "ms", res.Millis)
}

// heapWait answers POST /heap/wait: the kernel's answer to the share
// POST /heap/dump started.
func (a *Agent) heapWait(w http.ResponseWriter, r *http.Request) {
	if !a.cfg.ShareHeap {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no such endpoint %s: this agent was not started to share its heap (LIZARD_AGENT_SHARE_HEAP=1)", r.URL.Path)
		return
	}
	a.heap.mu.Lock()
	done := a.heap.done
	a.heap.mu.Unlock()
	if done == nil {
		writeError(w, http.StatusConflict, api.CodeConflict, "no heap share under way: POST %s first", api.AgentHeapDumpPath)
		return
	}
	select {
	case <-done:
	case <-r.Context().Done():
		return
	}
	if a.heap.err != nil {
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "%v", a.heap.err)
		return
	}
	api.WriteJSON(w, http.StatusOK, a.heap.res)
}

// defaultPython is the default Python context's kernel once its preloads
// are imported.
func (a *Agent) defaultPython(ctx context.Context) (heapSharer, error) {
	select {
	case <-a.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if a.readyErr != nil {
		return nil, fmt.Errorf("the default kernel did not start: %w", a.readyErr)
	}
	a.mu.Lock()
	c := a.contexts[defaultContextID(langPython)]
	a.mu.Unlock()
	if c == nil {
		return nil, errors.New("no default python context")
	}
	k, err := a.kernel(ctx, c)
	if err != nil {
		return nil, err
	}
	s, ok := k.(heapSharer)
	if !ok {
		return nil, fmt.Errorf("the default kernel (%T) cannot share its heap", k)
	}
	return s, nil
}
