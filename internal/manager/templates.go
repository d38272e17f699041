package manager

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// EnsureFunc builds or finds a template's root filesystem; template.Ensure.
type EnsureFunc func(ctx context.Context, cacheDir, name string, progress io.Writer) (rootfs string, err error)

// Templates runs template builds in the background, one at a time per
// template, and lets sandbox creation wait for them. A build that fails is
// tried again by the next caller that needs it.
type Templates struct {
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

// NewTemplates returns a Templates whose builds run until ctx ends.
func NewTemplates(ctx context.Context, ensure EnsureFunc, cacheDir string, progress io.Writer, logger *slog.Logger) *Templates {
	if progress == nil {
		progress = io.Discard
	}
	return &Templates{ctx: ctx, ensure: ensure, cacheDir: cacheDir, progress: progress, logger: logger, builds: map[string]*build{}}
}

// Start begins building name unless it is built or building.
func (t *Templates) Start(name string) { t.start(name) }

func (t *Templates) start(name string) *build {
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

// RootFS waits (as long as ctx allows) for name's root filesystem.
func (t *Templates) RootFS(ctx context.Context, name string) (string, error) {
	b := t.start(name)
	select {
	case <-b.done:
		return b.rootfs, b.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}
