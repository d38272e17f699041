package node

// Proxied calls in flight. A pause waits for them; and when their sandbox
// stops — killed, expired, its runtime dead — every one of them ends at
// once with the reason, instead of waiting on a connection to an address
// nothing answers any more. While a sandbox has calls in flight, a watcher
// checks its runtime often, so that a sandbox that dies on its own (the
// OOM killer, kill -9) ends its calls within a second or so rather than
// at the next liveness sweep.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentclient"
	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/fdbudget"
	"github.com/lizard-build/lizard/internal/store"
)

// watchEvery is how often a sandbox with calls in flight is checked.
const watchEvery = 250 * time.Millisecond

// inflight holds the calls in flight, per sandbox, each marked whether it
// is a follower (agentproxy.Following).
type inflight struct {
	// now, when set (--idle-reclaim), is the node's clock, and last
	// holds when a call to each sandbox last began or ended (reclaim.go).
	now func() time.Time

	mu    sync.Mutex
	calls map[string]map[*context.CancelCauseFunc]bool
	last  map[string]time.Time
}

func (f *inflight) add(id string, cancel *context.CancelCauseFunc, follower bool) (first bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]map[*context.CancelCauseFunc]bool{}
	}
	if f.now != nil { // inline, not a method: a runCode's path is short (internal/arch)
		if f.last == nil {
			f.last = map[string]time.Time{}
		}
		f.last[id] = f.now()
	}
	set := f.calls[id]
	if set == nil {
		set = map[*context.CancelCauseFunc]bool{}
		f.calls[id] = set
	}
	set[cancel] = follower
	return len(set) == 1
}

func (f *inflight) remove(id string, cancel *context.CancelCauseFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.now != nil { // inline, not a method: a runCode's path is short (internal/arch)
		if f.last == nil {
			f.last = map[string]time.Time{}
		}
		f.last[id] = f.now()
	}
	delete(f.calls[id], cancel)
	if len(f.calls[id]) == 0 {
		delete(f.calls, id)
	}
}

// lastAt is when a call to sandbox id last began or ended (zero: none
// since the node started, or not recorded without now), and how many are
// in flight.
func (f *inflight) lastAt(id string) (time.Time, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last[id], len(f.calls[id])
}

// putLast puts back when a call to sandbox id last began or ended, as
// lastAt said before a call of the node's own. A call of a user's that
// began and ended meanwhile is forgotten with it: the sandbox may then be
// squeezed a little early, and faults back what it needs.
func (f *inflight) putLast(id string, t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.now == nil {
		return
	}
	if t.IsZero() {
		delete(f.last, id)
		return
	}
	f.last[id] = t
}

// forget drops what last holds of the sandboxes not in running.
func (f *inflight) forget(running map[string]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.last {
		if !running[id] {
			delete(f.last, id)
		}
	}
}

// count is how many calls to sandbox id are in flight, followers included.
func (f *inflight) count(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls[id])
}

// waited is how many calls to sandbox id a pause waits for: all but the
// followers.
func (f *inflight) waited(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, follower := range f.calls[id] {
		if !follower {
			n++
		}
	}
	return n
}

// cancelFollowers ends the followers among the calls to sandbox id with
// cause.
func (f *inflight) cancelFollowers(id string, cause error) {
	f.mu.Lock()
	var cut []*context.CancelCauseFunc
	for cancel, follower := range f.calls[id] {
		if follower {
			cut = append(cut, cancel)
		}
	}
	f.mu.Unlock()
	for _, cancel := range cut {
		(*cancel)(cause)
	}
}

// cancelAll ends every call to sandbox id with cause.
func (f *inflight) cancelAll(id string, cause error) {
	f.mu.Lock()
	set := f.calls[id]
	delete(f.calls, id)
	f.mu.Unlock()
	for cancel := range set {
		(*cancel)(cause)
	}
}

// reachable returns sandbox id if it runs. A paused one is resumed
// first if resume says so, else refused with paused as the message. The
// caller holds id's lock.
func (n *Local) reachable(ctx context.Context, id string, resume bool, paused string) (store.Sandbox, error) {
	sb, err := n.get(ctx, id)
	if err != nil {
		return sb, err
	}
	err = check(sb, WantRunning)
	if errors.Is(err, ErrPaused) {
		if !resume {
			return sb, &errdefs.Error{Kind: errdefs.ErrConflict, Msg: paused}
		}
		// provision returns it running, or an error.
		return n.resumeLocked(ctx, sb, nil)
	}
	return sb, err
}

// Acquire implements Node.
func (n *Local) Acquire(ctx context.Context, id string) (agentproxy.Call, error) {
	unlock := n.locks.Lock(id)
	defer unlock()
	sb, err := n.reachable(ctx, id, true, "")
	if err != nil {
		return agentproxy.Call{}, err
	}
	held, err := n.cfg.Descriptors.Take(sb.ProjectID, fdbudget.Call)
	if err != nil {
		return agentproxy.Call{}, err
	}
	cctx, cancel := context.WithCancelCause(ctx)
	if first := n.calls.add(id, &cancel, agentproxy.Follows(ctx)); first {
		go n.watch(id)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			n.calls.remove(id, &cancel)
			cancel(nil)
			held()
		})
	}
	outcome := func(name, msg string) {
		n.bus.emit(Event{Kind: CallFailed, SandboxID: id, ErrorName: name, Reason: msg})
	}
	return agentproxy.Call{URL: agentclient.URL(id), Ctx: cctx, Release: release, Outcome: outcome}, nil
}

