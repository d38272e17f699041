package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/lizard-build/lizard/api"
)

// Webhooks are the key's project's webhooks (docs/events.md):
// c.Webhooks().Create, List, Delete, Deliveries.
type Webhooks struct{ c *Client }

// Webhooks returns the key's project's webhooks.
func (c *Client) Webhooks() Webhooks { return Webhooks{c: c} }

// Create registers url to be sent the project's events of types
// (none: every type). The answer holds the webhook's secret, shown only
// here: keep it to check deliveries' signatures (docs/events.md).
func (w Webhooks) Create(ctx context.Context, req api.CreateWebhookRequest) (*api.Webhook, error) {
	var hook api.Webhook
	if err := w.c.call(ctx, request{method: http.MethodPost, path: "/webhooks", json: req}, &hook); err != nil {
		return nil, err
	}
	return &hook, nil
}

// List lists the project's webhooks (without secrets).
func (w Webhooks) List(ctx context.Context) ([]api.Webhook, error) {
	var list api.WebhookList
	if err := w.c.call(ctx, request{method: http.MethodGet, path: "/webhooks"}, &list); err != nil {
		return nil, err
	}
	if list.Webhooks == nil {
		list.Webhooks = []api.Webhook{}
	}
	return list.Webhooks, nil
}

// Delete removes a webhook; nothing more is sent to it.
func (w Webhooks) Delete(ctx context.Context, id string) error {
	return w.c.call(ctx, request{method: http.MethodDelete, path: "/webhooks/" + url.PathEscape(id)}, nil)
}

// Deliveries lists a webhook's latest deliveries, newest first,
// each with its attempts.
func (w Webhooks) Deliveries(ctx context.Context, id string) ([]api.WebhookDelivery, error) {
	var list api.WebhookDeliveryList
	if err := w.c.call(ctx, request{method: http.MethodGet, path: "/webhooks/" + url.PathEscape(id) + "/deliveries"}, &list); err != nil {
		return nil, err
	}
	if list.Deliveries == nil {
		list.Deliveries = []api.WebhookDelivery{}
	}
	return list.Deliveries, nil
}
