package trace

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/metrics"
)

// Middleware traces every request next serves as a server span, the child
// of the caller's traceparent if it sent one. The span is named by the
// route template next matched ("POST /v1/sandboxes/{id}/execute",
// metrics.Route), never by the raw path, which holds sandbox ids; the
// sandbox id is the lizard.sandbox.id attribute. next must be (or wrap,
// passing the request on as it is) an http.ServeMux.
func Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, sp := otel.Tracer(tracerName).Start(ctx, r.Method, oteltrace.WithSpanKind(oteltrace.SpanKindServer))
		r = r.WithContext(ctx)
		if !sp.IsRecording() {
			// Off, or not sampled: the context still carries the caller's
			// trace on to the next process.
			next.ServeHTTP(w, r)
			return
		}
		rw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rw, r)
		route := metrics.Route(r)
		sp.SetName(r.Method + " " + route)
		sp.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", route),
			attribute.Int("http.response.status_code", rw.status))
		if id := r.PathValue("id"); id != "" && strings.Contains(route, "{id}") {
			sp.SetAttributes(Sandbox(id))
		}
		if rw.status >= 500 {
			sp.SetStatus(codes.Error, http.StatusText(rw.status))
		}
		sp.End()
	})
}

// statusWriter remembers the response's status. Flush and Unwrap keep
// streams and WebSockets working through it.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	w.wrote = true
	http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Inject writes ctx's trace context into h (traceparent), for the next
// process of the call: a node, an agent.
func Inject(ctx context.Context, h http.Header) {
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(h))
}

// StartClient starts a span for a call this process makes to another one.
func StartClient(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, Span) {
	return otel.Tracer(tracerName).Start(ctx, name, oteltrace.WithSpanKind(oteltrace.SpanKindClient), oteltrace.WithAttributes(attrs...))
}

// AgentSpans reads the timings the agent reported in resp's trailer
// (api.HeaderAgentSpans) once its body has been read to the end, and
// records them as children of ctx's span, placed by their offsets from
// sent, when the call was sent. The trailer is removed, so that it goes
// no further than this hop.
//
// The agent runs inside the sandbox, whose network reaches no collector:
// it reports what it timed on the call itself, and the node, which
// can export, records it.
func AgentSpans(ctx context.Context, resp *http.Response, sent time.Time, attrs ...attribute.KeyValue) {
	resp.Trailer.Del(api.HeaderAgentSpans)
	resp.Body = &agentSpansBody{ReadCloser: resp.Body, ctx: ctx, resp: resp, sent: sent, attrs: attrs}
}

type agentSpansBody struct {
	io.ReadCloser
	ctx   context.Context
	resp  *http.Response
	sent  time.Time
	attrs []attribute.KeyValue
	done  bool
}

func (b *agentSpansBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		// The transport has read the trailer by the time it says EOF.
		b.done = true
		v := b.resp.Trailer.Get(api.HeaderAgentSpans)
		b.resp.Trailer.Del(api.HeaderAgentSpans)
		if v != "" && oteltrace.SpanFromContext(b.ctx).IsRecording() {
			var spans []api.AgentSpan
			if json.Unmarshal([]byte(v), &spans) == nil {
				recordAgentSpans(b.ctx, spans, b.sent, b.attrs)
			}
		}
	}
	return n, err
}

// recordAgentSpans records spans as children of ctx's span, or of the
// span before them whose time holds theirs: the agent lists a step before
// the steps inside it.
func recordAgentSpans(ctx context.Context, spans []api.AgentSpan, sent time.Time, attrs []attribute.KeyValue) {
	type open struct {
		ctx      context.Context
		from, to time.Time
	}
	var stack []open
	tr := otel.Tracer(tracerName)
	for _, s := range spans {
		from := sent.Add(time.Duration(s.StartUs) * time.Microsecond)
		to := from.Add(time.Duration(s.DurUs) * time.Microsecond)
		parent := ctx
		for len(stack) > 0 {
			top := stack[len(stack)-1]
			if !from.Before(top.from) && !to.After(top.to) {
				parent = top.ctx
				break
			}
			stack = stack[:len(stack)-1]
		}
		sctx, sp := tr.Start(parent, s.Name, oteltrace.WithTimestamp(from), oteltrace.WithAttributes(attrs...))
		if s.Error != "" {
			sp.SetStatus(codes.Error, s.Error)
		}
		sp.End(oteltrace.WithTimestamp(to))
		stack = append(stack, open{sctx, from, to})
	}
}
