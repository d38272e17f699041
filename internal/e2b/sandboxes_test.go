package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/netpolicy"
)

func TestTemplateName(t *testing.T) {
	for _, tc := range []struct{ e2b, want string }{
		{"", "interpreter"},
		{"base", "interpreter"},
		{"code-interpreter-v1", "interpreter"},
		{"code-interpreter", "interpreter"},
		{"interpreter", "interpreter"},
		{"my-template", "my-template"},
	} {
		if got := templateName(tc.e2b); got != tc.want {
			t.Errorf("templateName(%q) = %q; want %q", tc.e2b, got, tc.want)
		}
	}
}

func TestCreateRequest(t *testing.T) {
	ms := func(n int64) *int64 { return &n }
	yes, no := true, false
	for _, tc := range []struct {
		name       string
		body       string
		want       api.CreateSandboxRequest
		wantStatus int // 0: accepted
	}{
		{"defaults", `{"templateID":"code-interpreter-v1"}`,
			api.CreateSandboxRequest{Template: "interpreter", TimeoutMs: ms(15000)}, 0},
		{"everything mapped", `{"templateID":"mine","timeout":300,"autoPause":true,"autoResume":{"enabled":true},"secure":true,
			"allow_internet_access":true,"metadata":{"a":"b"},"envVars":{"X":"1"},"network":{"allowPublicTraffic":true},
			"volumeMounts":[{"name":"v","path":"/data"}],"autoPauseMemory":true}`,
			api.CreateSandboxRequest{Template: "mine", TimeoutMs: ms(300000), OnTimeout: "pause", AllowInternet: &yes,
				Metadata: map[string]string{"a": "b", AutoResumeKey: "true"}, Envs: map[string]string{"X": "1"}, PublicPorts: true,
				Volumes: []api.VolumeMount{{Name: "v", Path: "/data"}}}, 0},
		{"a snapshot as the template", `{"templateID":"snap-abc"}`,
			api.CreateSandboxRequest{SnapshotID: "snap-abc", TimeoutMs: ms(15000)}, 0},
		{"zero timeout", `{"templateID":"base","timeout":0}`, api.CreateSandboxRequest{}, http.StatusBadRequest},
		{"auto-resume without auto-pause", `{"templateID":"base","autoResume":{"enabled":true}}`, api.CreateSandboxRequest{}, http.StatusBadRequest},
		{"auto-pause without auto-resume", `{"templateID":"base","autoPause":true,"autoResume":{"enabled":false},"metadata":{"a":"b"}}`,
			api.CreateSandboxRequest{Template: "interpreter", TimeoutMs: ms(15000), OnTimeout: "pause", Metadata: map[string]string{"a": "b"}}, 0},
		{"auto-resume's record in metadata", `{"templateID":"base","metadata":{"e2b.autoResume":"true"}}`, api.CreateSandboxRequest{}, http.StatusBadRequest},
		{"auto-pause keeping the disk alone", `{"templateID":"base","autoPause":true,"autoPauseMemory":false}`,
			api.CreateSandboxRequest{Template: "interpreter", TimeoutMs: ms(15000), OnTimeout: "pause", PauseMemory: new(false)}, 0},
		{"mcp", `{"templateID":"base","mcp":{"x":{}}}`, api.CreateSandboxRequest{}, http.StatusNotImplemented},
		{"mcp null is none", `{"templateID":"base","mcp":null}`, api.CreateSandboxRequest{Template: "interpreter", TimeoutMs: ms(15000)}, 0},
		{"iam", `{"templateID":"base","iam":{"tokens":{}}}`, api.CreateSandboxRequest{}, http.StatusNotImplemented},
		{"allow list", `{"templateID":"base","network":{"allowOut":["Example.com","1.2.3.4"],"denyOut":["0.0.0.0/0"]}}`,
			api.CreateSandboxRequest{Template: "interpreter", TimeoutMs: ms(15000),
				Network: &api.NetworkPolicy{Default: "deny", Allow: []string{"example.com", "1.2.3.4/32"}}}, 0},
		{"no internet with an allow list", `{"templateID":"base","allow_internet_access":false,"network":{"allowOut":["example.com"]}}`,
			api.CreateSandboxRequest{Template: "interpreter", TimeoutMs: ms(15000),
				Network: &api.NetworkPolicy{Default: "deny", Allow: []string{"example.com"}}}, 0},
		{"no internet alone", `{"templateID":"base","allow_internet_access":false}`,
			api.CreateSandboxRequest{Template: "interpreter", TimeoutMs: ms(15000), AllowInternet: &no}, 0},
		{"masked host", `{"templateID":"base","network":{"maskRequestHost":"app.local:${PORT}"}}`, api.CreateSandboxRequest{Template: "interpreter", TimeoutMs: ms(15000), PortsHost: "app.local:${PORT}"}, 0},
		{"https ports", `{"templateID":"base","network":{"httpsPorts":[3000]}}`, api.CreateSandboxRequest{}, http.StatusNotImplemented},
		{"egress proxy", `{"templateID":"base","network":{"egressProxy":{"address":"p:1080"}}}`, api.CreateSandboxRequest{}, http.StatusNotImplemented},
		{"transform rules with an allow list", `{"templateID":"base","network":{"allowOut":["api.test"],"denyOut":["0.0.0.0/0"],
			"rules":{"api.test":[{"transform":{"headers":{"authorization":"Bearer ${e2b.secrets.TOKEN}","X-Static":"v"}}}]}}}`,
			api.CreateSandboxRequest{Template: "interpreter", TimeoutMs: ms(15000), Network: &api.NetworkPolicy{Default: "deny", Allow: []string{"api.test"},
				Inject: []api.HeaderRule{{Domain: "api.test", Headers: map[string]string{"Authorization": "Bearer {{ secrets.TOKEN }}", "X-Static": "v"}}}}}, 0},
		// A rule alone filters nothing, as on E2B: the traffic goes through
		// the node's proxy with everything allowed.
		{"transform rules alone", `{"templateID":"base","network":{"rules":{"api.test":[{"transform":{"headers":{"X-A":"1"}}}]}}}`,
			api.CreateSandboxRequest{Template: "interpreter", TimeoutMs: ms(15000), Network: &api.NetworkPolicy{Default: "allow",
				Inject: []api.HeaderRule{{Domain: "api.test", Headers: map[string]string{"X-A": "1"}}}}}, 0},
		{"a rule without a transform", `{"templateID":"base","network":{"rules":{"a.test":[{}]}}}`,
			api.CreateSandboxRequest{Template: "interpreter", TimeoutMs: ms(15000)}, 0},
		{"transform rules without internet", `{"templateID":"base","allow_internet_access":false,"network":{"rules":{"api.test":[{"transform":{"headers":{"X-A":"1"}}}]}}}`,
			api.CreateSandboxRequest{Template: "interpreter", TimeoutMs: ms(15000), Network: &api.NetworkPolicy{Default: "deny",
				Inject: []api.HeaderRule{{Domain: "api.test", Headers: map[string]string{"X-A": "1"}}}}}, 0},
		{"an identity token", `{"templateID":"base","network":{"rules":{"a.test":[{"transform":{"headers":{"A":"${e2b.identity.tokens.aws}"}}}]}}}`,
			api.CreateSandboxRequest{}, http.StatusNotImplemented},
		{"bad allow entry", `{"templateID":"base","network":{"allowOut":["a b"]}}`, api.CreateSandboxRequest{}, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n newSandbox
			if err := json.Unmarshal([]byte(tc.body), &n); err != nil {
				t.Fatal(err)
			}
			got, err := createRequest(n)
			var he *httpError
			switch {
			case tc.wantStatus == 0 && err != nil:
				t.Fatalf("createRequest: %v", err)
			case tc.wantStatus != 0 && (!errors.As(err, &he) || he.status != tc.wantStatus):
				t.Fatalf("createRequest: %v; want a %d", err, tc.wantStatus)
			case tc.wantStatus == 0 && !reflect.DeepEqual(got, tc.want):
				t.Errorf("createRequest = %+v; want %+v", got, tc.want)
			}
		})
	}
}

