// Package warm makes creates fast: template snapshots and the warm pool.
//
// Once a template's root filesystem is ready, the node boots it once, as a
// sandbox of its own (role "template", in the internal project, never
// listed), waits until the agent's default kernel runs with Preload
// imported, checkpoints it into DataDir/templates/<name>-<key> and kills
// it. Creates then restore that image instead of booting: a restore skips
// the kernel start and the imports. The key hashes the template artifact's
// key, the runtime's image key, the injected binaries and the preload
// list, so a change to any of them makes a new image (the old one is
// removed).
//
// The warm pool keeps Size restored sandboxes per template (role "warm")
// that a create with the default shape claims at once.
package warm

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lizard-build/lizard/internal/agentclient"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

// DefaultPreload is what template snapshots import by default.
var DefaultPreload = []string{"numpy", "pandas", "matplotlib.pyplot"}

const (
	// DefaultMinAvailable: below this much MemAvailable the pool stops
	// refilling and gives sandboxes back, one per tick.
	DefaultMinAvailable = 1 << 30
	tick                = 2 * time.Second
	// templateFailures is how many restores of a template image in a row
	// may fail before it is thrown away and made again.
	templateFailures = 3
	readyMarker      = "lizard-template-ready"
	// DefaultRefillQuiet and DefaultRefillWait pace the refill after
	// claims (Config.RefillQuiet).
	DefaultRefillQuiet = 250 * time.Millisecond
	DefaultRefillWait  = 5 * time.Second
)

// Node is what template snapshots and the pool need of the node they
// serve; *node.Local is one.
type Node interface {
	Create(ctx context.Context, p node.Plan) (node.Sandbox, error)
	End(ctx context.Context, id, state, reason string) error
	Checkpoint(ctx context.Context, id, dir string) error
	Agents() *agentclient.Client
}

// Config says what to keep warm. Store, Artifact and DataDir are required.
type Config struct {
	Store     *store.Store
	Templates []string
	// Artifact waits for a template's artifact, as node.Config.Artifact.
	Artifact func(ctx context.Context, template string) (sandbox.Artifact, error)
	DataDir  string // images go to DataDir/templates
	// RuntimeKey is the runtime's ImageKey; Files the binaries injected
	// into sandboxes. Both are part of an image's key.
	RuntimeKey string
	Files      []string
	// Preload is what the template sandbox's kernel imports (nil:
	// DefaultPreload; empty: nothing).
	Preload []string
	// ShareHeap: the template sandbox's kernel shares its preloaded heap
	// from a file (node.Plan.HeapDir, agentclient.ShareHeap) before the
	// checkpoint, so that restores map it from the host's page cache and
	// copy only the pages they write (lizard serve --share-heap). Part of
	// an image's key.
	ShareHeap bool
	// Size is how many restored sandboxes per template are kept ready
	// for creates of the default shape, Limits and Internet (0: none).
	// Below MinAvailable bytes of MemAvailable (default 1 GiB; negative:
	// never) the pool shrinks instead. MemAvailable defaults to reading
	// /proc/meminfo.
	Size int
	// Sizes, when set, gives more templates a pool, by the name nodes
	// use (a custom template's reference), read again every tick: a
	// template built after the start gets its pool then. A built-in named
	// there takes that size instead of Size.
	Sizes  func(ctx context.Context) map[string]int
	Limits node.Limits
	// ImagesKeepShape says the runtime restores an image with the memory
	// and CPUs it was taken with, whatever a create asks (a VM's RAM and
	// vCPUs are part of its saved state): creates asking others boot.
	ImagesKeepShape bool
	Internet        bool
	MinAvailable    int64
	MemAvailable    func() (int64, error)
	// RefillQuiet: a refill restore waits until creates have claimed
	// nothing for this long, and RefillWait at most (defaults
	// DefaultRefillQuiet and DefaultRefillWait), so that a burst of
	// claims is served by the sandboxes restored for it before the pool
	// restores more beside it.
	RefillQuiet, RefillWait time.Duration
	Logger                  *slog.Logger
	// Metrics receives each template snapshot made; nil records nothing.
	Metrics *metrics.Metrics
}

// Pool holds each template's snapshot image, once made, and keeps the warm
// pool full. It implements node.Warm.
type Pool struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	dirs     map[string]string // template → ready image
	failures map[string]int    // template → restores failed in a row
	// making is the image maker of each template that has one (custom
	// templates get theirs on first use; Forget ends it).
	making map[string]*maker
	sizes  map[string]int  // Config.Sizes as last read
	node   Node            // set by Run
	ctx    context.Context // Run's, for remaking an image
	kick   chan struct{}   // wakes the pool
	// lastClaim is when a create last claimed a warm sandbox (UnixNano).
	lastClaim atomic.Int64
	// running counts Run and the image makers it started, for Drain to
	// wait on: a template sandbox being booted when the server stops must
	// be ended before the server exits.
	running sync.WaitGroup
}

