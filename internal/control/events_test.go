package control_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/events"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/webhook"
)

// TestEventsAndWebhooksThroughProject: a project's lifecycle events and
// webhooks are reached as its other resources, Control.Project(id), and
// each project sees only its own.
func TestEventsAndWebhooksThroughProject(t *testing.T) {
	var st *store.Store
	e := newEnv(t, func(c *control.Config) {
		st = c.Store
		c.Events = &events.Log{Store: c.Store}
		c.Webhooks = webhook.New(webhook.Config{Store: c.Store, AllowPrivate: true})
	})
	ctx := context.Background()
	if !e.c.EventsKept() || !e.c.WebhooksKept() {
		t.Fatalf("EventsKept %v, WebhooksKept %v; want both", e.c.EventsKept(), e.c.WebhooksKept())
	}
	for _, p := range []string{"p1", "p2"} {
		ev := store.Event{Type: api.LifecycleCreated, At: time.Now(), ProjectID: p, SandboxID: "sb-" + p}
		if err := st.Events().Append(ctx, &ev); err != nil {
			t.Fatal(err)
		}
	}
	p1, p2 := e.c.Project("p1"), e.c.Project("p2")
	page, err := p1.Events().List(ctx, events.Query{})
	if err != nil || len(page.Events) != 1 || page.Events[0].SandboxID != "sb-p1" {
		t.Fatalf("p1's events = %+v, %v; want its one event", page, err)
	}
	last, err := p1.Events().Last(ctx)
	if err != nil || last != page.Events[0].ID+1 {
		t.Errorf("Last = %d, %v; want %d, the newest of any project", last, err, page.Events[0].ID+1)
	}
	followCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var followed []string
	err = p2.Events().Follow(followCtx, events.Query{}, func(ev api.Event) error {
		followed = append(followed, ev.SandboxID)
		cancel()
		return nil
	})
	if len(followed) != 1 || followed[0] != "sb-p2" {
		t.Errorf("p2 followed %v (%v); want [sb-p2]", followed, err)
	}

	wh, err := p1.Webhooks().Create(ctx, api.CreateWebhookRequest{URL: "http://127.0.0.1:9/hook"})
	if err != nil || wh.Secret == "" {
		t.Fatalf("Create = %+v, %v; want a webhook with its secret", wh, err)
	}
	if l, err := p1.Webhooks().List(ctx); err != nil || len(l.Webhooks) != 1 || l.Webhooks[0].Secret != "" {
		t.Errorf("p1's webhooks = %+v, %v; want the one, without its secret", l, err)
	}
	if l, err := p2.Webhooks().List(ctx); err != nil || len(l.Webhooks) != 0 {
		t.Errorf("p2's webhooks = %+v, %v; want none", l, err)
	}
	if _, err := p2.Webhooks().Deliveries(ctx, wh.WebhookID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("p2 reading p1's deliveries: %v; want not found", err)
	}
	if err := p2.Webhooks().Delete(ctx, wh.WebhookID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("p2 deleting p1's webhook: %v; want not found", err)
	}
	if d, err := p1.Webhooks().Deliveries(ctx, wh.WebhookID); err != nil || d.Deliveries == nil {
		t.Errorf("p1's deliveries = %+v, %v; want a list", d, err)
	}
	if err := p1.Webhooks().Delete(ctx, wh.WebhookID); err != nil {
		t.Errorf("Delete: %v", err)
	}
}

// TestEventsAndWebhooksNotKept: a control plane built without them says
// so (the server then serves neither path) and answers any call not found.
func TestEventsAndWebhooksNotKept(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if e.c.EventsKept() || e.c.WebhooksKept() {
		t.Fatalf("EventsKept %v, WebhooksKept %v; want neither", e.c.EventsKept(), e.c.WebhooksKept())
	}
	p := e.c.Project("p1")
	_, listErr := p.Events().List(ctx, events.Query{})
	_, lastErr := p.Events().Last(ctx)
	followErr := p.Events().Follow(ctx, events.Query{}, func(api.Event) error { return nil })
	_, createErr := p.Webhooks().Create(ctx, api.CreateWebhookRequest{URL: "http://127.0.0.1:9/"})
	_, hooksErr := p.Webhooks().List(ctx)
	deleteErr := p.Webhooks().Delete(ctx, "wh_x")
	_, delivErr := p.Webhooks().Deliveries(ctx, "wh_x")
	for name, err := range map[string]error{"List": listErr, "Last": lastErr, "Follow": followErr,
		"Create": createErr, "Webhooks.List": hooksErr, "Delete": deleteErr, "Deliveries": delivErr} {
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s = %v; want ErrNotFound", name, err)
		}
	}
}

// TestEventQuery: GET /v1/events' parameters, read by control.
func TestEventQuery(t *testing.T) {
	tests := []struct {
		query  string
		want   events.Query
		follow bool
		bad    string // a word the 400's message names
	}{
		{"", events.Query{}, false, ""},
		{"sandbox=abc&type=sandbox.created,sandbox.killed&type=sandbox.paused&metadata=user=alice&after=7&limit=5&follow=1",
			events.Query{SandboxID: "abc", Types: []string{"sandbox.created", "sandbox.killed", "sandbox.paused"},
				Metadata: map[string]string{"user": "alice"}, After: 7, Limit: 5}, true, ""},
		{"sandbox=", events.Query{}, false, "sandbox filter"},
		{"sandbox=a&sandbox=b", events.Query{}, false, "sandbox filter"},
		{"type=nope", events.Query{}, false, "type filter"},
		{"metadata=novalue", events.Query{}, false, "metadata filter"},
		{"after=-1", events.Query{}, false, "after"},
		{"limit=0", events.Query{}, false, "limit"},
		{"limit=1001", events.Query{}, false, "limit"},
		{"follow=maybe", events.Query{}, false, "follow"},
	}
	for _, tt := range tests {
		v, _ := url.ParseQuery(tt.query)
		q, follow, err := control.EventQuery(v)
		if tt.bad != "" {
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(errdefs.Message(err), tt.bad) {
				t.Errorf("%q: %v; want a 400 naming %s", tt.query, err, tt.bad)
			}
			continue
		}
		if err != nil || follow != tt.follow || q.SandboxID != tt.want.SandboxID || q.After != tt.want.After ||
			q.Limit != tt.want.Limit || len(q.Types) != len(tt.want.Types) || len(q.Metadata) != len(tt.want.Metadata) {
			t.Errorf("%q = %+v, %v, %v; want %+v, %v", tt.query, q, follow, err, tt.want, tt.follow)
		}
	}
}
