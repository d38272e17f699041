package daemon

import (
	"flag"
	"log/slog"
	"time"

	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/events"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/webhook"
)

// eventFlags are the lifecycle events' and webhooks' flags
// (docs/events.md), taken by the processes that serve, prune and send
// them: `lizard serve` and `lizard api`.
type eventFlags struct {
	Retention    time.Duration
	RetryFor     time.Duration
	AllowPrivate bool
	WebhookSends int
}

func (f *eventFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.Retention, "event-retention", events.DefaultRetention, "how long lifecycle events (GET /v1/events) and webhook deliveries are kept")
	fs.DurationVar(&f.RetryFor, "webhook-retry-for", webhook.DefaultRetryFor, "how long a webhook delivery is retried (exponential backoff from 1s, at most 10m apart) before it is given up as failed")
	fs.BoolVar(&f.AllowPrivate, "webhook-allow-private", false, "let webhooks reach loopback, link-local, private and reserved addresses and this host's own (receivers on the operator's own network); by default they are refused, at registration and at every delivery")
	fs.IntVar(&f.WebhookSends, "webhook-workers", 4, "webhook deliveries sent at once by this process")
}

// webhooks is the webhook service over st, as the flags say.
func (f *eventFlags) webhooks(st *store.Store, log *slog.Logger) *webhook.Service {
	return webhook.New(webhook.Config{Store: st, Log: log, AllowPrivate: f.AllowPrivate, RetryFor: f.RetryFor, Workers: f.WebhookSends})
}

func (f *eventFlags) validate() error {
	if f.Retention < time.Minute {
		return cli.Usagef("--event-retention %s: want at least 1m", f.Retention)
	}
	if f.RetryFor < time.Second || f.RetryFor > f.Retention {
		return cli.Usagef("--webhook-retry-for %s: want at least 1s and at most --event-retention (%s)", f.RetryFor, f.Retention)
	}
	if f.WebhookSends < 1 || f.WebhookSends > 64 {
		return cli.Usagef("--webhook-workers %d: want 1 to 64", f.WebhookSends)
	}
	return nil
}
