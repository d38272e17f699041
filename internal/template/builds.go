package template

import (
	"path/filepath"

	"context"
	"github.com/lizard-build/lizard/internal/sandbox"
	"io"
	"log/slog"
	"sync"
	"time"
)

// EnsureFunc builds or finds a template's root filesystem; Ensure.
type EnsureFunc func(ctx context.Context, cacheDir, name string, progress io.Writer) (rootfs string, err error)

// Builds runs template builds in the background, one at a time per
// template, and lets sandbox creation wait for them. A build that fails is
// tried again by the next caller that needs it.
type Builds struct {
	ctx      context.Context // bounds builds: the server's life, not a request's
	ensure   EnsureFunc
	cacheDir string
	progress io.Writer
	logger   *slog.Logger

	mu     sync.Mutex
	builds map[string]*build
}

type build struct {
	done   chan struct{}
	rootfs string
	err    error
}

// NewBuilds returns a Builds whose builds run until ctx ends; ensure is
// normally Ensure.
func NewBuilds(ctx context.Context, ensure EnsureFunc, cacheDir string, progress io.Writer, logger *slog.Logger) *Builds {
	if progress == nil {
		progress = io.Discard
	}
	return &Builds{ctx: ctx, ensure: ensure, cacheDir: cacheDir, progress: progress, logger: logger, builds: map[string]*build{}}
}

// Start begins building name unless it is built or building.
func (t *Builds) Start(name string) { t.start(name) }

func (t *Builds) start(name string) *build {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b, ok := t.builds[name]; ok {
		select {
		case <-b.done:
			if b.err == nil {
				return b
			}
			// Failed: build again.
		default:
			return b
		}
	}
	b := &build{done: make(chan struct{})}
	t.builds[name] = b
	go func() {
		start := time.Now()
		t.logger.Info("preparing template", "template", name)
		b.rootfs, b.err = t.ensure(t.ctx, t.cacheDir, name, t.progress)
		if b.err != nil {
			t.logger.Error("preparing template failed", "template", name, "err", b.err)
		} else {
			t.logger.Info("template ready", "template", name, "rootfs", b.rootfs, "took", time.Since(start).Round(time.Millisecond))
		}
		close(b.done)
	}()
	return b
}

// Artifact waits (as long as ctx allows) for name's root filesystem.
func (t *Builds) Artifact(ctx context.Context, name string) (sandbox.Artifact, error) {
	b := t.start(name)
	select {
	case <-b.done:
		if b.err != nil {
			return sandbox.Artifact{}, b.err
		}
		// The rootfs lives in <name>-<recipe hash>/: its directory's name
		// changes with its content.
		return sandbox.Artifact{Name: name, Key: filepath.Base(filepath.Dir(b.rootfs)), RootFS: b.rootfs}, nil
	case <-ctx.Done():
		return sandbox.Artifact{}, ctx.Err()
	}
}
