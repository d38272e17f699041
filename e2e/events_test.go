package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// TestEvents follows a project's lifecycle events while a sandbox is
// created, paused, resumed, snapshotted, forked and killed, then reads
// them back as pages, filtered, through the CLI, and checks that another
// project sees none of them and that bad filters are refused.
func TestEvents(t *testing.T) {
	s := startServer(t)
	c := s.createProject("p1")
	other := s.createProject("p2")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := fmt.Sprint(time.Now().UnixNano())

	follow, err := c.Events().Follow(ctx, client.EventOptions{Metadata: map[string]string{"run": run}})
	if err != nil {
		t.Fatalf("Events().Follow: %v", err)
	}
	defer follow.Close()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Metadata: map[string]string{"run": run}})
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	defer c.KillSandbox(context.WithoutCancel(ctx), sb.SandboxID)
	if _, err := c.PauseSandbox(ctx, sb.SandboxID); err != nil {
		t.Fatalf("PauseSandbox: %v", err)
	}
	if _, err := c.ResumeSandbox(ctx, sb.SandboxID, api.ResumeRequest{}); err != nil {
		t.Fatalf("ResumeSandbox: %v", err)
	}
	snap, err := c.Snapshot(ctx, sb.SandboxID)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	defer c.Snapshots().Delete(context.WithoutCancel(ctx), snap.SnapshotID)
	forks, err := c.Fork(ctx, sb.SandboxID, api.ForkRequest{Count: 1, Metadata: map[string]string{"run": run}})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	if err := c.KillSandbox(ctx, forks[0].SandboxID); err != nil {
		t.Fatalf("KillSandbox(fork): %v", err)
	}
	if err := c.KillSandbox(ctx, sb.SandboxID); err != nil {
		t.Fatalf("KillSandbox: %v", err)
	}

	type seen struct{ typ, sandbox string }
	want := []seen{
		{api.LifecycleCreated, sb.SandboxID}, {api.LifecyclePaused, sb.SandboxID}, {api.LifecycleResumed, sb.SandboxID},
		{api.LifecycleSnapshot, sb.SandboxID}, {api.LifecycleCreated, forks[0].SandboxID}, {api.LifecycleForked, sb.SandboxID},
		{api.LifecycleKilled, forks[0].SandboxID}, {api.LifecycleKilled, sb.SandboxID},
	}
	var got []api.Event
	deadline := time.AfterFunc(30*time.Second, func() { follow.Close() })
	for len(got) < len(want) {
		ev, err := follow.Next()
		if err != nil {
			t.Fatalf("follow after %d events %v: %v", len(got), got, err)
		}
		got = append(got, ev)
	}
	deadline.Stop()
	for i, ev := range got {
		if (seen{ev.Type, ev.SandboxID}) != want[i] {
			t.Errorf("followed event %d = %s of %s; want %s of %s", i, ev.Type, ev.SandboxID, want[i].typ, want[i].sandbox)
		}
		if ev.ProjectID != "p1" || ev.Metadata["run"] != run {
			t.Errorf("event %d: project %q, metadata %v", i, ev.ProjectID, ev.Metadata)
		}
		if i > 0 && ev.ID <= got[i-1].ID {
			t.Errorf("event IDs %d then %d; want increasing", got[i-1].ID, ev.ID)
		}
	}
	for _, check := range []struct {
		i    int
		ok   bool
		what string
	}{
		{0, got[0].Data.State == api.StateRunning && got[0].Data.Template == "interpreter", "created: running, template interpreter"},
		{1, got[1].Data.State == api.StatePaused, "paused: state paused"},
		{3, got[3].Data.SnapshotID == snap.SnapshotID, "snapshot: its ID"},
		{4, got[4].Data.ForkedFrom == sb.SandboxID, "fork's created: forkedFrom"},
		{5, len(got[5].Data.SandboxIDs) == 1 && got[5].Data.SandboxIDs[0] == forks[0].SandboxID, "forked: the copy's ID"},
		{7, got[7].Data.State == api.StateKilled && got[7].Data.Reason != "", "killed: state and reason"},
	} {
		if !check.ok {
			t.Errorf("event %d %+v: want %s", check.i, got[check.i].Data, check.what)
		}
	}

	// Pages: the sandbox's own events, two at a time.
	var paged []api.Event
	opts := client.EventOptions{SandboxID: sb.SandboxID, Limit: 2}
	for {
		page, err := c.Events().List(ctx, opts)
		if err != nil {
			t.Fatalf("Events().List: %v", err)
		}
		paged = append(paged, page.Events...)
		if !page.HasMore {
			break
		}
		opts.After = page.Next
	}
	if len(paged) != 6 {
		t.Errorf("paged through %d events of %s; want 6 (created, paused, resumed, snapshot, forked, killed)", len(paged), sb.SandboxID)
	}
	page, err := c.Events().List(ctx, client.EventOptions{Types: []string{api.LifecyclePaused, api.LifecycleResumed}, Metadata: map[string]string{"run": run}})
	if err != nil || len(page.Events) != 2 || page.Events[0].Type != api.LifecyclePaused || page.Events[1].Type != api.LifecycleResumed {
		t.Errorf("types paused,resumed: %+v, %v; want the pause and the resume", page, err)
	}
	if page, err := c.Events().List(ctx, client.EventOptions{Metadata: map[string]string{"run": "another"}}); err != nil || len(page.Events) != 0 {
		t.Errorf("metadata run=another: %+v, %v; want none", page, err)
	}

	// Another project sees none of them, even asking by sandbox ID.
	for _, o := range []client.EventOptions{{}, {SandboxID: sb.SandboxID}} {
		page, err := other.Events().List(ctx, o)
		if err != nil || len(page.Events) != 0 {
			t.Errorf("project p2 listing %+v: %+v, %v; want no events", o, page, err)
		}
	}

	// The CLI prints them as JSON lines.
	cmd := exec.Command(s.bin, "events", "--sandbox", sb.SandboxID, "--type", "sandbox.killed", "--json")
	cmd.Env = append(os.Environ(), "LIZARD_API_URL="+s.url, "LIZARD_API_KEY="+s.keys[c])
	out, err := cmd.CombinedOutput()
	var ev api.Event
	if err != nil || json.Unmarshal(out, &ev) != nil || ev.Type != api.LifecycleKilled || ev.SandboxID != sb.SandboxID {
		t.Errorf("lizard events --json = %q, %v; want the kill as one JSON line", out, err)
	}

	// Runs that time out or lose their kernel are events of a sandbox
	// that lives on.
	runner := newSandbox(t, c, api.CreateSandboxRequest{Metadata: map[string]string{"run": run + "-calls"}})
	if _, err := c.Execute(ctx, runner.SandboxID, api.ExecuteRequest{Code: "import time\ntime.sleep(30)", TimeoutMs: ms(1000)}, nil); err != nil {
		t.Fatalf("Execute (timeout): %v", err)
	}
	if _, err := c.Execute(ctx, runner.SandboxID, api.ExecuteRequest{Code: "import os\nos._exit(3)"}, nil); err != nil {
		t.Fatalf("Execute (os._exit): %v", err)
	}
	calls, err := c.Events().List(ctx, client.EventOptions{SandboxID: runner.SandboxID,
		Types: []string{api.LifecycleCallTimeout, api.LifecycleCallKernelDied, api.LifecycleCallOutOfMemory}})
	if err != nil || len(calls.Events) != 2 || calls.Events[0].Type != api.LifecycleCallTimeout || calls.Events[1].Type != api.LifecycleCallKernelDied ||
		!strings.Contains(calls.Events[1].Data.Reason, "exit status 3") || calls.Events[1].Data.State != api.StateRunning {
		t.Errorf("call events of %s: %+v, %v; want a call.timeout then a call.kernel_died (exit status 3)", runner.SandboxID, calls, err)
	}

	// Bad filters: 400 naming the parameter.
	for q, name := range map[string]string{
		"type=sandbox.bogus": "type", "after=-1": "after", "after=x": "after", "limit=0": "limit",
		"limit=5000": "limit", "follow=maybe": "follow", "metadata=noequals": "metadata", "sandbox=": "sandbox",
	} {
		resp, body := send(t, http.MethodGet, s.url+"/v1/events?"+q, "", "Authorization", "Bearer "+s.keys[c])
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, name) {
			t.Errorf("GET /v1/events?%s = %d %s; want 400 naming %s", q, resp.StatusCode, body, name)
		}
	}
	// Without --webhook-allow-private a webhook may not reach loopback.
	resp, body := send(t, http.MethodPost, s.url+"/v1/webhooks", `{"url":"http://127.0.0.1:9/hook"}`, "Authorization", "Bearer "+s.keys[c])
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "loopback") {
		t.Errorf("webhook to loopback = %d %s; want 400 saying loopback", resp.StatusCode, body)
	}
	if resp, _ := send(t, http.MethodGet, s.url+"/v1/events", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/events without a key = %d; want 401", resp.StatusCode)
	}
}
