package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"

	"github.com/lizard-build/lizard/api"
)

// EventOptions select a project's lifecycle events (docs/events.md). Zero
// fields select everything.
type EventOptions struct {
	SandboxID string
	Types     []string          // api.Lifecycle*; any of these
	Metadata  map[string]string // every pair, as the sandbox had it
	// After: events after this ID (a page's Next, or the last event
	// seen). For Follow, 0 starts from now unless FromStart.
	After     int64
	FromStart bool
	Limit     int // page size, 1 to 1000 (0: the server's 100)
}

func (o EventOptions) query() url.Values {
	q := url.Values{}
	if o.SandboxID != "" {
		q.Set("sandbox", o.SandboxID)
	}
	for _, t := range o.Types {
		q.Add("type", t)
	}
	keys := make([]string, 0, len(o.Metadata))
	for k := range o.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q.Add("metadata", k+"="+o.Metadata[k])
	}
	if o.After > 0 || o.FromStart {
		q.Set("after", strconv.FormatInt(o.After, 10))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	return q
}

// Events are the key's project's lifecycle events (docs/events.md):
// c.Events().List, Follow.
type Events struct{ c *Client }

// Events returns the key's project's lifecycle events.
func (c *Client) Events() Events { return Events{c: c} }

// List returns one page of the project's events, oldest first; pass
// its Next as After for the following page while HasMore.
func (e Events) List(ctx context.Context, opts EventOptions) (*api.EventList, error) {
	var list api.EventList
	if err := e.c.call(ctx, request{method: http.MethodGet, path: "/events", query: opts.query()}, &list); err != nil {
		return nil, err
	}
	if list.Events == nil {
		list.Events = []api.Event{}
	}
	return &list, nil
}

// EventStream is a live follow of a project's events (Events.Follow).
type EventStream struct {
	body   io.ReadCloser
	dec    *json.Decoder
	cancel context.CancelFunc
	ctx    context.Context
	// Last is the ID of the last event Next returned: a new follow with
	// After: Last resumes without a gap.
	Last int64
}

// Follow starts following the project's events and returns once the
// server follows: every event recorded from then on (or after
// opts.After) comes out of Next, in order.
func (e Events) Follow(ctx context.Context, opts EventOptions) (*EventStream, error) {
	q := opts.query()
	q.Set("follow", "1")
	q.Del("limit")
	resp, cancel, err := e.c.do(ctx, request{method: http.MethodGet, path: "/events", query: q, stream: true})
	if err != nil {
		return nil, err
	}
	return &EventStream{body: resp.Body, dec: json.NewDecoder(resp.Body), cancel: cancel, ctx: ctx, Last: opts.After}, nil
}

// Next waits for the next event. It fails once the stream is closed,
// its context ends or the connection breaks (ErrTruncated).
func (s *EventStream) Next() (api.Event, error) {
	var e api.Event
	if err := s.dec.Decode(&e); err != nil {
		if s.ctx.Err() != nil {
			return e, fmt.Errorf("following events: %w", s.ctx.Err())
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return e, &streamError{what: "events"}
		}
		return e, &streamError{what: "events", cause: err}
	}
	s.Last = e.ID
	return e, nil
}

// Close stops following.
func (s *EventStream) Close() error {
	s.cancel()
	return s.body.Close()
}
