package manager

// Pause, resume, snapshots and forks. A paused sandbox is a live row in
// state "paused" with no address slot and an image in DataDir/images/ID; a
// snapshot is a row and an image in DataDir/snapshots/ID. Both images are
// runtime checkpoints taken with the sandbox left running, then (pause
// only) the sandbox is killed: a checkpoint that fails (disk full) thus
// always leaves the sandbox running as it was.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/store"
)

// MaxForks bounds one fork request.
const MaxForks = 16

// Defaults of the pause settings in Config.
const (
	DefaultPausedRetention = 7 * 24 * time.Hour
	DefaultPauseWait       = 10 * time.Second
)

func (m *Manager) imagesDir() string    { return filepath.Join(m.cfg.DataDir, "images") }
func (m *Manager) snapshotsDir() string { return filepath.Join(m.cfg.DataDir, "snapshots") }

func (m *Manager) pauseWait() time.Duration {
	if m.cfg.PauseWait > 0 {
		return m.cfg.PauseWait
	}
	return DefaultPauseWait
}

func (m *Manager) pausedRetention() time.Duration {
	if m.cfg.PausedRetention > 0 {
		return m.cfg.PausedRetention
	}
	return DefaultPausedRetention
}

func (m *Manager) needData() error {
	if m.cfg.DataDir == "" {
		return &Error{Kind: ErrUnavailable, Msg: "this server keeps no checkpoint images (no data directory configured)"}
	}
	return nil
}

// inflight counts proxied calls per sandbox, so that a pause waits for
// them instead of cutting them off.
type inflight struct {
	mu sync.Mutex
	n  map[string]int
}

func (f *inflight) add(id string, d int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[string]int{}
	}
	f.n[id] += d
	if f.n[id] <= 0 {
		delete(f.n, id)
	}
}

func (f *inflight) count(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[id]
}

// Acquire returns the agent URL of projectID's sandbox id for one proxied
// call, resuming the sandbox first if it is paused. Call release when the
// call has ended: a pause waits for calls in flight.
func (m *Manager) Acquire(ctx context.Context, projectID, id string) (u *url.URL, release func(), err error) {
	sb, err := m.lookup(ctx, projectID, id)
	if err != nil {
		return nil, nil, err
	}
	unlock := m.locks.lock(id)
	defer unlock()
	if sb, err = m.cfg.Store.GetSandbox(ctx, id); err != nil {
		return nil, nil, err
	}
	if sb.Live() && sb.State == api.StatePaused {
		if _, err := m.resumeLocked(ctx, sb, nil); err != nil {
			return nil, nil, err
		}
	}
	u, err = m.AgentURL(ctx, projectID, id)
	if err != nil {
		return nil, nil, err
	}
	m.calls.add(id, 1)
	var once sync.Once
	return u, func() { once.Do(func() { m.calls.add(id, -1) }) }, nil
}

