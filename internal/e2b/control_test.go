package e2b_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/e2b/envd"
)

// TestSandboxLifecycle drives E2B's control API through create, info,
// list with filters, timeout, pause, connect (resume), kill, and the
// answers for sandboxes that are not (or no longer) the caller's.
func TestSandboxLifecycle(t *testing.T) {
	e := newEnv(t, nil, nil)
	key := []string{"X-API-Key", e.key1}
	r := e.do(t, "POST", "/e2b/v2/sandboxes", `{"templateID":"code-interpreter-v1","timeout":300,"metadata":{"user":"al ice"}}`, key...)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var sb struct {
		SandboxID, TemplateID, ClientID, EnvdVersion, EnvdAccessToken string
		TrafficAccessToken                                            *string
	}
	json.Unmarshal([]byte(r.body), &sb)
	if sb.SandboxID == "" || sb.TemplateID != "interpreter" || sb.ClientID == "" || sb.EnvdVersion != envd.Version ||
		sb.EnvdAccessToken != e.c.EnvdToken(sb.SandboxID) || sb.TrafficAccessToken == nil || *sb.TrafficAccessToken != e.c.TrafficToken(sb.SandboxID) ||
		*sb.TrafficAccessToken == sb.EnvdAccessToken || *sb.TrafficAccessToken == "" {
		t.Fatalf("create answered %s", r.body)
	}
	other := e.do(t, "POST", "/e2b/sandboxes", `{"templateID":"base","metadata":{"user":"bob"}}`, key...)
	if other.status != http.StatusCreated {
		t.Fatalf("create (v1): %d %s", other.status, other.body)
	}
	path := "/e2b/sandboxes/" + sb.SandboxID

	var info struct {
		SandboxID, State, EnvdAccessToken string
		Metadata                          map[string]string
	}
	r = e.do(t, "GET", path, "", key...)
	json.Unmarshal([]byte(r.body), &info)
	if r.status != http.StatusOK || info.State != "running" || info.Metadata["user"] != "al ice" || info.EnvdAccessToken != sb.EnvdAccessToken {
		t.Fatalf("info: %d %s", r.status, r.body)
	}
	list := func(q url.Values) []string {
		t.Helper()
		r := e.do(t, "GET", "/e2b/v2/sandboxes?"+q.Encode(), "", key...)
		if r.status != http.StatusOK {
			t.Fatalf("list %v: %d %s", q, r.status, r.body)
		}
		var l []struct{ SandboxID string }
		json.Unmarshal([]byte(r.body), &l)
		var ids []string
		for _, s := range l {
			ids = append(ids, s.SandboxID)
		}
		return ids
	}
	if ids := list(url.Values{"metadata": {"user=al%2520ice"}}); len(ids) != 1 || ids[0] != sb.SandboxID {
		t.Errorf("list by metadata = %v; want only %s", ids, sb.SandboxID)
	}
	if ids := list(url.Values{}); len(ids) != 2 {
		t.Errorf("list = %v; want both", ids)
	}
	if r := e.do(t, "GET", "/e2b/v2/sandboxes?limit=1", "", key...); r.header.Get("X-Next-Token") == "" {
		t.Errorf("a list of 2 with limit 1 gave no X-Next-Token")
	}
	if r := e.do(t, "POST", path+"/timeout", `{"timeout":600}`, key...); r.status != http.StatusNoContent {
		t.Errorf("timeout: %d %s", r.status, r.body)
	}
	if r := e.do(t, "POST", path+"/pause", `{}`, key...); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if ids := list(url.Values{"state": {"paused"}}); len(ids) != 1 || ids[0] != sb.SandboxID {
		t.Errorf("list paused = %v; want %s", ids, sb.SandboxID)
	}
	if r := e.do(t, "POST", path+"/pause", `{}`, key...); r.status != http.StatusConflict {
		t.Errorf("pause of a paused sandbox: %d %s; want 409 (the SDK's 'already paused')", r.status, r.body)
	}
	if r := e.do(t, "POST", "/e2b/v2/sandboxes/"+sb.SandboxID+"/connect", `{"timeout":60}`, key...); r.status != http.StatusCreated {
		t.Errorf("connect to a paused sandbox: %d %s; want 201 resumed", r.status, r.body)
	}
	if r := e.do(t, "POST", "/e2b/v2/sandboxes/"+sb.SandboxID+"/connect", `{}`, key...); r.status != http.StatusOK {
		t.Errorf("connect to a running sandbox: %d %s; want 200", r.status, r.body)
	}
	// The v2 connect without a timeout, as the SDKs' connect() sends it:
	// E2B's default of 5 minutes, not create's 15 seconds; and a resume
	// from disk alone (on_resume="reboot") of a sandbox paused with its
	// memory is refused by name (409), not restored with memory.
	// A pause keeping the disk alone (mode="filesystem", keep_memory=False)
	// reaches the node, whose runtime here (a fake, no sandbox.DiskSaver)
	// refuses it by name rather than keep memory: the sandbox runs on.
	if r := e.do(t, "POST", path+"/pause", `{"memory":false}`, key...); r.status != http.StatusBadRequest || !strings.Contains(r.body, "disk alone") {
		t.Errorf("pause with memory false: %d %s; want 400 naming it", r.status, r.body)
	}
	if r := e.do(t, "GET", path, "", key...); !strings.Contains(r.body, `"state":"running"`) {
		t.Errorf("after a refused pause: %s; want running", r.body)
	}
	if r := e.do(t, "POST", path+"/pause", `{"memory":true,"requireHealthyGuest":true}`, key...); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	for _, route := range []string{"/e2b/v2/sandboxes/" + sb.SandboxID + "/connect", path + "/resume"} {
		if r := e.do(t, "POST", route, `{"memory":false}`, key...); r.status != http.StatusConflict || !strings.Contains(r.body, "paused with its memory") {
			t.Errorf("%s with memory false: %d %s; want 409 naming it", route, r.status, r.body)
		}
	}
	if r := e.do(t, "POST", "/e2b/v2/sandboxes/"+sb.SandboxID+"/connect", ``, key...); r.status != http.StatusCreated {
		t.Errorf("connect to a paused sandbox without a body: %d %s; want 201 resumed", r.status, r.body)
	}
	r = e.do(t, "GET", path, "", key...)
	var resumed struct{ EndAt time.Time }
	json.Unmarshal([]byte(r.body), &resumed)
	if left := time.Until(resumed.EndAt); left < 290*time.Second || left > 301*time.Second {
		t.Errorf("a sandbox resumed by connect without a timeout ends in %v (%s); want 300 s", left, r.body)
	}
	// Forks and snapshots, as E2B's SDKs call them.
	r = e.do(t, "POST", path+"/fork", `{"count":2,"timeout":60}`, key...)
	var forks []struct {
		Sandbox struct{ SandboxID, EnvdAccessToken string }
	}
	json.Unmarshal([]byte(r.body), &forks)
	if r.status != http.StatusCreated || len(forks) != 2 || forks[0].Sandbox.EnvdAccessToken != e.c.EnvdToken(forks[0].Sandbox.SandboxID) {
		t.Fatalf("fork: %d %s; want 201 with two sandboxes", r.status, r.body)
	}
	r = e.do(t, "POST", path+"/snapshots", `{}`, key...)
	var snap struct {
		SnapshotID string
		Names      []string
	}
	json.Unmarshal([]byte(r.body), &snap)
	if r.status != http.StatusCreated || snap.SnapshotID == "" || snap.Names == nil {
		t.Fatalf("snapshot: %d %s", r.status, r.body)
	}
	if r := e.do(t, "GET", "/e2b/snapshots?sandboxID="+sb.SandboxID, "", key...); r.status != http.StatusOK || !strings.Contains(r.body, snap.SnapshotID) {
		t.Errorf("list snapshots: %d %s; want %s", r.status, r.body, snap.SnapshotID)
	}
	if r := e.do(t, "POST", "/e2b/v2/sandboxes", `{"templateID":"`+snap.SnapshotID+`"}`, key...); r.status != http.StatusCreated {
		t.Errorf("create from the snapshot: %d %s", r.status, r.body)
	}
	if r := e.do(t, "DELETE", "/e2b/templates/"+snap.SnapshotID, "", key...); r.status != http.StatusNoContent {
		t.Errorf("delete the snapshot: %d %s", r.status, r.body)
	}
	if r := e.do(t, "DELETE", "/e2b/templates/"+snap.SnapshotID, "", key...); r.status != http.StatusNotFound {
		t.Errorf("delete it again: %d %s; want 404 (the SDK's false)", r.status, r.body)
	}
	// Named snapshots: the name is in names, the list filters by it, and
	// a create takes it as the template — one like an ID's too.
	for _, name := range []string{"snap-named_1", "golden.v2"} {
		r = e.do(t, "POST", path+"/snapshots", `{"name":"`+name+`"}`, key...)
		json.Unmarshal([]byte(r.body), &snap)
		if r.status != http.StatusCreated || len(snap.Names) != 1 || snap.Names[0] != name {
			t.Fatalf("snapshot named %s: %d %s", name, r.status, r.body)
		}
		if r := e.do(t, "GET", "/e2b/snapshots?name="+name, "", key...); r.status != http.StatusOK || !strings.Contains(r.body, snap.SnapshotID) || strings.Count(r.body, "snapshotID") != 1 {
			t.Errorf("list by name %s: %d %s; want %s alone", name, r.status, r.body, snap.SnapshotID)
		}
		if r := e.do(t, "GET", "/e2b/snapshots?name="+name, "", "X-API-Key", e.key2); r.body != "[]\n" {
			t.Errorf("another project lists by name %s: %q; want none", name, r.body)
		}
		if r := e.do(t, "POST", "/e2b/v2/sandboxes", `{"templateID":"`+name+`"}`, key...); r.status != http.StatusCreated {
			t.Errorf("create from the snapshot named %s: %d %s", name, r.status, r.body)
		}
	}
	if r := e.do(t, "GET", "/e2b/snapshots?name=nobody", "", key...); r.body != "[]\n" {
		t.Errorf("list by a name no snapshot has: %q; want []", r.body)
	}
	for _, tc := range []struct {
		name, method, path string
		headers            []string
		want               int
	}{
		{"another project's", "GET", path, []string{"X-API-Key", e.key2}, http.StatusNotFound},
		{"another project's kill", "DELETE", path, []string{"X-API-Key", e.key2}, http.StatusNotFound},
		{"unknown", "GET", "/e2b/sandboxes/nope", key, http.StatusNotFound},
		{"a snapshot named what no name is", "POST", path + "/snapshots", key, http.StatusBadRequest},
		{"network of one made without rules", "PUT", path + "/network", key, http.StatusConflict},
		{"a template named what no name is", "POST", "/e2b/v3/templates", key, http.StatusBadRequest},
		{"kill", "DELETE", path, key, http.StatusNoContent},
		{"info of a killed one", "GET", path, key, http.StatusNotFound},
		{"kill again", "DELETE", path, key, http.StatusNotFound},
		{"timeout of a killed one", "POST", path + "/timeout", key, http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := e.do(t, tc.method, tc.path, `{"timeout":1,"name":"n/o"}`, tc.headers...); r.status != tc.want {
				t.Errorf("%s %s: %d %s; want %d", tc.method, tc.path, r.status, r.body, tc.want)
			}
		})
	}
	if r := e.do(t, "POST", "/e2b/v2/sandboxes", `{"templateID":"base","mcp":{"github":{}}}`, key...); r.status != http.StatusNotImplemented {
		t.Errorf("create with mcp: %d %s; want 501", r.status, r.body)
	}
	if r := e.do(t, "POST", "/e2b/v2/sandboxes", `{"templateID":`, key...); r.status != http.StatusBadRequest {
		t.Errorf("create with broken JSON: %d %s; want 400", r.status, r.body)
	}
}

