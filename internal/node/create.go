package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/trace"
)

// MaxForks bounds one fork request.
const MaxForks = 16

// Create implements Node. A plan with an image restores it; otherwise a
// warm-pool sandbox is claimed if the plan has the pool's shape, else the
// template snapshot is restored, else the template boots.
func (n *Local) Create(ctx context.Context, p Plan) (Sandbox, error) {
	if len(p.Volumes) > 0 && n.cfg.Volumes == nil {
		return Sandbox{}, errNoVolumes
	}
	if p.Network != nil && p.Internet && n.cfg.Egress == nil {
		return Sandbox{}, errNoEgress
	}
	if err := n.images.roomFor("create a sandbox"); err != nil {
		return Sandbox{}, err
	}
	if p.Image != "" {
		path := metrics.PathSnapshot
		if p.forked {
			path = metrics.PathFork
		}
		src := restoreSource{what: "image", metricsPath: path, dir: p.Image}
		if !n.images.local(p.Image) && p.SnapshotID != "" {
			// A snapshot another node took: from the image store.
			dir, release, lost, err := n.images.fetch(ctx, SnapshotImage(p.SnapshotID))
			if lost {
				msg := fmt.Sprintf("snapshot %s's image is lost from the image store (missing or corrupt); its node may still hold it", p.SnapshotID)
				if imagestore.Reason(err) != "" {
					msg = fmt.Sprintf("snapshot %s cannot be restored: %s; its node may still hold it", p.SnapshotID, lostWhy(SnapshotImage(p.SnapshotID), err))
				}
				return Sandbox{}, &errdefs.Error{Kind: errdefs.ErrUnavailable, Cause: err, Msg: msg}
			}
			if err != nil {
				return Sandbox{}, err
			}
			defer release()
			src.dir = dir
		}
		return seam(n.provision(ctx, p, src))
	}
	w := n.cfg.Warm
	// A sandbox with volumes boots: runsc restores an image only into
	// the mounts it was taken with, and the template's has none.
	if w == nil || p.Role == store.RoleTemplate || len(p.Volumes) > 0 || p.Build != nil {
		return seam(n.provision(ctx, p, bootSource{}))
	}
	// A warm sandbox was made without a policy's redirects.
	if p.Role == "" && !p.Token && p.Network == nil && w.Pool(p.Template, p.Limits, p.Internet) {
		sb, err := seam(n.provision(ctx, p, claimSource{}))
		if err == nil || ctx.Err() != nil || isRefusal(err) {
			if err == nil {
				w.Claimed(p.Template)
			}
			return sb, err
		}
		if !errors.Is(err, errNoWarm) {
			n.log.Warn("a claimed warm sandbox failed; restoring a fresh one", "template", p.Template, "err", err)
			w.Claimed(p.Template)
		}
	}
	image := w.Image(p.Template, p.Limits)
	if image == "" {
		return seam(n.provision(ctx, p, bootSource{}))
	}
	sb, err := seam(n.provision(ctx, p, restoreSource{what: "template snapshot", metricsPath: metrics.PathTemplateRestore, dir: image}))
	if err == nil || ctx.Err() != nil || isRefusal(err) {
		if err == nil {
			w.Restored(ctx, p.Template, image, nil)
		}
		return sb, err
	}
	n.log.Warn("restoring the template snapshot failed; booting cold", "template", p.Template, "image", image, "err", err)
	w.Restored(ctx, p.Template, image, err)
	return seam(n.provision(ctx, p, bootSource{}))
}

// isRefusal reports whether err is the plan being refused (quota, rate,
// no address, bad input) rather than a start that failed: trying another
// source would be refused the same way.
func isRefusal(err error) bool {
	return errors.Is(err, errdefs.ErrRateLimited) || errors.Is(err, errdefs.ErrUnavailable) || errors.Is(err, errdefs.ErrInvalid)
}

// Fork implements Node: the parent is checkpointed (resumed first if
// paused) under its lock, then freed while the copies are restored.
func (n *Local) Fork(ctx context.Context, parent string, p Plan, count int) (_ []Sandbox, err error) {
	defer func(begin time.Time) { n.cfg.Metrics.SandboxOp(metrics.OpFork, time.Since(begin), err) }(time.Now())
	ctx, sp := trace.Start(ctx, "node.fork", trace.Sandbox(parent))
	defer func() { trace.End(sp, err) }()
	if err := n.images.needData(); err != nil {
		return nil, err
	}
	if err := n.images.roomFor("fork a sandbox"); err != nil {
		return nil, err
	}
	if count < 1 || count > MaxForks {
		return nil, errdefs.Invalidf("count %d is out of range: want 1 to %d", count, MaxForks)
	}
	unlock := n.locks.Lock(parent)
	sb, err := n.reachable(ctx, parent, true, "")
	if err != nil {
		unlock()
		return nil, err
	}
	dir := filepath.Join(n.images.snapshotsDir(), "fork-"+NewID())
	defer removeDir(n.log.With("sandbox_id", parent), "a fork's image", dir)
	p.Template = sb.Template
	p = n.Shaped(p, sb.Shape)
	p.Image, p.forked = dir, true
	// The copies are set up while the parent is checkpointed (provision,
	// sandbox.ForkRestorer) and read the image once it is made.
	made := make(chan struct{})
	var checkpointErr error
	p.fork = &forkOf{parent: parent, wait: func(ctx context.Context) error {
		select {
		case <-made:
			return checkpointErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	type result struct {
		out []Sandbox
		err error
	}
	copies := make(chan result, 1)
	go func() {
		out, err := n.createN(ctx, p, count)
		copies <- result{out, err}
	}()
	checkpointErr = n.checkpoint(ctx, parent, dir)
	close(made)
	unlock()
	r := <-copies
	if checkpointErr != nil {
		return nil, checkpointErr
	}
	if r.err == nil {
		e := Event{Kind: Forked, SandboxID: parent, ProjectID: sb.ProjectID, Token: sb.Shape.Token}
		for _, c := range r.out {
			e.Children = append(e.Children, c.ID)
		}
		n.bus.emit(e)
	}
	return r.out, r.err
}

// forkOf is the parent a fork's copies are restored from, and how to
// wait for its image.
type forkOf struct {
	parent string
	wait   func(context.Context) error
}

// parentID is the parent f is a fork of; "" for no fork.
func (f *forkOf) parentID() string {
	if f == nil {
		return ""
	}
	return f.parent
}

// createN makes count sandboxes of plan p at once, all or nothing.
func (n *Local) createN(ctx context.Context, p Plan, count int) ([]Sandbox, error) {
	out := make([]Sandbox, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	for i := range count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = n.Create(ctx, p)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for i, sb := range out {
			if errs[i] == nil {
				if kerr := n.Kill(context.WithoutCancel(ctx), sb.ID); kerr != nil {
					n.log.Error("killing a fork whose siblings failed", "sandbox_id", sb.ID, "err", kerr)
				}
			}
		}
		for _, e := range errs {
			if e != nil {
				return nil, fmt.Errorf("forking: %w", e)
			}
		}
	}
	return out, nil
}
