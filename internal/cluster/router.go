// Package cluster is Lizard on many machines (docs/cluster.md): nodes
// register in the shared database and renew a lease (Member); the API
// places each new sandbox on a node with a live lease and routes every
// later call for it to the node its row names (Router, a node.Node over
// the nodes' remote clients); and one API process at a time ends the
// sandboxes of nodes whose lease ran out (Sweeper).
package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/egress"
	"github.com/lizard-build/lizard/internal/netpolicy"
	"github.com/lizard-build/lizard/internal/template"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/cluster/remote"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/metrics"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/recipe"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/trace"
	"github.com/lizard-build/lizard/internal/version"
)

// Config says how the API reaches the nodes. Store and Secret are
// required.
type Config struct {
	Store  *store.Store
	Secret string
	Logger *slog.Logger // default slog.Default()
	// Choices is how many live nodes placement samples, picking the one
	// with the most free capacity (default 2: the power of two choices).
	Choices int
	// Refresh is how long the list of nodes kept in memory is used before
	// it is read again, in the background (default 1 s; list).
	Refresh time.Duration
	Now     func() time.Time // default time.Now
	// Metrics counts the refusals of the secret on /v1/nodes (nil: none).
	Metrics *metrics.Metrics
}

// Router is the node.Node of the API in a cluster: it places creates and
// sends every call for a sandbox to the node that runs it. It is safe for
// concurrent use.
type Router struct {
	cfg Config
	log *slog.Logger
	tr  *remote.Transport

	mu      sync.Mutex
	clients map[string]*remote.Client // by node name, for its current address
	nodes   []store.NodeInfo
	readAt  time.Time
	// refreshing says a background read of the nodes is under way.
	refreshing bool
	// placing counts creates under way per node, and placed those ended
	// since the nodes were last read, which the rows read may not count.
	placing map[string]int
	placed  map[string]int
	// homes remembers the node of each sandbox called (sandbox).
	homes map[string]home
	subs  []func(node.Event)
}

var _ node.Node = (*Router)(nil)

// NewRouter checks cfg and returns the router.
func NewRouter(cfg Config) (*Router, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("cluster: no store")
	case cfg.Secret == "":
		return nil, errors.New("cluster: no cluster secret")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Choices <= 0 {
		cfg.Choices = 2
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Router{cfg: cfg, log: cfg.Logger, tr: remote.NewTransport(cfg.Secret),
		clients: map[string]*remote.Client{}, placing: map[string]int{}, placed: map[string]int{}, homes: map[string]home{}}, nil
}

// list returns the registered nodes. fresh reads them now, each with its
// live sandboxes counted (the nodes' listing, drains, template builds).
// Otherwise it returns the list kept in memory, as the nodes' heartbeats
// left it: once it is Refresh old a read starts in the background and the
// kept one serves meanwhile, and only one staleRefreshes old (or none yet)
// is read before answering. So creates and calls never wait for a read
// of every node: placement's cost does not grow with the fleet (the bench
// counted 515 rows and 2,559 blocks a create at 500 nodes when each
// create read them all); place reads the few it samples fresh.
func (r *Router) list(ctx context.Context, fresh bool) ([]store.NodeInfo, error) {
	r.mu.Lock()
	age := time.Since(r.readAt)
	if !fresh && !r.readAt.IsZero() && age < staleRefreshes*r.cfg.Refresh {
		if age >= r.cfg.Refresh && !r.refreshing {
			r.refreshing = true
			go r.refresh()
		}
		defer r.mu.Unlock()
		return r.nodes, nil
	}
	r.mu.Unlock()
	read := r.cfg.Store.Nodes().ListReported
	if fresh {
		read = r.cfg.Store.Nodes().List
	}
	nodes, err := read(ctx)
	if err != nil {
		return nil, err
	}
	r.keep(nodes)
	return nodes, nil
}

// staleRefreshes is how many Refresh periods a kept list of nodes serves
// before one is read in the call's own time (a background read failing,
// or a process idle that long).
const staleRefreshes = 3

// refresh reads the nodes in the background for list.
func (r *Router) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), staleRefreshes*r.cfg.Refresh)
	defer cancel()
	nodes, err := r.cfg.Store.Nodes().ListReported(ctx)
	r.mu.Lock()
	r.refreshing = false
	r.mu.Unlock()
	if err != nil {
		r.log.Warn("reading the nodes", "err", err)
		return
	}
	r.keep(nodes)
}

