package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node/nodetest"
)

// TestOpenPort: a port connection goes to the sandbox's own address; the
// agent's port and ports out of range are refused; a paused sandbox is a
// conflict unless resume is asked for; a pause does not wait for open
// port connections but ends them, and so does a kill.
func TestOpenPort(t *testing.T) {
	e := nodetest.New(t)
	ctx := context.Background()
	sb := e.Create(t, nodetest.Plan(0))
	for _, tc := range []struct {
		port int
		want error
	}{{0, errdefs.ErrInvalid}, {65536, errdefs.ErrInvalid}, {api.AgentPort, errdefs.ErrNotFound}} {
		if _, err := e.Node.OpenPort(ctx, sb.ID, tc.port, false); !errors.Is(err, tc.want) {
			t.Errorf("OpenPort(%d) = %v; want %v", tc.port, err, tc.want)
		}
	}
	call, err := e.Node.OpenPort(ctx, sb.ID, 8000, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := sb.GuestAddr + ":8000"; call.URL.Host != want {
		t.Errorf("port URL host = %s; want %s", call.URL.Host, want)
	}
	done := make(chan struct{})
	go func() {
		if _, err := e.Node.Pause(ctx, sb.ID); err != nil {
			t.Errorf("Pause with a port connection open: %v", err)
		}
		close(done)
	}()
	select {
	case <-call.Ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the pause did not end the open port connection")
	}
	<-done
	call.Release()
	if _, err := e.Node.OpenPort(ctx, sb.ID, 8000, false); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("OpenPort of a paused sandbox = %v; want a conflict", err)
	}
	call, err = e.Node.OpenPort(ctx, sb.ID, 8000, true)
	if err != nil {
		t.Fatalf("OpenPort with resume: %v", err)
	}
	if cur, _ := e.Store.GetSandbox(ctx, sb.ID); cur.State != api.StateRunning {
		t.Errorf("after OpenPort with resume the sandbox is %s; want running", cur.State)
	}
	if err := e.Node.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-call.Ctx.Done():
		if !errors.Is(context.Cause(call.Ctx), errdefs.ErrGone) {
			t.Errorf("port connection ended with %v; want the sandbox's end", context.Cause(call.Ctx))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the kill did not end the open port connection")
	}
	call.Release()
	if _, err := e.Node.OpenPort(ctx, sb.ID, 8000, true); !errors.Is(err, errdefs.ErrGone) {
		t.Errorf("OpenPort of a killed sandbox = %v; want gone", err)
	}
}
