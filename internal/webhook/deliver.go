package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/lizard-build/lizard/internal/events"
	"github.com/lizard-build/lizard/internal/store"
)

// SignatureHeader carries a delivery's signature: "t=<unix seconds>,v1=<hex
// HMAC-SHA256 of t + "." + body under the webhook's secret>".
const SignatureHeader = "Lizard-Signature"

// Sign is the SignatureHeader value of body sent at t with secret.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// Backoff is the wait after failed attempt n (1, 2, ...): 1 s doubling,
// at most 10 minutes.
func Backoff(n int) time.Duration {
	const first, most = time.Second, 10 * time.Minute
	if n < 1 {
		n = 1
	}
	if n > 20 {
		return most
	}
	return min(first<<(n-1), most)
}

func deliveryClient(allowPrivate bool) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	if !allowPrivate {
		d.Control = refusedDial
	}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil, // never through an environment's proxy: the address check is on the receiver's
			DialContext:           d.DialContext,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: attemptTimeout,
			MaxIdleConnsPerHost:   2,
		},
		Timeout: attemptTimeout,
		// A redirect is an answer, not a new receiver: following it would
		// skip the URL's checks.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Run queues and sends deliveries until ctx ends: the fan-out (one process
// at a time) and Workers senders.
func (s *Service) Run(ctx context.Context) {
	for range s.cfg.Workers {
		go s.work(ctx)
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.fanOut(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Log.Error("queueing webhook deliveries", "err", err)
		}
	}
}

// fanOut queues a delivery of every event past each webhook's cursor that
// the webhook takes.
func (s *Service) fanOut(ctx context.Context) error {
	release, ok, err := s.cfg.Store.TryLock(ctx, "webhook-fanout")
	if err != nil || !ok {
		return err
	}
	defer release()
	ws, err := s.cfg.Store.Webhooks().List(ctx, "")
	if err != nil {
		return err
	}
	for _, w := range ws {
		evs, err := s.cfg.Store.Events().List(ctx, store.EventFilter{ProjectID: w.ProjectID, Types: w.Types, After: w.Cursor, Limit: 500})
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			continue
		}
		if err := s.cfg.Store.Webhooks().QueueDeliveries(ctx, w, evs, evs[len(evs)-1].ID, time.Now()); err != nil {
			return err
		}
	}
	return nil
}

// work sends due deliveries until ctx ends.
func (s *Service) work(ctx context.Context) {
	for ctx.Err() == nil {
		d, err := s.cfg.Store.Webhooks().ClaimDelivery(ctx, time.Now(), lease)
		if err != nil {
			if !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil {
				s.cfg.Log.Error("claiming a webhook delivery", "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(poll):
			}
			continue
		}
		s.deliver(ctx, d)
	}
}

// deliver makes one attempt at d and records how it went.
func (s *Service) deliver(ctx context.Context, d store.Delivery) {
	log := s.cfg.Log.With("webhook_id", d.WebhookID, "event_id", d.EventID, "sandbox_id", d.SandboxID, "attempt", d.Attempts)
	now := time.Now()
	a := store.Attempt{N: d.Attempts, At: now.UTC()}
	state, next := store.DeliveryDelivered, now
	w, werr := s.cfg.Store.Webhooks().Get(ctx, d.WebhookID)
	ev, eerr := s.cfg.Store.Events().Get(ctx, d.EventID)
	switch {
	case errors.Is(werr, store.ErrNotFound):
		return // deleted: its deliveries went with it
	case errors.Is(eerr, store.ErrNotFound):
		a.Error, state = "the event was pruned before it could be delivered", store.DeliveryFailed
	case werr != nil || eerr != nil:
		log.Error("reading a webhook delivery", "err", errors.Join(werr, eerr))
		return // its lease runs out and it is tried again
	default:
		a.Status, a.Error = s.send(ctx, w, ev)
		a.Took = time.Since(now)
		if a.Error != "" {
			wait := Backoff(d.Attempts)
			state, next = store.DeliveryPending, now.Add(wait)
			if next.Sub(d.CreatedAt) > s.cfg.RetryFor {
				state = store.DeliveryFailed
			}
			log.Info("webhook delivery failed", "status", a.Status, "err", a.Error, "retry_in", wait, "state", state)
		}
	}
	// The outcome is recorded even if ctx just ended: the send happened.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.cfg.Store.Webhooks().FinishAttempt(rctx, d, a, state, next); err != nil {
		log.Error("recording a webhook attempt", "err", err)
	}
}

// send POSTs ev to w, signed; it returns the status and, unless a 2xx
// came back, why the attempt failed.
func (s *Service) send(ctx context.Context, w store.Webhook, ev store.Event) (int, string) {
	body, err := json.Marshal(events.Wire(ev))
	if err != nil {
		return 0, fmt.Sprintf("encoding the event: %v", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Sprintf("making the request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "lizard-webhook/1")
	req.Header.Set("Lizard-Webhook-Id", w.ID)
	req.Header.Set("Lizard-Event-Id", strconv.FormatInt(ev.ID, 10))
	req.Header.Set("Lizard-Event-Type", ev.Type)
	req.Header.Set(SignatureHeader, Sign(w.Secret, time.Now(), body))
	resp, err := s.client.Do(req)
	if err != nil {
		var ue interface{ Unwrap() error }
		if errors.Is(err, errNotPublic) {
			err = errNotPublic // without the dialled address
		} else if errors.As(err, &ue) {
			err = ue.Unwrap() // the cause, without the URL repeated
		}
		return 0, err.Error()
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Sprintf("the receiver answered HTTP %d", resp.StatusCode)
	}
	return resp.StatusCode, ""
}