// keep makes nodes the list kept. The creates this router placed since
// the last read are in the rows now (or in the counts nodes report
// within a third of a lease: close enough for sampling).
func (r *Router) keep(nodes []store.NodeInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nodes, r.readAt = nodes, time.Now()
	clear(r.placed)
}

// client returns the client of node name.
func (r *Router) client(ctx context.Context, name string) (*remote.Client, error) {
	nodes, err := r.list(ctx, false)
	if err != nil {
		return nil, err
	}
	info, ok := find(nodes, name)
	if !ok {
		if nodes, err = r.list(ctx, true); err != nil {
			return nil, err
		}
		if info, ok = find(nodes, name); !ok {
			return nil, &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: fmt.Sprintf("node %s is not registered; is `lizard node` running there?", name)}
		}
	}
	if err := speak(info); err != nil {
		return nil, err
	}
	return r.clientOf(info), nil
}

// speak refuses node n, with a 503 naming both versions and what to do,
// when this API process does not work with n's version (Speaks): a call
// there would cross an internal API, and rows, of another release.
func speak(n store.NodeInfo) error {
	if Speaks(n) {
		return nil
	}
	v := cmp.Or(n.Version, version.Unreported)
	return &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: fmt.Sprintf(
		"node %s runs Lizard %s, which this lizard api (Lizard %s) cannot work with (the same major, and for 0.x the same minor: docs/cluster.md#versions); "+
			"call a lizard api of version %s, or upgrade node %s to %s", n.Name, v, version.Version, version.Span(v), n.Name, version.Span(version.Version))}
}

func (r *Router) clientOf(info store.NodeInfo) *remote.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.clients[info.Name]
	if c == nil || c.Addr() != info.Addr {
		c = remote.NewClient(info.Name, info.Addr, r.tr)
		r.clients[info.Name] = c
	}
	return c
}

func find(nodes []store.NodeInfo, name string) (store.NodeInfo, bool) {
	for _, n := range nodes {
		if n.Name == name {
			return n, true
		}
	}
	return store.NodeInfo{}, false
}

// place picks the node for a new sandbox among those with a live lease
// and not in skip: of Choices sampled at random from the nodes kept in
// memory, the least loaded with room (load, free) as read now — among the
// nodes that hold image on their disk if any of them has room (prefer).
// It reads Choices rows, not the fleet: the kept list only says which
// nodes to sample, at most a few seconds old (list); the sampled nodes'
// leases, draining marks and live sandboxes are read fresh, so a create
// never goes to a node that lost its lease or filled up since.
// When the kept list leads nowhere (no node placeable in it, or none of
// those sampled placeable as read now: an undrain or a new node it does
// not show yet), the nodes are read again and placement tried once more,
// so that no create is refused on a list a few seconds old.
func (r *Router) place(ctx context.Context, skip map[string]bool, image string) (store.NodeInfo, error) {
	nodes, err := r.list(ctx, false)
	if err != nil {
		return store.NodeInfo{}, err
	}
	n, err := r.placeAmong(ctx, nodes, skip, image)
	if !errors.Is(err, errNoNode) {
		return n, err
	}
	if nodes, err = r.list(ctx, true); err != nil {
		return store.NodeInfo{}, err
	}
	return r.placeAmong(ctx, nodes, skip, image)
}

// errNoNode marks placeAmong's refusals for want of a node.
var errNoNode = errors.New("no node can take the sandbox")

