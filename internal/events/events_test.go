package events

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/store"
)

func TestLifecycle(t *testing.T) {
	for _, tc := range []struct {
		e    node.Event
		typ  string // "": not a lifecycle event
		data api.EventData
	}{
		{node.Event{Kind: node.Created, Template: "interpreter", ForkedFrom: "p"}, api.LifecycleCreated,
			api.EventData{State: api.StateRunning, Template: "interpreter", ForkedFrom: "p"}},
		{node.Event{Kind: node.Resumed}, api.LifecycleResumed, api.EventData{State: api.StateRunning}},
		{node.Event{Kind: node.Forked, Children: []string{"a", "b"}}, api.LifecycleForked, api.EventData{State: api.StateRunning, SandboxIDs: []string{"a", "b"}}},
		{node.Event{Kind: node.Snapshotted, SnapshotID: "snap"}, api.LifecycleSnapshot, api.EventData{State: api.StateRunning, SnapshotID: "snap"}},
		{node.Event{Kind: node.Stopped, State: api.StatePaused, Reason: "paused"}, api.LifecyclePaused, api.EventData{State: api.StatePaused}},
		{node.Event{Kind: node.Stopped, State: api.StateKilled, Reason: "k"}, api.LifecycleKilled, api.EventData{State: api.StateKilled, Reason: "k"}},
		{node.Event{Kind: node.Stopped, State: api.StateExpired, Reason: "t"}, api.LifecycleExpired, api.EventData{State: api.StateExpired, Reason: "t"}},
		{node.Event{Kind: node.Stopped, State: api.StateFailed, Reason: "oom?"}, api.LifecycleFailed, api.EventData{State: api.StateFailed, Reason: "oom?"}},
		{node.Event{Kind: node.Stopped, State: api.StateFailed, Reason: "node lost", LostNode: "n1"}, api.LifecycleNodeLost,
			api.EventData{State: api.StateFailed, Reason: "node lost", Node: "n1"}},
		{node.Event{Kind: node.CallFailed, ErrorName: "TimeoutError", Reason: "execution timed out after 1s"}, api.LifecycleCallTimeout,
			api.EventData{State: api.StateRunning, Reason: "execution timed out after 1s"}},
		{node.Event{Kind: node.CallFailed, ErrorName: "KernelDiedError", Reason: "the kernel died (exit status 1)"}, api.LifecycleCallKernelDied,
			api.EventData{State: api.StateRunning, Reason: "the kernel died (exit status 1)"}},
		{node.Event{Kind: node.CallFailed, ErrorName: "KernelDiedError", Reason: "killed by signal KILL, perhaps for running out of memory"},
			api.LifecycleCallOutOfMemory, api.EventData{State: api.StateRunning, Reason: "killed by signal KILL, perhaps for running out of memory"}},
		{node.Event{Kind: node.Started}, "", api.EventData{}},
		{node.Event{Kind: node.Killed}, "", api.EventData{}}, // its Stopped follows
		{node.Event{Kind: node.KeyCreated}, "", api.EventData{}},
	} {
		typ, data, ok := lifecycle(tc.e)
		if ok != (tc.typ != "") || typ != tc.typ || fmt.Sprint(data) != fmt.Sprint(tc.data) {
			t.Errorf("lifecycle(%s %s) = %q %+v %v; want %q %+v", tc.e.Kind, tc.e.State, typ, data, ok, tc.typ, tc.data)
		}
	}
}

// TestRecorderAndList records events through a Recorder and reads them
// back in pages, with a metadata filter that skips most rows.
func TestRecorderAndList(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.CreateProject(ctx, "p", time.Now()); err != nil {
		t.Fatal(err)
	}
	addrs := func(slot int) (string, string) { return fmt.Sprintf("10.0.%d.1", slot), fmt.Sprintf("10.0.%d.2", slot) }
	mk := func(id, role string, meta map[string]string) {
		sb := store.Sandbox{ID: id, ProjectID: "p", Template: "t", State: "running", Metadata: meta, CreatedAt: time.Now(), Role: role}
		if err := st.CreateSandbox(ctx, &sb, 64, addrs); err != nil {
			t.Fatal(err)
		}
	}
	mk("warm", store.RoleWarm, nil)
	rec := &Recorder{Store: st, Log: discard()}
	rec.Handle(node.Event{Kind: node.Stopped, SandboxID: "warm", State: api.StateKilled})
	for i := range 30 {
		id := fmt.Sprintf("s%02d", i)
		mk(id, "", map[string]string{"even": fmt.Sprint(i%2 == 0)})
		rec.Handle(node.Event{Kind: node.Created, SandboxID: id, Template: "t"})
	}
	l := &Log{Store: st}
	all, err := l.List(ctx, "p", Query{Limit: MaxLimit})
	if err != nil || len(all.Events) != 30 || all.HasMore {
		t.Fatalf("List = %d events, more %v, %v; want the 30 users' creates (none of the warm sandbox)", len(all.Events), all.HasMore, err)
	}
	var got []string
	q := Query{Metadata: map[string]string{"even": "true"}, Limit: 4}
	for {
		page, err := l.List(ctx, "p", q)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Events {
			got = append(got, e.SandboxID)
			var d api.EventData
			b, _ := json.Marshal(e.Data)
			json.Unmarshal(b, &d)
			if e.Type != api.LifecycleCreated || d.Template != "t" || e.Metadata["even"] != "true" {
				t.Errorf("event %+v", e)
			}
		}
		if !page.HasMore {
			break
		}
		q.After = page.Next
	}
	if len(got) != 15 || got[0] != "s00" || got[14] != "s28" {
		t.Errorf("paged even sandboxes: %v; want s00, s02 ... s28", got)
	}
	if page, _ := l.List(ctx, "other", Query{}); len(page.Events) != 0 {
		t.Errorf("another project's list: %v", page.Events)
	}
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
