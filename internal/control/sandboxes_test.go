package control_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// TestOtherProject checks that a project sees and touches none of
// another's sandboxes: every operation answers ErrNotFound, exactly as for
// a sandbox that does not exist, and changes nothing.
func TestOtherProject(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb := e.create(t, "p1", api.CreateSandboxRequest{TimeoutMs: ms(60_000)})
	paused := e.create(t, "p1", api.CreateSandboxRequest{})
	if _, err := e.c.Pause(ctx, "p1", paused.SandboxID, api.PauseRequest{}); err != nil {
		t.Fatal(err)
	}
	ops := map[string]func(id string) error{
		"Get":          func(id string) error { _, err := e.c.Get(ctx, "p2", id); return err },
		"Kill":         func(id string) error { return e.c.Kill(ctx, "p2", id) },
		"SetTimeout":   func(id string) error { _, err := e.c.SetTimeout(ctx, "p2", id, 1); return err },
		"Pause":        func(id string) error { _, err := e.c.Pause(ctx, "p2", id, api.PauseRequest{}); return err },
		"Resume":       func(id string) error { _, err := e.c.Resume(ctx, "p2", id, api.ResumeRequest{}); return err },
		"Acquire":      func(id string) error { _, err := e.c.Acquire(ctx, "p2", id); return err },
		"CheckRunning": func(id string) error { return e.c.CheckRunning(ctx, "p2", id) },
		"Snapshot":     func(id string) error { _, err := e.c.Snapshot(ctx, "p2", id, api.SnapshotRequest{}); return err },
		"Fork":         func(id string) error { _, err := e.c.Fork(ctx, "p2", id, api.ForkRequest{}); return err },
	}
	for name, op := range ops {
		for _, id := range []string{sb.SandboxID, paused.SandboxID, "nosuch"} {
			if err := op(id); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(errdefs.Message(err), "not found in project p2") {
				t.Errorf("%s(%s) from another project = %v; want ErrNotFound", name, id, err)
			}
		}
	}
	if list, _ := e.c.List(ctx, "p2", control.ListFilter{States: []string{api.StateRunning, api.StatePaused}}); len(list) != 0 {
		t.Errorf("p2 lists %d sandboxes; want 0", len(list))
	}
	got, _ := e.c.Get(ctx, "p1", sb.SandboxID)
	if !e.Runtime.IsRunning(sb.SandboxID) || got.State != api.StateRunning || !got.ExpiresAt.Equal(*sb.ExpiresAt) {
		t.Error("another project's calls changed the running sandbox")
	}
	if got, _ := e.c.Get(ctx, "p1", paused.SandboxID); got.State != api.StatePaused || e.Runtime.IsRunning(paused.SandboxID) {
		t.Error("another project's calls changed the paused sandbox")
	}
	if n := len(e.Runtime.Restores()); n != 0 {
		t.Errorf("another project's calls restored %d sandboxes", n)
	}
}

