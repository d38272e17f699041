// Package events records sandboxes' lifecycle events (docs/events.md) in
// the store and reads them back, as pages and as a live follow.
//
// Events are written where the state changes: a Recorder subscribes to the
// node that changed it (node.Local in `lizard serve` and in each `lizard
// node`, which write to the shared database) and to the cluster's router
// (the ends of sandboxes of lost nodes, recorded by the one API process
// that swept them). Each change is thus recorded once, by one process,
// however many API processes serve reads. Readers poll the store by ID,
// which works the same through any API process.
package events

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/store"
)

// DefaultRetention is how long events are kept by default.
const DefaultRetention = 7 * 24 * time.Hour

// writeTimeout bounds recording one event: a state change is not held up
// longer than this by a slow database.
const writeTimeout = 5 * time.Second

// Recorder turns a node's events into stored lifecycle events.
type Recorder struct {
	Store *store.Store
	Log   *slog.Logger
	Now   func() time.Time // default time.Now
}

// Handle records e if it is a lifecycle event of a user's sandbox. It is
// a node subscriber: it runs synchronously, under the sandbox's lock, so
// one sandbox's events are stored in the order they happened, and an API
// call that changed a sandbox returns once its event can be read.
func (r *Recorder) Handle(e node.Event) {
	typ, data, ok := lifecycle(e)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	log := r.Log.With("sandbox_id", e.SandboxID, "project_id", e.ProjectID, "event", typ)
	sb, err := r.Store.GetSandbox(ctx, e.SandboxID)
	if err != nil {
		log.Error("recording a lifecycle event: reading its sandbox", "err", err)
		return
	}
	if sb.Role != "" {
		return // the server's own (template builds, warm pool)
	}
	b, err := json.Marshal(data)
	if err != nil {
		log.Error("recording a lifecycle event: encoding it", "err", err)
		return
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	ev := store.Event{Type: typ, At: now().UTC(), ProjectID: sb.ProjectID, SandboxID: sb.ID, Metadata: sb.Metadata, Data: b}
	if err := r.Store.Events().Append(ctx, &ev); err != nil {
		log.Error("recording a lifecycle event", "err", err)
	}
}

// lifecycle maps a node event to a lifecycle event type and its data; ok
// is false for node events that are not one (Started, Killed — whose
// Stopped follows — and key events). A CallFailed is a timeout or a
// kernel that died, out of memory when the kernel's message says it was
// SIGKILLed (pykernel's "perhaps for running out of memory").
func lifecycle(e node.Event) (typ string, data api.EventData, ok bool) {
	switch e.Kind {
	case node.Created:
		return api.LifecycleCreated, api.EventData{State: api.StateRunning, Template: e.Template, SnapshotID: e.SnapshotID,
			ForkedFrom: e.ForkedFrom, ParentSandboxID: e.ParentID}, true
	case node.Moved:
		return api.LifecycleMoved, api.EventData{State: e.State, Node: e.To, From: e.From, DowntimeMs: e.Downtime.Milliseconds()}, true
	case node.Resumed:
		return api.LifecycleResumed, api.EventData{State: api.StateRunning}, true
	case node.Forked:
		return api.LifecycleForked, api.EventData{State: api.StateRunning, SandboxIDs: e.Children}, true
	case node.Snapshotted:
		return api.LifecycleSnapshot, api.EventData{State: api.StateRunning, SnapshotID: e.SnapshotID}, true
	case node.CallFailed:
		data = api.EventData{State: api.StateRunning, Reason: e.Reason}
		switch {
		case e.ErrorName == api.ErrorNameTimeout:
			return api.LifecycleCallTimeout, data, true
		case strings.Contains(e.Reason, "out of memory"):
			return api.LifecycleCallOutOfMemory, data, true
		default:
			return api.LifecycleCallKernelDied, data, true
		}
	case node.Stopped:
		data = api.EventData{State: e.State, Reason: e.Reason}
		switch {
		case e.State == api.StatePaused:
			return api.LifecyclePaused, api.EventData{State: e.State}, true
		case e.State == api.StateKilled:
			return api.LifecycleKilled, data, true
		case e.State == api.StateExpired:
			return api.LifecycleExpired, data, true
		case e.LostNode != "":
			data.Node = e.LostNode
			return api.LifecycleNodeLost, data, true
		default:
			return api.LifecycleFailed, data, true
		}
	}
	return "", api.EventData{}, false
}

// Types are the lifecycle event types, for checking filters.
var Types = []string{api.LifecycleCreated, api.LifecyclePaused, api.LifecycleResumed, api.LifecycleForked,
	api.LifecycleSnapshot, api.LifecycleKilled, api.LifecycleExpired, api.LifecycleFailed, api.LifecycleNodeLost, api.LifecycleMoved,
	api.LifecycleCallTimeout, api.LifecycleCallKernelDied, api.LifecycleCallOutOfMemory}

// Wire is a stored event as the API shows it.
func Wire(e store.Event) api.Event {
	out := api.Event{ID: e.ID, Type: e.Type, Time: e.At, ProjectID: e.ProjectID, SandboxID: e.SandboxID, Metadata: e.Metadata}
	if out.Metadata == nil {
		out.Metadata = map[string]string{}
	}
	// Data was written from api.EventData; an unreadable row shows none.
	_ = json.Unmarshal(e.Data, &out.Data)
	return out
}