// TestEgressPolicy: E2B's allowOut and denyOut (allow wins, then deny,
// then everything else allowed) as Lizard's policy (deny wins), and what
// cannot be said refused naming the field.
func TestEgressPolicy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rules     egressRules
		denyAll   bool
		want      *api.NetworkPolicy
		status    int // 0: mapped
		wantField string
	}{
		{"ALL_TRAFFIC denied: an allow list", egressRules{AllowOut: []string{"allowed.test", "*.wild.test", "203.0.113.0/24"}, DenyOut: []string{"0.0.0.0/0", "10.0.0.0/8"}}, false,
			&api.NetworkPolicy{Default: "deny", Allow: []string{"allowed.test", "*.wild.test", "203.0.113.0/24"}}, 0, ""},
		{"allow_internet_access=false is ALL_TRAFFIC denied", egressRules{AllowOut: []string{"allowed.test"}}, true,
			&api.NetworkPolicy{Default: "deny", Allow: []string{"allowed.test"}}, 0, ""},
		{"dns servers opened with a name allowed", egressRules{AllowOut: []string{"allowed.test"}, DenyOut: []string{"0.0.0.0/0"}, DNSServers: []string{"1.1.1.1"}}, false,
			&api.NetworkPolicy{Default: "deny", Allow: []string{"allowed.test", "1.1.1.1"}}, 0, ""},
		{"dns servers not opened without a name", egressRules{AllowOut: []string{"1.2.3.4"}, DenyOut: []string{"0.0.0.0/0"}, DNSServers: []string{"1.1.1.1"}}, false,
			&api.NetworkPolicy{Default: "deny", Allow: []string{"1.2.3.4/32"}}, 0, ""},
		{"some addresses denied", egressRules{DenyOut: []string{"10.0.0.0/8", "192.0.2.1"}}, false,
			&api.NetworkPolicy{Default: "allow", Deny: []string{"10.0.0.0/8", "192.0.2.1/32"}}, 0, ""},
		{"allow alone allows everything", egressRules{AllowOut: []string{"allowed.test"}}, false,
			&api.NetworkPolicy{Default: "allow", Allow: []string{"allowed.test"}}, 0, ""},
		{"ALL_TRAFFIC allowed wins", egressRules{AllowOut: []string{"0.0.0.0/0"}, DenyOut: []string{"0.0.0.0/0", "10.0.0.0/8"}}, false,
			&api.NetworkPolicy{Default: "allow"}, 0, ""},
		{"an allow inside a narrower deny", egressRules{AllowOut: []string{"10.1.2.3"}, DenyOut: []string{"10.0.0.0/8"}}, false,
			nil, http.StatusNotImplemented, "network.allowOut[0]"},
		{"an allow inside a deny, ALL_TRAFFIC denied after", egressRules{AllowOut: []string{"10.1.2.3"}, DenyOut: []string{"10.0.0.0/8", "0.0.0.0/0"}}, false,
			&api.NetworkPolicy{Default: "deny", Allow: []string{"10.1.2.3/32"}}, 0, ""},
		{"a name denied", egressRules{DenyOut: []string{"0.0.0.0/0", "evil.test"}}, false, nil, http.StatusBadRequest, "network.denyOut[1]"},
		{"a bad allow", egressRules{AllowOut: []string{"ok.test", "api.*.test"}}, false, nil, http.StatusBadRequest, "network.allowOut[1]"},
		{"IPv6", egressRules{DenyOut: []string{"::/0"}}, false, nil, http.StatusBadRequest, "network.denyOut[0]"},
		{"a bad prefix", egressRules{DenyOut: []string{"10.0.0.0/33"}}, false, nil, http.StatusBadRequest, "network.denyOut[0]"},
		{"a DNS server by name", egressRules{AllowOut: []string{"a.test"}, DenyOut: []string{"0.0.0.0/0"}, DNSServers: []string{"dns.test"}}, false,
			nil, http.StatusBadRequest, "network.dnsServers[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.rules.policy(tc.denyAll)
			var he *httpError
			switch {
			case tc.status == 0 && err != nil:
				t.Fatalf("policy: %v", err)
			case tc.status == 0 && !reflect.DeepEqual(got, tc.want):
				t.Errorf("policy = %+v; want %+v", got, tc.want)
			case tc.status != 0 && (!errors.As(err, &he) || he.status != tc.status || !strings.HasPrefix(he.msg, tc.wantField)):
				t.Errorf("policy: %v; want a %d naming %s", err, tc.status, tc.wantField)
			}
		})
	}
}