// placeAmong is place over nodes.
func (r *Router) placeAmong(ctx context.Context, nodes []store.NodeInfo, skip map[string]bool, image string) (store.NodeInfo, error) {
	live, other := r.placeable(nodes, skip)
	if len(live) == 0 && len(other) > 0 {
		return store.NodeInfo{}, noNode("no node can take the sandbox:" + incompatible(other))
	}
	if len(live) == 0 {
		msg := "no node can take the sandbox: none has a live lease"
		if len(skip) > 0 {
			msg = "no node can take the sandbox: the nodes tried did not answer and no other has a live lease"
		}
		return store.NodeInfo{}, noNode(msg + "; check that `lizard node` runs and reaches the database, then retry")
	}
	rand.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	r.mu.Lock()
	live = r.prefer(live, image)
	r.mu.Unlock()
	var names []string
	for _, n := range live[:min(r.cfg.Choices, len(live))] {
		names = append(names, n.Name)
	}
	sampled, err := r.cfg.Store.Nodes().GetMany(ctx, names)
	if err != nil {
		return store.NodeInfo{}, err
	}
	sampled, _ = r.placeable(sampled, skip)
	r.mu.Lock()
	defer r.mu.Unlock()
	var best *store.NodeInfo
	for i := range sampled {
		n := &sampled[i]
		// Counted now: what this router placed there before is in it.
		delete(r.placed, n.Name)
		if !r.room(*n) {
			continue
		}
		if best == nil || r.load(*n) < r.load(*best) || r.load(*n) == r.load(*best) && n.FreeMemory > best.FreeMemory {
			best = n
		}
	}
	if best == nil {
		msg := "no node can take the sandbox: the nodes sampled have no free sandbox address or memory; kill sandboxes or add nodes"
		if len(other) > 0 {
			msg += ";" + incompatible(other)
		}
		return store.NodeInfo{}, noNode(msg)
	}
	r.placing[best.Name]++
	return *best, nil
}

// noNode is a refusal for want of a node: ErrUnavailable with msg for the
// caller, errNoNode for place.
func noNode(msg string) error {
	return noNodeError{&errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: msg}}
}

type noNodeError struct{ err *errdefs.Error }

func (e noNodeError) Error() string        { return e.err.Error() }
func (e noNodeError) Unwrap() error        { return e.err }
func (e noNodeError) Is(target error) bool { return target == errNoNode }

// placeable splits nodes into those placement may use (a live lease, not
// draining, not in skip, of a version this API works with) and the live
// ones of other versions.
func (r *Router) placeable(nodes []store.NodeInfo, skip map[string]bool) (live, other []store.NodeInfo) {
	now := r.cfg.Now()
	for _, n := range nodes {
		switch {
		case !n.Live(now) || n.Draining || skip[n.Name]:
		case !Speaks(n):
			other = append(other, n)
		default:
			live = append(live, n)
		}
	}
	return live, other
}

// Speaks reports whether this API process works with node n's version
// (version.Compatible); a node that reports none is of
// version.Unreported. Placement uses only such nodes: the internal API
// and the rows both write change between minor releases of 0.x.
func Speaks(n store.NodeInfo) bool {
	return version.Compatible(version.Version, cmp.Or(n.Version, version.Unreported))
}

// incompatible says which live nodes placement left out for their
// versions, and what to do.
func incompatible(nodes []store.NodeInfo) string {
	var s []string
	for _, n := range nodes {
		s = append(s, fmt.Sprintf("%s (%s)", n.Name, cmp.Or(n.Version, "unreported: "+version.Unreported)))
	}
	return fmt.Sprintf(" the live nodes %s run versions this lizard api (%s) cannot work with; "+
		"run nodes of version %s (the same major, and for 0.x the same minor: docs/cluster.md#versions) or an api of theirs",
		strings.Join(s, ", "), version.Version, version.Span(version.Version))
}

// prefer narrows nodes to those that reported holding image (an image
// store name: a custom template's build, a snapshot's or a paused
// sandbox's image) and have room: a create there starts without fetching
// it. With none such (or no image), nodes are left as they are, and the
// node picked fetches the image. The caller holds mu.
func (r *Router) prefer(nodes []store.NodeInfo, image string) []store.NodeInfo {
	if image == "" {
		return nodes
	}
	var holding []store.NodeInfo
	for _, n := range nodes {
		if n.Holds(image) && r.room(n) {
			holding = append(holding, n)
		}
	}
	if len(holding) == 0 {
		return nodes
	}
	return holding
}

// sandboxMemory is what placement counts a sandbox as holding: an idle
// interpreter sandbox restored from a template snapshot holds less, a busy
// one more; it turns a node's memory into a number of sandboxes.
const sandboxMemory = 256 << 20

