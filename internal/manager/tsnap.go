package manager

// Template snapshots and the warm pool (issue 6). Once a template's root
// filesystem is ready the server boots it once, as a sandbox of its own
// (role "template", in the internal project, never listed), waits until the
// agent's default kernel runs with Config.Preload imported, checkpoints it
// into DataDir/templates/<name>-<key> and kills it. Creates then restore
// that image instead of booting: a restore skips the kernel start and the
// imports. The key hashes the root filesystem's path, the agent, lizard and
// runtime binaries and the preload list, so a change to any of them makes a
// new image (the old one is removed).
//
// The warm pool keeps WarmPool restored sandboxes per template (role
// "warm") that a create with the default shape claims at once.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/store"
)

// DefaultPreload is what template snapshots import by default.
var DefaultPreload = []string{"numpy", "pandas", "matplotlib.pyplot"}

// Defaults of the warm pool settings in Config.
const (
	// DefaultWarmPoolMinAvailable: below this much MemAvailable the pool
	// stops refilling and gives sandboxes back, one per tick.
	DefaultWarmPoolMinAvailable = 1 << 30
	warmPoolTick                = 2 * time.Second
	// templateFailures is how many restores of a template image in a row
	// may fail before it is thrown away and made again.
	templateFailures = 3
	readyMarker      = "lizard-template-ready"
)

// tsnaps holds each template's snapshot image, once made.
type tsnaps struct {
	mu       sync.Mutex
	dirs     map[string]string // template → ready image
	failures map[string]int    // template → restores failed in a row
	kick     chan struct{}     // wakes the warm pool
}

func (m *Manager) templatesDir() string { return filepath.Join(m.cfg.DataDir, "templates") }

// templateImage returns template's ready snapshot image, or "".
func (m *Manager) templateImage(template string) string {
	m.ts.mu.Lock()
	defer m.ts.mu.Unlock()
	return m.ts.dirs[template]
}

func (m *Manager) setTemplateImage(template, dir string) {
	m.ts.mu.Lock()
	m.ts.dirs[template] = dir
	m.ts.failures[template] = 0
	m.ts.mu.Unlock()
	m.kickPool()
}

func (m *Manager) kickPool() {
	select {
	case m.ts.kick <- struct{}{}:
	default:
	}
}

// StartBackground starts what runs beside the API until ctx ends: a
// template snapshot per template (unless Config.NoTemplateSnapshots) and
// the warm pool (if Config.WarmPool > 0). Call it after Reconcile.
func (m *Manager) StartBackground(ctx context.Context) {
	if m.cfg.DataDir == "" || m.cfg.NoTemplateSnapshots {
		return
	}
	if err := m.cfg.Store.CreateProject(ctx, store.InternalProject, m.now()); err != nil && !errors.Is(err, store.ErrConflict) {
		m.log.Error("creating the internal project; no template snapshots", "err", err)
		return
	}
	for _, name := range m.cfg.Templates {
		go m.makeTemplateSnapshot(ctx, name)
	}
	if m.cfg.WarmPool > 0 {
		go m.runWarmPool(ctx)
	}
}

