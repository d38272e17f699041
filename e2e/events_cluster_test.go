package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// TestClusterEvents: lifecycle events and webhooks with two `lizard api`
// processes (clusterEvents), and the end of a sandbox whose node is lost,
// recorded once although both processes sweep.
func TestClusterEvents(t *testing.T) {
	// The receiver is on loopback.
	c, cl := startClusterWith(t, 2, 2, nil, nil, []string{"--webhook-allow-private"})
	clusterEvents(t, cl)
	sb := newSandbox(t, cl[0], api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
	lost := c.nodeOf(sb.SandboxID)
	c.node(lost).kill9()
	nodeLostEvent(t, cl[1], sb.SandboxID, lost)
}

// clusterEvents runs a sandbox through its life with each call through
// either API process while the other follows the project's events and a
// webhook receives them: each event is recorded, followed and delivered
// exactly once, in order, whichever process served the call.
func clusterEvents(t *testing.T, cl []*client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rcv := newReceiver(t, nil)
	wh, err := cl[0].Webhooks().Create(ctx, api.CreateWebhookRequest{URL: rcv.srv.URL})
	if err != nil {
		t.Fatalf("Webhooks().Create through api 0: %v", err)
	}
	defer cl[1].Webhooks().Delete(context.WithoutCancel(ctx), wh.WebhookID)
	rcv.mu.Lock()
	rcv.secret = wh.Secret
	rcv.mu.Unlock()
	run := fmt.Sprint(time.Now().UnixNano())
	follow, err := cl[1].Events().Follow(ctx, client.EventOptions{Metadata: map[string]string{"run": run}})
	if err != nil {
		t.Fatalf("Events().Follow through api 1: %v", err)
	}
	defer follow.Close()

	sb, err := cl[0].CreateSandbox(ctx, api.CreateSandboxRequest{Metadata: map[string]string{"run": run}, TimeoutMs: ms(600_000)})
	if err != nil {
		t.Fatalf("CreateSandbox through api 0: %v", err)
	}
	id := sb.SandboxID
	if _, err := cl[1].PauseSandbox(ctx, id); err != nil {
		t.Fatalf("PauseSandbox through api 1: %v", err)
	}
	if _, err := cl[0].ResumeSandbox(ctx, id, api.ResumeRequest{}); err != nil {
		t.Fatalf("ResumeSandbox through api 0: %v", err)
	}
	if err := cl[1].KillSandbox(ctx, id); err != nil {
		t.Fatalf("KillSandbox through api 1: %v", err)
	}
	want := strings.Join([]string{api.LifecycleCreated, api.LifecyclePaused, api.LifecycleResumed, api.LifecycleKilled}, " ")

	// The follow: the four, then nothing more.
	var followed []string
	stop := time.AfterFunc(20*time.Second, func() { follow.Close() })
	for len(followed) < 4 {
		ev, err := follow.Next()
		if err != nil {
			t.Fatalf("following through api 1 after %v: %v", followed, err)
		}
		followed = append(followed, ev.Type)
	}
	stop.Stop()
	if got := strings.Join(followed, " "); got != want {
		t.Errorf("followed %s; want %s", got, want)
	}
	time.AfterFunc(1500*time.Millisecond, func() { follow.Close() })
	if ev, err := follow.Next(); err == nil {
		t.Errorf("followed a fifth event %s of %s; want each once", ev.Type, ev.SandboxID)
	}

	// Both API processes list the same events.
	var lists [2]string
	for i := range cl {
		page, err := cl[i].Events().List(ctx, client.EventOptions{SandboxID: id})
		if err != nil {
			t.Fatalf("Events().List through api %d: %v", i, err)
		}
		for _, e := range page.Events {
			lists[i] += fmt.Sprintf("%d:%s ", e.ID, e.Type)
		}
	}
	if lists[0] != lists[1] || strings.Count(lists[0], ":") != 4 {
		t.Errorf("events through api 0: %s; through api 1: %s; want the same four", lists[0], lists[1])
	}

	// The webhook: each event once, in order, though both API processes
	// run delivery workers.
	got := rcv.events(id, 4, 30*time.Second)
	time.Sleep(2 * time.Second) // a second delivery would come by now
	got = rcv.events(id, 0, 0)
	var types []string
	for _, e := range got {
		types = append(types, e.Type)
	}
	if strings.Join(types, " ") != want {
		t.Errorf("webhook received %v; want %s, each once", types, want)
	}
	ds, err := cl[1].Webhooks().Deliveries(ctx, wh.WebhookID)
	if err != nil {
		t.Fatalf("Webhooks().Deliveries through api 1: %v", err)
	}
	for _, d := range ds {
		if d.State != api.DeliveryDelivered || len(d.Attempts) != 1 {
			t.Errorf("delivery of event %d: %s after %d attempts; want delivered at the first", d.EventID, d.State, len(d.Attempts))
		}
	}
}

// nodeLostEvent waits for sandbox id's one sandbox.node_lost event and
// checks it names node.
func nodeLostEvent(t *testing.T, c *client.Client, id, node string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(3*clusterLease + 10*time.Second)
	for {
		page, err := c.Events().List(ctx, client.EventOptions{SandboxID: id, Types: []string{api.LifecycleNodeLost, api.LifecycleFailed}})
		if err != nil {
			t.Fatalf("Events().List: %v", err)
		}
		if len(page.Events) > 0 || time.Now().After(deadline) {
			if len(page.Events) > 0 {
				// Both API processes sweep every quarter lease: give the
				// other its turn before counting.
				time.Sleep(clusterLease / 2)
				if page, err = c.Events().List(ctx, client.EventOptions{SandboxID: id, Types: []string{api.LifecycleNodeLost, api.LifecycleFailed}}); err != nil {
					t.Fatalf("Events().List: %v", err)
				}
			}
			if len(page.Events) != 1 || page.Events[0].Type != api.LifecycleNodeLost || page.Events[0].Data.Node != node ||
				page.Events[0].Data.State != api.StateFailed {
				t.Errorf("events of %s, on lost node %s: %+v; want one sandbox.node_lost naming the node", id, node, page.Events)
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
