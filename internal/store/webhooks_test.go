package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestWebhookDeliveries(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		s := be.open(t)
		now := time.Now()
		if err := s.CreateProject(ctx, "p", now); err != nil {
			t.Fatal(err)
		}
		before := Event{Type: "sandbox.created", At: now, ProjectID: "p", SandboxID: "s0"}
		if err := s.Events().Append(ctx, &before); err != nil {
			t.Fatal(err)
		}
		w := Webhook{ID: "wh1", ProjectID: "p", URL: "http://127.0.0.1:1/", Types: []string{"sandbox.created", "sandbox.killed"}, Secret: "k", CreatedAt: now}
		if err := s.Webhooks().Create(ctx, &w); err != nil {
			t.Fatalf("CreateWebhook: %v", err)
		}
		if w.Cursor != before.ID {
			t.Errorf("new webhook's cursor = %d; want the newest event %d (it is sent only later ones)", w.Cursor, before.ID)
		}
		if err := s.Webhooks().Create(ctx, &Webhook{ID: "wh2", ProjectID: "nope", URL: "x", Secret: "k", CreatedAt: now}); !errors.Is(err, ErrNotFound) {
			t.Errorf("CreateWebhook in a missing project = %v; want ErrNotFound", err)
		}
		got, err := s.Webhooks().Get(ctx, "wh1")
		if err != nil || len(got.Types) != 2 || got.Secret != "k" {
			t.Fatalf("GetWebhook = %+v, %v", got, err)
		}
		var evs []Event
		for _, sb := range []string{"s1", "s1", "s2"} {
			e := Event{Type: "sandbox.created", At: now, ProjectID: "p", SandboxID: sb}
			if err := s.Events().Append(ctx, &e); err != nil {
				t.Fatal(err)
			}
			evs = append(evs, e)
		}
		last := evs[2].ID
		// Twice, as two API processes would: one delivery per event.
		for range 2 {
			if err := s.Webhooks().QueueDeliveries(ctx, w, evs, last, now); err != nil {
				t.Fatalf("QueueDeliveries: %v", err)
			}
		}
		if got, _ := s.Webhooks().Get(ctx, "wh1"); got.Cursor != last {
			t.Errorf("cursor after queueing = %d; want %d", got.Cursor, last)
		}
		lease := time.Minute
		d1, err := s.Webhooks().ClaimDelivery(ctx, now, lease)
		if err != nil || d1.EventID != evs[0].ID || d1.Attempts != 1 {
			t.Fatalf("first claim = %+v, %v; want event %d, attempt 1", d1, err, evs[0].ID)
		}
		// s1's second event waits for its first; s2's goes.
		d2, err := s.Webhooks().ClaimDelivery(ctx, now, lease)
		if err != nil || d2.EventID != evs[2].ID {
			t.Fatalf("second claim = %+v, %v; want s2's event %d", d2, err, evs[2].ID)
		}
		if d, err := s.Webhooks().ClaimDelivery(ctx, now, lease); !errors.Is(err, ErrNotFound) {
			t.Fatalf("third claim = %+v, %v; want none (s1's second waits, the others are claimed)", d, err)
		}
		// A claimer that died: its lease runs out and another takes it.
		d1again, err := s.Webhooks().ClaimDelivery(ctx, now.Add(2*lease), lease)
		if err != nil || d1again.ID != d1.ID || d1again.Attempts != 2 {
			t.Fatalf("claim after the lease = %+v, %v; want delivery %d again, attempt 2", d1again, err, d1.ID)
		}
		if err := s.Webhooks().FinishAttempt(ctx, d2, Attempt{N: 1, At: now, Status: 200}, DeliveryDelivered, now); err != nil {
			t.Fatal(err)
		}
		retry := now.Add(2*lease + time.Second)
		if err := s.Webhooks().FinishAttempt(ctx, d1again, Attempt{N: 2, At: now, Status: 500, Error: "HTTP 500", Took: time.Millisecond}, DeliveryPending, retry); err != nil {
			t.Fatal(err)
		}
		if d, err := s.Webhooks().ClaimDelivery(ctx, now.Add(2*lease), lease); !errors.Is(err, ErrNotFound) {
			t.Fatalf("claim before the retry is due = %+v, %v; want none", d, err)
		}
		d1 = must(s.Webhooks().ClaimDelivery(ctx, retry, lease))
		if err := s.Webhooks().FinishAttempt(ctx, d1, Attempt{N: 3, At: retry, Status: 204}, DeliveryDelivered, retry); err != nil {
			t.Fatal(err)
		}
		if d := must(s.Webhooks().ClaimDelivery(ctx, retry, lease)); d.EventID != evs[1].ID {
			t.Errorf("claim after s1's first was delivered = event %d; want %d", d.EventID, evs[1].ID)
		}
		ds, err := s.Webhooks().ListDeliveries(ctx, "wh1", 10)
		if err != nil || len(ds) != 3 {
			t.Fatalf("ListDeliveries = %d, %v; want 3", len(ds), err)
		}
		if d := ds[2]; d.State != DeliveryDelivered || len(d.Tries) != 2 || d.Tries[0].Status != 500 || d.Tries[1].Status != 204 {
			t.Errorf("s1's first delivery = %+v; want delivered after a 500 and a 204", d)
		}
		if err := s.Webhooks().Delete(ctx, "wh1"); err != nil {
			t.Fatal(err)
		}
		if err := s.Webhooks().Delete(ctx, "wh1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("second DeleteWebhook = %v; want ErrNotFound", err)
		}
		if ds, _ := s.Webhooks().ListDeliveries(ctx, "wh1", 10); len(ds) != 0 {
			t.Errorf("deliveries of a deleted webhook: %d", len(ds))
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
