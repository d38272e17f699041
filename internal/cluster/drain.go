package cluster

// Draining a node (docs/cluster.md): it takes no new sandboxes, and each
// of its sandboxes is handed to another node through the image store —
// a running one paused there, made durable and resumed on the other node,
// a paused one made durable and re-homed, resuming there on its next
// call. Calls made meanwhile wait for the move (onNode, and the node's
// own internal API for agent calls) instead of failing.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/store"
)

// drainParallel is how many sandboxes a drain moves at once: each move is
// a checkpoint on the draining node and a restore on another, both
// bounded by their machines' CPUs.
const drainParallel = 2

// drainRounds bounds how often a drain lists the node's sandboxes again
// for those that came meanwhile (a create placed just before the mark, a
// fork, a resume of a paused sandbox not yet durable).
const drainRounds = 3

// Drain marks node name draining and moves its sandboxes to the other
// nodes; a node already draining is drained again (what is left is
// moved). It refuses a node of no image store, the last node that could
// take its sandboxes, and a node with running sandboxes that mount
// volumes, naming them.
func (r *Router) Drain(ctx context.Context, name string) (api.NodeDrain, error) {
	begin := time.Now()
	info, err := r.cfg.Store.Nodes().Get(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return api.NodeDrain{}, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("node %s is not registered (GET the cluster's nodes from its database's nodes table; names are lizard node's --name)", name)}
	}
	if err != nil {
		return api.NodeDrain{}, err
	}
	// Its sandboxes are moved by calls to it: of a version this api
	// speaks, or drained by an api of its own.
	if err := speak(info); err != nil {
		return api.NodeDrain{}, err
	}
	if info.ImageStore == "" {
		return api.NodeDrain{}, &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf(
			"node %s keeps its images on its own disk, where no other node can resume its sandboxes: start every node with the same --image-store (s3://BUCKET/PREFIX or a shared file:///DIR) to drain it", name)}
	}
	if _, err := r.targets(ctx, info); err != nil {
		return api.NodeDrain{}, err
	}
	sbs, err := r.cfg.Store.OnNode(name).ListSandboxes(ctx, store.Filter{LiveOnly: true})
	if err != nil {
		return api.NodeDrain{}, err
	}
	var mounting []string
	for _, sb := range sbs {
		if sb.Role == "" && node.SandboxOf(sb).Check(node.WantRunning) == nil && len(sb.Shape.Volumes) > 0 {
			mounting = append(mounting, sb.ID)
		}
	}
	if len(mounting) > 0 {
		return api.NodeDrain{}, &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf(
			"node %s runs sandboxes that mount volumes, which stay on its disk: %s; pause or kill them, then drain (their paused images stay on the node and resume there once it is undrained)",
			name, strings.Join(mounting, ", "))}
	}
	if err := r.cfg.Store.Nodes().SetDraining(ctx, name, true); err != nil {
		return api.NodeDrain{}, err
	}
	r.list(ctx, true) // this process's placement sees it at once
	r.log.Info("draining node", "node", name, "sandboxes", len(sbs))
	// One drain of a node at a time, across API processes: a second one
	// waits, then finds what the first left.
	release, err := r.drainLock(ctx, name)
	if err != nil {
		return api.NodeDrain{}, err
	}
	defer release()
	out := api.NodeDrain{Node: name, Draining: true, Moved: []api.SandboxMove{}, Left: []api.SandboxLeft{}}
	left := map[string]string{}
	for round := 0; round < drainRounds; round++ {
		sbs, err := r.cfg.Store.OnNode(name).ListSandboxes(ctx, store.Filter{LiveOnly: true})
		if err != nil {
			return out, err
		}
		var todo []store.Sandbox
		for _, sb := range sbs {
			switch {
			case sb.Role != "":
				// The node's own (warm pool, template builds) end with it.
			case len(sb.Shape.Volumes) > 0:
				left[sb.ID] = "it mounts volumes, which stay on the node's disk; it resumes there once the node is undrained"
			case left[sb.ID] == "":
				todo = append(todo, sb)
			}
		}
		if len(todo) == 0 {
			break
		}
		moved, failed := r.moveAll(ctx, info, todo)
		out.Moved = append(out.Moved, moved...)
		for id, why := range failed {
			left[id] = why
		}
	}
	for id, why := range left {
		out.Left = append(out.Left, api.SandboxLeft{SandboxID: id, Reason: why})
	}
	slices.SortFunc(out.Left, func(a, b api.SandboxLeft) int { return strings.Compare(a.SandboxID, b.SandboxID) })
	out.TookMs = time.Since(begin).Milliseconds()
	r.log.Info("node drained", "node", name, "moved", len(out.Moved), "left", len(out.Left), "took", time.Since(begin).Round(time.Millisecond))
	return out, ctx.Err()
}

// Undrain makes node name placeable again.
func (r *Router) Undrain(ctx context.Context, name string) (api.NodeState, error) {
	err := r.cfg.Store.Nodes().SetDraining(ctx, name, false)
	if errors.Is(err, store.ErrNotFound) {
		return api.NodeState{}, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("node %s is not registered", name)}
	}
	if err != nil {
		return api.NodeState{}, err
	}
	r.list(ctx, true)
	info, err := r.cfg.Store.Nodes().Get(ctx, name)
	if err != nil {
		return api.NodeState{}, err
	}
	r.log.Info("node undrained: it takes new sandboxes again", "node", name)
	return api.NodeState{Node: name, Draining: info.Draining, Live: info.Live(r.cfg.Now()) && info.LostAt == nil}, nil
}

