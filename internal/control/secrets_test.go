package control_test

import (
	"context"
	"errors"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// TestSecretsWithoutStore: a server built without a secrets store answers
// every secrets call unavailable (503), as the server did before the
// calls went through control.
func TestSecretsWithoutStore(t *testing.T) {
	e := newEnv(t, func(c *control.Config) { c.Secrets = nil })
	ctx := context.Background()
	s := e.c.Project("p1").Secrets()
	_, setErr := s.Set(ctx, "K", api.SetSecretRequest{Value: "v"})
	_, listErr := s.List(ctx)
	delErr := s.Delete(ctx, "K")
	for name, err := range map[string]error{"Set": setErr, "List": listErr, "Delete": delErr} {
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("%s = %v; want ErrUnavailable", name, err)
		}
	}
}
