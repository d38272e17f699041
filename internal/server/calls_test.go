package server

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
)

// A call in flight ends within moments of its sandbox's end, whatever
// ended it, with a typed error naming why: a 410 when the agent had not
// answered yet, an abort event when a stream was under way.
func TestCallsEndWhenSandboxStops(t *testing.T) {
	tests := []struct {
		name string
		stop func(e *testEnv, id string)
		want string // in the message
	}{
		{"killed through the API", func(e *testEnv, id string) {
			if r := e.do(t, e.key1, "DELETE", "/v1/sandboxes/"+id, nil); r.status != 204 {
				t.Errorf("kill = %d %s", r.status, r.body)
			}
		}, "was killed"},
		{"runtime died", func(e *testEnv, id string) { e.rt.Stop(id) }, "runtime stopped"},
	}
	for _, tt := range tests {
		t.Run(tt.name+", stream under way", func(t *testing.T) {
			e := newTestEnv(t)
			sb := e.create(t, e.key1, `{}`)
			lines := e.openStream(t, sb.SandboxID)
			begin := time.Now()
			tt.stop(e, sb.SandboxID)
			last := lastEvent(t, lines)
			if took := time.Since(begin); took > 3*time.Second {
				t.Errorf("the stream ended %s after the sandbox; want within moments", took)
			}
			if last.Type != api.EventAbort || last.Abort == nil || last.Abort.Status != 410 || last.Abort.Code != api.CodeGone ||
				!strings.Contains(last.Abort.Message, tt.want) {
				t.Errorf("last event = %+v (abort %+v); want abort 410 gone containing %q", last, last.Abort, tt.want)
			}
		})
		t.Run(tt.name+", no answer yet", func(t *testing.T) {
			e := newTestEnv(t)
			sb := e.create(t, e.key1, `{}`)
			done := make(chan response, 1)
			go func() { done <- e.do(t, e.key1, "POST", "/v1/sandboxes/"+sb.SandboxID+"/files/mkdir", nil) }()
			select {
			case <-e.agent.started:
			case <-time.After(5 * time.Second):
				t.Fatal("request never reached the agent")
			}
			tt.stop(e, sb.SandboxID)
			select {
			case r := <-done:
				if r.status != 410 || r.err.Code != api.CodeGone || !strings.Contains(r.err.Message, tt.want) {
					t.Errorf("call = %d %s; want 410 gone containing %q", r.status, r.body, tt.want)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("the call did not end within 3 s of its sandbox")
			}
			select {
			case <-e.agent.cancelled:
			case <-time.After(5 * time.Second):
				t.Error("the agent's request was not cancelled")
			}
		})
	}
}

// postExecute starts POST /execute in sandbox id with key1 and returns the
// response, closed when the test ends.
func (e *testEnv) postExecute(t *testing.T, id string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", e.url+"/v1/sandboxes/"+id+"/execute", strings.NewReader(`{"code":"x"}`))
	req.Header.Set("Authorization", "Bearer "+e.key1)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// openStream starts a runCode stream in sandbox id and returns its lines
// once the fake agent's first event has come.
func (e *testEnv) openStream(t *testing.T, id string) *bufio.Scanner {
	t.Helper()
	lines := bufio.NewScanner(e.postExecute(t, id).Body)
	if !lines.Scan() || !strings.Contains(lines.Text(), "first") {
		t.Fatalf("first event = %q, %v", lines.Text(), lines.Err())
	}
	return lines
}

// lastEvent reads a stream to its end and returns its last event.
func lastEvent(t *testing.T, lines *bufio.Scanner) api.ExecuteEvent {
	t.Helper()
	var last api.ExecuteEvent
	for lines.Scan() {
		if err := json.Unmarshal(lines.Bytes(), &last); err != nil {
			t.Fatalf("line %q: %v", lines.Text(), err)
		}
	}
	return last
}
