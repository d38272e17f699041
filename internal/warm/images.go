package warm

// Template snapshot images: DataDir/templates/<name>-<key>, made once per
// key by booting the template, waiting for its kernel and preloads, and
// checkpointing it.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/trace"
)

// key hashes what a template image depends on; share: its kernel's heap
// is shared from a file.
func (p *Pool) key(a sandbox.Artifact, share bool) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "artifact %s %s\nruntime %s\npreload %s\n", a.Key, a.RootFS, p.cfg.RuntimeKey, strings.Join(p.cfg.Preload, ","))
	if share {
		// Only then: the keys of images made without it stay as they were.
		fmt.Fprintf(h, "share-heap\n")
	}
	for _, f := range p.cfg.Files {
		fh, err := os.Open(f)
		if err != nil {
			return "", fmt.Errorf("hashing %s: %w", f, err)
		}
		fmt.Fprintf(h, "file %s\n", f)
		_, err = io.Copy(h, fh)
		fh.Close()
		if err != nil {
			return "", fmt.Errorf("hashing %s: %w", f, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// goMakeImage starts name's image maker unless it has one; ctx nil
// means Run's (before Run, nothing starts: Run starts the built-ins').
func (p *Pool) goMakeImage(ctx context.Context, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ctx == nil {
		ctx = p.ctx
	}
	if ctx == nil || ctx.Err() != nil || p.making[name] != nil {
		return
	}
	mctx, cancel := context.WithCancel(ctx)
	m := &maker{cancel: cancel, done: make(chan struct{})}
	p.making[name] = m
	p.running.Add(1)
	go func() {
		defer p.running.Done()
		defer close(m.done)
		p.makeImage(mctx, name)
		p.mu.Lock()
		if p.making[name] == m {
			delete(p.making, name)
		}
		p.mu.Unlock()
		cancel()
	}()
}

// maker is one template's image maker under way.
type maker struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// makeImage finds or makes template name's snapshot image, retrying with
// a growing pause while it fails, until ctx ends.
func (p *Pool) makeImage(ctx context.Context, name string) {
	log := p.log.With("template", name)
	for attempt, wait := 1, 10*time.Second; ; attempt++ {
		err := p.makeImageOnce(ctx, name, p.cfg.ShareHeap)
		if errors.Is(err, errShareHeap) && ctx.Err() == nil {
			// A kernel that cannot share (a custom template's preloads
			// left a thread running) still gets its snapshot, as
			// without --share-heap, under that key: the next start
			// tries again.
			log.Error("sharing the template kernel's heap failed; making its snapshot without", "err", err)
			err = p.makeImageOnce(ctx, name, false)
		}
		if err == nil || ctx.Err() != nil {
			return
		}
		log.Error("making the template snapshot failed; creates boot cold meanwhile", "attempt", attempt, "retry_in", wait, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Minute)
	}
}

// errShareHeap is makeImageOnce's error when the template's kernel did not
// share its heap.
var errShareHeap = errors.New("sharing the template's heap")

func (p *Pool) makeImageOnce(ctx context.Context, name string, share bool) (err error) {
	a, err := p.cfg.Artifact(ctx, name)
	if err != nil {
		return fmt.Errorf("waiting for the template: %w", err)
	}
	key, err := p.key(a, share)
	if err != nil {
		return err
	}
	dir := filepath.Join(p.templatesDir(), name+"-"+key)
	log := p.log.With("template", name, "image", dir)
	if _, err := os.Stat(filepath.Join(dir, readyMarker)); err == nil {
		p.removeOld(name, dir)
		p.setImage(name, dir)
		log.Info("template snapshot found")
		return nil
	}
	begin := time.Now()
	defer func() { p.cfg.Metrics.TemplateBuilt(name, metrics.BuildSnapshot, time.Since(begin), err) }()
	ctx, sp := trace.Start(ctx, "template.snapshot", trace.Template(name))
	defer func() { trace.End(sp, err) }()
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	plan := node.Plan{ProjectID: store.InternalProject, Role: store.RoleTemplate, Template: name,
		Envs: []string{"LIZARD_AGENT_PRELOAD=" + strings.Join(p.cfg.Preload, ",")}, Limits: p.cfg.Limits, Internet: p.cfg.Internet}
	if share {
		// The file the kernel maps its heap from, read-only in the
		// sandbox; the checkpoint keeps its own copy (the runtime's), so
		// the directory goes on every path, after the sandbox.
		plan.HeapDir = dir + ".heap"
		if err := os.RemoveAll(plan.HeapDir); err != nil {
			return err
		}
		if err := os.MkdirAll(plan.HeapDir, 0o755); err != nil {
			return fmt.Errorf("making the template's heap directory: %w", err)
		}
		defer os.RemoveAll(plan.HeapDir)
		plan.Envs = append(plan.Envs, "LIZARD_AGENT_SHARE_HEAP=1")
	}
	sb, err := p.node.Create(ctx, plan)
	if err != nil {
		return fmt.Errorf("booting the template sandbox: %w", err)
	}
	blog := log.With("sandbox_id", sb.ID)
	defer func() {
		// The sandbox only exists to be checkpointed.
		if err := p.node.End(context.WithoutCancel(ctx), sb.ID, api.StateKilled, "its template snapshot was taken (or failed)"); err != nil {
			blog.Error("killing the template sandbox", "err", err)
		}
	}()
	ready := time.Now()
	if err := p.node.Agents().Ready(ctx, sb.ID); err != nil {
		return err
	}
	blog.Info("template sandbox ready", "kernel_wait", time.Since(ready).Round(time.Millisecond))
	if plan.HeapDir != "" {
		hs, err := p.node.Agents().ShareHeap(ctx, sb.ID, plan.HeapDir)
		if err != nil {
			return fmt.Errorf("%w: %w", errShareHeap, err)
		}
		blog.Info("template heap shared", "regions", hs.Regions, "bytes", hs.Bytes, "stored", hs.Stored, "took", time.Duration(hs.Millis)*time.Millisecond)
	}
	// Close our kept-alive connections to it first: the image would keep
	// them established, and the first sandbox restored from it gets this
	// sandbox's address, where our new connections could collide with them.
	p.node.Agents().CloseIdle()
	time.Sleep(100 * time.Millisecond) // for the FINs to be answered
	if err := p.node.Checkpoint(ctx, sb.ID, tmp); err != nil {
		return fmt.Errorf("checkpointing the template sandbox: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, readyMarker), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o600); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("marking the template snapshot: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("placing the template snapshot: %w", err)
	}
	p.removeOld(name, dir)
	p.setImage(name, dir)
	log.Info("template snapshot made", "took", time.Since(begin).Round(time.Millisecond))
	return nil
}

// removeOld removes name's images other than keep.
func (p *Pool) removeOld(name, keep string) {
	entries, _ := os.ReadDir(p.templatesDir())
	for _, e := range entries {
		path := filepath.Join(p.templatesDir(), e.Name())
		rest, ok := strings.CutPrefix(e.Name(), name+"-")
		// Keys are 16 hex digits (plus ".tmp" while made, ".heap" for
		// the heap's directory a crash left).
		if !ok || path == keep || len(strings.TrimSuffix(strings.TrimSuffix(rest, ".tmp"), ".heap")) != 16 {
			continue
		}
		p.log.Info("removing an old template snapshot", "image", path)
		if err := os.RemoveAll(path); err != nil {
			p.log.Error("removing an old template snapshot", "image", path, "err", err)
		}
	}
}
