package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/trace/otlptest"
)

// TestCallTimeoutEverySurface: a runCode that times out gives the same
// call event (call.timeout), the same metric label
// (lizard_executions_total{outcome="timeout"}) and the same span outcome
// (lizard.outcome on the agent call's span) whichever surface ran it —
// Lizard's API, MCP's run_code, E2B's code interpreter — on `lizard serve`
// and in a cluster: every surface reaches the agent through the agent
// proxy, which reads the outcome. Before, E2B's interpreter made its own
// call: no event on `lizard serve`, and on no setup a metric or an
// outcome on the span. E2B's protocol has no run timeout (its SDKs time
// out on the client's side), so its row's code times out by itself, as
// code does that waits on a socket.
func TestCallTimeoutEverySurface(t *testing.T) {
	const sleep = "import time\ntime.sleep(30)"
	const socketWait = "import socket\na, b = socket.socketpair()\na.settimeout(1)\na.recv(1)"
	surfaces := []struct {
		name string
		run  func(t *testing.T, at setup, id, token string)
	}{
		{"native", func(t *testing.T, at setup, id, _ string) {
			c, err := client.New(client.Config{BaseURL: at.url, APIKey: at.key})
			if err != nil {
				t.Fatal(err)
			}
			run, err := c.Execute(context.Background(), id, api.ExecuteRequest{Code: sleep, TimeoutMs: ms(1000)}, nil)
			if err != nil || run.Error == nil || run.Error.Name != api.ErrorNameTimeout {
				t.Fatalf("native runCode: %+v, %v; want a %s", run, err, api.ErrorNameTimeout)
			}
		}},
		{"mcp", func(t *testing.T, at setup, id, _ string) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			hc := &http.Client{Transport: bearer{key: at.key}}
			cs, err := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, nil).
				Connect(ctx, &sdk.StreamableClientTransport{Endpoint: at.url + "/mcp", HTTPClient: hc, DisableStandaloneSSE: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_code",
				Arguments: map[string]any{"code": sleep, "sandbox_id": id, "timeout_seconds": 1}})
			if err != nil || !res.IsError || !strings.Contains(text(res), api.ErrorNameTimeout) {
				t.Fatalf("MCP run_code: %+v, %v; want an error result naming %s", res, err, api.ErrorNameTimeout)
			}
		}},
		{"e2b interpreter", func(t *testing.T, at setup, id, token string) {
			body, _ := json.Marshal(map[string]string{"code": socketWait})
			resp, out := send(t, http.MethodPost, at.url+"/e2b/sandbox/execute", string(body), "Content-Type", "application/json",
				"E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "49999", "X-Access-Token", token)
			if resp.StatusCode != http.StatusOK || !strings.Contains(out, `"name":"`+api.ErrorNameTimeout+`"`) || !strings.Contains(out, "end_of_execution") {
				t.Fatalf("E2B run_code: %d %s; want a %s and the end", resp.StatusCode, out, api.ErrorNameTimeout)
			}
		}},
	}
	for _, where := range []string{"serve", "cluster"} {
		t.Run(where, func(t *testing.T) {
			rcv := otlptest.New(t)
			otel := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.URL, "OTEL_BSP_SCHEDULE_DELAY=100"}
			metricsAddr := freeAddr(t)
			var at setup
			if where == "serve" {
				s := startServerEnv(t, otel, "--metrics-listen", metricsAddr)
				c := s.createProject("proj_outcome")
				at = setup{url: s.url, key: s.keys[c]}
			} else {
				c, _ := startClusterWith(t, 1, 1, otel, nil, []string{"--metrics-listen", metricsAddr})
				// The API process reads the runs that pass it: its
				// metrics count them, the node's events and agent span
				// tell them.
				at = setup{url: c.apis[0].url, key: c.key}
			}
			murl := "http://" + metricsAddr + "/metrics"
			events, err := client.New(client.Config{BaseURL: at.url, APIKey: at.key})
			if err != nil {
				t.Fatal(err)
			}
			for _, surface := range surfaces {
				t.Run(surface.name, func(t *testing.T) {
					id, token := e2bSandbox(t, at)
					before := scrape(t, murl)
					surface.run(t, at, id, token)

					// The event: one call.timeout, naming the run's error.
					var list *api.EventList
					deadline := time.Now().Add(10 * time.Second)
					for {
						list, err = events.Events().List(context.Background(), client.EventOptions{SandboxID: id, Types: []string{api.LifecycleCallTimeout}})
						if err != nil || len(list.Events) > 0 || time.Now().After(deadline) {
							break
						}
						time.Sleep(100 * time.Millisecond)
					}
					if err != nil || len(list.Events) != 1 {
						t.Errorf("%s events of the sandbox: %+v, %v; want one", api.LifecycleCallTimeout, list, err)
					}
					// The metric: one runCode more, labelled timeout.
					const key = `lizard_executions_total{language="python",outcome="timeout"}`
					if got := scrape(t, murl)[key] - before[key]; got != 1 {
						t.Errorf("%s moved by %v; want 1", key, got)
					}
					// The span: the agent call's, with its outcome.
					rcv.Wait(t, 20*time.Second, func(spans []otlptest.Span) bool {
						for _, s := range spans {
							if s.Name == "agent POST /execute" && s.Attrs["lizard.sandbox.id"] == id && s.Attrs["lizard.outcome"] == "timeout" {
								return true
							}
						}
						return false
					})
				})
			}
		})
	}
}

// setup is where a surface is called: an API process and a key.
type setup struct{ url, key string }

// e2bSandbox creates a sandbox through E2B's API (which gives it the
// access token E2B's sandbox URL takes), killed when t ends.
func e2bSandbox(t *testing.T, at setup) (id, token string) {
	t.Helper()
	resp, body := send(t, http.MethodPost, at.url+"/e2b/sandboxes", `{"templateID":"code-interpreter-v1","timeout":300}`,
		"Content-Type", "application/json", "X-API-Key", at.key)
	var sb struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if resp.StatusCode/100 != 2 || json.Unmarshal([]byte(body), &sb) != nil || sb.SandboxID == "" {
		t.Fatalf("E2B create: %d %s", resp.StatusCode, body)
	}
	t.Cleanup(func() {
		if c, err := client.New(client.Config{BaseURL: at.url, APIKey: at.key}); err == nil {
			c.KillSandbox(context.Background(), sb.SandboxID)
		}
	})
	return sb.SandboxID, sb.EnvdAccessToken
}

// bearer sets the API key on every request (an MCP client's).
type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// text is a tool result's text content.
func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*sdk.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}