// TestSetTimeoutZeroEndsNow: E2B's set_timeout(0) ends a sandbox's time
// now (the reaper then pauses or kills it, as its on_timeout says), where
// Lizard's 0 means it never ends.
func TestSetTimeoutZeroEndsNow(t *testing.T) {
	e := newEnv(t, nil, nil)
	key := []string{"X-API-Key", e.key1}
	r := e.do(t, "POST", "/e2b/v2/sandboxes", `{"templateID":"base","timeout":300,"autoPause":true}`, key...)
	var sb struct{ SandboxID string }
	json.Unmarshal([]byte(r.body), &sb)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	path := "/e2b/sandboxes/" + sb.SandboxID
	if r := e.do(t, "POST", path+"/timeout", `{"timeout":0}`, key...); r.status != http.StatusNoContent {
		t.Fatalf("set_timeout(0): %d %s", r.status, r.body)
	}
	// The reaper's next round pauses it, and get_info answers then.
	time.Sleep(5 * time.Millisecond) // past its end (set_timeout(0) is 1 ms)
	time.AfterFunc(200*time.Millisecond, func() { e.n.Reap(context.Background()) })
	r = e.do(t, "GET", path, "", key...)
	var info struct{ State string }
	json.Unmarshal([]byte(r.body), &info)
	if r.status != http.StatusOK || info.State != "paused" {
		t.Errorf("after set_timeout(0) and the reaper: %d %s; want it paused", r.status, r.body)
	}
}

