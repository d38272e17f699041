package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/lizard-build/lizard/api"
)

// CreateWebhook registers url to be sent the project's events of types
// (none: every type). The answer holds the webhook's secret, shown only
// here: keep it to check deliveries' signatures (docs/events.md).
func (c *Client) CreateWebhook(ctx context.Context, req api.CreateWebhookRequest) (*api.Webhook, error) {
	var w api.Webhook
	if err := c.call(ctx, request{method: http.MethodPost, path: "/webhooks", json: req}, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// ListWebhooks lists the project's webhooks (without secrets).
func (c *Client) ListWebhooks(ctx context.Context) ([]api.Webhook, error) {
	var list api.WebhookList
	if err := c.call(ctx, request{method: http.MethodGet, path: "/webhooks"}, &list); err != nil {
		return nil, err
	}
	if list.Webhooks == nil {
		list.Webhooks = []api.Webhook{}
	}
	return list.Webhooks, nil
}

// DeleteWebhook removes a webhook; nothing more is sent to it.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	return c.call(ctx, request{method: http.MethodDelete, path: "/webhooks/" + url.PathEscape(id)}, nil)
}

// WebhookDeliveries lists a webhook's latest deliveries, newest first,
// each with its attempts.
func (c *Client) WebhookDeliveries(ctx context.Context, id string) ([]api.WebhookDelivery, error) {
	var list api.WebhookDeliveryList
	if err := c.call(ctx, request{method: http.MethodGet, path: "/webhooks/" + url.PathEscape(id) + "/deliveries"}, &list); err != nil {
		return nil, err
	}
	if list.Deliveries == nil {
		list.Deliveries = []api.WebhookDelivery{}
	}
	return list.Deliveries, nil
}
