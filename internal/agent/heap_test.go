package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentclient"
	"github.com/lizard-build/lizard/internal/pykernel"
	"github.com/lizard-build/lizard/internal/testenv"
)

// sharingKernel shares its "heap" as kernel.py does: it writes the dump,
// makes the marker, waits for the map file, and answers what it read.
type sharingKernel struct {
	*fakeKernel
	dump []byte
	err  error // refuses with it
}

func (k *sharingKernel) ShareHeap(ctx context.Context, s pykernel.HeapShare) (api.HeapShare, error) {
	if k.err != nil {
		return api.HeapShare{}, k.err
	}
	if err := os.WriteFile(s.Dump, k.dump, 0o600); err != nil {
		return api.HeapShare{}, err
	}
	if err := os.WriteFile(s.Ready, nil, 0o600); err != nil {
		return api.HeapShare{}, err
	}
	deadline := time.Now().Add(s.Timeout)
	for {
		got, err := os.ReadFile(s.Map)
		if err == nil {
			if !bytes.Equal(got, k.dump) {
				return api.HeapShare{}, errors.New("the map file is not the dump")
			}
			return api.HeapShare{Regions: 1, Bytes: int64(len(got)), Stored: int64(len(got)), Millis: 1}, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return api.HeapShare{}, errors.New("no map file")
		}
		time.Sleep(time.Millisecond)
	}
}

func newHeapAgent(t *testing.T, k *sharingKernel, enabled bool) (*testAgent, string) {
	t.Helper()
	dir := t.TempDir()
	ks := &kernels{make: func(cfg pykernel.Config) (*fakeKernel, error) { return &fakeKernel{cfg: cfg}, nil }}
	ta := newTestAgentKernels(t, ks, func(c *Config) {
		c.ShareHeap, c.HeapDir = enabled, dir
		c.StartKernel = func(ctx context.Context, cfg pykernel.Config) (Kernel, error) {
			fk, err := ks.start(ctx, cfg)
			if err != nil {
				return nil, err
			}
			k.fakeKernel = fk.(*fakeKernel)
			return k, nil
		}
	})
	return ta, dir
}

func TestHeapShareOnce(t *testing.T) {
	k := &sharingKernel{dump: bytes.Repeat([]byte("heap"), 5000)}
	ta, dir := newHeapAgent(t, k, true)
	if runtime.GOARCH != "amd64" {
		if status, body := ta.do(t, "POST", api.AgentHeapDumpPath, nil); status != http.StatusNotImplemented || !strings.Contains(string(body), "x86-64") {
			t.Errorf("POST /heap/dump on %s = %d %s; want 501 saying x86-64", runtime.GOARCH, status, body)
		}
		return
	}
	// The node's side: the dump, written where the kernel maps it from.
	status, body := ta.do(t, "POST", api.AgentHeapDumpPath, nil)
	if status != http.StatusOK || !bytes.Equal(body, k.dump) {
		t.Fatalf("POST /heap/dump = %d, %d bytes; want 200 and the kernel's %d", status, len(body), len(k.dump))
	}
	if err := os.WriteFile(filepath.Join(dir, api.HeapFile), body, 0o444); err != nil {
		t.Fatal(err)
	}
	status, body = ta.do(t, "POST", api.AgentHeapWaitPath, nil)
	var res api.HeapShare
	if status != http.StatusOK || json.Unmarshal(body, &res) != nil || res.Bytes != int64(len(k.dump)) {
		t.Fatalf("POST /heap/wait = %d %s; want 200 and what the kernel shared", status, body)
	}
	// The dump's directory is gone once sent.
	if m, _ := filepath.Glob(filepath.Join(os.TempDir(), "lizard-heap-*", "dump")); len(m) > 0 {
		t.Errorf("dumps left behind: %v", m)
	}
	// Once per agent lifetime: a restored sandbox inherits it spent.
	for range 2 {
		if status, body := ta.do(t, "POST", api.AgentHeapDumpPath, nil); status != http.StatusConflict || !strings.Contains(string(body), api.CodeConflict) {
			t.Errorf("second POST /heap/dump = %d %s; want 409 conflict", status, body)
		}
	}
}