func TestStates(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	running := e.create(t, "p1", api.CreateSandboxRequest{})
	paused := e.create(t, "p1", api.CreateSandboxRequest{})
	if _, err := e.c.Pause(ctx, "p1", paused.SandboxID, api.PauseRequest{}); err != nil {
		t.Fatal(err)
	}
	killed := e.create(t, "p1", api.CreateSandboxRequest{})
	if err := e.c.Kill(ctx, "p1", killed.SandboxID); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Kill(ctx, "p1", killed.SandboxID); err != nil {
		t.Errorf("second Kill = %v; want nil (idempotent)", err)
	}
	tests := []struct {
		id      string
		wantErr error
		wantMsg string
	}{
		{running.SandboxID, nil, ""},
		{paused.SandboxID, errdefs.ErrConflict, "is paused, not running"},
		{killed.SandboxID, errdefs.ErrGone, "was killed at"},
	}
	for _, tt := range tests {
		err := e.c.CheckRunning(ctx, "p1", tt.id)
		if !errors.Is(err, tt.wantErr) || tt.wantErr != nil && !strings.Contains(errdefs.Message(err), tt.wantMsg) {
			t.Errorf("CheckRunning(%s) = %v; want %v saying %q", tt.id, err, tt.wantErr, tt.wantMsg)
		}
	}
	got, err := e.c.Get(ctx, "p1", killed.SandboxID)
	if err != nil || got.State != api.StateKilled || got.EndedAt == nil {
		t.Errorf("Get after Kill = %+v, %v; want killed with endedAt", got, err)
	}
	// A call to a paused sandbox resumes it; its URL names the sandbox.
	call, err := e.c.Acquire(ctx, "p1", paused.SandboxID)
	if err != nil || call.URL.String() != (&url.URL{Scheme: "http", Host: paused.SandboxID + ":49983"}).String() {
		t.Fatalf("Acquire of a paused sandbox = %+v, %v; want its agent URL", call, err)
	}
	call.Release()
	if got, _ := e.c.Get(ctx, "p1", paused.SandboxID); got.State != api.StateRunning {
		t.Errorf("state after a call to a paused sandbox: %s; want running", got.State)
	}
	if _, err := e.c.SetTimeout(ctx, "p1", killed.SandboxID, 1000); !errors.Is(err, errdefs.ErrGone) {
		t.Errorf("SetTimeout after Kill = %v; want ErrGone", err)
	}
	for _, bad := range []int64{-1, (24*time.Hour + time.Millisecond).Milliseconds()} {
		if _, err := e.c.SetTimeout(ctx, "p1", running.SandboxID, bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("SetTimeout(%d) = %v; want ErrInvalid", bad, err)
		}
		if _, err := e.c.Resume(ctx, "p1", running.SandboxID, api.ResumeRequest{TimeoutMs: &bad}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Resume(timeoutMs %d) = %v; want ErrInvalid", bad, err)
		}
	}
	got, err = e.c.SetTimeout(ctx, "p1", running.SandboxID, 10_000)
	if want := e.Clock.Now().Add(10 * time.Second); err != nil || got.TimeoutMs != 10_000 || got.ExpiresAt == nil || !got.ExpiresAt.Equal(want) {
		t.Errorf("SetTimeout(10000) = %+v, %v; want expiring at %v", got, err, want)
	}
}

func TestList(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	a := e.create(t, "p1", api.CreateSandboxRequest{Metadata: map[string]string{"user": "u1", "env": "dev"}})
	e.Clock.Add(time.Second)
	b := e.create(t, "p1", api.CreateSandboxRequest{Metadata: map[string]string{"user": "u1"}})
	e.Clock.Add(time.Second)
	c := e.create(t, "p1", api.CreateSandboxRequest{})
	e.create(t, "p2", api.CreateSandboxRequest{Metadata: map[string]string{"user": "u1"}})
	if err := e.c.Kill(ctx, "p1", c.SandboxID); err != nil {
		t.Fatal(err)
	}
	ids := func(sbs []api.Sandbox) []string {
		var out []string
		for _, s := range sbs {
			out = append(out, s.SandboxID)
		}
		return out
	}
	tests := []struct {
		name string
		f    control.ListFilter
		want []string
	}{
		{"live, newest first", control.ListFilter{}, []string{b.SandboxID, a.SandboxID}},
		{"metadata", control.ListFilter{Metadata: map[string]string{"user": "u1"}}, []string{b.SandboxID, a.SandboxID}},
		{"all pairs must match", control.ListFilter{Metadata: map[string]string{"user": "u1", "env": "dev"}}, []string{a.SandboxID}},
		{"no match", control.ListFilter{Metadata: map[string]string{"user": "u2"}}, nil},
		{"state killed", control.ListFilter{States: []string{"killed"}}, []string{c.SandboxID}},
		{"any of the states", control.ListFilter{States: []string{"killed", "running"}}, []string{c.SandboxID, b.SandboxID, a.SandboxID}},
	}
	for _, tt := range tests {
		got, err := e.c.List(ctx, "p1", tt.f)
		if err != nil || !slices.Equal(ids(got), tt.want) {
			t.Errorf("%s: List = %v, %v; want %v", tt.name, ids(got), err, tt.want)
		}
	}
	if _, err := e.c.List(ctx, "p1", control.ListFilter{States: []string{"bogus"}}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("List with an unknown state = %v; want ErrInvalid", err)
	}
}
