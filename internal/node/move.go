package node

// Moving a sandbox off this node, for a drain (docs/cluster.md): the API
// picks the node it goes to, this node hands it over with its image in
// the image store, and the new node resumes it from there.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/store"
)

// MovedTo is the cause of the refusal of a call for a sandbox whose row
// names another node (get): To is the node it runs on now.
type MovedTo struct{ To string }

func (m *MovedTo) Error() string { return "the sandbox moved to node " + m.To }

// MoveWait bounds how long a move waits for the image store to take the
// sandbox's image while no upload fails (Config.MoveWait).
const MoveWait = 2 * time.Minute

// StoreProbe bounds how long a move waits for the image store to answer a
// one-key listing before it takes the store for unreachable.
const StoreProbe = 10 * time.Second

// probe asks the image store to answer a one-key listing within StoreProbe.
func (im *images) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, StoreProbe)
	defer cancel()
	return im.remote.Bucket().Check(ctx)
}

// Move is what MoveOut did: the sandbox's row after it (paused, on the
// node it went to) and whether the move paused it (it was running: the
// new node is to resume it).
type Move struct {
	Sandbox Sandbox
	Paused  bool
}

// MoveOut hands sandbox id to node to: a running sandbox is paused as by
// Pause, a paused one kept paused; its image is made durable and its row
// then names node to, which resumes it from the image store. All of it
// under the sandbox's lock: calls that arrive meanwhile wait, then find
// it on node to (Moved), where the API or this node's internal API sends
// them. A sandbox that mounts volumes is refused (they stay on this
// node's disk), as is one starting. Moving a sandbox already on node to
// is a no-op.
func (n *Local) MoveOut(ctx context.Context, id, to string) (Move, error) {
	me := n.cfg.Store.Node()
	if n.cfg.Images == nil || me == "" {
		return Move{}, &errdefs.Error{Kind: errdefs.ErrConflict,
			Msg: fmt.Sprintf("sandbox %s cannot move: its node has no image store (--image-store) for another node to resume it from", id)}
	}
	// The row will name node to, and calls for the sandbox go to the
	// address its heartbeat gives: it must be another registered node.
	if _, err := n.cfg.Store.Nodes().Get(ctx, to); errors.Is(err, store.ErrNotFound) || to == me {
		return Move{}, errdefs.Invalidf("to: %q is not another registered node", to)
	} else if err != nil {
		return Move{}, err
	}
	unlock := n.locks.Lock(id)
	defer unlock()
	sb, err := n.get(ctx, id)
	if m := (*MovedTo)(nil); errors.As(err, &m) {
		return Move{Sandbox: SandboxOf(sb)}, nil
	}
	if err == nil {
		err = check(sb, WantLive)
	}
	switch {
	case err != nil:
		return Move{}, err
	case len(sb.Shape.Volumes) > 0:
		return Move{}, &errdefs.Error{Kind: errdefs.ErrConflict,
			Msg: fmt.Sprintf("sandbox %s mounts volumes, which stay on node %s's disk: it cannot move", id, me)}
	case sb.State != api.StateRunning && sb.State != api.StatePaused:
		return Move{}, &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf("sandbox %s is %s; retry once it runs", id, sb.State)}
	}
	log := n.log.With("sandbox_id", id, "project_id", sb.ProjectID, "to", to)
	paused := sb.State == api.StateRunning
	if paused {
		err = poll(ctx, n.cfg.PauseWait, 20*time.Millisecond, func() bool { return n.calls.waited(id) == 0 })
		if errors.Is(err, errWaitedOut) {
			return Move{}, &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf("sandbox %s has a call running; retry when it ends", id)}
		}
		if err != nil {
			return Move{}, err
		}
		if err := n.pauseLocked(ctx, sb); err != nil {
			return Move{}, err
		}
	}
	// The uploader (woken by the pause) puts the image in the store. A
	// pass of it that begins after this wake sees the paused row: its
	// failure (the store is away) ends the move now, the sandbox paused
	// here, rather than after MoveWait with its lock, and every call
	// queued on it, held.
	passes := n.images.passes.count()
	n.images.wake()
	// A store that stalls (takes connections, never answers) fails no
	// pass before its client's timeouts: one that does not answer a
	// probe within StoreProbe ends the move too.
	probe := make(chan error, 1)
	go func() { probe <- n.images.probe(ctx) }()
	var cur store.Sandbox
	var gerr, uerr error
	err = poll(ctx, n.cfg.MoveWait, 50*time.Millisecond, func() bool {
		cur, gerr = n.cfg.Store.GetSandbox(ctx, id)
		// An API process may re-home it meanwhile (adopt: a call to a
		// draining node's durable paused sandbox) and the node it went to
		// resume it, which forgets that it was durable: it has moved.
		// Waiting on would hold its lock, and the uploader, which takes
		// that lock to drop the image here, with it: every other move
		// waiting for its image stalled behind this one (issue 40).
		if gerr != nil || cur.Durable || cur.Node != me {
			return true
		}
		select {
		case uerr = <-probe:
		default:
		}
		if uerr == nil {
			uerr = n.images.passes.failedSince(passes)
		}
		return uerr != nil
	})
	if err == nil {
		err = gerr
	}
	if err == nil && uerr != nil {
		log.Warn("moving a sandbox: the image store did not take its image; it stays paused here", "err", uerr)
		return Move{}, &errdefs.Error{Kind: errdefs.ErrUnavailable, Cause: uerr,
			Msg: fmt.Sprintf("sandbox %s stays paused on node %s: the image store is unreachable and did not take its image (the node log says why); retry the move once it is reachable — the sandbox resumes here on its next call", id, me)}
	}
	if err != nil {
		log.Warn("moving a sandbox: its image did not become durable; it stays paused here", "err", err)
		return Move{}, &errdefs.Error{Kind: errdefs.ErrUnavailable, Cause: err,
			Msg: fmt.Sprintf("sandbox %s is paused on node %s but its image did not reach the image store within %s (is the store reachable? the node log says); it resumes on its next call", id, me, n.cfg.MoveWait)}
	}
	if err := n.cfg.Store.AdoptPaused(ctx, id, me, to); err != nil && !errors.Is(err, store.ErrConflict) {
		return Move{}, err
	}
	// ErrConflict: an API process moved it first (a call to it, which a
	// draining node's durable paused sandboxes are moved by).
	if cur, err = n.cfg.Store.GetSandbox(ctx, id); err != nil {
		return Move{}, err
	}
	if cur.Node != me {
		// Its image is durable and its row names the other node, which
		// resumes it from the store: this node's copy serves nothing.
		n.images.dropImage(log, id)
	}
	log.Info("sandbox moved off this node", "now_on", cur.Node, "was_running", paused)
	return Move{Sandbox: SandboxOf(cur), Paused: paused}, nil
}

