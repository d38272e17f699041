// Package webhook sends a project's lifecycle events (package events) to
// the URLs it registers (docs/events.md): each delivery signed with the
// webhook's secret, retried with exponential backoff for a bounded time,
// every attempt recorded, and sent by a pool of workers that read the
// events table — never in the path of a sandbox operation.
//
// Several API processes may share one database: a fan-out under a lock
// queues one delivery per webhook and event, and workers claim deliveries
// with a lease (store.Webhooks.ClaimDelivery), so each event is sent once, and each
// sandbox's events in order.
package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/events"
	"github.com/lizard-build/lizard/internal/store"
)

// Defaults and bounds.
const (
	// DefaultRetryFor is how long a delivery is retried by default.
	DefaultRetryFor = 24 * time.Hour
	// MaxPerProject bounds a project's webhooks.
	MaxPerProject = 20
	// MaxURL bounds a webhook's URL, in bytes.
	MaxURL = 2048
	// attemptTimeout bounds one attempt, connect to answer.
	attemptTimeout = 10 * time.Second
	// lease is how long a claimed delivery is its worker's: well past
	// attemptTimeout, so a live worker never loses its delivery to
	// another (which would send it twice).
	lease = 3 * attemptTimeout
	// poll is how often workers look for due deliveries and the fan-out
	// for new events.
	poll = 250 * time.Millisecond
	// deliveriesShown bounds GET /v1/webhooks/{id}/deliveries.
	deliveriesShown = 100
)

// Config says how webhooks are kept and sent.
type Config struct {
	Store *store.Store
	Log   *slog.Logger
	// AllowPrivate lets webhooks reach loopback, link-local and private
	// addresses (a receiver on the operator's own network; tests).
	AllowPrivate bool
	// RetryFor bounds how long a delivery is retried (default
	// DefaultRetryFor).
	RetryFor time.Duration
	// Workers send deliveries at once (default 4).
	Workers int
	// Resolver looks up webhook hosts at registration (default
	// net.DefaultResolver); deliveries check the address they connect to.
	Resolver *net.Resolver
}

// Service registers webhooks and sends their deliveries.
type Service struct {
	cfg    Config
	client *http.Client
}

// New returns the service; Run sends deliveries.
func New(cfg Config) *Service {
	if cfg.RetryFor == 0 {
		cfg.RetryFor = DefaultRetryFor
	}
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Service{cfg: cfg, client: deliveryClient(cfg.AllowPrivate)}
}

// Create registers a webhook for projectID and returns it with its secret,
// which is shown only here.
func (s *Service) Create(ctx context.Context, projectID string, req api.CreateWebhookRequest) (api.Webhook, error) {
	if err := CheckURL(ctx, req.URL, s.cfg.AllowPrivate, s.cfg.Resolver); err != nil {
		return api.Webhook{}, err
	}
	types := []string{}
	for _, t := range req.Types {
		if !slices.Contains(events.Types, t) {
			return api.Webhook{}, errdefs.Invalidf("types: %q is not an event type; want any of %s", t, strings.Join(events.Types, ", "))
		}
		if !slices.Contains(types, t) {
			types = append(types, t)
		}
	}
	have, err := s.cfg.Store.Webhooks().List(ctx, projectID)
	if err != nil {
		return api.Webhook{}, err
	}
	if len(have) >= MaxPerProject {
		return api.Webhook{}, &errdefs.Error{Kind: errdefs.ErrConflict,
			Msg: fmt.Sprintf("project %s has %d webhooks, the most allowed; delete one first", projectID, MaxPerProject)}
	}
	w := store.Webhook{ID: "wh_" + random(10), ProjectID: projectID, URL: req.URL, Types: types,
		Secret: "whsec_" + random(32), CreatedAt: time.Now().UTC()}
	if err := s.cfg.Store.Webhooks().Create(ctx, &w); err != nil {
		return api.Webhook{}, err
	}
	out := wire(w)
	out.Secret = w.Secret
	return out, nil
}

// List returns projectID's webhooks, without their secrets.
func (s *Service) List(ctx context.Context, projectID string) ([]api.Webhook, error) {
	ws, err := s.cfg.Store.Webhooks().List(ctx, projectID)
	if err != nil {
		return nil, err
	}
	out := []api.Webhook{}
	for _, w := range ws {
		out = append(out, wire(w))
	}
	return out, nil
}

// lookup returns projectID's webhook id; another project's is not found,
// exactly like a missing one.
func (s *Service) lookup(ctx context.Context, projectID, id string) (store.Webhook, error) {
	w, err := s.cfg.Store.Webhooks().Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && w.ProjectID != projectID {
		return store.Webhook{}, &errdefs.Error{Kind: errdefs.ErrNotFound, Msg: fmt.Sprintf("webhook %s not found in project %s", id, projectID)}
	}
	return w, err
}

// Delete removes projectID's webhook id; nothing more is sent to it.
func (s *Service) Delete(ctx context.Context, projectID, id string) error {
	if _, err := s.lookup(ctx, projectID, id); err != nil {
		return err
	}
	err := s.cfg.Store.Webhooks().Delete(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil // deleted meanwhile
	}
	return err
}

// Deliveries returns the latest deliveries to projectID's webhook id.
func (s *Service) Deliveries(ctx context.Context, projectID, id string) ([]api.WebhookDelivery, error) {
	if _, err := s.lookup(ctx, projectID, id); err != nil {
		return nil, err
	}
	ds, err := s.cfg.Store.Webhooks().ListDeliveries(ctx, id, deliveriesShown)
	if err != nil {
		return nil, err
	}
	out := []api.WebhookDelivery{}
	for _, d := range ds {
		wd := api.WebhookDelivery{EventID: d.EventID, SandboxID: d.SandboxID, State: d.State, Attempts: []api.WebhookAttempt{}}
		if d.State == store.DeliveryPending {
			next := d.NextAt
			wd.NextAttemptAt = &next
		}
		for _, a := range d.Tries {
			wd.Attempts = append(wd.Attempts, api.WebhookAttempt{Attempt: a.N, Time: a.At, Status: a.Status, Error: a.Error, TookMs: a.Took.Milliseconds()})
		}
		out = append(out, wd)
	}
	return out, nil
}

func wire(w store.Webhook) api.Webhook {
	types := w.Types
	if types == nil {
		types = []string{}
	}
	return api.Webhook{WebhookID: w.ID, URL: w.URL, Types: types, CreatedAt: w.CreatedAt}
}

// random is n random bytes in hex.
func random(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