func TestParseList(t *testing.T) {
	for _, tc := range []struct {
		name      string
		query     url.Values
		wantMeta  map[string]string
		wantState []string
		wantLimit int
		bad       bool
	}{
		{"nothing", url.Values{}, nil, nil, 100, false},
		// What the Python SDK sends: each key and value quoted, then the
		// pairs URL-encoded as one parameter.
		{"metadata as the SDK sends it", url.Values{"metadata": {"user=al%2520ice&app=prod"}},
			map[string]string{"user": "al ice", "app": "prod"}, nil, 100, false},
		{"states", url.Values{"state": {"running,paused"}}, nil, []string{api.StatePaused, api.StateRunning, api.StateStarting}, 100, false},
		// A sandbox being paused is running to Lizard and paused to E2B.
		{"paused", url.Values{"state": {"paused"}}, nil, []string{api.StatePaused, api.StateRunning, api.StateStarting}, 100, false},
		{"running", url.Values{"state": {"running"}}, nil, []string{api.StateRunning, api.StateStarting}, 100, false},
		{"limit", url.Values{"limit": {"7"}}, nil, nil, 7, false},
		{"limit too big", url.Values{"limit": {"101"}}, nil, nil, 0, true},
		{"limit zero", url.Values{"limit": {"0"}}, nil, nil, 0, true},
		{"unknown state", url.Values{"state": {"killed"}}, nil, nil, 0, true},
		{"bad order", url.Values{"order": {"up"}}, nil, nil, 0, true},
		{"bad time", url.Values{"startedAfter": {"yesterday"}}, nil, nil, 0, true},
		{"empty key", url.Values{"metadata": {"=x"}}, nil, nil, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lq, err := parseList(tc.query)
			if tc.bad {
				if err == nil {
					t.Fatalf("parseList(%v) = %+v; want an error", tc.query, lq)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(lq.filter.Metadata, tc.wantMeta) || !reflect.DeepEqual(lq.filter.States, tc.wantState) || lq.limit != tc.wantLimit {
				t.Errorf("parseList = %+v; want metadata %v, states %v, limit %d", lq, tc.wantMeta, tc.wantState, tc.wantLimit)
			}
		})
	}
}

// TestPage walks a list page by page, newest first and oldest first, and
// through a token whose sandbox ended between pages.
func TestPage(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var sbs []api.Sandbox
	for i := 5; i >= 1; i-- { // newest first, as Control.List answers
		sbs = append(sbs, api.Sandbox{SandboxID: string(rune('a' + i - 1)), CreatedAt: base.Add(time.Duration(i) * time.Minute), Template: "interpreter"})
	}
	walk := func(sbs []api.Sandbox, lq listQuery) []string {
		var ids []string
		for range 10 {
			p, next, err := page(sbs, lq)
			if err != nil {
				t.Fatal(err)
			}
			for _, sb := range p {
				ids = append(ids, sb.SandboxID)
			}
			if next == "" {
				return ids
			}
			lq.next = next
		}
		t.Fatal("pagination never ended")
		return nil
	}
	if got := walk(sbs, listQuery{limit: 2}); !reflect.DeepEqual(got, []string{"e", "d", "c", "b", "a"}) {
		t.Errorf("desc pages = %v", got)
	}
	if got := walk(sbs, listQuery{limit: 2, asc: true}); !reflect.DeepEqual(got, []string{"a", "b", "c", "d", "e"}) {
		t.Errorf("asc pages = %v", got)
	}
	first, next, _ := page(sbs, listQuery{limit: 2})
	if len(first) != 2 || next == "" {
		t.Fatalf("first page = %v, next %q", first, next)
	}
	// d, the last of the first page, ends before the next page is asked.
	rest := append(append([]api.Sandbox{}, sbs[:1]...), sbs[2:]...)
	p, _, err := page(rest, listQuery{limit: 10, next: next})
	if err != nil || len(p) != 3 || p[0].SandboxID != "c" {
		t.Errorf("page after an ended sandbox = %v, %v; want c, b, a", p, err)
	}
	if _, _, err := page(sbs, listQuery{limit: 2, next: "garbage"}); err == nil {
		t.Error("a made-up nextToken was accepted")
	}
	after := base.Add(4 * time.Minute)
	if got := walk(sbs, listQuery{limit: 10, startedAfter: &after}); !reflect.DeepEqual(got, []string{"e", "d"}) {
		t.Errorf("startedAfter = %v; want e, d", got)
	}
	if got := walk(sbs, listQuery{limit: 10, template: "code-interpreter-v1"}); len(got) != 5 {
		t.Errorf("template filter by E2B's name = %v; want all", got)
	}
}

// TestTransformRules: E2B's transform rules as Lizard's inject rules, and
// what is refused — naming the field — before anything reaches the node:
// E2B's own bounds, header smuggling, addresses, framing headers, and
// placeholders Lizard cannot say.
func TestTransformRules(t *testing.T) {
	rule := func(h map[string]string) []networkRule {
		return []networkRule{{Transform: &transform{Headers: h}}}
	}
	many := func(n int, f func(i int) (string, string)) map[string]string {
		m := map[string]string{}
		for i := range n {
			k, v := f(i)
			m[k] = v
		}
		return m
	}
	domains := func(n int) map[string][]networkRule {
		m := map[string][]networkRule{}
		for i := range n {
			m[fmt.Sprintf("d%d.test", i)] = rule(map[string]string{"X": "1"})
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		rules  map[string][]networkRule
		want   []api.HeaderRule
		status int    // 0: mapped
		field  string // what the message starts with
	}{
		{"secrets and text, sorted by domain", map[string][]networkRule{
			"b.test":      rule(map[string]string{"x-key": "k=${e2b.secrets.B_KEY};v=${e2b.secrets.B2}"}),
			"*.A.test":    rule(map[string]string{"Authorization": "Bearer ${e2b.secrets.TOKEN}"}),
			"other.test.": rule(map[string]string{"X-Not": "${e2b.other} and ${HOME} and $${e2b.secrets.S}"}),
		}, []api.HeaderRule{
			{Domain: "*.a.test", Headers: map[string]string{"Authorization": "Bearer {{ secrets.TOKEN }}"}},
			{Domain: "b.test", Headers: map[string]string{"X-Key": "k={{ secrets.B_KEY }};v={{ secrets.B2 }}"}},
			{Domain: "other.test", Headers: map[string]string{"X-Not": "${e2b.other} and ${HOME} and ${{ secrets.S }}"}},
		}, 0, ""},
		{"at E2B's bounds", map[string][]networkRule{
			strings.Repeat("a", 59) + "." + strings.Repeat("b", 63) + ".test": rule(many(20, func(i int) (string, string) {
				return fmt.Sprintf("X-%s%02d", strings.Repeat("h", 59), i), strings.Repeat("v", 2048)
			})),
		}, nil, -1, ""},
		{"11 domains", domains(11), nil, http.StatusBadRequest, "network.rules: 11 domains, at most 10"},
		{"a domain of 129 characters", map[string][]networkRule{strings.Repeat("a", 60) + "." + strings.Repeat("b", 63) + ".test": rule(map[string]string{"X": "1"})},
			nil, http.StatusBadRequest, "network.rules[\"aaaa"},
		{"two rules for a domain", map[string][]networkRule{"a.test": append(rule(map[string]string{"X": "1"}), rule(map[string]string{"Y": "2"})...)},
			nil, http.StatusBadRequest, `network.rules["a.test"]: 2 rules, at most 1`},
		{"21 headers", map[string][]networkRule{"a.test": rule(many(21, func(i int) (string, string) { return fmt.Sprintf("X-%d", i), "v" }))},
			nil, http.StatusBadRequest, `network.rules["a.test"][0].transform.headers: 21 headers, at most 20`},
		{"a value of 2049 bytes", map[string][]networkRule{"a.test": rule(map[string]string{"X": strings.Repeat("v", 2049)})},
			nil, http.StatusBadRequest, `network.rules["a.test"][0].transform.headers["X"]: the value is 2049 bytes, at most 2048`},
		{"a header name of 65 characters", map[string][]networkRule{"a.test": rule(map[string]string{strings.Repeat("h", 65): "v"})},
			nil, http.StatusBadRequest, `network.rules["a.test"][0].transform.headers["hhh`},
		{"33 secrets for a domain", map[string][]networkRule{"a.test": rule(many(17, func(i int) (string, string) {
			return fmt.Sprintf("X-%d", i), fmt.Sprintf("${e2b.secrets.S%da}${e2b.secrets.S%db}", i, i)
		}))}, nil, http.StatusBadRequest, `network.rules["a.test"]: 34 secrets, at most 32`},
		{"CR LF in a value: a header smuggled in", map[string][]networkRule{"a.test": rule(map[string]string{"X": "v\r\nX-Evil: 1"})},
			nil, http.StatusBadRequest, `network.rules["a.test"][0].transform.headers["X"]: the value holds a character`},
		{"LF alone", map[string][]networkRule{"a.test": rule(map[string]string{"X": "v\nGET / HTTP/1.1"})},
			nil, http.StatusBadRequest, `network.rules["a.test"][0].transform.headers["X"]: the value holds a character`},
		{"NUL", map[string][]networkRule{"a.test": rule(map[string]string{"X": "v\x00"})},
			nil, http.StatusBadRequest, `network.rules["a.test"][0].transform.headers["X"]: the value holds a character`},
		{"CR LF in a name", map[string][]networkRule{"a.test": rule(map[string]string{"X\r\nEvil": "1"})},
			nil, http.StatusBadRequest, `network.rules["a.test"][0].transform.headers["X\r\nEvil"]: a header name`},
		{"CR LF in a secret's name", map[string][]networkRule{"a.test": rule(map[string]string{"X": "${e2b.secrets.A\r\nB}"})},
			nil, http.StatusBadRequest, `network.rules["a.test"][0].transform.headers["X"]: the value holds a character`},
		{"Host", map[string][]networkRule{"a.test": rule(map[string]string{"host": "evil.test"})},
			nil, http.StatusBadRequest, `network.rules["a.test"][0].transform.headers["host"]: host frames the request`},
		{"Transfer-Encoding", map[string][]networkRule{"a.test": rule(map[string]string{"Transfer-Encoding": "chunked"})},
			nil, http.StatusBadRequest, `network.rules["a.test"][0].transform.headers["Transfer-Encoding"]: Transfer-Encoding frames`},
		{"Content-Length", map[string][]networkRule{"a.test": rule(map[string]string{"Content-Length": "0"})},
			nil, http.StatusBadRequest, `network.rules["a.test"][0].transform.headers["Content-Length"]: Content-Length frames`},
		{"an address", map[string][]networkRule{"203.0.113.5": rule(map[string]string{"X": "1"})},
			nil, http.StatusBadRequest, `network.rules["203.0.113.5"]: rules are by domain name`},
		{"a prefix", map[string][]networkRule{"0.0.0.0/0": rule(map[string]string{"X": "1"})},
			nil, http.StatusBadRequest, `network.rules["0.0.0.0/0"]: rules are by domain name`},
		{"a port", map[string][]networkRule{"a.test:8080": rule(map[string]string{"X": "1"})},
			nil, http.StatusBadRequest, `network.rules["a.test:8080"]`},
		{"an empty domain", map[string][]networkRule{"": rule(map[string]string{"X": "1"})},
			nil, http.StatusBadRequest, `network.rules[""]`},
		{"Lizard's template marks", map[string][]networkRule{"a.test": rule(map[string]string{"X": "{{ secrets.OTHER }}"})},
			nil, http.StatusBadRequest, `network.rules["a.test"][0].transform.headers["X"]: the value holds {{ or }}`},
		{"a secret name Lizard cannot hold", map[string][]networkRule{"a.test": rule(map[string]string{"X": "${e2b.secrets.openai-key}"})},
			nil, http.StatusBadRequest, `network.rules["a.test"][0].transform.headers["X"]: secret "openai-key"`},
		{"an unclosed placeholder", map[string][]networkRule{"a.test": rule(map[string]string{"X": "${e2b.secrets.A"})},
			nil, http.StatusBadRequest, `network.rules["a.test"][0].transform.headers["X"]: a ${e2b.secrets. placeholder`},
		{"an identity token", map[string][]networkRule{"a.test": rule(map[string]string{"X": "Bearer ${e2b.identity.tokens.aws}"})},
			nil, http.StatusNotImplemented, `network.rules["a.test"][0].transform.headers["X"]: workload identity`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := egressRules{Rules: tc.rules}.inject()
			var he *httpError
			switch {
			case tc.status == -1 && err != nil:
				t.Fatalf("inject at the bounds: %v", err)
			case tc.status == 0 && err != nil:
				t.Fatalf("inject: %v", err)
			case tc.status == 0 && !reflect.DeepEqual(got, tc.want):
				t.Errorf("inject = %+v; want %+v", got, tc.want)
			case tc.status > 0 && (!errors.As(err, &he) || he.status != tc.status || !strings.HasPrefix(he.msg, tc.field)):
				t.Errorf("inject: %v; want a %d starting %q", err, tc.status, tc.field)
			}
		})
	}
	// What the mapping makes is a policy Lizard takes, at E2B's bounds too.
	at := map[string][]networkRule{}
	for i := range 10 {
		at[fmt.Sprintf("d%d.test", i)] = rule(many(20, func(j int) (string, string) {
			return fmt.Sprintf("X-%d", j), fmt.Sprintf("${e2b.secrets.S%d}", j) + strings.Repeat("v", 2000)
		}))
	}
	inject, err := egressRules{Rules: at}.inject()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := netpolicy.FromAPI(api.NetworkPolicy{Default: "allow", Inject: inject}, "network"); err != nil {
		t.Errorf("Lizard's policy refuses the mapped rules: %v", err)
	}
}

// TestNetworkOf: get_info's network is the sandbox's policy in E2B's
// words, and what E2B's create sent comes back from it.
func TestNetworkOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		sb   api.Sandbox
		want *networkInfo
	}{
		{"no policy", api.Sandbox{}, &networkInfo{}},
		{"public ports", api.Sandbox{PublicPorts: true}, &networkInfo{AllowPublicTraffic: true}},
		{"a masked host", api.Sandbox{PortsHost: "app.local:${PORT}"}, &networkInfo{MaskRequestHost: "app.local:${PORT}"}},
		{"a deny default is ALL_TRAFFIC denied", api.Sandbox{Network: &api.NetworkPolicy{Default: "deny", Allow: []string{"a.test", "1.2.3.4/32"}}},
			&networkInfo{AllowOut: []string{"a.test", "1.2.3.4/32"}, DenyOut: []string{"0.0.0.0/0"}}},
		{"an allow default with denies", api.Sandbox{Network: &api.NetworkPolicy{Default: "allow", Deny: []string{"10.0.0.0/8"}}},
			&networkInfo{DenyOut: []string{"10.0.0.0/8"}}},
		{"inject rules are transform rules", api.Sandbox{Network: &api.NetworkPolicy{Default: "allow",
			Inject: []api.HeaderRule{{Domain: "a.test", Headers: map[string]string{"Authorization": "Bearer {{ secrets.T }}", "X": "{{secrets.A}}-{{ secrets.B }}", "Y": "v"}}}}},
			&networkInfo{Rules: map[string][]networkRule{"a.test": {{Transform: &transform{Headers: map[string]string{
				"Authorization": "Bearer ${e2b.secrets.T}", "X": "${e2b.secrets.A}-${e2b.secrets.B}", "Y": "v"}}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := networkOf(tc.sb); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("networkOf = %+v; want %+v", got, tc.want)
			}
		})
	}
	var n newSandbox
	body := `{"network":{"allowOut":["api.test"],"denyOut":["0.0.0.0/0"],"rules":{"api.test":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.TOKEN}"}}}]}}}`
	if err := json.Unmarshal([]byte(body), &n); err != nil {
		t.Fatal(err)
	}
	req, err := createRequest(n)
	if err != nil {
		t.Fatal(err)
	}
	got := networkOf(api.Sandbox{Network: req.Network})
	if !reflect.DeepEqual(got.Rules, n.Network.Rules) || !reflect.DeepEqual(got.AllowOut, n.Network.AllowOut) || !reflect.DeepEqual(got.DenyOut, n.Network.DenyOut) {
		t.Errorf("E2B's network %s came back as %+v", body, got)
	}
}