// watch checks sandbox id's runtime while it has calls in flight, and
// ends the sandbox as failed if its runtime has stopped.
func (n *Local) watch(id string) {
	ctx := context.Background()
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for range t.C {
		if n.calls.count(id) == 0 {
			return
		}
		if !n.dead(ctx, id) {
			continue
		}
		unlock := n.locks.Lock(id)
		cur, err := n.cfg.Store.GetSandbox(ctx, id)
		if err == nil && check(cur, WantRunning) == nil && n.dead(ctx, id) {
			const reason = "its runtime stopped: the sandbox's processes died or were killed (out of memory?)"
			// The calls end now, not after the removal end makes (the
			// processes' exit, the cgroups), which a loaded host may take
			// seconds over, up to the runtime's cleanup timeout.
			n.calls.cancelAll(id, stopReason(id, api.StateFailed, reason))
			err = n.end(ctx, cur, api.StateFailed, reason)
		}
		unlock()
		if err != nil {
			n.log.Error("ending a dead sandbox with calls in flight", "sandbox_id", id, "err", err)
		}
		return
	}
}

// stopReason is the error calls to a sandbox that stopped end with.
func stopReason(id, state, reason string) error {
	var how string
	switch state {
	case api.StateKilled:
		how = "was killed"
	case api.StateExpired:
		how = "expired"
	case api.StatePaused:
		return &errdefs.Error{Kind: errdefs.ErrConflict, Msg: fmt.Sprintf("sandbox %s was paused during the call; retry it", id)}
	default:
		how = "failed"
	}
	if reason != "" {
		how += " (" + reason + ")"
	}
	return &errdefs.Error{Kind: errdefs.ErrGone, Msg: fmt.Sprintf("sandbox %s %s during the call; create a new sandbox", id, how)}
}

// NewAgentProxy is the proxy of calls to n's sandboxes whose callers have
// been checked: the node's internal API serves the API's with it.
func NewAgentProxy(n Node, log *slog.Logger) *agentproxy.Proxy {
	p := &agentproxy.Proxy{Acquire: n.Acquire, Transport: n.Transport(), Log: log,
		Fail: func(w http.ResponseWriter, r *http.Request, err error) {
			status, code, msg := agentproxy.Classify(err)
			if status >= 500 {
				log.Error("agent call failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
			}
			api.WriteJSON(w, status, api.Error{Code: code, Message: msg})
		},
		Unanswered: func(context.Context, string) error { return errAgentUnanswered },
	}
	if l, ok := n.(*Local); ok {
		p.Unanswered = l.unanswered
	}
	return p
}

var errAgentUnanswered = &errdefs.Error{Kind: errdefs.ErrBadGateway,
	Msg: "the sandbox's agent did not answer; retry shortly, and if it persists kill the sandbox and create a new one"}

// agentGoneWait bounds how long Unanswered waits for an ending sandbox's
// state to be recorded.
const agentGoneWait = 2 * time.Second

// Unanswered is the error for a proxied call to sandbox id whose agent did
// not answer or broke off before its response began; state reads the
// sandbox's expiry and whether it still runs (Check's error if not), from
// wherever its caller sees it (the node's store, or control across a
// cluster). When the sandbox has ended or stopped running meanwhile
// (killed, expired, failed, paused), that is the answer — 410 naming how
// it ended, or 409 — not a 502 that tells the client to retry: a sandbox
// whose timeout passed counts as expired, and one being torn down is
// given agentGoneWait for its end to be recorded. Only an agent that
// fails in a sandbox still running is a 502.
func Unanswered(ctx context.Context, id string, state func(context.Context) (expires *time.Time, err error)) error {
	deadline := time.Now().Add(agentGoneWait)
	for {
		expires, err := state(ctx)
		if err != nil {
			return err
		}
		if !time.Now().Before(deadline) {
			if expires != nil && !time.Now().Before(*expires) {
				return &errdefs.Error{Kind: errdefs.ErrGone,
					Msg: "sandbox " + id + " expired during the call (its timeout passed; extend it with setTimeout next time); create a new sandbox"}
			}
			return &errdefs.Error{Kind: errdefs.ErrBadGateway,
				Msg: "sandbox " + id + "'s agent did not answer; retry shortly, and if it persists kill the sandbox and create a new one"}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// unanswered is Unanswered as the node sees the sandbox, in its store.
func (n *Local) unanswered(ctx context.Context, id string) error {
	return Unanswered(ctx, id, func(ctx context.Context) (*time.Time, error) {
		sb, err := n.get(ctx, id)
		if err == nil {
			err = check(sb, WantRunning)
		}
		return sb.ExpiresAt, err
	})
}