// dropImage removes this node's checkpoint image of sandbox id, which moved
// to another node; the image store's copy stays, the other node's.
func (im *images) dropImage(log *slog.Logger, id string) {
	if im.dataDir == "" {
		return
	}
	dir := filepath.Join(im.pausedDir(), id)
	if _, err := os.Stat(dir); err != nil {
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		log.Warn("removing the image of a sandbox that moved off this node; the next start sweeps it", "err", err)
		return
	}
	log.Info("removed the image of a sandbox that moved off this node", "dir", dir)
}

// dropMovedImages removes the images on this node's disk of sandboxes that
// moved off it without it (an API process re-homed a durable paused
// sandbox of this draining node on a call), paused being this node's
// paused sandboxes (their images stay): the row names another node and
// the image there is durable or the sandbox no longer paused. Under the
// sandbox's lock, under which alone this node writes an image of it (a
// pause), and only while its row names this node.
func (im *images) dropMovedImages(ctx context.Context, paused []store.Pause) error {
	me := im.store.Node()
	if im.dataDir == "" || me == "" {
		return nil
	}
	entries, err := os.ReadDir(im.pausedDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing checkpoint images: %w", err)
	}
	mine := make(map[string]bool, len(paused))
	for _, p := range paused {
		mine[p.SandboxID] = true
	}
	moved := func(id string) (store.Sandbox, bool, error) {
		sb, err := im.store.GetSandbox(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return sb, false, nil
		}
		return sb, err == nil && sb.Node != me && (!sb.Live() || sb.State != api.StatePaused || sb.Durable), err
	}
	for _, e := range entries {
		id := e.Name()
		if mine[id] {
			continue
		}
		// Read first without the lock: one held by a pause or a move of a
		// sandbox whose row names this node may be held until this
		// uploader makes its image durable.
		if _, ok, err := moved(id); err != nil {
			return err
		} else if !ok {
			continue
		}
		unlock := im.locks.Lock(id)
		sb, ok, err := moved(id)
		if ok {
			im.dropImage(im.log.With("sandbox_id", id, "project_id", sb.ProjectID, "now_on", sb.Node), id)
		}
		unlock()
		if err != nil {
			return err
		}
	}
	return nil
}