// TestTimedOutSandboxSettles: a sandbox whose time is up but which the
// reaper has not yet paused or killed is answered as what its timeout
// makes it — paused, or not found — as E2B's API answers a pausing or
// killing sandbox at once: get_info, connect and the sandbox URL wait for
// the reaper (up to 10 s) rather than answer "running". E2B's own
// test_auto_pause_without_auto_resume_requires_connect (2.45.1) read
// "running" 5 s after a create with a 3 s timeout.
func TestTimedOutSandboxSettles(t *testing.T) {
	e := newEnv(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	key := []string{"X-API-Key", e.key1}
	for _, tc := range []struct {
		name, body string
		get        int
		state      string
	}{
		{"auto-pause", `{"templateID":"base","timeout":300,"autoPause":true}`, http.StatusOK, "paused"},
		{"kill", `{"templateID":"base","timeout":300}`, http.StatusNotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, "POST", "/e2b/v2/sandboxes", tc.body, key...)
			var sb struct{ SandboxID string }
			json.Unmarshal([]byte(r.body), &sb)
			path := "/e2b/sandboxes/" + sb.SandboxID
			if r := e.do(t, "POST", path+"/timeout", `{"timeout":0}`, key...); r.status != http.StatusNoContent {
				t.Fatalf("set_timeout(0): %d %s", r.status, r.body)
			}
			time.Sleep(5 * time.Millisecond) // past its end (set_timeout(0) is 1 ms)
			const lag = 300 * time.Millisecond
			time.AfterFunc(lag, func() { e.n.Reap(context.Background()) })
			start := time.Now()
			r = e.do(t, "GET", path, "", key...)
			var info struct{ State string }
			json.Unmarshal([]byte(r.body), &info)
			if r.status != tc.get || info.State != tc.state || time.Since(start) < lag {
				t.Errorf("get_info before the reaper's round: %d %s after %v; want %d %q once the reaper acted", r.status, r.body, time.Since(start), tc.get, tc.state)
			}
			if r := e.do(t, "GET", "/e2b/sandbox/health", "", "E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49983", "X-API-Key", e.key1); r.status != http.StatusBadGateway {
				t.Errorf("is_running()'s /health: %d %s; want 502", r.status, r.body)
			}
		})
	}
	// Through the sandbox URL too, and connect resumes what the reaper
	// paused.
	r := e.do(t, "POST", "/e2b/v2/sandboxes", `{"templateID":"base","timeout":300,"autoPause":true}`, key...)
	var sb struct{ SandboxID string }
	json.Unmarshal([]byte(r.body), &sb)
	e.do(t, "POST", "/e2b/sandboxes/"+sb.SandboxID+"/timeout", `{"timeout":0}`, key...)
	time.Sleep(5 * time.Millisecond)
	time.AfterFunc(300*time.Millisecond, func() { e.n.Reap(context.Background()) })
	if r := e.do(t, "GET", "/e2b/sandbox/health", "", "E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49983", "X-API-Key", e.key1); r.status != http.StatusBadGateway || !strings.Contains(r.body, "paused") {
		t.Errorf("/health before the reaper's round: %d %s; want 502 saying it is paused", r.status, r.body)
	}
	time.AfterFunc(300*time.Millisecond, func() { e.n.Reap(context.Background()) })
	if r := e.do(t, "POST", "/e2b/sandboxes/"+sb.SandboxID+"/connect", `{"timeout":60}`, key...); r.status != http.StatusCreated {
		t.Errorf("connect: %d %s; want 201, resumed", r.status, r.body)
	}
}