// load is the share of n's capacity its sandboxes take, counting the
// creates this router placed on it that its row may not count yet. Its
// capacity is its address slots, or its memory in sandboxes if that is
// fewer. The caller holds mu.
func (r *Router) load(n store.NodeInfo) float64 {
	capacity := min(int64(n.Slots), n.MemoryBytes/sandboxMemory)
	if capacity <= 0 {
		return 1
	}
	return float64(n.Sandboxes+r.placing[n.Name]+r.placed[n.Name]) / float64(capacity)
}

// room reports whether n has a free address and the memory of one more
// sandbox. The caller holds mu.
func (r *Router) room(n store.NodeInfo) bool {
	return n.Sandboxes+r.placing[n.Name]+r.placed[n.Name] < n.Slots && n.FreeMemory >= sandboxMemory
}

// done is told a create placed on node name has ended; until the list of
// nodes is read again it still counts there.
func (r *Router) done(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.placing[name]--; r.placing[name] <= 0 {
		delete(r.placing, name)
	}
	r.placed[name]++
}

// Create implements node.Node: a plan with a snapshot's image goes to the
// node holding it if that node is live and has room, else, once the image
// is durable, to any node placement picks, which fetches it from the image
// store; any other plan to a node placement picks, and to another one if
// that node does not answer.
func (r *Router) Create(ctx context.Context, p node.Plan) (node.Sandbox, error) {
	home, err := r.volumesNode(ctx, p)
	if err != nil {
		return node.Sandbox{}, err
	}
	skip := map[string]bool{}
	image := ""
	if _, key, ok := template.SplitRef(p.Template); ok {
		image = recipe.ImageName(key)
	}
	if p.Image != "" {
		name, path := store.SplitImageRef(p.Image)
		if home != "" && home != name {
			return node.Sandbox{}, errdefs.Invalidf("the snapshot is on node %s but its volumes are on node %s: a sandbox runs where both are", name, home)
		}
		p.Image = path
		if home == "" && !r.usable(ctx, name) && r.durableSnapshot(ctx, p.SnapshotID) {
			skip[name] = true
			image = node.SnapshotImage(p.SnapshotID)
		} else {
			home = name
		}
	}
	if home != "" {
		c, err := r.client(ctx, home)
		if err != nil {
			return node.Sandbox{}, err
		}
		return c.Create(ctx, p)
	}
	for {
		_, sp := trace.Start(ctx, "cluster.place")
		n, err := r.place(ctx, skip, image)
		sp.SetAttributes(trace.String("lizard.node", n.Name))
		trace.End(sp, err)
		if err != nil {
			return node.Sandbox{}, err
		}
		sb, err := r.clientOf(n).Create(ctx, p)
		r.done(n.Name)
		if errors.Is(err, remote.ErrUnreachable) && ctx.Err() == nil {
			r.log.Warn("node did not answer a create; placing it on another", "node", n.Name, "err", err)
			skip[n.Name] = true
			continue
		}
		return sb, err
	}
}

// usable reports whether node name has a live lease and room for one more
// sandbox: where a snapshot's image is on disk, its creates go first.
func (r *Router) usable(ctx context.Context, name string) bool {
	info, ok, err := r.live(ctx, name)
	if err != nil {
		return true // let the call to it say why
	}
	if !ok || info.Draining || !Speaks(info) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.room(info)
}

// live returns node name's row and whether its lease runs.
func (r *Router) live(ctx context.Context, name string) (store.NodeInfo, bool, error) {
	nodes, err := r.list(ctx, false)
	if err != nil {
		return store.NodeInfo{}, false, err
	}
	info, ok := find(nodes, name)
	return info, ok && info.Live(r.cfg.Now()) && info.LostAt == nil, nil
}

// durableSnapshot reports whether snapshot id's image is in the image store.
func (r *Router) durableSnapshot(ctx context.Context, id string) bool {
	if id == "" {
		return false
	}
	sn, err := r.cfg.Store.GetSnapshot(ctx, id)
	return err == nil && sn.Durable
}

// home is the node a sandbox was found on, and when that node started: a
// sandbox moves only off a node without a live lease (adopt), so while
// the same run of its node keeps its lease the sandbox is still there.
type home struct {
	node    string
	started time.Time
}

