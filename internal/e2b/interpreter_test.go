package e2b_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/e2b"
)

// fakeInterpreterAgent answers /execute with events chosen per test and
// /contexts like the agent, remembering what it was asked.
type fakeInterpreterAgent struct {
	mu     sync.Mutex
	asked  api.ExecuteRequest
	events []api.ExecuteEvent
	// cut drops the connection after the events instead of ending.
	cut   bool
	paths []string
}

func (a *fakeInterpreterAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.paths = append(a.paths, r.Method+" "+r.URL.Path)
	switch {
	case r.URL.Path == "/execute":
		json.NewDecoder(r.Body).Decode(&a.asked)
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		for _, ev := range a.events {
			enc.Encode(ev)
		}
		if a.cut {
			http.NewResponseController(w).Flush()
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
		}
	case r.URL.Path == "/contexts" && r.Method == http.MethodGet:
		json.NewEncoder(w).Encode(api.ContextList{Contexts: []api.Context{{ID: "default-python", Language: "python", Cwd: "/home/user"}}})
	case r.URL.Path == "/contexts" && r.Method == http.MethodPost:
		var req api.CreateContextRequest
		json.NewDecoder(r.Body).Decode(&req)
		json.NewEncoder(w).Encode(api.Context{ID: "ctx_1", Language: req.Language, Cwd: "/home/user"})
	case r.URL.Path == "/contexts/ctx_1" || r.URL.Path == "/contexts/ctx_1/restart":
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(api.Error{Code: api.CodeNotFound, Message: "context nope not found"})
	}
}

func TestExecuteTranslates(t *testing.T) {
	agent := &fakeInterpreterAgent{events: []api.ExecuteEvent{
		{Type: api.EventStdout, Text: "hi\n"},
		{Type: api.EventResult, Result: &api.Result{Type: api.ResultTypeDisplay, Mime: "image/png", Data: "iVBO"},
			Bundle: map[string]json.RawMessage{"image/png": json.RawMessage(`"iVBO\n"`), "text/plain": json.RawMessage(`"<Figure>"`)}},
		{Type: api.EventResult, Result: &api.Result{Type: api.ResultTypeResult, Mime: "text/html", Data: "<b>x</b>"},
			Bundle: map[string]json.RawMessage{"text/html": json.RawMessage(`"<b>x</b>"`), "text/plain": json.RawMessage(`"'x'"`),
				"application/json": json.RawMessage(`{"a":1}`), "application/vnd.custom": json.RawMessage(`{"c":2}`)}},
		{Type: api.EventError, Error: &api.ExecutionError{Name: "ValueError", Message: "bad", Traceback: "tb"}},
		{Type: api.EventEnd, ExecutionCount: 3},
	}}
	e := newEnv(t, agent, nil)
	sb := e.createNative(t, e.key1)
	hdr := []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49999", "X-Access-Token", e.c.EnvdToken(sb.SandboxID)}
	r := e.do(t, "POST", "/e2b/sandbox/execute", `{"code":"x","language":"python","env_vars":{"A":"1"}}`, hdr...)
	if r.status != http.StatusOK {
		t.Fatalf("execute: %d %s", r.status, r.body)
	}
	if !agent.asked.Bundle || agent.asked.TimeoutMs == nil || *agent.asked.TimeoutMs != 0 || agent.asked.Envs["A"] != "1" || agent.asked.Language != "python" {
		t.Errorf("agent was asked %+v; want the bundle, no time bound, the envs and the language", agent.asked)
	}
	if agent.asked.Stateful {
		t.Errorf("a python call asked for stateful: %+v", agent.asked)
	}
	// E2B's JavaScript and TypeScript keep their variables without a context.
	for _, lang := range []string{"js", "typescript"} {
		e.do(t, "POST", "/e2b/sandbox/execute", `{"code":"1","language":"`+lang+`"}`, hdr...)
		if !agent.asked.Stateful || agent.asked.ContextID != "" {
			t.Errorf("%s call: agent was asked %+v; want the stateful default context", lang, agent.asked)
		}
	}
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(r.body))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	want := []string{"stdout", "result", "result", "error", "number_of_executions", "end_of_execution"}
	if len(lines) != len(want) {
		t.Fatalf("lines = %v; want types %v", lines, want)
	}
	for i, typ := range want {
		if lines[i]["type"] != typ {
			t.Errorf("line %d type %v; want %s", i, lines[i]["type"], typ)
		}
	}
	if lines[0]["text"] != "hi\n" || lines[0]["timestamp"] == nil {
		t.Errorf("stdout line = %v", lines[0])
	}
	if l := lines[1]; l["png"] != "iVBO" || l["text"] != "<Figure>" || l["is_main_result"] != false {
		t.Errorf("display line = %v; want png without the newline, text, not main", l)
	}
	l := lines[2]
	if l["html"] != "<b>x</b>" || l["text"] != "x" || l["is_main_result"] != true {
		t.Errorf("result line = %v; want html, text unquoted, main", l)
	}
	if j, _ := l["json"].(map[string]any); j["a"] != float64(1) {
		t.Errorf("result json = %v; want the object", l["json"])
	}
	if x, _ := l["extra"].(map[string]any); x["application/vnd.custom"] == nil {
		t.Errorf("result extra = %v; want the unknown MIME type", l["extra"])
	}
	if l := lines[3]; l["name"] != "ValueError" || l["value"] != "bad" || l["traceback"] != "tb" {
		t.Errorf("error line = %v", l)
	}
	if lines[4]["execution_count"] != float64(3) {
		t.Errorf("count line = %v", lines[4])
	}
}

