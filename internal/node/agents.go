package node

// The node's way to its sandboxes' agents: dialled by sandbox ID, each
// with its own secret, and waited for while a sandbox starts or restores.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentclient"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/store"
)

// agents is the node's client for its sandboxes' agents.
type agents struct {
	*agentclient.Client
	store   *store.Store
	addr    func(sandboxID, guestAddr string) string // Config.AgentAddr
	key     []byte                                   // Config.AgentKey
	timeout time.Duration                            // Config.StartTimeout
	// dead reports whether sandbox id's runtime has stopped (Local.dead).
	dead func(ctx context.Context, id string) bool
}

// resolve is where a live sandbox's agent listens.
func (a *agents) resolve(ctx context.Context, id string) (string, error) {
	sb, err := a.store.GetSandbox(ctx, id)
	if err != nil {
		return "", err
	}
	if !sb.Live() {
		return "", errors.New("it has ended")
	}
	return a.addr(sb.ID, sb.GuestAddr), nil
}

// secret is sandbox id's agent secret: derived from AgentKey and the
// ID, so the node needs no record of it, and each sandbox's differs.
func (a *agents) secret(id string) string {
	if len(a.key) == 0 {
		return ""
	}
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte("lizard agent " + id))
	return hex.EncodeToString(m.Sum(nil))
}

// wait waits for sandbox sb's agent to answer, for at most StartTimeout
// and no longer than sb's runtime runs. Given reseed (sb was just restored
// from an image, whose agent holds auth, the secret of the sandbox the
// image was taken from), it gives the agent that identity and sb's own
// secret in the first request it answers. Its error says in words for the
// caller which ended it: "did not answer within", or "stopped before its
// agent ...". Its attempts dial the address sb was just given
// (agentclient.At), not the row read back from the store at each.
func (a *agents) wait(ctx context.Context, sb store.Sandbox, reseed *api.ReseedRequest, auth string) error {
	ctx = agentclient.At(ctx, sb.ID, a.addr(sb.ID, sb.GuestAddr))
	wctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	alive := func(ctx context.Context) error {
		if a.dead(ctx, sb.ID) {
			return errors.New("its runtime stopped")
		}
		return nil
	}
	var err error
	what := "started"
	if reseed == nil {
		err = a.Wait(wctx, sb.ID, alive)
	} else {
		r := *reseed
		r.Secret = a.secret(sb.ID)
		what = "answered after the restore"
		err = a.ReseedWhenUp(wctx, r, auth, alive)
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case wctx.Err() != nil:
		return &errdefs.Error{Msg: fmt.Sprintf("sandbox %s's agent did not answer within %s", sb.ID, a.timeout), Cause: err}
	case errors.Is(err, agentclient.ErrStopped):
		return &errdefs.Error{Msg: fmt.Sprintf("sandbox %s stopped before its agent %s (the server log says why)", sb.ID, what), Cause: err}
	}
	return err
}