// sandbox returns the client of the node sandbox id runs on. Its node is
// remembered: a call to a sandbox on a node with a live lease, in the run
// it was found on, goes there without reading its row (the node checks
// the sandbox's state itself). Otherwise the row is read: an ended
// sandbox is ErrGone naming why ("node lost"), and a durable paused one on
// a node without a live lease is moved (adopt).
func (r *Router) sandbox(ctx context.Context, id string) (*remote.Client, error) {
	r.mu.Lock()
	h, known := r.homes[id]
	r.mu.Unlock()
	if known {
		nodes, err := r.list(ctx, false)
		if err != nil {
			return nil, err
		}
		// A node restarted (its version may have changed) is read again.
		if info, ok := find(nodes, h.node); ok && info.Live(r.cfg.Now()) && info.LostAt == nil && !info.Draining && info.StartedAt.Equal(h.started) && Speaks(info) {
			return r.clientOf(info), nil
		}
	}
	row, err := r.cfg.Store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, node.NotFound(id)
	}
	if err != nil {
		return nil, err
	}
	sb := node.SandboxOf(row)
	if err := sb.Check(node.WantLive); err != nil {
		return nil, err
	}
	if errors.Is(sb.Check(node.WantRunning), node.ErrPaused) && sb.Durable && len(sb.Shape.Volumes) == 0 {
		if info, live, err := r.live(ctx, sb.Node); err == nil && (!live || info.Draining) {
			if sb, err = r.adopt(ctx, sb); err != nil {
				return nil, err
			}
		}
	}
	c, err := r.client(ctx, sb.Node)
	if err != nil {
		return nil, err
	}
	nodes, err := r.list(ctx, false)
	if err != nil {
		return nil, err
	}
	if info, ok := find(nodes, sb.Node); ok {
		r.mu.Lock()
		if len(r.homes) >= maxHomes {
			clear(r.homes)
		}
		r.homes[id] = home{node: sb.Node, started: info.StartedAt}
		r.mu.Unlock()
	}
	return c, nil
}

// adopt moves paused sandbox sb, whose image is durable and whose node has
// no live lease (lost, or stopped) or is draining, to a node placement picks, which
// resumes it from the image store on its next call. Another API process
// may move it first: then it goes where that one put it.
func (r *Router) adopt(ctx context.Context, sb node.Sandbox) (node.Sandbox, error) {
	n, err := r.place(ctx, map[string]bool{sb.Node: true}, node.PausedImage(sb.ID))
	if err != nil {
		return sb, err
	}
	defer r.done(n.Name)
	err = r.cfg.Store.AdoptPaused(ctx, sb.ID, sb.Node, n.Name)
	if err != nil && !errors.Is(err, store.ErrConflict) {
		return sb, err
	}
	if err == nil {
		r.log.Info("paused sandbox moved off a node without a lease or draining; it resumes from the image store", "sandbox_id", sb.ID, "from", sb.Node, "to", n.Name)
	}
	row, err := r.cfg.Store.GetSandbox(ctx, sb.ID)
	if err != nil {
		return sb, err
	}
	moved := node.SandboxOf(row)
	return moved, moved.Check(node.WantLive)
}

// maxHomes bounds the sandboxes whose node is remembered.
const maxHomes = 100_000

// onNode runs call on the node of sandbox id. A node that refuses it
// because the sandbox moved meanwhile (a drain: the call waited for the
// move under the sandbox's lock) has it run once more on the node the
// sandbox's row names now, so that its caller sees a stall, not an error.
func (r *Router) onNode(ctx context.Context, id string, call func(c *remote.Client) error) error {
	c, err := r.sandbox(ctx, id)
	if err != nil {
		return err
	}
	err = call(c)
	if errors.Is(err, remote.ErrUnreachable) {
		if gone := r.ended(ctx, id)(); gone != nil {
			return gone
		}
		return err
	}
	if !errors.Is(err, errdefs.ErrUnavailable) {
		return err
	}
	sb, gerr := r.cfg.Store.GetSandbox(ctx, id)
	if gerr != nil || sb.Node == c.Name() || node.SandboxOf(sb).Check(node.WantLive) != nil {
		return err
	}
	r.mu.Lock()
	delete(r.homes, id)
	r.mu.Unlock()
	if c, err = r.sandbox(ctx, id); err != nil {
		return err
	}
	return call(c)
}