func TestHeapShareKernelRefuses(t *testing.T) {
	k := &sharingKernel{err: errors.New("sharing the heap: RuntimeError: another thread runs")}
	ta, _ := newHeapAgent(t, k, true)
	if runtime.GOARCH != "amd64" {
		return // TestHeapShareOnce checks the 501
	}
	for _, path := range []string{api.AgentHeapDumpPath, api.AgentHeapWaitPath} {
		status, body := ta.do(t, "POST", path, nil)
		if status != http.StatusInternalServerError || !strings.Contains(string(body), "another thread runs") {
			t.Errorf("POST %s = %d %s; want 500 with the kernel's message", path, status, body)
		}
	}
}

func TestHeapShareNotEnabled(t *testing.T) {
	k := &sharingKernel{dump: []byte("heap")}
	ta, _ := newHeapAgent(t, k, false)
	for _, path := range []string{api.AgentHeapDumpPath, api.AgentHeapWaitPath} {
		if status, body := ta.do(t, "POST", path, nil); status != http.StatusNotFound || !strings.Contains(string(body), "LIZARD_AGENT_SHARE_HEAP") {
			t.Errorf("POST %s without LIZARD_AGENT_SHARE_HEAP = %d %s; want 404 saying so", path, status, body)
		}
	}
	// Nothing waits: a wait before any dump is refused at once.
	ta2, _ := newHeapAgent(t, &sharingKernel{}, true)
	if status, body := ta2.do(t, "POST", api.AgentHeapWaitPath, nil); status != http.StatusConflict {
		t.Errorf("POST /heap/wait before a dump = %d %s; want 409", status, body)
	}
}

func TestShareHeapConfig(t *testing.T) {
	for env, want := range map[string]bool{"1": true, "": false, "0": false} {
		cfg, err := LoadConfig(nil, func(k string) string {
			if k == "LIZARD_AGENT_SHARE_HEAP" {
				return env
			}
			return ""
		})
		if err != nil || cfg.ShareHeap != want {
			t.Errorf("LIZARD_AGENT_SHARE_HEAP=%q: ShareHeap %v, %v; want %v", env, cfg.ShareHeap, err, want)
		}
	}
}

// TestHeapShareRealKernel is the whole path but the sandbox: a real agent
// and kernel with the template's preloads, agentclient.ShareHeap as the
// node calls it, the kernel mapping its heap from the file the client
// wrote, and code running on it afterwards.
func TestHeapShareRealKernel(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the heap is shared on x86-64 alone")
	}
	python := testenv.Python(t)
	heapDir := t.TempDir()
	ta := newTestAgent(t, func(c *Config) {
		c.Python, c.StartKernel = python, nil
		c.Preload = []string{"numpy", "pandas"}
		c.ShareHeap, c.HeapDir = true, heapDir
	})
	addr := strings.TrimPrefix(ta.url, "http://")
	client := agentclient.New(func(context.Context, string) (string, error) { return addr, nil }, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := client.ShareHeap(ctx, "sbx", heapDir)
	if err != nil {
		t.Fatalf("ShareHeap: %v", err)
	}
	t.Logf("shared %+v", res)
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(heapDir, api.HeapFile), &st); err != nil {
		t.Fatal(err)
	}
	if res.Regions == 0 || st.Size != res.Bytes || st.Blocks*512 >= st.Size || res.Stored == 0 {
		t.Errorf("ShareHeap = %+v, the file %d bytes (%d on disk); want its size the kernel's, sparse", res, st.Size, st.Blocks*512)
	}
	ex := ta.execute(t, api.ExecuteRequest{Code: "import numpy, pandas\nprint(pandas.DataFrame({'x': numpy.arange(5)}).x.sum())"})
	if ex.stdout != "10\n" || ex.err != nil {
		t.Errorf("after the share: stdout %q, error %+v", ex.stdout, ex.err)
	}
	if _, err := client.ShareHeap(ctx, "sbx", heapDir); err == nil || !strings.Contains(err.Error(), "409") {
		t.Errorf("a second ShareHeap = %v; want the agent's 409", err)
	}
}