// Nodes lists the registered nodes with their versions and whether this
// API process places sandboxes on them (Speaks).
func (r *Router) Nodes(ctx context.Context) (api.NodeList, error) {
	nodes, err := r.list(ctx, true)
	if err != nil {
		return api.NodeList{}, err
	}
	now := r.cfg.Now()
	l := api.NodeList{Nodes: []api.NodeInfo{}}
	for _, n := range nodes {
		l.Nodes = append(l.Nodes, api.NodeInfo{Name: n.Name, Addr: n.Addr, Version: n.Version, Compatible: Speaks(n),
			Live: n.Live(now) && n.LostAt == nil, Draining: n.Draining, Sandboxes: n.Sandboxes, Slots: n.Slots})
	}
	return l, nil
}

// targets returns the nodes that can take from's sandboxes: live, not
// draining, of the same image store. None is ErrConflict saying what to
// do.
func (r *Router) targets(ctx context.Context, from store.NodeInfo) (skip map[string]bool, err error) {
	nodes, err := r.list(ctx, true)
	if err != nil {
		return nil, err
	}
	skip = map[string]bool{from.Name: true}
	n := 0
	for _, o := range nodes {
		switch {
		case o.Name == from.Name:
		case o.ImageStore != from.ImageStore:
			skip[o.Name] = true
		case o.Live(r.cfg.Now()) && o.LostAt == nil && !o.Draining:
			n++
		}
	}
	if n == 0 {
		return nil, &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf(
			"node %s is the last node that can take sandboxes (no other live, undrained node has --image-store %s): start another lizard node with it, or undrain one, then drain %s",
			from.Name, from.ImageStore, from.Name)}
	}
	return skip, nil
}

// moveAll moves sbs off node from, drainParallel at a time; failed says
// why each that did not move stayed.
func (r *Router) moveAll(ctx context.Context, from store.NodeInfo, sbs []store.Sandbox) (moved []api.SandboxMove, failed map[string]string) {
	var mu sync.Mutex
	failed = map[string]string{}
	sem := make(chan struct{}, drainParallel)
	var wg sync.WaitGroup
	for _, sb := range sbs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			mv, err := r.move(ctx, from, sb)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				r.log.Warn("drain: a sandbox did not move", "sandbox_id", sb.ID, "node", from.Name, "err", err)
				_, failed[sb.ID] = errdefs.Public(err)
				return
			}
			moved = append(moved, mv)
		}()
	}
	wg.Wait()
	slices.SortFunc(moved, func(a, b api.SandboxMove) int { return strings.Compare(a.SandboxID, b.SandboxID) })
	return moved, failed
}

// move hands sb to a node placement picks among from's targets: from
// pauses it if it runs and makes its image durable (MoveOut), and the new
// node resumes it if it ran. Its downtime is from the start of the move
// to the end of the resume.
func (r *Router) move(ctx context.Context, from store.NodeInfo, sb store.Sandbox) (api.SandboxMove, error) {
	begin := time.Now()
	skip, err := r.targets(ctx, from)
	if err != nil {
		return api.SandboxMove{}, err
	}
	to, err := r.place(ctx, skip, "")
	if err != nil {
		return api.SandboxMove{}, err
	}
	defer r.done(to.Name)
	mv, err := r.clientOf(from).MoveOut(ctx, sb.ID, to.Name)
	if err != nil {
		return api.SandboxMove{}, err
	}
	// Another API process may have moved a paused sandbox first: it went
	// where its row says.
	dest := mv.Sandbox.Node
	r.mu.Lock()
	delete(r.homes, sb.ID)
	r.mu.Unlock()
	out := api.SandboxMove{SandboxID: sb.ID, From: from.Name, To: dest}
	if mv.Paused {
		c, err := r.client(ctx, dest)
		if err != nil {
			return out, err
		}
		if _, err := c.Resume(ctx, sb.ID, nil); err != nil {
			return out, fmt.Errorf("resuming sandbox %s on node %s after its move: %w", sb.ID, dest, err)
		}
		out.Resumed = true
		out.DowntimeMs = time.Since(begin).Milliseconds()
	}
	state := api.StatePaused
	if out.Resumed {
		state = api.StateRunning
	}
	r.log.Info("drain: sandbox moved", "sandbox_id", sb.ID, "project_id", sb.ProjectID, "from", from.Name, "to", dest,
		"resumed", out.Resumed, "downtime_ms", out.DowntimeMs)
	r.emit(node.Event{Kind: node.Moved, SandboxID: sb.ID, ProjectID: sb.ProjectID, State: state,
		From: from.Name, To: dest, Downtime: time.Duration(out.DowntimeMs) * time.Millisecond})
	return out, nil
}

// drainLock takes the lock of node name's drain, waiting for another
// API process's drain of it to end.
func (r *Router) drainLock(ctx context.Context, name string) (func(), error) {
	for {
		release, ok, err := r.cfg.Store.TryLock(ctx, "drain-"+name)
		if err != nil || ok {
			return release, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
