package remote

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/cluster/secret"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
)

// TestNodeSecretThrottle: a node's API throttles failed checks of the
// cluster secret per source address (a 429 marked as the secret's
// refusal, which the API's client reads as the secret refused), while
// the API's client, with the right secret from another address, is
// served.
func TestNodeSecretThrottle(t *testing.T) {
	ctx := context.Background()
	s := serve(t, &fakeNode{pause: func(ctx context.Context, id string) (node.Sandbox, error) {
		return node.Sandbox{ID: id, State: "paused"}, nil
	}})
	from := func(local, sec string) *Client {
		tr := NewTransport(sec)
		tr.Base.(*http.Transport).DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}).DialContext
		return NewClient("n1", s.srv.Listener.Addr().String(), tr)
	}
	guesser := from("127.0.0.2", "a-wrong-guess-0123456789abcdef0123456789")
	for i := range secret.Burst + 3 {
		if _, err := guesser.Pause(ctx, "sb-1"); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(errdefs.Message(err), "LIZARD_CLUSTER_SECRET") {
			t.Fatalf("guess %d: %v; want ErrUnavailable naming LIZARD_CLUSTER_SECRET", i, err)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, s.srv.URL+"/internal/v1/sandboxes/sb-1/pause", nil)
	req.Header.Set("Authorization", "Bearer "+testSecret)
	c := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || resp.Header.Get(HeaderSecret) != "refused" {
		t.Errorf("the right secret from the throttled address: %d, Retry-After %q, %s %q; want 429 with Retry-After, marked refused",
			resp.StatusCode, resp.Header.Get("Retry-After"), HeaderSecret, resp.Header.Get(HeaderSecret))
	}
	if sb, err := from("127.0.0.3", testSecret).Pause(ctx, "sb-1"); err != nil || sb.State != "paused" {
		t.Errorf("Pause with the right secret from another address: %+v, %v; want paused", sb, err)
	}
	if sb, err := s.client.Pause(ctx, "sb-1"); err != nil || sb.State != "paused" {
		t.Errorf("Pause with the right secret from 127.0.0.1: %+v, %v; want paused", sb, err)
	}
}
