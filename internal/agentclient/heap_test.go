package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/sparse"
)

// heapAgent serves /heap/dump and /heap/wait as an agent does: the dump,
// then the kernel's answer once the file is in dir.
func heapAgent(t *testing.T, dir string, dump []byte, dumpStatus int) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case api.AgentHeapDumpPath:
			if _, err := os.Stat(filepath.Join(dir, api.HeapFile)); err == nil {
				t.Errorf("an old heap file is still there when the dump is asked for: the kernel would map it")
			}
			if dumpStatus != http.StatusOK {
				w.WriteHeader(dumpStatus)
				w.Write([]byte(`{"code":"conflict","message":"shared already"}`))
				return
			}
			w.Header().Set("Content-Length", strconv.Itoa(len(dump)))
			w.Write(dump)
		case api.AgentHeapWaitPath:
			got, err := os.ReadFile(filepath.Join(dir, api.HeapFile))
			if err != nil || !bytes.Equal(got, dump) {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			json.NewEncoder(w).Encode(api.HeapShare{Regions: 3, Bytes: int64(len(dump)), Stored: 2 * sparse.Block, Millis: 7})
		}
	}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	return New(func(context.Context, string) (string, error) { return addr, nil }, nil, nil)
}

func TestShareHeapWritesSparse(t *testing.T) {
	// 64 pages, two of them not zero (one at the very end, so the file's
	// size is the dump's own), and a partial last block of zeros.
	dump := make([]byte, 64*sparse.Block+100)
	copy(dump[5*sparse.Block:], "region one")
	dump[64*sparse.Block-1] = 0xff
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, api.HeapFile), []byte("an older build's"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := heapAgent(t, dir, dump, http.StatusOK)
	res, err := c.ShareHeap(context.Background(), "sbx", dir)
	if err != nil {
		t.Fatal(err)
	}
	if res.Regions != 3 || res.Bytes != int64(len(dump)) || res.Millis != 7 {
		t.Errorf("ShareHeap = %+v; want the agent's answer", res)
	}
	path := filepath.Join(dir, api.HeapFile)
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, dump) {
		t.Fatalf("heap file: %d bytes, equal %v, err %v; want the dump's %d", len(got), bytes.Equal(got, dump), err, len(dump))
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 >= st.Size {
		t.Errorf("heap file takes %d bytes on disk for %d: not sparse", st.Blocks*512, st.Size)
	}
	if st.Mode&0o222 != 0 {
		t.Errorf("heap file mode %o; want read-only", st.Mode&0o777)
	}
	assertNoTemp(t, dir, 1)
}

func TestShareHeapRefused(t *testing.T) {
	dir := t.TempDir()
	c := heapAgent(t, dir, nil, http.StatusConflict)
	_, err := c.ShareHeap(context.Background(), "sbx", dir)
	if err == nil || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "shared already") {
		t.Fatalf("ShareHeap = %v; want the agent's 409 and its message", err)
	}
	assertNoTemp(t, dir, 0)
}

func TestShareHeapCancelled(t *testing.T) {
	dir := t.TempDir()
	// A dump whose body never ends: the caller's context cuts it.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000000")
		w.Write(make([]byte, 1000))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	c := New(func(context.Context, string) (string, error) { return addr, nil }, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.ShareHeap(ctx, "sbx", dir)
		errc <- err
	}()
	// Once the temporary file exists the body is being read.
	for {
		if m, _ := filepath.Glob(filepath.Join(dir, ".heap-*.tmp")); len(m) > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("ShareHeap succeeded with its context cancelled")
	}
	assertNoTemp(t, dir, 0)
}

// assertNoTemp checks dir holds files entries and no temporary file.
func assertNoTemp(t *testing.T, dir string, files int) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(ents) != files || (files == 1 && names[0] != api.HeapFile) {
		t.Errorf("dir holds %v; want %d file (heap) and no temporary file", names, files)
	}
}
