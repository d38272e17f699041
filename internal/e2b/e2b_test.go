package e2b_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/e2b"
	"github.com/lizard-build/lizard/internal/server"
)

// e2bForm is key as E2B's SDKs 2.25 to 2.45 accept it, ^e2b_[0-9a-f]+$:
// lz_<id>_<secret> as e2b_<id><secret>.
func e2bForm(t *testing.T, key string) string {
	t.Helper()
	k, err := auth.Parse(key)
	if err != nil {
		t.Fatal(err)
	}
	f := "e2b_" + k.ID + k.Secret
	if !regexp.MustCompile(`^e2b_[0-9a-f]+$`).MatchString(f) {
		t.Fatalf("%s is not what E2B's SDKs 2.25 to 2.45 accept", f)
	}
	return f
}

func TestControlAPINeedsKey(t *testing.T) {
	e := newEnv(t, nil, nil)
	e2bKey := e2bForm(t, e.key1)
	wrongSecret := e2bKey[:len(e2bKey)-1] + "0"
	if wrongSecret == e2bKey {
		wrongSecret = e2bKey[:len(e2bKey)-1] + "1"
	}
	for _, tc := range []struct {
		name    string
		headers []string
		want    int
	}{
		{"no key", nil, http.StatusUnauthorized},
		{"wrong key", []string{"X-API-Key", "lz_nope_nope"}, http.StatusUnauthorized},
		// The e2b_ form, which E2B's SDKs 2.25 to 2.45 require, is the
		// same key; a wrong secret in that form is still refused.
		{"right key in the e2b_ form", []string{"X-API-Key", e2bKey}, http.StatusOK},
		{"wrong secret in the e2b_ form", []string{"X-API-Key", wrongSecret}, http.StatusUnauthorized},
		{"short e2b_ key", []string{"X-API-Key", e2bKey[:len(e2bKey)-2]}, http.StatusUnauthorized},
		{"bearer is not E2B's", []string{"Authorization", "Bearer " + e.key1}, http.StatusUnauthorized},
		{"right key", []string{"X-API-Key", e.key1}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := e.do(t, "GET", "/e2b/sandboxes", "", tc.headers...); r.status != tc.want {
				t.Errorf("GET /e2b/sandboxes: %d %s; want %d", r.status, r.body, tc.want)
			}
		})
	}
}

func TestUnknownRouteIs404(t *testing.T) {
	e := newEnv(t, nil, nil)
	if r := e.do(t, "GET", "/e2b/teams", "", "X-API-Key", e.key1); r.status != http.StatusNotFound {
		t.Errorf("GET /e2b/teams: %d %s; want 404", r.status, r.body)
	}
}