// TestExecuteCutIsCut: a stream that breaks before its end, or that a
// cluster's node ends with an abort event, is not ended with a normal
// last line, which the SDK would read as a finished run; the abort cuts
// it at once.
func TestExecuteCutIsCut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		agent   *fakeInterpreterAgent
		quickly bool
	}{
		{"broken", &fakeInterpreterAgent{cut: true, events: []api.ExecuteEvent{{Type: api.EventStdout, Text: "start\n"}}}, false},
		{"abort event", &fakeInterpreterAgent{events: []api.ExecuteEvent{{Type: api.EventStdout, Text: "start\n"},
			{Type: api.EventAbort, Abort: &api.Abort{Status: 410, Code: "gone", Message: "sandbox killed"}}}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) { testCut(t, tc.agent, tc.quickly) })
	}
}

func testCut(t *testing.T, agent *fakeInterpreterAgent, quickly bool) {
	e := newEnv(t, agent, nil)
	sb := e.createNative(t, e.key1)
	req, _ := http.NewRequest("POST", e.url+"/e2b/sandbox/execute", strings.NewReader(`{"code":"x"}`))
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49999")
	req.Header.Set("X-Access-Token", e.c.EnvdToken(sb.SandboxID))
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if took := time.Since(start); quickly && took > time.Second {
		t.Errorf("the cut took %v; want it at once", took)
	}
	if !strings.Contains(string(body), "start") {
		t.Errorf("the output before the cut was lost: %q", body)
	}
	if err == nil {
		t.Errorf("the stream ended cleanly (%q); want it broken", body)
	}
	if strings.Contains(string(body), "end_of_execution") {
		t.Errorf("a cut stream ended with end_of_execution: %q", body)
	}
}

