package agentclient

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
)

// TestReseedWhenUpSandboxDiesDuringAttempt checks that a sandbox that
// stops while a reseed or health check hangs (nothing answers at its address: a dead
// sandbox's SYNs go unanswered, or its agent died after accepting) ends
// the wait within moments with ErrStopped, not at the caller's deadline
// (the chaos suite's kill of the agent during a restore waited 30 s).
func TestReseedWhenUpSandboxDiesDuringAttempt(t *testing.T) {
	// A listener that never accepts: connections complete in its backlog
	// and every request hangs.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := New(func(context.Context, string) (string, error) { return ln.Addr().String(), nil }, nil, nil)
	died := time.Now().Add(700 * time.Millisecond)
	alive := func(context.Context) error {
		if time.Now().After(died) {
			return errors.New("its runtime stopped")
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	calls := map[string]func() error{
		"ReseedWhenUp": func() error { return c.ReseedWhenUp(ctx, api.ReseedRequest{SandboxID: "sbx"}, "", alive) },
		"Wait":         func() error { return c.Wait(ctx, "sbx", alive) },
	}
	for name, call := range calls {
		died = time.Now().Add(700 * time.Millisecond)
		begin := time.Now()
		if err := call(); !errors.Is(err, ErrStopped) {
			t.Errorf("%s = %v; want ErrStopped", name, err)
		}
		if took := time.Since(begin); took > 3*time.Second {
			t.Errorf("%s took %s to see the sandbox stop; want within moments", name, took)
		}
	}
}