// TestSandboxRouter checks the sandbox URL's authentication and its
// dispatch on E2b-Sandbox-Port, with the envd hook.
func TestSandboxRouter(t *testing.T) {
	type seen struct {
		path string
		t    e2b.TargetSandbox
	}
	var got seen
	envd := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.path = r.URL.Path
		got.t, _ = e2b.Target(r.Context())
		w.WriteHeader(http.StatusAccepted)
	})
	e := newEnv(t, nil, envd)
	sb := e.createNative(t, e.key1)
	other := e.createNative(t, e.key2)
	tok := e.c.EnvdToken(sb.SandboxID)
	for _, tc := range []struct {
		name    string
		headers []string
		want    int
	}{
		{"no headers", nil, http.StatusBadRequest},
		{"no token", []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49983"}, http.StatusUnauthorized},
		{"another sandbox's token", []string{"E2b-Sandbox-Id", other.SandboxID, "E2b-Sandbox-Port", "49983", "X-Access-Token", tok}, http.StatusUnauthorized},
		{"port token", []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49983", "X-Access-Token", sb.AccessToken}, http.StatusUnauthorized},
		{"another project's key", []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49983", "X-API-Key", e.key2}, http.StatusBadGateway},
		{"token to envd", []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49983", "X-Access-Token", tok}, http.StatusAccepted},
		// The trafficAccessToken opens the ports, not envd (issue 33: it
		// ran commands as root and wrote /etc/ld.so.preload there).
		{"traffic token to envd", []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49983", "E2B-Traffic-Access-Token", e.c.TrafficToken(sb.SandboxID)}, http.StatusUnauthorized},
		{"traffic token as the envd token", []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49983", "X-Access-Token", e.c.TrafficToken(sb.SandboxID)}, http.StatusUnauthorized},
		{"port token in the traffic header", []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49983", "E2B-Traffic-Access-Token", sb.AccessToken}, http.StatusUnauthorized},
		{"another sandbox's traffic token", []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49999", "E2B-Traffic-Access-Token", e.c.TrafficToken(other.SandboxID)}, http.StatusUnauthorized},
		// A sandbox made before the two differed holds the envd token as
		// its trafficAccessToken.
		{"envd token in the traffic header", []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49983", "E2B-Traffic-Access-Token", tok}, http.StatusAccepted},
		{"key to envd", []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49983", "X-API-Key", e.key1}, http.StatusAccepted},
		{"key in the e2b_ form to envd", []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49983", "X-API-Key", e2bForm(t, e.key1)}, http.StatusAccepted},
		{"another project's key in the e2b_ form", []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49983", "X-API-Key", e2bForm(t, e.key2)}, http.StatusBadGateway},
		{"other port", []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "8080", "X-Access-Token", tok}, http.StatusNotImplemented},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = seen{}
			r := e.do(t, "POST", "/e2b/sandbox/process.Process/List", "{}", tc.headers...)
			if r.status != tc.want {
				t.Fatalf("%d %s; want %d", r.status, r.body, tc.want)
			}
			if r.status == http.StatusAccepted {
				want := seen{"/process.Process/List", e2b.TargetSandbox{ProjectID: "p1", SandboxID: sb.SandboxID}}
				if got != want {
					t.Errorf("envd saw %+v; want %+v", got, want)
				}
			}
		})
	}
}

// TestEnvdServedByDefault: the server plugs internal/e2b/envd in when the
// config names no envd, and it reaches the sandbox's agent
// (internal/e2b/envd's own tests cover every method).
func TestEnvdServedByDefault(t *testing.T) {
	agent := http.NewServeMux()
	agent.HandleFunc("GET /processes", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"processes":[{"pid":7,"args":["sleep","9"],"cwd":"/","running":true}]}`)
	})
	e := newEnv(t, agent, nil)
	sb := e.createNative(t, e.key1)
	r := e.do(t, "POST", "/e2b/sandbox/process.Process/List", "{}", "Content-Type", "application/json",
		"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49983", "X-Access-Token", e.c.EnvdToken(sb.SandboxID))
	want := `{"processes":[{"config":{"cmd":"sleep","args":["9"],"cwd":"/"},"pid":7}]}`
	// protojson varies its spacing on purpose.
	if got := strings.Join(strings.Fields(r.body), ""); r.status != http.StatusOK || got != want {
		t.Errorf("envd List: %d %s; want 200 %s", r.status, r.body, want)
	}
}

// TestEndedSandboxIs502: calls into a sandbox that has ended get E2B's
// 502 saying it "was not found", which the SDKs' is_running() reads as
// "not running", and e2b 2.63's probe after a dropped stream too (a 502
// without those words it takes for envd unreachable in a running one).
func TestEndedSandboxIs502(t *testing.T) {
	e := newEnv(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	sb := e.createNative(t, e.key1)
	tok := e.c.EnvdToken(sb.SandboxID)
	if r := e.do(t, "DELETE", "/e2b/sandboxes/"+sb.SandboxID, "", "X-API-Key", e.key1); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", r.status, r.body)
	}
	for _, port := range []string{"49983", "49999"} {
		if r := e.do(t, "GET", "/e2b/sandbox/health", "", "E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", port, "X-Access-Token", tok); r.status != http.StatusBadGateway || !strings.Contains(r.body, "sandbox "+sb.SandboxID+" was not found") {
			t.Errorf("port %s of a killed sandbox: %d %s; want 502 saying it was not found", port, r.status, r.body)
		}
	}
}

// TestPausedSandboxIs502: calls through the sandbox URL into a paused
// sandbox get E2B's proxy's 502 "was not found" (is_running() False after
// pause()) and leave it paused, on both ports and with either token or
// its key; connect() resumes it. One created with E2B's lifecycle
// auto_resume is resumed by the call instead, as E2B's proxy does, and
// get_info does not show the metadata pair that records it.
func TestPausedSandboxIs502(t *testing.T) {
	e := newEnv(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	key := []string{"X-API-Key", e.key1}
	create := func(body string) string {
		t.Helper()
		r := e.do(t, "POST", "/e2b/v2/sandboxes", body, key...)
		var sb struct{ SandboxID string }
		json.Unmarshal([]byte(r.body), &sb)
		if r.status != http.StatusCreated || sb.SandboxID == "" {
			t.Fatalf("create %s: %d %s", body, r.status, r.body)
		}
		return sb.SandboxID
	}
	state := func(id string) string {
		t.Helper()
		var info struct {
			State    string
			Metadata map[string]string
		}
		r := e.do(t, "GET", "/e2b/sandboxes/"+id, "", key...)
		json.Unmarshal([]byte(r.body), &info)
		if _, ok := info.Metadata[e2b.AutoResumeKey]; ok {
			t.Errorf("get_info shows %s: %s", e2b.AutoResumeKey, r.body)
		}
		return info.State
	}
	pause := func(id string) {
		t.Helper()
		if r := e.do(t, "POST", "/e2b/sandboxes/"+id+"/pause", "", key...); r.status != http.StatusNoContent {
			t.Fatalf("pause: %d %s", r.status, r.body)
		}
	}
	health := func(id, port string, auth ...string) response {
		t.Helper()
		return e.do(t, "GET", "/e2b/sandbox/health", "", append([]string{"E2b-Sandbox-Id", id, "E2b-Sandbox-Port", port}, auth...)...)
	}

	id := create(`{"templateID":"base","timeout":300,"autoPause":true}`)
	if r := health(id, "49983", "X-Access-Token", e.c.EnvdToken(id)); r.status != http.StatusNoContent {
		t.Fatalf("health of a running sandbox: %d %s", r.status, r.body)
	}
	pause(id)
	for _, c := range []struct{ port, header, cred string }{
		{"49983", "X-Access-Token", e.c.EnvdToken(id)},
		{"49999", "X-Access-Token", e.c.EnvdToken(id)},
		{"49999", "E2b-Traffic-Access-Token", e.c.TrafficToken(id)},
		{"49983", "X-API-Key", e.key1},
	} {
		if r := health(id, c.port, c.header, c.cred); r.status != http.StatusBadGateway || !strings.Contains(r.body, "sandbox "+id+" was not found: it is paused") {
			t.Errorf("port %s (%s) of a paused sandbox: %d %s; want 502, not found, paused", c.port, c.header, r.status, r.body)
		}
	}
	if r := e.do(t, "POST", "/e2b/sandbox/process.Process/List", "{}", "Content-Type", "application/json",
		"E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "49983", "X-Access-Token", e.c.EnvdToken(id)); r.status != http.StatusBadGateway {
		t.Errorf("envd call into a paused sandbox: %d %s; want 502", r.status, r.body)
	}
	if s := state(id); s != "paused" {
		t.Errorf("after calls into it, a paused sandbox is %s; want still paused", s)
	}
	if r := e.do(t, "POST", "/e2b/v2/sandboxes/"+id+"/connect", `{}`, key...); r.status != http.StatusCreated {
		t.Fatalf("connect: %d %s; want 201 resumed", r.status, r.body)
	}
	if r := health(id, "49983", "X-Access-Token", e.c.EnvdToken(id)); r.status != http.StatusNoContent {
		t.Errorf("health after connect: %d %s; want 204", r.status, r.body)
	}

	auto := create(`{"templateID":"base","timeout":300,"autoPause":true,"autoResume":{"enabled":true},"metadata":{"a":"b"}}`)
	pause(auto)
	if r := health(auto, "49983", "X-Access-Token", e.c.EnvdToken(auto)); r.status != http.StatusNoContent {
		t.Errorf("health of a paused auto_resume sandbox: %d %s; want 204, resumed", r.status, r.body)
	}
	if s := state(auto); s != "running" {
		t.Errorf("a paused auto_resume sandbox called into is %s; want running", s)
	}
}

// TestSandboxRouterInFlight: a project has at most 1024 calls under way
// through the sandbox URL, which an access token opens and no key's
// bounds cover, all its sandboxes together; another project's are not
// counted with them, and a call that ends makes room.
func TestSandboxRouterInFlight(t *testing.T) {
	const most = 1024
	release := make(chan struct{})
	var started sync.WaitGroup
	envd := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			started.Done()
			<-release
		}
		w.WriteHeader(http.StatusNoContent)
	})
	e := newEnv(t, nil, envd)
	sb := e.createNative(t, e.key1)
	same := e.createNative(t, e.key1)
	other := e.createNative(t, e.key2)
	call := func(id, path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, e.url+"/e2b/sandbox"+path, nil)
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", "49983")
		req.Header.Set("X-Access-Token", e.c.EnvdToken(id))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var done sync.WaitGroup
	started.Add(most)
	for range most {
		done.Add(1)
		go func() { defer done.Done(); call(sb.SandboxID, "/hold") }()
	}
	started.Wait()
	if status, body := call(same.SandboxID, "/health"); status != http.StatusTooManyRequests || !strings.Contains(body, "project p1 has 1024 calls under way") {
		t.Errorf("call %d of a project under way, to another of its sandboxes: %d %s; want 429 naming the bound", most+1, status, body)
	}
	if status, body := call(other.SandboxID, "/health"); status != http.StatusNoContent {
		t.Errorf("another project's call: %d %s; want 204", status, body)
	}
	close(release)
	done.Wait()
	if status, body := call(sb.SandboxID, "/health"); status != http.StatusNoContent {
		t.Errorf("once its calls ended: %d %s; want 204", status, body)
	}
}

// TestSandboxRouterRate: calls to the sandbox URL count against the
// caller's request rate as /v1's do (429 with Retry-After past it): a
// key's against the bucket its control API calls spend too, access
// tokens' against their project's, all its sandboxes together; another
// project's are not counted with them. Before, only the calls under way
// were bounded, and a token sent calls at any rate. Its 429s, and the
// control API's, are in E2B's error shape, as its other errors.
func TestSandboxRouterRate(t *testing.T) {
	envd := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	e := newEnvLimits(t, nil, envd, server.KeyLimits{Rate: 0.01, Burst: 3})
	// The creates spend key1's and key2's buckets; keys made after them
	// have their own.
	sb := e.createNative(t, e.key1)
	same := e.createNative(t, e.key1)
	other := e.createNative(t, e.key2)
	call := func(id string, headers ...string) (int, string, string) {
		req, _ := http.NewRequest(http.MethodGet, e.url+"/e2b/sandbox/health", nil)
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", "49983")
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
	}
	token := func(id string) []string { return []string{"X-Access-Token", e.c.EnvdToken(id)} }
	for i := range 3 {
		id := sb.SandboxID
		if i == 2 {
			id = same.SandboxID
		}
		if status, _, body := call(id, token(id)...); status != http.StatusNoContent {
			t.Fatalf("token call %d within the burst: %d %s; want 204", i+1, status, body)
		}
	}
	status, after, body := call(same.SandboxID, token(same.SandboxID)...)
	if status != http.StatusTooManyRequests || after == "" || !e2bRateLimited(body, "sandbox access tokens of project p1 sends requests too fast") {
		t.Errorf("token call 4 of project p1: %d, Retry-After %q, %s; want 429 naming the project in E2B's shape, with Retry-After", status, after, body)
	}
	if status, _, body := call(other.SandboxID, token(other.SandboxID)...); status != http.StatusNoContent {
		t.Errorf("project p2's token call: %d %s; want 204", status, body)
	}
	// A key's sandbox URL calls and its control API calls share its bucket.
	k, err := auth.Create(context.Background(), e.st, "p1", "")
	if err != nil {
		t.Fatal(err)
	}
	key := []string{"X-API-Key", k.String()}
	for i := range 3 {
		if status, _, body := call(sb.SandboxID, key...); status != http.StatusNoContent {
			t.Fatalf("key call %d within the burst: %d %s; want 204", i+1, status, body)
		}
	}
	if status, after, body := call(sb.SandboxID, key...); status != http.StatusTooManyRequests || after == "" || !e2bRateLimited(body, "API key "+k.ID+" sends requests too fast") {
		t.Errorf("key call 4: %d, Retry-After %q, %s; want 429 naming the key in E2B's shape", status, after, body)
	}
	req, _ := http.NewRequest(http.MethodGet, e.url+"/e2b/sandboxes", nil)
	req.Header.Set("X-API-Key", k.String())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !e2bRateLimited(string(b), "API key "+k.ID+" sends requests too fast") {
		t.Errorf("the key's control API call after its sandbox URL calls: %d, Retry-After %q, %s; want 429 in E2B's shape, with Retry-After",
			resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
}

// e2bRateLimited says whether body is E2B's error shape for a 429, whose
// code its SDKs read as a number, with msg in its message (not the native
// API's {"code":"rate_limited"}).
func e2bRateLimited(body, msg string) bool {
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	return json.Unmarshal([]byte(body), &e) == nil && e.Code == http.StatusTooManyRequests && strings.Contains(e.Message, msg)
}

// TestSignedFileURLFields: E2B's file URL signature joins path,
// operation, user and token with ':' unescaped, as its SDKs compute it;
// a user holding ':' or a parameter given twice is refused, so that one
// signature cannot stand for another path, operation or user. Before, a
// read signature of the path "t:write:u" was a write of "t" by user
// "u:read:user".
func TestSignedFileURLFields(t *testing.T) {
	var calls []string
	envd := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls = append(calls, r.Method+" "+r.URL.Query().Get("path")+" as "+r.URL.Query().Get("username"))
		w.WriteHeader(http.StatusAccepted)
	})
	e := newEnv(t, nil, envd)
	sb := e.createNative(t, e.key1)
	tok := e.c.EnvdToken(sb.SandboxID)
	// sign is E2B's get_signature (python-sdk e2b/sandbox/signature.py).
	sign := func(path, op, user, exp string) string {
		raw := path + ":" + op + ":" + user + ":" + tok
		if exp != "" {
			raw += ":" + exp
		}
		sum := sha256.Sum256([]byte(raw))
		return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
	}
	exp := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
	heads := []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49983"}
	for _, tc := range []struct {
		name, method string
		query        url.Values
		want         int
	}{
		{"read as signed", "GET", url.Values{"path": {"/tmp/a:b"}, "username": {"user"}, "signature": {sign("/tmp/a:b", "read", "user", "")}}, http.StatusAccepted},
		{"write as signed, expiring", "POST", url.Values{"path": {"/tmp/x"}, "signature": {sign("/tmp/x", "write", "", exp)}, "signature_expiration": {exp}}, http.StatusAccepted},
		{"a read signature shifted into a write", "POST", url.Values{"path": {"t"}, "username": {"u:read:user"}, "signature": {sign("t:write:u", "read", "user", "")}}, http.StatusBadRequest},
		{"a write signature shifted into a read", "GET", url.Values{"path": {"t"}, "username": {"u:write:user"}, "signature": {sign("t:read:u", "write", "user", "")}}, http.StatusBadRequest},
		{"a user with ':' signed as such", "GET", url.Values{"path": {"/tmp/x"}, "username": {"a:b"}, "signature": {sign("/tmp/x", "read", "a:b", "")}}, http.StatusBadRequest},
		{"path twice", "GET", url.Values{"path": {"/tmp/x", "/etc/shadow"}, "signature": {sign("/tmp/x", "read", "", "")}}, http.StatusBadRequest},
		{"username twice", "GET", url.Values{"path": {"/tmp/x"}, "username": {"user", "root"}, "signature": {sign("/tmp/x", "read", "user", "")}}, http.StatusBadRequest},
		{"another operation's signature", "POST", url.Values{"path": {"/tmp/x"}, "signature": {sign("/tmp/x", "read", "", "")}}, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls = nil
			r := e.do(t, tc.method, "/e2b/sandbox/files?"+tc.query.Encode(), "", heads...)
			if r.status != tc.want {
				t.Fatalf("%s /files?%s: %d %s; want %d", tc.method, tc.query.Encode(), r.status, r.body, tc.want)
			}
			if tc.want != http.StatusAccepted && len(calls) != 0 {
				t.Errorf("refused, yet envd served %q", calls)
			}
		})
	}
}
