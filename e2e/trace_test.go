package e2e

// OpenTelemetry traces (docs/traces.md) across `lizard api`, `lizard
// node` and the agent, exported over OTLP/HTTP to a receiver the test runs
// on loopback.

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/trace/otlptest"
)

func TestTraces(t *testing.T) {
	rcv := otlptest.New(t)
	c, cl := startClusterOf(t, 1, 1, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.URL, "OTEL_BSP_SCHEDULE_DELAY=100"})
	ctx := context.Background()
	sb, err := cl[0].CreateSandbox(ctx, api.CreateSandboxRequest{TimeoutMs: ms(120_000)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl[0].KillSandbox(ctx, sb.SandboxID)

	// The create's trace: the API's span, placement, and the node's
	// provisioning steps, all naming the sandbox.
	steps := []string{"control.create", "cluster.place", "POST /internal/v1/sandboxes", "node.provision", "node.start", "runtime.network", "node.agent_wait"}
	create := rcv.Wait(t, 20*time.Second, func(s []otlptest.Span) bool {
		for _, name := range steps {
			if find(s, "", name) == nil {
				return false
			}
		}
		return find(s, "lizard-api", "POST /v1/sandboxes") != nil
	})
	apiCreate := find(create, "lizard-api", "POST /v1/sandboxes")
	if apiCreate.Attrs["lizard.sandbox.id"] != sb.SandboxID || apiCreate.Attrs["lizard.project"] != "p1" {
		t.Errorf("create's API span attributes %v; want the sandbox %s and project p1", apiCreate.Attrs, sb.SandboxID)
	}
	for _, name := range steps {
		s := find(create, "", name)
		if s == nil {
			t.Errorf("the create's trace has no %s span", name)
			continue
		}
		if s.TraceID != apiCreate.TraceID {
			t.Errorf("%s is in trace %s, not the create's %s", name, s.TraceID, apiCreate.TraceID)
		}
	}
	if p := find(create, "lizard-node", "node.provision"); p != nil && p.Attrs["lizard.sandbox.id"] != sb.SandboxID {
		t.Errorf("node.provision attributes %v; want the sandbox %s", p.Attrs, sb.SandboxID)
	}

	// One runCode whose caller sends its traceparent: one trace, the
	// caller's, through the API, the node and the agent to the kernel.
	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	execute(t, c.apis[0].url, c.key, sb.SandboxID, "00-"+traceID+"-"+callerSpan+"-01")
	spans := rcv.Wait(t, 20*time.Second, func(s []otlptest.Span) bool {
		k, a := findIn(s, traceID, "kernel.execute"), find(s, "lizard-api", "POST /v1/sandboxes/{id}/execute")
		return k != nil && a != nil && a.TraceID == traceID
	})
	chain := []struct{ service, name string }{
		{"lizard-api", "POST /v1/sandboxes/{id}/execute"},
		{"lizard-node", "POST /v1/sandboxes/{id}/execute"},
		{"lizard-node", "agent POST /execute"},
		{"lizard-node", "agent.execute"},
	}
	parent := callerSpan
	for _, want := range chain {
		var s *otlptest.Span
		for i := range spans {
			if spans[i].TraceID == traceID && spans[i].Service == want.service && spans[i].Name == want.name {
				s = &spans[i]
			}
		}
		if s == nil {
			t.Fatalf("trace %s has no %s span %q; it has %v", traceID, want.service, want.name, namesOf(spans, traceID))
		}
		if s.ParentID != parent {
			t.Errorf("%s %q: parent %s; want %s", want.service, want.name, s.ParentID, parent)
		}
		if s.Attrs["lizard.sandbox.id"] != sb.SandboxID {
			t.Errorf("%s %q: attributes %v; want lizard.sandbox.id %s", want.service, want.name, s.Attrs, sb.SandboxID)
		}
		parent = s.SpanID
	}
	for _, name := range []string{"agent.kernel_wait", "kernel.execute"} {
		if s := findIn(spans, traceID, name); s == nil || s.ParentID != parent {
			t.Errorf("%s: %+v; want a child of agent.execute %s", name, s, parent)
		}
	}
	if s := find(spans, "lizard-api", "POST /v1/sandboxes/{id}/execute"); s.Attrs["lizard.project"] != "p1" {
		t.Errorf("API span attributes %v; want lizard.project p1", s.Attrs)
	}

	// Without a traceparent the API's span is the root of the call's trace.
	before := len(rcv.Spans())
	execute(t, c.apis[0].url, c.key, sb.SandboxID, "")
	spans = rcv.Wait(t, 20*time.Second, func(s []otlptest.Span) bool {
		return find(s[before:], "lizard-node", "kernel.execute") != nil && find(s[before:], "lizard-api", "POST /v1/sandboxes/{id}/execute") != nil
	})[before:]
	root := find(spans, "lizard-api", "POST /v1/sandboxes/{id}/execute")
	if root.ParentID != "" {
		t.Errorf("the API span of an untraced call has parent %s; want none", root.ParentID)
	}
	if k := find(spans, "lizard-node", "kernel.execute"); k.TraceID != root.TraceID {
		t.Errorf("kernel.execute is in trace %s, not the call's %s", k.TraceID, root.TraceID)
	}
}

// execute runs 1 + 1 in sandbox id through the API at url, with
// traceparent if set, and reads the stream to its end.
func execute(t *testing.T, url, key, id, traceparent string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/sandboxes/"+id+"/execute", strings.NewReader(`{"code":"1 + 1"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("execute: status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	var last string
	for sc.Scan() {
		last = sc.Text()
	}
	if !strings.Contains(last, `"end"`) {
		t.Fatalf("execute stream ended with %q, not its end event", last)
	}
	if v := resp.Trailer.Get(api.HeaderAgentSpans); v != "" {
		t.Errorf("the agent's timings reached the client: %q", v)
	}
}

// find returns the last span of service ("" for any) named name.
func find(spans []otlptest.Span, service, name string) *otlptest.Span {
	for i := len(spans) - 1; i >= 0; i-- {
		if spans[i].Name == name && (service == "" || spans[i].Service == service) {
			return &spans[i]
		}
	}
	return nil
}

func findIn(spans []otlptest.Span, traceID, name string) *otlptest.Span {
	for i := range spans {
		if spans[i].TraceID == traceID && spans[i].Name == name {
			return &spans[i]
		}
	}
	return nil
}

func namesOf(spans []otlptest.Span, traceID string) []string {
	var n []string
	for _, s := range spans {
		if s.TraceID == traceID {
			n = append(n, s.Service+":"+s.Name+"("+s.SpanID+"<"+s.ParentID+")")
		}
	}
	return n
}
