package agent

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/lizard-build/lizard/api"
)

// timings records the steps of one call whose traceparent asks for its
// trace (api.TraceSampled), and reports them in the response's trailer
// (api.HeaderAgentSpans). The agent exports no spans itself: the sandbox's
// network reaches no collector, so its node records them. A nil *timings
// (the call is not traced) records nothing.
type timings struct {
	start time.Time
	spans []api.AgentSpan
}

func newTimings(w http.ResponseWriter, r *http.Request) *timings {
	if !api.TraceSampled(r.Header.Get("traceparent")) {
		return nil
	}
	// Announced, the trailer makes the response chunked even when it is
	// short: net/http would otherwise give it a Content-Length and no
	// trailer.
	w.Header().Set("Trailer", api.HeaderAgentSpans)
	return &timings{start: time.Now()}
}

// step times f as a step named name, listed after the steps already
// begun: a step inside another is listed after it.
func (t *timings) step(name string, f func() error) error {
	if t == nil {
		return f()
	}
	i := len(t.spans)
	begin := time.Now()
	t.spans = append(t.spans, api.AgentSpan{Name: name, StartUs: begin.Sub(t.start).Microseconds()})
	err := f()
	t.spans[i].DurUs = time.Since(begin).Microseconds()
	if err != nil {
		t.spans[i].Error = err.Error()
	}
	return err
}

// report sets the trailer, once the response's body is written: the
// handler's own span (name), then its steps.
func (t *timings) report(w http.ResponseWriter, name string) {
	if t == nil {
		return
	}
	all := append([]api.AgentSpan{{Name: name, DurUs: time.Since(t.start).Microseconds()}}, t.spans...)
	b, err := json.Marshal(all)
	if err != nil {
		return
	}
	w.Header().Set(api.HeaderAgentSpans, string(b))
}
