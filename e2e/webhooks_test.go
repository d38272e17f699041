package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// receiver is a webhook receiver on loopback: it checks each delivery's
// signature with the webhook's secret and keeps the events it accepts.
type receiver struct {
	t      *testing.T
	srv    *httptest.Server
	secret string
	// fail answers 500 to the first fail[eventType] attempts at each
	// event of that type.
	mu      sync.Mutex
	fail    map[string]int
	refused map[int64]int
	got     []api.Event // accepted, in arrival order
	bad     []string    // deliveries that did not verify
}

func newReceiver(t *testing.T, fail map[string]int) *receiver {
	r := &receiver{t: t, fail: fail, refused: map[int64]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := verify(r.secret, req.Header.Get("Lizard-Signature"), body, time.Now()); err != nil {
		r.bad = append(r.bad, err.Error())
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var ev api.Event
	if err := json.Unmarshal(body, &ev); err != nil || req.Header.Get("Lizard-Event-Type") != ev.Type ||
		req.Header.Get("Lizard-Event-Id") != fmt.Sprint(ev.ID) {
		r.bad = append(r.bad, fmt.Sprintf("body %s, headers %v: %v", body, req.Header, err))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if r.refused[ev.ID] < r.fail[ev.Type] {
		r.refused[ev.ID]++
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	r.got = append(r.got, ev)
	w.WriteHeader(http.StatusNoContent)
}

// verify checks a Lizard-Signature as docs/events.md tells receivers to:
// HMAC-SHA256 of t + "." + body, and t within 5 minutes.
func verify(secret, header string, body []byte, now time.Time) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	var t int64
	if _, err := fmt.Sscan(ts, &t); err != nil || sig == "" {
		return fmt.Errorf("signature header %q does not parse", header)
	}
	if d := now.Sub(time.Unix(t, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("signature time %s is %s off", ts, d)
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	if !hmac.Equal([]byte(hex.EncodeToString(m.Sum(nil))), []byte(sig)) {
		return errors.New("signature does not verify")
	}
	return nil
}

// events returns the accepted events of sandbox id, waiting until there
// are n of them or timeout passes.
func (r *receiver) events(id string, n int, timeout time.Duration) []api.Event {
	deadline := time.Now().Add(timeout)
	for {
		r.mu.Lock()
		var out []api.Event
		for _, e := range r.got {
			if e.SandboxID == id {
				out = append(out, e)
			}
		}
		bad := r.bad
		r.mu.Unlock()
		if len(bad) > 0 {
			r.t.Fatalf("deliveries that did not verify: %v", bad)
		}
		if len(out) >= n || time.Now().After(deadline) {
			return out
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestWebhooks registers a receiver on loopback (the server allows it),
// runs two sandboxes through their lives and checks that every event
// arrives once, signed, in order per sandbox, after the receiver's 500s
// are retried; that the attempts are recorded; and that another project
// can neither see nor delete the webhook.
func TestWebhooks(t *testing.T) {
	s := startServer(t, "--webhook-allow-private")
	c := s.createProject("p1")
	other := s.createProject("p2")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rcv := newReceiver(t, map[string]int{api.LifecycleCreated: 2})

	// Bad input first: 400s saying why.
	for _, tc := range []struct {
		req  api.CreateWebhookRequest
		want string
	}{
		{api.CreateWebhookRequest{URL: "ftp://127.0.0.1/"}, "http:// or https://"},
		{api.CreateWebhookRequest{URL: ""}, "http:// or https://"},
		{api.CreateWebhookRequest{URL: rcv.srv.URL + "/" + strings.Repeat("a", 2048)}, "over the 2048"},
		{api.CreateWebhookRequest{URL: rcv.srv.URL, Types: []string{"sandbox.bogus"}}, "types"},
	} {
		_, err := c.Webhooks().Create(ctx, tc.req)
		var ae *client.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Message, tc.want) {
			t.Errorf("Webhooks().Create(%.60q) = %v; want 400 saying %q", tc.req.URL, err, tc.want)
		}
	}

	wh, err := c.Webhooks().Create(ctx, api.CreateWebhookRequest{URL: rcv.srv.URL + "/hook"})
	if err != nil {
		t.Fatalf("Webhooks().Create: %v", err)
	}
	if !strings.HasPrefix(wh.Secret, "whsec_") {
		t.Fatalf("webhook secret %q; want whsec_...", wh.Secret)
	}
	rcv.mu.Lock()
	rcv.secret = wh.Secret
	rcv.mu.Unlock()
	if ws, err := c.Webhooks().List(ctx); err != nil || len(ws) != 1 || ws[0].Secret != "" {
		t.Errorf("Webhooks().List = %+v, %v; want the webhook without its secret", ws, err)
	}

	// Two sandboxes at once: their events interleave, and the first's
	// created is refused twice.
	ids := make([]string, 2)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
			if err != nil {
				t.Errorf("CreateSandbox: %v", err)
				return
			}
			ids[i] = sb.SandboxID
			if _, err := c.PauseSandbox(ctx, sb.SandboxID); err != nil {
				t.Errorf("PauseSandbox: %v", err)
			}
			if _, err := c.ResumeSandbox(ctx, sb.SandboxID, api.ResumeRequest{}); err != nil {
				t.Errorf("ResumeSandbox: %v", err)
			}
			if err := c.KillSandbox(ctx, sb.SandboxID); err != nil {
				t.Errorf("KillSandbox: %v", err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	want := []string{api.LifecycleCreated, api.LifecyclePaused, api.LifecycleResumed, api.LifecycleKilled}
	for _, id := range ids {
		got := rcv.events(id, len(want), 60*time.Second)
		var types []string
		for _, e := range got {
			types = append(types, e.Type)
		}
		if strings.Join(types, " ") != strings.Join(want, " ") {
			t.Errorf("sandbox %s: received %v; want %v, each once, in order", id, types, want)
		}
	}
	// Nothing arrives twice later on.
	time.Sleep(time.Second)
	for _, id := range ids {
		if got := rcv.events(id, 0, 0); len(got) != len(want) {
			t.Errorf("sandbox %s: %d events received in the end; want %d", id, len(got), len(want))
		}
	}

	ds, err := c.Webhooks().Deliveries(ctx, wh.WebhookID)
	if err != nil {
		t.Fatalf("Webhooks().Deliveries: %v", err)
	}
	if len(ds) != 2*len(want) {
		t.Errorf("%d deliveries; want %d", len(ds), 2*len(want))
	}
	retried := 0
	for _, d := range ds {
		if d.State != api.DeliveryDelivered {
			t.Errorf("delivery of event %d: %s; want delivered", d.EventID, d.State)
		}
		var statuses []int
		for _, a := range d.Attempts {
			statuses = append(statuses, a.Status)
		}
		if len(statuses) == 3 && statuses[0] == 500 && statuses[1] == 500 && statuses[2] == 204 {
			retried++
		} else if len(statuses) != 1 || statuses[0] != 204 {
			t.Errorf("delivery of event %d: attempts %v", d.EventID, statuses)
		}
	}
	if retried != 2 {
		t.Errorf("%d deliveries went through after 500, 500; want the two created events", retried)
	}

	// Another project: no webhooks, and this one is not found.
	if ws, err := other.Webhooks().List(ctx); err != nil || len(ws) != 0 {
		t.Errorf("project p2's webhooks = %+v, %v; want none", ws, err)
	}
	if _, err := other.Webhooks().Deliveries(ctx, wh.WebhookID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("project p2 reading p1's deliveries = %v; want not found", err)
	}
	if err := other.Webhooks().Delete(ctx, wh.WebhookID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("project p2 deleting p1's webhook = %v; want not found", err)
	}
	if err := c.Webhooks().Delete(ctx, wh.WebhookID); err != nil {
		t.Fatalf("Webhooks().Delete: %v", err)
	}
	if ws, _ := c.Webhooks().List(ctx); len(ws) != 0 {
		t.Errorf("webhooks after the delete: %+v", ws)
	}
}