// Fork implements node.Node: on the parent's node, which holds its
// memory.
func (r *Router) Fork(ctx context.Context, parent string, p node.Plan, n int) (out []node.Sandbox, err error) {
	err = r.onNode(ctx, parent, func(c *remote.Client) error {
		out, err = c.Fork(ctx, parent, p, n)
		return err
	})
	return out, err
}

// Kill implements node.Node.
func (r *Router) Kill(ctx context.Context, id string) error {
	err := r.onNode(ctx, id, func(c *remote.Client) error { return c.Kill(ctx, id) })
	if errors.Is(err, errdefs.ErrGone) {
		return nil
	}
	return err
}

// SetTimeout implements node.Node.
func (r *Router) SetTimeout(ctx context.Context, id string, ms int64) (sb node.Sandbox, err error) {
	err = r.onNode(ctx, id, func(c *remote.Client) error {
		sb, err = c.SetTimeout(ctx, id, ms)
		return err
	})
	return sb, err
}

// UpdateNetwork implements node.Node.
func (r *Router) UpdateNetwork(ctx context.Context, id string, p *netpolicy.Policy, cut bool) (sb node.Sandbox, err error) {
	err = r.onNode(ctx, id, func(c *remote.Client) error {
		sb, err = c.UpdateNetwork(ctx, id, p, cut)
		return err
	})
	return sb, err
}

// NetworkLog implements node.Node.
func (r *Router) NetworkLog(ctx context.Context, id string) (log []egress.Decision, err error) {
	err = r.onNode(ctx, id, func(c *remote.Client) error {
		log, err = c.NetworkLog(ctx, id)
		return err
	})
	return log, err
}

// Pause implements node.Node.
func (r *Router) Pause(ctx context.Context, id string) (sb node.Sandbox, err error) {
	err = r.onNode(ctx, id, func(c *remote.Client) error {
		sb, err = c.Pause(ctx, id)
		return err
	})
	return sb, err
}

// Resume implements node.Node: on the node that holds the image.
func (r *Router) Resume(ctx context.Context, id string, timeoutMs *int64) (sb node.Sandbox, err error) {
	err = r.onNode(ctx, id, func(c *remote.Client) error {
		sb, err = c.Resume(ctx, id, timeoutMs)
		return err
	})
	return sb, err
}

// Snapshot implements node.Node: the image is named with its node
// (store.ImageRef), where creates from it are sent.
func (r *Router) Snapshot(ctx context.Context, id, snapshotID string) (image string, size int64, err error) {
	err = r.onNode(ctx, id, func(c *remote.Client) error {
		image, size, err = c.Snapshot(ctx, id, snapshotID)
		image = store.ImageRef(c.Name(), image)
		return err
	})
	if err != nil {
		return "", 0, err
	}
	return image, size, nil
}

// RemoveImage implements node.Node. The image of a node without a live
// lease is left to it: it removes images no row accounts for when it is
// back (and the copy in the image store stays: docs/storage.md).
func (r *Router) RemoveImage(ctx context.Context, image string) error {
	name, path := store.SplitImageRef(image)
	if _, live, err := r.live(ctx, name); err == nil && !live {
		r.log.Warn("not removing an image of a node without a live lease; it sweeps it when back", "node", name, "image", path)
		return nil
	}
	c, err := r.client(ctx, name)
	if err != nil {
		return err
	}
	return c.RemoveImage(ctx, path)
}

// Acquire implements node.Node: the call goes to the sandbox's node,
// which resumes it if paused.
func (r *Router) Acquire(ctx context.Context, id string) (agentproxy.Call, error) {
	c, err := r.sandbox(ctx, id)
	if err != nil {
		return agentproxy.Call{}, err
	}
	return c.Acquire(remote.WithGone(ctx, r.ended(ctx, id)), id)
}