func TestInterpreterRequests(t *testing.T) {
	agent := &fakeInterpreterAgent{}
	e := newEnv(t, agent, nil)
	sb := e.createNative(t, e.key1)
	// The SDKs' context calls carry only the traffic token.
	hdr := []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49999", "E2B-Traffic-Access-Token", e.c.EnvdToken(sb.SandboxID)}
	for _, tc := range []struct {
		name, method, path, body string
		want                     int
		wantBody                 string
	}{
		{"list", "GET", "/contexts", "", http.StatusOK, `[{"id":"default-python","language":"python","cwd":"/home/user"}]`},
		{"create", "POST", "/contexts", `{"language":"js","cwd":"/home/user"}`, http.StatusOK, `{"id":"ctx_1","language":"javascript","cwd":"/home/user"}`},
		{"restart", "POST", "/contexts/ctx_1/restart", "", http.StatusOK, "null"},
		{"remove", "DELETE", "/contexts/ctx_1", "", http.StatusOK, "null"},
		{"remove unknown", "DELETE", "/contexts/nope", "", http.StatusNotFound, "context nope not found"},
		{"typescript", "POST", "/contexts", `{"language":"ts"}`, http.StatusOK, `{"id":"ctx_1","language":"typescript","cwd":"/home/user"}`},
		{"java", "POST", "/contexts", `{"language":"java"}`, http.StatusOK, `{"id":"ctx_1","language":"java","cwd":"/home/user"}`},
		{"r context", "POST", "/contexts", `{"language":"r"}`, http.StatusOK, `{"id":"ctx_1","language":"r","cwd":"/home/user"}`},
		{"deno", "POST", "/contexts", `{"language":"deno"}`, http.StatusNotImplemented, ""},
		{"unknown language", "POST", "/execute", `{"code":"1","language":"cobol"}`, http.StatusBadRequest, ""},
		{"deno run", "POST", "/execute", `{"code":"1","language":"deno"}`, http.StatusNotImplemented, ""},
		{"context and language", "POST", "/execute", `{"code":"1","language":"python","context_id":"c"}`, http.StatusBadRequest, "Only one of context_id or language can be provided"},
		{"unknown route", "GET", "/nope", "", http.StatusNotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, e.url+"/e2b/sandbox"+tc.path, strings.NewReader(tc.body))
			for i := 0; i < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.want || (tc.wantBody != "" && strings.TrimSpace(string(b)) != tc.wantBody) {
				t.Errorf("%s %s: %d %s; want %d %s", tc.method, tc.path, resp.StatusCode, b, tc.want, tc.wantBody)
			}
		})
	}
}

// TestExecuteLineBounded: an agent's line past api.MaxExecuteLine (the
// agent keeps its own within it; code in the sandbox, as root, may have
// replaced it) ends the run with a ResultTooLarge error instead of being
// held whole: before, each concurrent run held up to the kernel's 256 MiB
// frame in the API process.
func TestExecuteLineBounded(t *testing.T) {
	sent := make(chan int64, 1)
	agent := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		io.WriteString(w, `{"type":"stdout","text":"before\n"}`+"\n"+`{"type":"result","result":{"type":"display_data","mime":"image/png","data":"`)
		chunk := strings.Repeat("A", 64<<10)
		var n int64
		for n < 2*api.MaxExecuteLine {
			if _, err := io.WriteString(w, chunk); err != nil {
				break // the API closed the stream
			}
			n += int64(len(chunk))
		}
		io.WriteString(w, `"}}`+"\n"+`{"type":"end"}`+"\n")
		sent <- n
	})
	e := newEnv(t, agent, nil)
	sb := e.createNative(t, e.key1)
	r := e.do(t, "POST", "/e2b/sandbox/execute", `{"code":"x"}`, "E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49999", "X-Access-Token", e.c.EnvdToken(sb.SandboxID))
	if r.status != http.StatusOK {
		t.Fatalf("execute: %d %s", r.status, r.body)
	}
	var types []string
	var errLine map[string]any
	sc := bufio.NewScanner(strings.NewReader(r.body))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %.80q: %v", sc.Text(), err)
		}
		types = append(types, m["type"].(string))
		if m["type"] == "error" {
			errLine = m
		}
	}
	if got := strings.Join(types, ","); got != "stdout,error,end_of_execution" {
		t.Errorf("lines %s; want stdout,error,end_of_execution", got)
	}
	if errLine["name"] != api.ErrorNameResultTooLarge || !strings.HasPrefix(errLine["value"].(string), "result too large: over ") {
		t.Errorf("error line %v; want ResultTooLarge saying the result is too large", errLine)
	}
	select {
	case n := <-sent:
		if n >= 2*api.MaxExecuteLine {
			t.Errorf("the agent wrote all %d bytes of its line; want the stream closed under it", n)
		}
	case <-time.After(10 * time.Second):
		t.Error("the agent's stream was not closed")
	}
}

