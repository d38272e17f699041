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
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lizard-build/lizard/api"
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
)

// Node is what template snapshots and the pool need of the node they
// serve; *node.Local is one.
type Node interface {
	Create(ctx context.Context, p node.Plan) (store.Sandbox, error)
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
	// Preload is what the template sandbox's kernel imports (default
	// DefaultPreload).
	Preload []string
	// Size is how many restored sandboxes per template are kept ready
	// for creates of the default shape, Limits and Internet (0: none).
	// Below MinAvailable bytes of MemAvailable (default 1 GiB; negative:
	// never) the pool shrinks instead. MemAvailable defaults to reading
	// /proc/meminfo.
	Size         int
	Limits       sandbox.Limits
	Internet     bool
	MinAvailable int64
	MemAvailable func() (int64, error)
	Logger       *slog.Logger
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
	node     Node              // set by Run
	ctx      context.Context   // Run's, for remaking an image
	kick     chan struct{}     // wakes the pool
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
	return &Pool{cfg: cfg, log: cfg.Logger, dirs: map[string]string{}, failures: map[string]int{}, kick: make(chan struct{}, 1)}
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
	if p.cfg.Size > 0 {
		p.fill(ctx)
	}
}

func (p *Pool) templatesDir() string { return filepath.Join(p.cfg.DataDir, "templates") }

// Image implements node.Warm. The image is taken with the default disk
// limit, which its restores keep: a sandbox asking another boots.
func (p *Pool) Image(template string, limits sandbox.Limits) string {
	if limits.DiskBytes != p.cfg.Limits.DiskBytes {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dirs[template]
}

// Pool implements node.Warm: the pool serves creates of the default shape
// only, since a claimed sandbox's limits and egress were fixed when it
// started.
func (p *Pool) Pool(template string, limits sandbox.Limits, internet bool) bool {
	return p.cfg.Size > 0 && limits == p.cfg.Limits && internet == p.cfg.Internet
}

// Claimed implements node.Warm.
func (p *Pool) Claimed(string) { p.wake() }

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

// key hashes what a template image depends on.
func (p *Pool) key(a sandbox.Artifact) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "artifact %s %s\nruntime %s\npreload %s\n", a.Key, a.RootFS, p.cfg.RuntimeKey, strings.Join(p.cfg.Preload, ","))
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

func (p *Pool) goMakeImage(ctx context.Context, name string) {
	p.running.Add(1)
	go func() {
		defer p.running.Done()
		p.makeImage(ctx, name)
	}()
}

// makeImage finds or makes template name's snapshot image, retrying with
// a growing pause while it fails, until ctx ends.
func (p *Pool) makeImage(ctx context.Context, name string) {
	log := p.log.With("template", name)
	for attempt, wait := 1, 10*time.Second; ; attempt++ {
		err := p.makeImageOnce(ctx, name)
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

func (p *Pool) makeImageOnce(ctx context.Context, name string) (err error) {
	a, err := p.cfg.Artifact(ctx, name)
	if err != nil {
		return fmt.Errorf("waiting for the template: %w", err)
	}
	key, err := p.key(a)
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
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	sb, err := p.node.Create(ctx, node.Plan{ProjectID: store.InternalProject, Role: store.RoleTemplate, Template: name,
		Envs: []string{"LIZARD_AGENT_PRELOAD=" + strings.Join(p.cfg.Preload, ",")}, Limits: p.cfg.Limits, Internet: p.cfg.Internet})
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
		// Keys are 16 hex digits (plus ".tmp" while made).
		if !ok || path == keep || len(strings.TrimSuffix(rest, ".tmp")) != 16 {
			continue
		}
		p.log.Info("removing an old template snapshot", "image", path)
		if err := os.RemoveAll(path); err != nil {
			p.log.Error("removing an old template snapshot", "image", path, "err", err)
		}
	}
}

// Drain waits (as ctx allows) for Run, whose context has ended, and its
// image makers, then ends the warm pool's sandboxes. The server calls it
// on its way out: pool sandboxes hold no one's state and would otherwise
// sit idle, holding memory, until the next start ends them anyway.
func (p *Pool) Drain(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		p.running.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		p.log.Error("the warm pool did not stop in time; draining it anyway", "err", ctx.Err())
	}
	p.mu.Lock()
	n := p.node
	p.mu.Unlock()
	if n == nil {
		return
	}
	for _, sb := range p.warm(ctx, "") {
		p.endWarm(ctx, n, sb.ID, "the server stopped")
	}
}

// endWarm ends warm sandbox id unless a create claimed it meanwhile.
func (p *Pool) endWarm(ctx context.Context, n Node, id, reason string) {
	cur, err := p.cfg.Store.GetSandbox(ctx, id)
	if err != nil || !cur.Live() || cur.Role != store.RoleWarm {
		return
	}
	if err := n.End(ctx, id, api.StateKilled, reason); err != nil {
		p.log.Error("ending a warm sandbox", "sandbox_id", id, "err", err)
	}
}

// warm lists the live warm sandboxes of template ("": of all).
func (p *Pool) warm(ctx context.Context, template string) []store.Sandbox {
	rows, err := p.cfg.Store.ListSandboxes(ctx, store.Filter{Role: store.RoleWarm, LiveOnly: true})
	if err != nil {
		p.log.Error("listing the warm pool", "err", err)
		return nil
	}
	var out []store.Sandbox
	for _, sb := range rows {
		if template == "" || sb.Template == template {
			out = append(out, sb)
		}
	}
	return out
}

// fill keeps the pool full, and smaller under memory pressure.
func (p *Pool) fill(ctx context.Context) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		for _, name := range p.cfg.Templates {
			p.fillTemplate(ctx, name)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.kick:
		}
	}
}

// fillTemplate restores warm sandboxes of template until the pool is
// full, or ends one if memory is short.
func (p *Pool) fillTemplate(ctx context.Context, name string) {
	for ctx.Err() == nil {
		warm := p.warm(ctx, name)
		if low, avail := p.memoryLow(); low {
			if len(warm) > 0 {
				sb := warm[len(warm)-1]
				p.log.Warn("memory is short; shrinking the warm pool", "template", name, "sandbox_id", sb.ID,
					"mem_available", avail, "pool", len(warm)-1)
				p.endWarm(ctx, p.node, sb.ID, "the warm pool shrank: memory is short")
			}
			return
		}
		dir := p.Image(name, p.cfg.Limits)
		if len(warm) >= p.cfg.Size || dir == "" {
			return
		}
		_, err := p.node.Create(ctx, node.Plan{ProjectID: store.InternalProject, Role: store.RoleWarm, Template: name,
			Limits: p.cfg.Limits, Internet: p.cfg.Internet, Image: dir})
		if err != nil {
			if ctx.Err() == nil {
				p.log.Error("filling the warm pool", "template", name, "err", err)
				p.Restored(ctx, name, dir, err)
			}
			return
		}
	}
}

// memoryLow reports whether MemAvailable is under the pool's floor.
func (p *Pool) memoryLow() (bool, int64) {
	if p.cfg.MinAvailable < 0 {
		return false, 0
	}
	avail, err := p.cfg.MemAvailable()
	if err != nil {
		return false, 0
	}
	return avail < p.cfg.MinAvailable, avail
}

// memAvailable reads MemAvailable from /proc/meminfo, in bytes.
func memAvailable() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, errors.New("no MemAvailable in /proc/meminfo")
}