var _ node.Warm = (*Pool)(nil)

// New returns a pool with no images yet; Run makes them.
func New(cfg Config) *Pool {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Preload == nil {
		cfg.Preload = DefaultPreload
	}
	if cfg.MinAvailable == 0 {
		cfg.MinAvailable = DefaultMinAvailable
	}
	if cfg.MemAvailable == nil {
		cfg.MemAvailable = memAvailable
	}
	if cfg.RefillQuiet == 0 {
		cfg.RefillQuiet = DefaultRefillQuiet
	}
	if cfg.RefillWait == 0 {
		cfg.RefillWait = DefaultRefillWait
	}
	return &Pool{cfg: cfg, log: cfg.Logger, dirs: map[string]string{}, failures: map[string]int{}, kick: make(chan struct{}, 1),
		making: map[string]*maker{}, sizes: map[string]int{}}
}

// Run makes each template's snapshot image, then keeps the warm pool full,
// with n, until ctx ends. Call it after the node has reconciled.
func (p *Pool) Run(ctx context.Context, n Node) {
	p.running.Add(1)
	defer p.running.Done()
	p.mu.Lock()
	p.node, p.ctx = n, ctx
	p.mu.Unlock()
	if err := p.cfg.Store.CreateProject(ctx, store.InternalProject, time.Now().UTC()); err != nil && !errors.Is(err, store.ErrConflict) {
		p.log.Error("creating the internal project; no template snapshots", "err", err)
		return
	}
	for _, name := range p.cfg.Templates {
		p.goMakeImage(ctx, name)
	}
	if p.cfg.Size > 0 || p.cfg.Sizes != nil {
		p.fill(ctx)
	}
}

func (p *Pool) templatesDir() string { return filepath.Join(p.cfg.DataDir, "templates") }

// Image implements node.Warm. The image is taken with the default disk
// limit, which its restores keep: a sandbox asking another boots; so does
// one asking other memory or CPUs when the runtime keeps those too.
func (p *Pool) Image(template string, limits node.Limits) string {
	if limits.DiskBytes != p.cfg.Limits.DiskBytes {
		return ""
	}
	if p.cfg.ImagesKeepShape && (limits.MemoryBytes != p.cfg.Limits.MemoryBytes || limits.CPUs != p.cfg.Limits.CPUs) {
		return ""
	}
	p.mu.Lock()
	dir := p.dirs[template]
	p.mu.Unlock()
	if dir == "" {
		// A custom template's image is made on first use.
		p.goMakeImage(nil, template)
	}
	return dir
}

// Pool implements node.Warm: the pool serves creates of the default shape
// only, since a claimed sandbox's limits and egress were fixed when it
// started.
func (p *Pool) Pool(template string, limits node.Limits, internet bool) bool {
	return p.size(template) > 0 && limits == p.cfg.Limits && internet == p.cfg.Internet
}

// size is how many warm sandboxes template gets.
func (p *Pool) size(template string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n, ok := p.sizes[template]; ok {
		return n
	}
	if slices.Contains(p.cfg.Templates, template) {
		return p.cfg.Size
	}
	return 0
}

// Forget drops what the pool keeps for template (a custom template
// deleted or rebuilt under its name): its image maker, its image and its
// warm sandboxes.
func (p *Pool) Forget(ctx context.Context, template string) {
	p.mu.Lock()
	m := p.making[template]
	delete(p.dirs, template)
	delete(p.failures, template)
	n := p.node
	p.mu.Unlock()
	if m != nil {
		// Its template sandbox is ended before it returns: the build it
		// boots from may be removed next.
		m.cancel()
		select {
		case <-m.done:
		case <-ctx.Done():
		}
	}
	p.removeOld(template, "")
	if n == nil {
		return
	}
	for _, sb := range p.warm(ctx, template) {
		p.endWarm(ctx, n, sb.ID, "its template was deleted or rebuilt")
	}
}

// Claimed implements node.Warm.
func (p *Pool) Claimed(string) {
	p.lastClaim.Store(time.Now().UnixNano())
	p.wake()
}

func (p *Pool) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *Pool) setImage(template, dir string) {
	p.mu.Lock()
	p.dirs[template] = dir
	p.failures[template] = 0
	p.mu.Unlock()
	p.wake()
}

// Restored implements node.Warm: after templateFailures failed restores
// in a row the image is thrown away and made again.
func (p *Pool) Restored(ctx context.Context, template, image string, err error) {
	p.mu.Lock()
	if err == nil {
		p.failures[template] = 0
		p.mu.Unlock()
		return
	}
	p.failures[template]++
	drop := p.failures[template] >= templateFailures && p.dirs[template] == image
	if drop {
		delete(p.dirs, template)
	}
	runCtx := p.ctx
	p.mu.Unlock()
	if drop && runCtx != nil {
		p.log.Error("template snapshot failed too often; making it again", "template", template, "image", image)
		os.RemoveAll(image)
		p.goMakeImage(runCtx, template)
	}
}
