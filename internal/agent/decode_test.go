package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
)

// TestDecodeAsSpecified holds the agent's request bodies to the rules of
// api/openapi.yaml: unknown fields and nulls are 400s naming the field,
// and the body of POST /contexts is optional.
func TestDecodeAsSpecified(t *testing.T) {
	ta := newTestAgent(t, nil)
	tests := []struct {
		name, method, path, body string
		want                     string
	}{
		{"unknown field in execute", "POST", "/execute", `{"code": "1", "langauge": "python"}`, `unknown field "langauge"`},
		{"null env value in execute", "POST", "/execute", `{"code": "1", "envs": {"A": null}}`, "envs.A: must not be null"},
		{"null code", "POST", "/execute", `{"code": null}`, "code: must not be null"},
		{"no code", "POST", "/execute", `{"language": "python"}`, "code: is required"},
		{"empty body object", "POST", "/execute", `{}`, "code: is required"},
		{"null body", "POST", "/execute", `null`, "body: must not be null"},
		{"array body", "POST", "/process", `[]`, "must be a JSON object"},
		{"null env value in process", "POST", "/process", `{"cmd": "true", "envs": {"A": null}}`, "envs.A: must not be null"},
		{"unknown field in contexts", "POST", "/contexts", `{"language": "bash", "dir": "/"}`, `unknown field "dir"`},
		{"null cwd", "POST", "/contexts", `{"cwd": null}`, "cwd: must not be null"},
		{"two values", "POST", "/contexts", `{} {}`, "more than one JSON value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := ta.do(t, tt.method, tt.path, tt.body)
			var e api.Error
			json.Unmarshal(body, &e)
			if status != 400 || e.Code != api.CodeInvalidArgument || !strings.Contains(e.Message, tt.want) {
				t.Errorf("%s %s %s = %d %s; want 400 containing %q", tt.method, tt.path, tt.body, status, body, tt.want)
			}
		})
	}
	// JSON Schema counts 6.0 as an integer, and so does the agent.
	if status, body := ta.do(t, "POST", "/process", `{"cmd": "true", "timeoutMs": 5000.0}`); status != 200 {
		t.Errorf("POST /process with timeoutMs 5000.0 = %d %s; want 200", status, body)
	}
	if status, body := ta.do(t, "POST", "/contexts", ""); status != 201 {
		t.Errorf("POST /contexts without a body = %d %s; want 201", status, body)
	}
}
