package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/sparse"
)

// ShareHeap asks sandbox id's agent to share its default Python kernel's
// heap (docs/performance.md, "The preloaded heap shared from a file"):
// the kernel's dump is written to dir/api.HeapFile, which the sandbox
// sees read-only at api.HeapMount, and the kernel maps its regions back
// from it. The file is written sparse (its all-zero pages are holes:
// ~142 MB of address space, ~72 MB on disk), under a temporary name and
// renamed once whole and synced, since the kernel takes its appearance as
// the signal to map it; an older one is removed first for the same reason.
// It returns what the kernel shared.
func (c *Client) ShareHeap(ctx context.Context, id, dir string) (api.HeapShare, error) {
	var res api.HeapShare
	fail := func(format string, args ...any) (api.HeapShare, error) {
		return res, fmt.Errorf("sharing the heap of sandbox %s: "+format, append([]any{id}, args...)...)
	}
	dst := filepath.Join(dir, api.HeapFile)
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail("removing the old file: %w", err)
	}
	resp, err := c.call(ctx, http.MethodPost, id, api.AgentHeapDumpPath, nil, "", 0)
	if err != nil {
		return fail("%w", err)
	}
	defer resp.Body.Close()
	f, err := os.CreateTemp(dir, ".heap-*.tmp")
	if err != nil {
		return fail("%w", err)
	}
	tmp := f.Name()
	defer func() {
		if f != nil {
			f.Close()
		}
		if tmp != "" {
			os.Remove(tmp)
		}
	}()
	n, err := sparse.Copy(f, resp.Body)
	if err != nil {
		return fail("receiving the dump: %w", err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return fail("the dump ended after %d of %d bytes", n, resp.ContentLength)
	}
	// Read-only: the sandbox maps it MAP_PRIVATE, and its user must read it.
	if err := f.Chmod(0o444); err != nil {
		return fail("%w", err)
	}
	if err := f.Sync(); err != nil {
		return fail("syncing %s: %w", tmp, err)
	}
	err = f.Close()
	f = nil
	if err != nil {
		return fail("%w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fail("%w", err)
	}
	tmp = ""
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the rename, for a node that restarts
		d.Close()
	}
	wait, err := c.call(ctx, http.MethodPost, id, api.AgentHeapWaitPath, nil, "", 0)
	if err != nil {
		return fail("waiting for the kernel to map %s: %w", dst, err)
	}
	defer wait.Body.Close()
	if err := json.NewDecoder(io.LimitReader(wait.Body, 1<<20)).Decode(&res); err != nil {
		return fail("reading the kernel's answer: %w", err)
	}
	return res, nil
}
