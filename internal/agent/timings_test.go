package agent

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
)

// TestExecuteTimings: a runCode whose traceparent is sampled gets the
// agent's timings in its trailer, the call's own step first; one without
// (or not sampled) gets none.
func TestExecuteTimings(t *testing.T) {
	ta := newTestAgent(t, nil)
	tests := []struct {
		name, language, traceparent string
		want                        []string // span names; nil: no trailer
	}{
		{"python sampled", "python", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", []string{"agent.execute", "agent.kernel_wait", "kernel.execute"}},
		{"bash sampled", "bash", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", []string{"agent.execute", "process.execute"}},
		{"not sampled", "bash", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", nil},
		{"no traceparent", "bash", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code := "echo hi"
			if tt.language == "python" {
				code = "1 + 1"
			}
			b, _ := json.Marshal(api.ExecuteRequest{Language: tt.language, Code: code})
			req, _ := http.NewRequest("POST", ta.url+"/execute", strings.NewReader(string(b)))
			req.Header.Set("Content-Type", "application/json")
			if tt.traceparent != "" {
				req.Header.Set("traceparent", tt.traceparent)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.ReadAll(resp.Body)
			resp.Body.Close()
			v := resp.Trailer.Get(api.HeaderAgentSpans)
			if tt.want == nil {
				if v != "" {
					t.Errorf("trailer %q on an untraced call; want none", v)
				}
				return
			}
			var spans []api.AgentSpan
			if err := json.Unmarshal([]byte(v), &spans); err != nil {
				t.Fatalf("trailer %q: %v", v, err)
			}
			var names []string
			for _, s := range spans {
				names = append(names, s.Name)
			}
			if strings.Join(names, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("spans %v; want %v", names, tt.want)
			}
			whole := spans[0]
			for _, s := range spans[1:] {
				if s.StartUs < whole.StartUs || s.StartUs+s.DurUs > whole.StartUs+whole.DurUs {
					t.Errorf("step %+v lies outside the call's %+v", s, whole)
				}
			}
		})
	}
}
