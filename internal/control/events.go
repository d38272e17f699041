package control

import (
	"context"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/events"
)

// errNoEvents answers on a control plane built without an event log. The
// server serves no /v1/events there (EventsKept), so no caller sees it.
var errNoEvents = &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: "this server keeps no lifecycle events"}

// EventsKept says whether this control plane reads lifecycle events:
// without them GET /v1/events is no API path at all.
func (c *Control) EventsKept() bool { return c.cfg.Events != nil }

// List returns one page of the project's events q selects, oldest first.
func (es Events) List(ctx context.Context, q events.Query) (api.EventList, error) {
	if es.c.cfg.Events == nil {
		return api.EventList{}, errNoEvents
	}
	return es.c.cfg.Events.List(ctx, es.project, q)
}

// Last is the newest event's ID of any project: a follower that gives no
// after starts there, seeing only what is recorded from now on.
func (es Events) Last(ctx context.Context) (int64, error) {
	if es.c.cfg.Events == nil {
		return 0, errNoEvents
	}
	return es.c.cfg.Events.Last(ctx)
}

// Follow sends the project's events q selects as they are recorded, after
// q.After, until ctx ends or send fails.
func (es Events) Follow(ctx context.Context, q events.Query, send func(api.Event) error) error {
	if es.c.cfg.Events == nil {
		return errNoEvents
	}
	return es.c.cfg.Events.Follow(ctx, es.project, q, send)
}

// EventQuery reads GET /v1/events' parameters: sandbox, type (repeated or
// comma-separated), metadata=key=value (repeated, as on GET
// /v1/sandboxes), after, limit and follow. It is here, not in the server,
// because it checks a request against the event log's own terms (its
// types, its largest page) as control checks every other request.
func EventQuery(v url.Values) (events.Query, bool, error) {
	var q events.Query
	if vs, ok := v["sandbox"]; ok {
		if len(vs) > 1 || vs[0] == "" {
			return q, false, errdefs.Invalidf("sandbox filter: give one sandbox ID, such as sandbox=abc123, or leave the parameter out")
		}
		q.SandboxID = vs[0]
	}
	for _, t := range v["type"] {
		for _, typ := range strings.Split(t, ",") {
			if !slices.Contains(events.Types, typ) {
				return q, false, errdefs.Invalidf("type filter %q: want one of %s", typ, strings.Join(events.Types, ", "))
			}
			q.Types = append(q.Types, typ)
		}
	}
	for _, kv := range v["metadata"] {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return q, false, errdefs.Invalidf("metadata filter %q: want key=value, such as metadata=user=alice", kv)
		}
		if q.Metadata == nil {
			q.Metadata = map[string]string{}
		}
		q.Metadata[k] = val
	}
	if v.Has("after") {
		n, err := strconv.ParseInt(v.Get("after"), 10, 64)
		if err != nil || n < 0 {
			return q, false, errdefs.Invalidf("after %q: want an event ID (a whole number, 0 for the oldest kept), such as a page's next", v.Get("after"))
		}
		q.After = n
	}
	if v.Has("limit") {
		n, err := strconv.Atoi(v.Get("limit"))
		if err != nil || n < 1 || n > events.MaxLimit {
			return q, false, errdefs.Invalidf("limit %q: want 1 to %d", v.Get("limit"), events.MaxLimit)
		}
		q.Limit = n
	}
	follow := false
	if v.Has("follow") {
		b, err := strconv.ParseBool(v.Get("follow"))
		if err != nil {
			return q, false, errdefs.Invalidf("follow %q: want 1 or 0 (true or false)", v.Get("follow"))
		}
		follow = b
	}
	return q, follow, nil
}