// ended is, for a call to sandbox id whose node stops answering
// (remote.WithGone), the sandbox's 410 if its row has ended meanwhile:
// the sweeper ends a lost node's sandboxes within a second of its lease's
// end, while this process's list of nodes may show the lease live a
// second or more longer, and its callers would be told 503 (retry) for a
// sandbox that will never answer again.
func (r *Router) ended(ctx context.Context, id string) func() error {
	return func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endedWait)
		defer cancel()
		row, err := r.cfg.Store.GetSandbox(rctx, id)
		if err != nil {
			return nil // the node's 503 stands
		}
		if err := node.SandboxOf(row).Check(node.WantLive); err != nil {
			r.mu.Lock()
			delete(r.homes, id)
			r.mu.Unlock()
			return err
		}
		return nil
	}
}

// endedWait bounds ended's read of the row: the caller is told the node's
// 503 rather than kept waiting on a database that does not answer.
const endedWait = 5 * time.Second

// Transport implements node.Node.
func (r *Router) Transport() http.RoundTripper { return r.tr }

// Subscribe implements node.Node: the router tells of the ends it
// records itself (nodes lost, Sweeper).
func (r *Router) Subscribe(fn func(node.Event)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subs = append(r.subs, fn)
}

func (r *Router) emit(e node.Event) {
	r.mu.Lock()
	subs := r.subs
	r.mu.Unlock()
	for _, fn := range subs {
		fn(e)
	}
}

// MakeVolume implements node.Node: the volume is made on a node placement
// picks, and recorded there; sandboxes that mount it are placed on it.
func (r *Router) MakeVolume(ctx context.Context, id string, size int64) error {
	n, err := r.place(ctx, nil, "")
	if err != nil {
		return err
	}
	err = r.clientOf(n).MakeVolume(ctx, id, size)
	r.done(n.Name)
	if err != nil {
		return err
	}
	if err := r.cfg.Store.Volumes().SetNode(context.WithoutCancel(ctx), id, n.Name); err != nil {
		if rerr := r.clientOf(n).RemoveVolume(context.WithoutCancel(ctx), id); rerr != nil {
			r.log.Error("removing a volume whose node could not be recorded", "volume_id", id, "node", n.Name, "err", rerr)
		}
		return err
	}
	return nil
}

// RemoveVolume implements node.Node: on the node that holds it.
func (r *Router) RemoveVolume(ctx context.Context, id string) error {
	nodes, err := r.cfg.Store.Volumes().Nodes(ctx, []string{id})
	if err != nil {
		return err
	}
	name, ok := nodes[id]
	if !ok || name == "" {
		return nil // never made on a node: nothing to remove
	}
	c, err := r.client(ctx, name)
	if err != nil {
		return err
	}
	return c.RemoveVolume(ctx, id)
}

// volumesNode is the node a plan's volumes live on ("" when it mounts
// none): a sandbox that mounts volumes runs where they are, so they must
// all be on one node.
func (r *Router) volumesNode(ctx context.Context, p node.Plan) (string, error) {
	if len(p.Volumes) == 0 {
		return "", nil
	}
	ids := make([]string, len(p.Volumes))
	for i, v := range p.Volumes {
		ids[i] = v.ID
	}
	nodes, err := r.cfg.Store.Volumes().Nodes(ctx, ids)
	if err != nil {
		return "", err
	}
	home := ""
	for _, v := range p.Volumes {
		n := nodes[v.ID]
		switch {
		case home == "":
			home = n
		case n != home:
			return "", errdefs.Invalidf("volumes %q and %q are on different nodes (%s, %s): a sandbox can mount volumes of one node only; mount them in two sandboxes",
				p.Volumes[0].Name, v.Name, home, n)
		}
	}
	return home, nil
}

// OpenPort implements node.Node: the request goes to the sandbox's node,
// which dials the port.
func (r *Router) OpenPort(ctx context.Context, id string, port int, resume bool) (agentproxy.Call, error) {
	c, err := r.sandbox(ctx, id)
	if err != nil {
		return agentproxy.Call{}, err
	}
	return c.OpenPort(remote.WithGone(ctx, r.ended(ctx, id)), id, port, resume)
}

// Metrics implements node.Node: the samples are kept by the sandbox's node.
func (r *Router) Metrics(ctx context.Context, id string) (m []api.SandboxMetric, err error) {
	err = r.onNode(ctx, id, func(c *remote.Client) error {
		m, err = c.Metrics(ctx, id)
		return err
	})
	return m, err
}