// TestListShowsPausingAsPaused: E2B's list (and get_info) shows a sandbox
// being paused as paused — at its timeout with auto-pause, before the reaper's round,
// and while an explicit pause waits for a call in flight — and one the
// reaper is killing not at all, as E2B's API does; before, both were
// listed as running until the reaper or the pause was done.
func TestListShowsPausingAsPaused(t *testing.T) {
	e := newEnv(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	key := []string{"X-API-Key", e.key1}
	create := func(body string) string {
		t.Helper()
		r := e.do(t, "POST", "/e2b/v2/sandboxes", body, key...)
		var sb struct{ SandboxID string }
		if err := json.Unmarshal([]byte(r.body), &sb); err != nil || r.status != http.StatusCreated {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		return sb.SandboxID
	}
	running := create(`{"templateID":"base","timeout":300}`)
	pausing := create(`{"templateID":"base","timeout":300,"autoPause":true}`)
	killing := create(`{"templateID":"base","timeout":300}`)
	for _, id := range []string{pausing, killing} {
		if r := e.do(t, "POST", "/e2b/sandboxes/"+id+"/timeout", `{"timeout":0}`, key...); r.status != http.StatusNoContent {
			t.Fatalf("set_timeout(0): %d %s", r.status, r.body)
		}
	}
	time.Sleep(5 * time.Millisecond) // past their end; no reaper runs here
	list := func(query string) map[string]string {
		t.Helper()
		r := e.do(t, "GET", "/e2b/v2/sandboxes"+query, "", key...)
		var sbs []struct{ SandboxID, State string }
		if err := json.Unmarshal([]byte(r.body), &sbs); err != nil || r.status != http.StatusOK {
			t.Fatalf("list%s: %d %s", query, r.status, r.body)
		}
		got := map[string]string{}
		for _, sb := range sbs {
			got[sb.SandboxID] = sb.State
		}
		return got
	}
	check := func(when string, want map[string]map[string]string) {
		t.Helper()
		for query, w := range want {
			if got := list(query); !reflect.DeepEqual(got, w) {
				t.Errorf("%s: list%s = %v; want %v", when, query, got, w)
			}
		}
	}
	check("at their timeout, before the reaper's round", map[string]map[string]string{
		"":               {running: "running", pausing: "paused"},
		"?state=running": {running: "running"},
		"?state=paused":  {pausing: "paused"},
	})
	e.n.Reap(context.Background())
	check("after the reaper's round", map[string]map[string]string{
		"":               {running: "running", pausing: "paused"},
		"?state=running": {running: "running"},
	})

	// An explicit pause waiting for a call in flight.
	call, err := e.c.Acquire(context.Background(), "p1", running)
	if err != nil {
		t.Fatal(err)
	}
	paused := make(chan error, 1)
	go func() {
		r := e.do(t, "POST", "/e2b/sandboxes/"+running+"/pause", "", key...)
		if r.status != http.StatusNoContent {
			paused <- fmt.Errorf("pause: %d %s", r.status, r.body)
		}
		paused <- nil
	}()
	deadline := time.Now().Add(5 * time.Second)
	for list("?state=paused")[running] != "paused" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	check("while a pause waits for a call", map[string]map[string]string{
		"":               {running: "paused", pausing: "paused"},
		"?state=running": {},
	})
	var info struct{ State string }
	if r := e.do(t, "GET", "/e2b/sandboxes/"+running, "", key...); json.Unmarshal([]byte(r.body), &info) != nil || info.State != "paused" {
		t.Errorf("get_info while a pause waits for a call: %d %s; want paused", r.status, r.body)
	}
	call.Release()
	if err := <-paused; err != nil {
		t.Fatal(err)
	}
	check("once paused", map[string]map[string]string{"?state=paused": {running: "paused", pausing: "paused"}})
}
