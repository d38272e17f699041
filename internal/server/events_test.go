package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/events"
	"github.com/lizard-build/lizard/internal/webhook"
)

// TestEventsAndWebhooksWhereKept: GET /v1/events and /v1/webhooks are
// served where the control plane keeps them and are no API path (404, as
// any unknown path) where it does not; a sandbox's key manages no webhooks.
func TestEventsAndWebhooksWhereKept(t *testing.T) {
	without := newTestEnv(t)
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/v1/events"}, {http.MethodGet, "/v1/webhooks"}, {http.MethodPost, "/v1/webhooks"},
		{http.MethodDelete, "/v1/webhooks/wh_x"}, {http.MethodGet, "/v1/webhooks/wh_x/deliveries"},
	} {
		r := without.do(t, without.key1, c.method, c.path, nil)
		if r.status != http.StatusNotFound || !strings.Contains(r.err.Message, "no such API path") {
			t.Errorf("without events and webhooks, %s %s = %d %q; want 404 no such API path", c.method, c.path, r.status, r.err.Message)
		}
	}

	with := newTestEnv(t, func(c *control.Config) {
		c.Events = &events.Log{Store: c.Store}
		c.Webhooks = webhook.New(webhook.Config{Store: c.Store, AllowPrivate: true})
	})
	with.create(t, with.key1, "")
	if r := with.do(t, with.key1, http.MethodGet, "/v1/events?limit=10", nil); r.status != http.StatusOK || !strings.Contains(r.body, `"events"`) {
		t.Errorf("GET /v1/events = %d %s; want 200 and a page", r.status, r.body)
	}
	if r := with.do(t, with.key1, http.MethodGet, "/v1/events?limit=0", nil); r.status != http.StatusBadRequest || !strings.Contains(r.err.Message, "limit") {
		t.Errorf("GET /v1/events?limit=0 = %d %q; want 400 naming limit", r.status, r.err.Message)
	}
	r := with.do(t, with.key1, http.MethodPost, "/v1/webhooks", strings.NewReader(`{"url":"http://127.0.0.1:9/hook"}`))
	if r.status != http.StatusCreated || !strings.Contains(r.body, "whsec_") {
		t.Fatalf("POST /v1/webhooks = %d %s; want 201 with its secret", r.status, r.body)
	}
	if r := with.do(t, with.key2, http.MethodGet, "/v1/webhooks", nil); r.status != http.StatusOK || strings.Contains(r.body, "wh_") {
		t.Errorf("p2's GET /v1/webhooks = %d %s; want 200 without p1's", r.status, r.body)
	}
	if r := with.do(t, with.key1, http.MethodGet, "/v1/webhooks", nil); r.status != http.StatusOK || !strings.Contains(r.body, "wh_") || strings.Contains(r.body, "whsec_") {
		t.Errorf("p1's GET /v1/webhooks = %d %s; want 200 with its webhook, no secret", r.status, r.body)
	}
}
