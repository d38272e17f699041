package control

import (
	"context"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// errNoWebhooks answers on a control plane built without webhooks. The
// server serves no /v1/webhooks there (WebhooksKept), so no caller sees it.
var errNoWebhooks = &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: "this server sends no webhooks"}

// WebhooksKept says whether this control plane keeps webhooks: without
// them /v1/webhooks is no API path at all.
func (c *Control) WebhooksKept() bool { return c.cfg.Webhooks != nil }

// Create registers a webhook for the project and returns it with its
// secret, which is shown only here.
func (ws Webhooks) Create(ctx context.Context, req api.CreateWebhookRequest) (api.Webhook, error) {
	if ws.c.cfg.Webhooks == nil {
		return api.Webhook{}, errNoWebhooks
	}
	return ws.c.cfg.Webhooks.Create(ctx, ws.project, req)
}

// List returns the project's webhooks, without their secrets.
func (ws Webhooks) List(ctx context.Context) (api.WebhookList, error) {
	if ws.c.cfg.Webhooks == nil {
		return api.WebhookList{}, errNoWebhooks
	}
	hooks, err := ws.c.cfg.Webhooks.List(ctx, ws.project)
	if err != nil {
		return api.WebhookList{}, err
	}
	return api.WebhookList{Webhooks: hooks}, nil
}

// Delete removes the project's webhook id; nothing more is sent to it.
func (ws Webhooks) Delete(ctx context.Context, id string) error {
	if ws.c.cfg.Webhooks == nil {
		return errNoWebhooks
	}
	return ws.c.cfg.Webhooks.Delete(ctx, ws.project, id)
}

// Deliveries returns the latest deliveries to the project's webhook id.
func (ws Webhooks) Deliveries(ctx context.Context, id string) (api.WebhookDeliveryList, error) {
	if ws.c.cfg.Webhooks == nil {
		return api.WebhookDeliveryList{}, errNoWebhooks
	}
	ds, err := ws.c.cfg.Webhooks.Deliveries(ctx, ws.project, id)
	if err != nil {
		return api.WebhookDeliveryList{}, err
	}
	return api.WebhookDeliveryList{Deliveries: ds}, nil
}