// templateKey hashes what a template image depends on.
func (m *Manager) templateKey(rootfs string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "rootfs %s\npreload %s\n", rootfs, strings.Join(m.preload(), ","))
	for _, p := range []string{m.cfg.AgentBinary, m.cfg.LizardBinary, m.cfg.RuntimeBinary} {
		if p == "" {
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			return "", fmt.Errorf("hashing %s: %w", p, err)
		}
		fmt.Fprintf(h, "file %s\n", p)
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("hashing %s: %w", p, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func (m *Manager) preload() []string {
	if m.cfg.Preload != nil {
		return m.cfg.Preload
	}
	return DefaultPreload
}

// makeTemplateSnapshot finds or makes template name's snapshot image,
// retrying with a growing pause while it fails, until ctx ends.
func (m *Manager) makeTemplateSnapshot(ctx context.Context, name string) {
	log := m.log.With("template", name)
	for attempt, wait := 1, 10*time.Second; ; attempt++ {
		err := m.templateSnapshotOnce(ctx, name)
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

func (m *Manager) templateSnapshotOnce(ctx context.Context, name string) error {
	rootfs, err := m.cfg.RootFS(ctx, name)
	if err != nil {
		return fmt.Errorf("waiting for the root filesystem: %w", err)
	}
	key, err := m.templateKey(rootfs)
	if err != nil {
		return err
	}
	dir := filepath.Join(m.templatesDir(), name+"-"+key)
	log := m.log.With("template", name, "image", dir)
	if _, err := os.Stat(filepath.Join(dir, readyMarker)); err == nil {
		m.removeOldTemplateImages(name, dir)
		m.setTemplateImage(name, dir)
		log.Info("template snapshot found")
		return nil
	}
	begin := time.Now()
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	plan, err := m.validate(api.CreateSandboxRequest{Template: name})
	if err != nil {
		return err
	}
	plan.timeoutMs = 0
	plan.envs = []string{"LIZARD_AGENT_PRELOAD=" + strings.Join(m.preload(), ",")}
	sb := store.Sandbox{ID: newID(), ProjectID: store.InternalProject, Template: name, State: api.StateStarting,
		CreatedAt: m.now(), Shape: plan.shape(), Role: store.RoleTemplate}
	if err := m.cfg.Store.CreateSandbox(ctx, &sb, m.cfg.Pool.Slots(), m.cfg.Pool.addrStrings); err != nil {
		return fmt.Errorf("recording the template sandbox: %w", err)
	}
	unlock := m.locks.lock(sb.ID)
	defer unlock()
	blog := log.With("sandbox_id", sb.ID)
	defer func() {
		// The sandbox only exists to be checkpointed.
		if err := m.end(ctx, sb, api.StateKilled, "its template snapshot was taken (or failed)"); err != nil {
			blog.Error("killing the template sandbox", "err", err)
		}
	}()
	if err := m.boot(ctx, blog, sb, rootfs, plan); err != nil {
		return fmt.Errorf("booting the template sandbox: %w", err)
	}
	ready := time.Now()
	if err := m.waitReady(ctx, sb.ID); err != nil {
		return err
	}
	blog.Info("template sandbox ready", "kernel_wait", time.Since(ready).Round(time.Millisecond))
	// Close our kept-alive connections to it first: the image would keep
	// them established, and the first sandbox restored from it gets this
	// sandbox's address, where our new connections could collide with them.
	if t, ok := m.transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
		time.Sleep(100 * time.Millisecond) // for the FINs to be answered
	}
	if err := m.checkpoint(ctx, sb.ID, tmp); err != nil {
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
	m.removeOldTemplateImages(name, dir)
	m.setTemplateImage(name, dir)
	log.Info("template snapshot made", "size_bytes", dirSize(dir), "took", time.Since(begin).Round(time.Millisecond))
	return nil
}

// waitReady waits for the agent's default kernel and its preloads.
func (m *Manager) waitReady(ctx context.Context, id string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+agentHost(id)+"/ready", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: m.transport, Timeout: 3 * time.Minute}).Do(req)
	if err != nil {
		return fmt.Errorf("waiting for the template sandbox's kernel: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("waiting for the template sandbox's kernel: agent answered %s: %s", resp.Status, b)
	}
	return nil
}

// removeOldTemplateImages removes name's images other than keep.
func (m *Manager) removeOldTemplateImages(name, keep string) {
	entries, _ := os.ReadDir(m.templatesDir())
	for _, e := range entries {
		p := filepath.Join(m.templatesDir(), e.Name())
		rest, ok := strings.CutPrefix(e.Name(), name+"-")
		// Keys are 16 hex digits (plus ".tmp" while made).
		if !ok || p == keep || len(strings.TrimSuffix(rest, ".tmp")) != 16 {
			continue
		}
		m.log.Info("removing an old template snapshot", "image", p)
		if err := os.RemoveAll(p); err != nil {
			m.log.Error("removing an old template snapshot", "image", p, "err", err)
		}
	}
}

// restoreFailed counts a failed restore of template's image; after
// templateFailures in a row the image is thrown away and made again.
func (m *Manager) restoreFailed(ctx context.Context, template, dir string) {
	m.ts.mu.Lock()
	m.ts.failures[template]++
	drop := m.ts.failures[template] >= templateFailures && m.ts.dirs[template] == dir
	if drop {
		delete(m.ts.dirs, template)
	}
	m.ts.mu.Unlock()
	if drop {
		m.log.Error("template snapshot failed too often; making it again", "template", template, "image", dir)
		os.RemoveAll(dir)
		go m.makeTemplateSnapshot(context.WithoutCancel(ctx), template)
	}
}

// createRestored creates a sandbox for a plain create (no snapshotId) from
// a warm-pool sandbox or the template snapshot. ok false means neither
// was available or usable: the caller boots cold.
func (m *Manager) createRestored(ctx context.Context, projectID string, plan createPlan, rootfs string, req api.CreateSandboxRequest) (sb api.Sandbox, ok bool, err error) {
	if sb, ok, err := m.claimWarm(ctx, projectID, plan, req); ok || err != nil {
		return sb, ok, err
	}
	dir := m.templateImage(plan.template)
	if dir == "" {
		return api.Sandbox{}, false, nil
	}
	plan.admit = true
	sb, err = m.restoreOne(ctx, projectID, "", plan, rootfs, dir, req.Metadata, req.OnTimeout)
	if err == nil {
		m.ts.mu.Lock()
		m.ts.failures[plan.template] = 0
		m.ts.mu.Unlock()
		return sb, true, nil
	}
	if ctx.Err() != nil || errors.Is(err, ErrRateLimited) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrInvalid) {
		return api.Sandbox{}, true, err
	}
	m.log.Warn("restoring the template snapshot failed; booting cold", "template", plan.template, "image", dir, "err", err)
	m.restoreFailed(ctx, plan.template, dir)
	return api.Sandbox{}, false, nil
}

// defaultShape reports whether plan is what warm-pool sandboxes are made
// with: a claimed sandbox's limits and egress were fixed when it started.
func (m *Manager) defaultShape(plan createPlan) bool {
	return !plan.token && plan.limits == m.cfg.Limits && plan.internet == m.cfg.Policy.Internet
}

// claimWarm hands a warm-pool sandbox to projectID if the plan has the
// default shape and the pool has one. ok false: none claimed.
func (m *Manager) claimWarm(ctx context.Context, projectID string, plan createPlan, req api.CreateSandboxRequest) (api.Sandbox, bool, error) {
	if m.cfg.WarmPool <= 0 || !m.defaultShape(plan) {
		return api.Sandbox{}, false, nil
	}
	release, err := m.admit(ctx, projectID)
	if err != nil {
		return api.Sandbox{}, true, err
	}
	var expires *time.Time
	if plan.timeoutMs > 0 {
		t := m.now().Add(time.Duration(plan.timeoutMs) * time.Millisecond)
		expires = &t
	}
	sb, err := m.cfg.Store.ClaimWarm(ctx, plan.template, projectID, req.Metadata, plan.timeoutMs, m.now(), expires)
	release()
	if errors.Is(err, store.ErrNotFound) {
		return api.Sandbox{}, false, nil
	}
	if err != nil {
		return api.Sandbox{}, true, err
	}
	defer m.kickPool()
	log := m.log.With("sandbox_id", sb.ID, "project_id", projectID)
	unlock := m.locks.lock(sb.ID)
	defer unlock()
	begin := time.Now()
	fail := func(reason string, err error) (api.Sandbox, bool, error) {
		log.Warn("a claimed warm sandbox failed; restoring a fresh one", "reason", reason, "err", err)
		if eerr := m.end(ctx, sb, api.StateFailed, reason); eerr != nil {
			log.Error("ending a failed warm sandbox", "err", eerr)
		}
		return api.Sandbox{}, false, nil
	}
	if req.OnTimeout != "" {
		if err := m.cfg.Store.SetOnTimeout(ctx, sb.ID, req.OnTimeout); err != nil {
			return fail("recording onTimeout failed", err)
		}
	}
	r := reseedRequest{SandboxID: sb.ID, Envs: envMap(append(plan.envs, identityEnv(sb)...))}
	if err := m.reseed(ctx, r); err != nil {
		return fail("giving it its identity failed", err)
	}
	log.Info("sandbox claimed from the warm pool", "template", sb.Template, "took", time.Since(begin).Round(time.Millisecond))
	got, err := m.cfg.Store.GetSandbox(ctx, sb.ID)
	if err != nil {
		return api.Sandbox{}, true, err
	}
	return toAPI(got), true, nil
}

// DrainWarmPool ends the warm pool's sandboxes. `lizard serve` calls it
// on its way out: pool sandboxes hold no one's state and would otherwise
// sit idle, holding memory, until the next start ends them anyway.
func (m *Manager) DrainWarmPool(ctx context.Context) {
	rows, err := m.cfg.Store.ListSandboxes(ctx, store.Filter{Role: store.RoleWarm, LiveOnly: true})
	if err != nil {
		m.log.Error("listing the warm pool to drain it", "err", err)
		return
	}
	for _, sb := range rows {
		unlock := m.locks.lock(sb.ID)
		// A create may have claimed it since the listing.
		if cur, err := m.cfg.Store.GetSandbox(ctx, sb.ID); err == nil && cur.Live() && cur.Role == store.RoleWarm {
			m.end(ctx, cur, api.StateKilled, "the server stopped")
		}
		unlock()
	}
}

// runWarmPool keeps the pool full, and smaller under memory pressure.
func (m *Manager) runWarmPool(ctx context.Context) {
	t := time.NewTicker(warmPoolTick)
	defer t.Stop()
	for {
		for _, name := range m.cfg.Templates {
			m.fillWarm(ctx, name)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.ts.kick:
		}
	}
}

// fillWarm restores warm sandboxes of template until the pool is full, or
// ends one if memory is short.
func (m *Manager) fillWarm(ctx context.Context, name string) {
	for ctx.Err() == nil {
		rows, err := m.cfg.Store.ListSandboxes(ctx, store.Filter{Role: store.RoleWarm, LiveOnly: true})
		if err != nil {
			m.log.Error("listing the warm pool", "err", err)
			return
		}
		var warm []store.Sandbox
		for _, sb := range rows {
			if sb.Template == name {
				warm = append(warm, sb)
			}
		}
		if low, avail := m.memoryLow(); low {
			if len(warm) > 0 {
				sb := warm[len(warm)-1]
				m.log.Warn("memory is short; shrinking the warm pool", "template", name, "sandbox_id", sb.ID,
					"mem_available", avail, "pool", len(warm)-1)
				unlock := m.locks.lock(sb.ID)
				if cur, err := m.cfg.Store.GetSandbox(ctx, sb.ID); err == nil && cur.Live() && cur.Role == store.RoleWarm {
					m.end(ctx, cur, api.StateKilled, "the warm pool shrank: memory is short")
				}
				unlock()
			}
			return
		}
		dir := m.templateImage(name)
		if len(warm) >= m.cfg.WarmPool || dir == "" {
			return
		}
		rootfs, err := m.cfg.RootFS(ctx, name)
		if err != nil {
			return
		}
		plan, err := m.validate(api.CreateSandboxRequest{Template: name})
		if err != nil {
			return
		}
		plan.timeoutMs = 0
		if _, err := m.restoreOne(ctx, store.InternalProject, store.RoleWarm, plan, rootfs, dir, nil, ""); err != nil {
			if ctx.Err() == nil {
				m.log.Error("filling the warm pool", "template", name, "err", err)
				m.restoreFailed(ctx, name, dir)
			}
			return
		}
	}
}

// memoryLow reports whether MemAvailable is under the warm pool's floor.
func (m *Manager) memoryLow() (bool, int64) {
	floor := m.cfg.WarmPoolMinAvailable
	if floor == 0 {
		floor = DefaultWarmPoolMinAvailable
	}
	if floor < 0 {
		return false, 0
	}
	avail, err := m.cfg.MemAvailable()
	if err != nil {
		return false, 0
	}
	return avail < floor, avail
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