// Pause checkpoints projectID's running sandbox id to disk and stops it;
// pausing a paused sandbox returns it as it is. Calls in flight are waited
// for up to PauseWait, after which the pause fails with ErrConflict.
func (m *Manager) Pause(ctx context.Context, projectID, id string) (api.Sandbox, error) {
	if err := m.needData(); err != nil {
		return api.Sandbox{}, err
	}
	sb, unlock, err := m.lockSandbox(ctx, projectID, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	defer unlock()
	switch {
	case !sb.Live():
		return api.Sandbox{}, gone(sb)
	case sb.State == api.StatePaused:
		return toAPI(sb), nil
	case sb.State != api.StateRunning:
		return api.Sandbox{}, &Error{Kind: ErrConflict, Msg: fmt.Sprintf("sandbox %s is %s, not running; wait until it runs", id, sb.State)}
	}
	// New calls wait for the lock we hold (and then resume the sandbox);
	// calls already in flight get a bounded time to end.
	deadline := time.Now().Add(m.pauseWait())
	for m.calls.count(id) > 0 {
		if time.Now().After(deadline) {
			return api.Sandbox{}, &Error{Kind: ErrConflict,
				Msg: fmt.Sprintf("sandbox %s has a call running; retry when it ends", id)}
		}
		select {
		case <-ctx.Done():
			return api.Sandbox{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := m.pauseLocked(ctx, sb); err != nil {
		return api.Sandbox{}, err
	}
	sb, err = m.cfg.Store.GetSandbox(ctx, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	return toAPI(sb), nil
}

// pauseLocked pauses running sandbox sb; the caller holds its lock. On
// failure the sandbox keeps running.
func (m *Manager) pauseLocked(ctx context.Context, sb store.Sandbox) error {
	log := m.log.With("sandbox_id", sb.ID, "project_id", sb.ProjectID)
	begin := time.Now()
	dir := filepath.Join(m.imagesDir(), sb.ID)
	if err := os.RemoveAll(dir); err != nil {
		// An unwritable image directory (read-only, full) is the
		// checkpoint failing, and the client must be told so, not a 500.
		return &Error{Msg: fmt.Sprintf("checkpointing sandbox %s failed (disk full? the server log says why); it keeps running", sb.ID),
			Cause: fmt.Errorf("clearing old image of sandbox %s: %w", sb.ID, err)}
	}
	if err := m.checkpoint(ctx, sb.ID, dir); err != nil {
		return err
	}
	var remaining *int64
	if sb.ExpiresAt != nil {
		r := max(sb.ExpiresAt.Sub(m.now()).Milliseconds(), 1)
		remaining = &r
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := m.cfg.Runtime.Kill(cctx, sb.ID); err != nil {
		// The checkpoint is good but the sandbox still runs: keep it
		// running rather than have two copies.
		os.RemoveAll(dir)
		return &Error{Msg: fmt.Sprintf("could not stop sandbox %s after checkpointing it; it keeps running", sb.ID),
			Cause: fmt.Errorf("killing sandbox: %w", err)}
	}
	if err := m.cfg.Store.PauseSandbox(cctx, sb.ID, dir, remaining, m.now()); err != nil {
		// The sandbox is gone and unrecorded as paused: reconciliation
		// would end it anyway, so end it now and say so.
		m.cfg.Store.EndSandbox(cctx, sb.ID, api.StateFailed, "recording its pause failed", m.now())
		os.RemoveAll(dir)
		return fmt.Errorf("recording pause of sandbox %s: %w", sb.ID, err)
	}
	// Its address is free for others now: so must the port on it be. A
	// resume opens the API again on the sandbox's new host address.
	if a := m.cfg.Policy.SandboxAPI; a != nil {
		a.Close(sb.ID)
	}
	log.Info("sandbox paused", "image", dir, "size_bytes", dirSize(dir), "took", time.Since(begin).Round(time.Millisecond))
	return nil
}

// checkpoint saves running sandbox id into dir, leaving it running. On
// failure dir is removed and the error says why in words for the caller.
func (m *Manager) checkpoint(ctx context.Context, id, dir string) error {
	err := os.MkdirAll(filepath.Dir(dir), 0o700)
	if err == nil {
		if err = m.cfg.Runtime.Checkpoint(ctx, id, dir, true); err != nil {
			os.RemoveAll(dir)
		}
	}
	if err != nil {
		return &Error{Msg: fmt.Sprintf("checkpointing sandbox %s failed (disk full? the server log says why); it keeps running", id),
			Cause: err}
	}
	return nil
}

// Resume restores projectID's paused sandbox id; resuming a running
// sandbox returns it as it is. req.TimeoutMs, when set, replaces the time
// it had left.
func (m *Manager) Resume(ctx context.Context, projectID, id string, req api.ResumeRequest) (api.Sandbox, error) {
	if req.TimeoutMs != nil {
		if err := m.checkTimeout(*req.TimeoutMs); err != nil {
			return api.Sandbox{}, err
		}
	}
	sb, unlock, err := m.lockSandbox(ctx, projectID, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	defer unlock()
	switch {
	case !sb.Live():
		return api.Sandbox{}, gone(sb)
	case sb.State == api.StateRunning:
		return toAPI(sb), nil
	case sb.State != api.StatePaused:
		return api.Sandbox{}, &Error{Kind: ErrConflict, Msg: fmt.Sprintf("sandbox %s is %s, not paused", id, sb.State)}
	}
	return m.resumeLocked(ctx, sb, req.TimeoutMs)
}

// resumeLocked restores paused sandbox sb; the caller holds its lock. An
// image that cannot be restored fails the sandbox; a lack of addresses
// leaves it paused.
func (m *Manager) resumeLocked(ctx context.Context, sb store.Sandbox, timeoutMs *int64) (api.Sandbox, error) {
	log := m.log.With("sandbox_id", sb.ID, "project_id", sb.ProjectID)
	begin := time.Now()
	p, err := m.cfg.Store.GetPause(ctx, sb.ID)
	if err != nil {
		return api.Sandbox{}, err
	}
	rootfs, err := m.cfg.RootFS(ctx, sb.Template)
	if err != nil {
		return api.Sandbox{}, &Error{Kind: ErrUnavailable, Cause: err,
			Msg: fmt.Sprintf("template %q of sandbox %s is not available; try again later", sb.Template, sb.ID)}
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	// A resume cut short by a server crash may have left the sandbox up.
	if err := m.cfg.Runtime.Kill(cctx, sb.ID); err != nil {
		return api.Sandbox{}, fmt.Errorf("clearing sandbox %s before resuming it: %w", sb.ID, err)
	}
	host, guest, err := m.cfg.Store.AssignSlot(ctx, sb.ID, m.cfg.Pool.Slots(), m.cfg.Pool.addrStrings)
	if errors.Is(err, store.ErrFull) {
		return api.Sandbox{}, &Error{Kind: ErrUnavailable, Cause: err,
			Msg: fmt.Sprintf("no free sandbox address to resume sandbox %s; it stays paused; kill sandboxes or widen --address-pool", sb.ID)}
	}
	if err != nil {
		return api.Sandbox{}, err
	}
	sb.HostAddr, sb.GuestAddr = host, guest
	fail := func(reason string, err error) (api.Sandbox, error) {
		m.cfg.Runtime.Kill(cctx, sb.ID)
		if eerr := m.cfg.Store.EndSandbox(cctx, sb.ID, api.StateFailed, reason, m.now()); eerr != nil {
			log.Error("recording a sandbox that failed to resume", "err", eerr)
		}
		os.RemoveAll(p.ImageDir)
		log.Warn("sandbox failed to resume", "err", err)
		return api.Sandbox{}, &Error{Kind: ErrGone, Msg: fmt.Sprintf("sandbox %s could not be resumed: %s", sb.ID, reason), Cause: err}
	}
	if p.ImageDir == "" {
		return fail("its checkpoint image is missing", errors.New("no image recorded"))
	}
	// A sandbox with a lizardToken keeps it: its API listener opens again
	// on its new host address, and the agent is told the new URL.
	var apiEnv []string
	apiPort := 0
	if sb.Shape.Token && m.cfg.APIURL == "" && m.cfg.Policy.SandboxAPI != nil {
		if has, err := m.cfg.Store.SandboxHasLiveKey(ctx, sb.ID); err == nil && has {
			h, _ := netip.ParseAddr(host)
			if apiEnv, apiPort, err = m.tokenAPI(sb, h); err != nil {
				return fail("its API listener could not be opened", err)
			}
		}
	}
	spec, err := m.spec(sb, rootfs, identityEnv(sb), apiPort)
	if err != nil {
		return fail("its addresses are unusable", err)
	}
	if err := m.cfg.Runtime.Restore(ctx, spec, p.ImageDir); err != nil {
		if ctx.Err() != nil {
			// Not the image's fault: put the sandbox back to paused.
			m.cfg.Runtime.Kill(cctx, sb.ID)
			m.cfg.Store.ReleaseSlot(cctx, sb.ID)
			return api.Sandbox{}, ctx.Err()
		}
		return fail("its checkpoint image is missing or corrupt", err)
	}
	if err := m.waitAgent(ctx, sb); err != nil {
		return fail("its agent did not answer after the restore", err)
	}
	if len(apiEnv) > 0 {
		r := reseedRequest{SandboxID: sb.ID, Envs: envMap(apiEnv), KeepSeeds: true}
		if err := m.reseed(ctx, r); err != nil {
			return fail("telling its agent the new API address failed", err)
		}
	}
	ms := sb.TimeoutMs
	var expires *time.Time
	switch {
	case timeoutMs != nil:
		ms = *timeoutMs
		if ms > 0 {
			t := m.now().Add(time.Duration(ms) * time.Millisecond)
			expires = &t
		}
	case p.RemainingMs != nil:
		t := m.now().Add(time.Duration(*p.RemainingMs) * time.Millisecond)
		expires = &t
	}
	if err := m.cfg.Store.MarkResumed(cctx, sb.ID, ms, expires); err != nil {
		return fail("recording the resume failed", err)
	}
	if err := os.RemoveAll(p.ImageDir); err != nil {
		log.Error("removing the image of a resumed sandbox", "err", err)
	}
	log.Info("sandbox resumed", "guest_addr", guest, "took", time.Since(begin).Round(time.Millisecond))
	got, err := m.cfg.Store.GetSandbox(ctx, sb.ID)
	if err != nil {
		return api.Sandbox{}, err
	}
	return toAPI(got), nil
}

// Snapshot saves projectID's running sandbox id (resuming it if paused)
// without stopping it.
func (m *Manager) Snapshot(ctx context.Context, projectID, id string) (api.Snapshot, error) {
	if err := m.needData(); err != nil {
		return api.Snapshot{}, err
	}
	if _, err := m.lookup(ctx, projectID, id); err != nil {
		return api.Snapshot{}, err
	}
	unlock := m.locks.lock(id)
	defer unlock()
	sb, err := m.runningLocked(ctx, id)
	if err != nil {
		return api.Snapshot{}, err
	}
	begin := time.Now()
	sn := store.Snapshot{ID: "snap-" + newID(), ProjectID: projectID, SandboxID: id, Template: sb.Template, CreatedAt: m.now(),
		Shape: m.recorded(sb.Shape)}
	sn.ImageDir = filepath.Join(m.snapshotsDir(), sn.ID)
	if err := m.checkpoint(ctx, id, sn.ImageDir); err != nil {
		return api.Snapshot{}, err
	}
	sn.SizeBytes = dirSize(sn.ImageDir)
	if err := m.cfg.Store.CreateSnapshot(context.WithoutCancel(ctx), sn); err != nil {
		os.RemoveAll(sn.ImageDir)
		return api.Snapshot{}, err
	}
	m.log.Info("snapshot taken", "sandbox_id", id, "snapshot_id", sn.ID, "size_bytes", sn.SizeBytes,
		"took", time.Since(begin).Round(time.Millisecond))
	return snapshotAPI(sn), nil
}

// runningLocked returns sandbox id, resuming it if paused; the caller
// holds its lock.
func (m *Manager) runningLocked(ctx context.Context, id string) (store.Sandbox, error) {
	sb, err := m.cfg.Store.GetSandbox(ctx, id)
	if err != nil {
		return sb, err
	}
	if !sb.Live() {
		return sb, gone(sb)
	}
	if sb.State == api.StatePaused {
		if _, err := m.resumeLocked(ctx, sb, nil); err != nil {
			return sb, err
		}
		return m.cfg.Store.GetSandbox(ctx, id)
	}
	if sb.State != api.StateRunning {
		return sb, &Error{Kind: ErrConflict, Msg: fmt.Sprintf("sandbox %s is %s, not running; wait until it runs", id, sb.State)}
	}
	return sb, nil
}

func snapshotAPI(sn store.Snapshot) api.Snapshot {
	return api.Snapshot{SnapshotID: sn.ID, SandboxID: sn.SandboxID, ProjectID: sn.ProjectID, Template: sn.Template,
		CreatedAt: sn.CreatedAt, SizeBytes: sn.SizeBytes}
}

func (m *Manager) lookupSnapshot(ctx context.Context, projectID, id string) (store.Snapshot, error) {
	sn, err := m.cfg.Store.GetSnapshot(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && sn.ProjectID != projectID {
		return store.Snapshot{}, &Error{Kind: ErrNotFound, Msg: fmt.Sprintf("snapshot %s not found in project %s", id, projectID)}
	}
	return sn, err
}

// GetSnapshot returns projectID's snapshot id.
func (m *Manager) GetSnapshot(ctx context.Context, projectID, id string) (api.Snapshot, error) {
	sn, err := m.lookupSnapshot(ctx, projectID, id)
	if err != nil {
		return api.Snapshot{}, err
	}
	return snapshotAPI(sn), nil
}

// ListSnapshots returns projectID's snapshots, newest first.
func (m *Manager) ListSnapshots(ctx context.Context, projectID string) ([]api.Snapshot, error) {
	rows, err := m.cfg.Store.ListSnapshots(ctx, projectID)
	if err != nil {
		return nil, err
	}
	out := []api.Snapshot{}
	for i := len(rows) - 1; i >= 0; i-- {
		out = append(out, snapshotAPI(rows[i]))
	}
	return out, nil
}

// DeleteSnapshot removes projectID's snapshot id and its image. Sandboxes
// created from it are not affected.
func (m *Manager) DeleteSnapshot(ctx context.Context, projectID, id string) error {
	sn, err := m.lookupSnapshot(ctx, projectID, id)
	if err != nil {
		return err
	}
	unlock := m.locks.lock(id)
	defer unlock()
	if err := m.cfg.Store.DeleteSnapshot(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if err := os.RemoveAll(sn.ImageDir); err != nil {
		return fmt.Errorf("removing image of snapshot %s: %w", id, err)
	}
	m.log.Info("snapshot deleted", "snapshot_id", id)
	return nil
}

// createFromSnapshot is Create with req.SnapshotID set.
func (m *Manager) createFromSnapshot(ctx context.Context, projectID string, req api.CreateSandboxRequest) (api.Sandbox, error) {
	sn, err := m.lookupSnapshot(ctx, projectID, req.SnapshotID)
	if err != nil {
		return api.Sandbox{}, err
	}
	if req.Template != "" && req.Template != sn.Template {
		return api.Sandbox{}, invalidf(fmt.Sprintf("template %q differs from snapshot %s's template %q; leave it out", req.Template, sn.ID, sn.Template))
	}
	if len(req.Envs) > 0 || req.LizardToken {
		return api.Sandbox{}, invalidf("envs and lizardToken cannot be set when creating from a snapshot: the restored processes keep the snapshot's environment")
	}
	unlock := m.locks.lock(sn.ID) // DeleteSnapshot waits for the restore
	defer unlock()
	sbs, err := m.restoreNew(ctx, projectID, sn.Template, sn.Shape, sn.ImageDir, 1, req.TimeoutMs, req.Metadata, req.OnTimeout)
	if err != nil {
		return api.Sandbox{}, err
	}
	return sbs[0], nil
}

// Fork makes req.Count new sandboxes, each a copy of projectID's running
// sandbox id (resumed first if paused) with its own address and reseeded
// random generators. All or nothing: if one fork fails, none is kept.
func (m *Manager) Fork(ctx context.Context, projectID, id string, req api.ForkRequest) ([]api.Sandbox, error) {
	if err := m.needData(); err != nil {
		return nil, err
	}
	if req.Count == 0 {
		req.Count = 1
	}
	if req.Count < 1 || req.Count > MaxForks {
		return nil, invalidf(fmt.Sprintf("count %d is out of range: want 1 to %d", req.Count, MaxForks))
	}
	if _, err := m.lookup(ctx, projectID, id); err != nil {
		return nil, err
	}
	unlock := m.locks.lock(id)
	sb, err := m.runningLocked(ctx, id)
	if err != nil {
		unlock()
		return nil, err
	}
	dir := filepath.Join(m.snapshotsDir(), "fork-"+newID())
	defer os.RemoveAll(dir)
	err = m.checkpoint(ctx, id, dir)
	unlock() // the parent is free again; the restores use only the image
	if err != nil {
		return nil, err
	}
	return m.restoreNew(ctx, projectID, sb.Template, sb.Shape, dir, req.Count, req.TimeoutMs, req.Metadata, "")
}

// restoreNew makes n new sandboxes of projectID from image dir, as Create
// does, shaped as the sandbox the image was taken from (sh), and reseeds
// each. None gets a lizardToken: a copy holding its parent's key would
// act as its parent. All or nothing.
func (m *Manager) restoreNew(ctx context.Context, projectID, tmpl string, sh store.Shape, dir string, n int, timeoutMs *int64, meta map[string]string, onTimeout string) ([]api.Sandbox, error) {
	plan, err := m.validate(api.CreateSandboxRequest{Template: tmpl, TimeoutMs: timeoutMs, Metadata: meta})
	if err != nil {
		return nil, err
	}
	plan = m.shaped(plan, sh)
	if err := checkOnTimeout(onTimeout); err != nil {
		return nil, err
	}
	rootfs, err := m.cfg.RootFS(ctx, tmpl)
	if err != nil {
		return nil, &Error{Kind: ErrUnavailable, Cause: err, Msg: fmt.Sprintf("template %q is not available; try again later", tmpl)}
	}
	out := make([]api.Sandbox, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = m.restoreOne(ctx, projectID, "", plan, rootfs, dir, meta, onTimeout)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for i, sb := range out {
			if errs[i] == nil {
				m.Kill(context.WithoutCancel(ctx), projectID, sb.SandboxID)
			}
		}
		for _, e := range errs {
			if e != nil {
				return nil, e
			}
		}
	}
	return out, nil
}

// restoreOne makes one new sandbox of projectID (of role, "" for users')
// from image dir with plan's shape, envs and token, and gives it its new
// identity through the agent's /reseed.
func (m *Manager) restoreOne(ctx context.Context, projectID, role string, plan createPlan, rootfs, dir string, meta map[string]string, onTimeout string) (api.Sandbox, error) {
	sb := store.Sandbox{
		ID: newID(), ProjectID: projectID, Template: plan.template, State: api.StateStarting,
		TimeoutMs: plan.timeoutMs, Metadata: meta, CreatedAt: m.now(), Shape: plan.shape(), Role: role,
	}
	release := func() {}
	if plan.admit {
		r, err := m.admit(ctx, projectID)
		if err != nil {
			return api.Sandbox{}, err
		}
		release = r
	}
	err := m.cfg.Store.CreateSandbox(ctx, &sb, m.cfg.Pool.Slots(), m.cfg.Pool.addrStrings)
	release()
	if err != nil {
		if errors.Is(err, store.ErrFull) {
			return api.Sandbox{}, &Error{Kind: ErrUnavailable, Cause: err,
				Msg: fmt.Sprintf("no free sandbox address: all %d addresses of the pool %s are in use", m.cfg.Pool.Slots(), m.cfg.Pool.Prefix())}
		}
		return api.Sandbox{}, fmt.Errorf("recording sandbox: %w", err)
	}
	log := m.log.With("sandbox_id", sb.ID, "project_id", projectID)
	unlock := m.locks.lock(sb.ID)
	defer unlock()
	begin := time.Now()
	fail := func(reason string, err error) (api.Sandbox, error) {
		m.cleanupFailed(ctx, log, sb.ID, reason)
		log.Warn("restored sandbox failed to start", "err", err)
		if ctx.Err() != nil {
			return api.Sandbox{}, ctx.Err()
		}
		return api.Sandbox{}, &Error{Msg: fmt.Sprintf("restoring a new sandbox failed: %s", reason), Cause: err}
	}
	if onTimeout != "" {
		if err := m.cfg.Store.SetOnTimeout(ctx, sb.ID, onTimeout); err != nil {
			return fail("recording onTimeout failed", err)
		}
	}
	tokenEnv, apiPort, err := m.mintToken(ctx, sb, plan)
	if err != nil {
		return fail("giving it its lizardToken failed", err)
	}
	spec, err := m.spec(sb, rootfs, identityEnv(sb), apiPort)
	if err != nil {
		return fail("its addresses are unusable", err)
	}
	if err := m.cfg.Runtime.Restore(ctx, spec, dir); err != nil {
		return fail("the image could not be restored (the server log says why)", err)
	}
	if err := m.waitAgent(ctx, sb); err != nil {
		return fail("its agent did not answer after the restore", err)
	}
	r := reseedRequest{SandboxID: sb.ID, Envs: envMap(append(append(slices.Clone(plan.envs), identityEnv(sb)...), tokenEnv...))}
	if !plan.token {
		// The image may hold another sandbox's lizardToken (a fork's parent).
		r.Unset = []string{"LIZARD_API_KEY", "LIZARD_API_URL"}
	}
	if err := m.reseed(ctx, r); err != nil {
		return fail("giving it its identity and reseeding its random generators failed", err)
	}
	var expires *time.Time
	if plan.timeoutMs > 0 && role == "" {
		t := m.now().Add(time.Duration(plan.timeoutMs) * time.Millisecond)
		expires = &t
	}
	if err := m.cfg.Store.MarkRunning(ctx, sb.ID, expires); err != nil {
		return fail("recording the running sandbox failed", err)
	}
	log.Info("sandbox restored", "image", dir, "role", role, "guest_addr", sb.GuestAddr, "took", time.Since(begin).Round(time.Millisecond))
	got, err := m.cfg.Store.GetSandbox(ctx, sb.ID)
	if err != nil {
		return api.Sandbox{}, err
	}
	return toAPI(got), nil
}

func checkOnTimeout(s string) error {
	switch s {
	case "", api.OnTimeoutKill, api.OnTimeoutPause:
		return nil
	}
	return invalidf(fmt.Sprintf("onTimeout %q: want %q or %q", s, api.OnTimeoutKill, api.OnTimeoutPause))
}

// expirePaused pauses sb instead of ending it when it was created with
// onTimeout "pause"; it reports whether it did. The caller holds the lock.
func (m *Manager) expirePaused(ctx context.Context, sb store.Sandbox) (bool, error) {
	if sb.State != api.StateRunning || m.cfg.DataDir == "" {
		return false, nil
	}
	p, err := m.cfg.Store.GetPause(ctx, sb.ID)
	if err != nil || p.OnTimeout != api.OnTimeoutPause {
		return false, err
	}
	if m.calls.count(sb.ID) > 0 {
		// Pausing would cut a call off: wait for the next tick.
		return true, nil
	}
	// Its time is up: it resumes with its full timeout.
	full := m.now().Add(time.Duration(sb.TimeoutMs) * time.Millisecond)
	sb.ExpiresAt = &full
	return true, m.pauseLocked(ctx, sb)
}

// reapPaused kills paused sandboxes kept longer than PausedRetention.
func (m *Manager) reapPaused(ctx context.Context) {
	if m.cfg.DataDir == "" {
		return
	}
	before := m.now().Add(-m.pausedRetention())
	old, err := m.cfg.Store.ListPaused(ctx, &before)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Error("listing old paused sandboxes", "err", err)
		}
		return
	}
	for _, p := range old {
		unlock := m.locks.lock(p.SandboxID)
		sb, err := m.cfg.Store.GetSandbox(ctx, p.SandboxID)
		if err == nil && sb.Live() && sb.State == api.StatePaused {
			err = m.end(ctx, sb, api.StateExpired, fmt.Sprintf("it stayed paused longer than the retention of %s", m.pausedRetention()))
		}
		unlock()
		if err != nil {
			m.log.Error("ending an old paused sandbox", "sandbox_id", p.SandboxID, "err", err)
		}
	}
}

// removeImage removes what a paused sandbox left on disk; end calls it.
func (m *Manager) removeImage(ctx context.Context, id string) {
	if m.cfg.DataDir == "" {
		return
	}
	if err := os.RemoveAll(filepath.Join(m.imagesDir(), id)); err != nil {
		m.log.Error("removing the image of an ended sandbox", "sandbox_id", id, "err", err)
	}
}

// sweepImages removes images no paused sandbox or snapshot accounts for
// (left by a crash in the middle of a pause or a fork).
func (m *Manager) sweepImages(ctx context.Context) error {
	if m.cfg.DataDir == "" {
		return nil
	}
	paused, err := m.cfg.Store.ListPaused(ctx, nil)
	if err != nil {
		return err
	}
	snaps, err := m.cfg.Store.ListSnapshots(ctx, "")
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, p := range paused {
		keep[filepath.Clean(p.ImageDir)] = true
	}
	for _, sn := range snaps {
		keep[filepath.Clean(sn.ImageDir)] = true
	}
	var errs []error
	for _, parent := range []string{m.imagesDir(), m.snapshotsDir()} {
		entries, err := os.ReadDir(parent)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		for _, e := range entries {
			p := filepath.Join(parent, e.Name())
			if !keep[p] {
				m.log.Warn("removing orphan checkpoint image", "dir", p)
				errs = append(errs, os.RemoveAll(p))
			}
		}
	}
	return errors.Join(errs...)
}

// dirSize is the bytes the files under dir hold.
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