// TestTrafficTokenScope: the trafficAccessToken (E2B-Traffic-Access-Token
// alone) reaches the code interpreter's context calls, which E2B's SDKs
// send with it alone, and not /execute, which runs code; before, it was
// the envdAccessToken and ran anything.
func TestTrafficTokenScope(t *testing.T) {
	agent := &fakeInterpreterAgent{events: []api.ExecuteEvent{{Type: "end"}}}
	e := newEnv(t, agent, nil)
	sb := e.createNative(t, e.key1)
	traffic := []string{"Content-Type", "application/json", "E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49999", "E2B-Traffic-Access-Token", e.c.TrafficToken(sb.SandboxID)}
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/execute", `{"code":"open('/etc/ld.so.preload','w')"}`, http.StatusUnauthorized},
		{"GET", "/contexts", "", http.StatusOK},
		{"POST", "/contexts", `{"language":"python"}`, http.StatusOK},
		{"POST", "/contexts/ctx_1/restart", "", http.StatusOK},
		{"DELETE", "/contexts/ctx_1", "", http.StatusOK},
		{"GET", "/health", "", http.StatusOK},
	} {
		if r := e.do(t, tc.method, "/e2b/sandbox"+tc.path, tc.body, traffic...); r.status != tc.want {
			t.Errorf("%s %s with the trafficAccessToken: %d %s; want %d", tc.method, tc.path, r.status, r.body, tc.want)
		}
	}
	for _, p := range agent.paths {
		if p == "POST /execute" {
			t.Errorf("the agent ran code for the trafficAccessToken")
		}
	}
	// The envdAccessToken still runs code.
	if r := e.do(t, "POST", "/e2b/sandbox/execute", `{"code":"1"}`, "Content-Type", "application/json", "E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49999",
		"X-Access-Token", e.c.EnvdToken(sb.SandboxID), "E2B-Traffic-Access-Token", e.c.TrafficToken(sb.SandboxID)); r.status != http.StatusOK {
		t.Errorf("execute with both tokens, as E2B's SDKs send them: %d %s; want 200", r.status, r.body)
	}
}

// TestContextAnswerBounded: an agent's JSON answer to a context call past
// MaxContextAnswer (code in the sandbox, as root, may have replaced the
// agent) ends the call with a 502 saying so instead of being held whole;
// before, the list of contexts was decoded however long it was.
func TestContextAnswerBounded(t *testing.T) {
	sent := make(chan int64, 1)
	agent := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"contexts":[{"id":"`)
		chunk := strings.Repeat("A", 64<<10)
		var n int64
		for n < 64*e2b.MaxContextAnswer {
			if _, err := io.WriteString(w, chunk); err != nil {
				break // the API closed the connection
			}
			n += int64(len(chunk))
		}
		io.WriteString(w, `"}]}`)
		sent <- n
	})
	e := newEnv(t, agent, nil)
	sb := e.createNative(t, e.key1)
	// The interpreter's refusals are plain text, as E2B's server's; the
	// SDKs raise a 502 with its text (TimeoutException).
	req, _ := http.NewRequest("GET", e.url+"/e2b/sandbox/contexts", nil)
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49999")
	req.Header.Set("X-Access-Token", e.c.EnvdToken(sb.SandboxID))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || string(body) != "the sandbox's answer to GET /contexts was too large: over 1 MiB" {
		t.Errorf("list contexts: %d %.200s; want 502 saying the answer was too large", resp.StatusCode, body)
	}
	select {
	case n := <-sent:
		if n >= 64*e2b.MaxContextAnswer {
			t.Errorf("the agent wrote all %d bytes of its answer; want the connection closed under it", n)
		}
	case <-time.After(10 * time.Second):
		t.Error("the agent's answer was not cut")
	}
}
