// Package trace is Lizard's OpenTelemetry tracing (docs/traces.md):
// its set-up from the standard OTEL_* environment variables, off unless an
// OTLP endpoint is named; the span helpers the API, the control plane and
// the node call; the HTTP middleware that names a server span by its route
// template; and the W3C traceparent propagation between `lizard api`, the
// node and the agent.
//
// Spans are exported over OTLP/HTTP (protobuf) through a bounded queue
// (queue.go): a collector that is slow or down costs a call nothing, and
// what cannot be exported is dropped and counted in
// lizard_trace_spans_dropped_total.
//
// When tracing is off the global tracer is OpenTelemetry's no-op one, so
// every helper here is a few loads and a branch; the propagator is still
// installed, so a caller's traceparent passes through an untraced process
// to the next one unchanged.
package trace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/lizard-build/lizard/internal/metrics"
)

// Span is an OpenTelemetry span, so that callers need not import otel.
type Span = oteltrace.Span

// Attribute keys Lizard sets on its spans.
const (
	KeySandbox  = "lizard.sandbox.id"
	KeyProject  = "lizard.project"
	KeyTemplate = "lizard.template"
	KeyRuntime  = "lizard.runtime"
	// KeyOutcome is how a run (a runCode, a command) ended, as the
	// metrics' outcome label says it (agentproxy.Outcome).
	KeyOutcome = "lizard.outcome"
)

// Sandbox, Project, Template and Runtime are the attributes Lizard's
// spans carry.
func Sandbox(id string) attribute.KeyValue  { return attribute.String(KeySandbox, id) }
func Project(id string) attribute.KeyValue  { return attribute.String(KeyProject, id) }
func Template(id string) attribute.KeyValue { return attribute.String(KeyTemplate, id) }
func Runtime(name string) attribute.KeyValue {
	return attribute.String(KeyRuntime, name)
}

// String is any other string attribute.
func String(key, value string) attribute.KeyValue { return attribute.String(key, value) }

// tracerName names Lizard's instrumentation scope.
const tracerName = "github.com/lizard-build/lizard"

// Start starts a span named name as a child of ctx's.
func Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, Span) {
	return otel.Tracer(tracerName).Start(ctx, name, oteltrace.WithAttributes(attrs...))
}

// End ends sp, marking it failed with err if err is not nil.
func End(sp Span, err error) {
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// Step runs f as a span named name, a child of ctx's, failed if f fails.
func Step(ctx context.Context, name string, f func(context.Context) error, attrs ...attribute.KeyValue) error {
	ctx, sp := Start(ctx, name, attrs...)
	err := f(ctx)
	End(sp, err)
	return err
}

// Annotate sets attrs on ctx's span, if it records: what a step learns
// after its span began (the sandbox a create made, the caller's project).
func Annotate(ctx context.Context, attrs ...attribute.KeyValue) {
	oteltrace.SpanFromContext(ctx).SetAttributes(attrs...)
}

// Config is tracing's configuration, read from the standard OTEL_*
// environment variables (LoadConfig). The exporter's own variables (the
// endpoint, OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION, TLS) and
// the sampler's (OTEL_TRACES_SAMPLER, _ARG) and the resource's
// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) are read by the
// OpenTelemetry SDK itself.
type Config struct {
	// Enabled: an OTLP endpoint is named, the SDK is not disabled and the
	// traces exporter is not "none".
	Enabled bool
	// The export queue (OTEL_BSP_*): its bound, the largest batch sent at
	// once, how long a span may wait for a batch to fill, and how long one
	// export may take before its spans are dropped.
	QueueSize     int
	BatchSize     int
	Delay         time.Duration
	ExportTimeout time.Duration
}

// LoadConfig reads Config from getenv. Tracing is off unless
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT is set;
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off
// regardless. Only OTLP over HTTP with protobuf is exported: another
// OTEL_EXPORTER_OTLP_PROTOCOL or exporter is an error, not silence.
func LoadConfig(getenv func(string) string) (Config, error) {
	c := Config{QueueSize: 2048, BatchSize: 512, Delay: 5 * time.Second, ExportTimeout: 30 * time.Second}
	if v := getenv("OTEL_SDK_DISABLED"); v != "" {
		disabled, err := strconv.ParseBool(v)
		if err != nil {
			return c, fmt.Errorf("OTEL_SDK_DISABLED %q: want true or false", v)
		}
		if disabled {
			return c, nil
		}
	}
	switch v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v {
	case "", "otlp":
	case "none":
		return c, nil
	default:
		return c, fmt.Errorf("OTEL_TRACES_EXPORTER %q: Lizard exports traces with otlp (or none)", v)
	}
	if getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		return c, nil
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := getenv(k); v != "" {
			if v != "http/protobuf" {
				return c, fmt.Errorf("%s %q: Lizard exports OTLP over http/protobuf only", k, v)
			}
			break // the traces-specific one wins
		}
	}
	ints := []struct {
		key string
		dst *int
	}{{"OTEL_BSP_MAX_QUEUE_SIZE", &c.QueueSize}, {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", &c.BatchSize}}
	for _, e := range ints {
		if v := getenv(e.key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return c, fmt.Errorf("%s %q: want a positive integer", e.key, v)
			}
			*e.dst = n
		}
	}
	millis := []struct {
		key string
		dst *time.Duration
	}{{"OTEL_BSP_SCHEDULE_DELAY", &c.Delay}, {"OTEL_BSP_EXPORT_TIMEOUT", &c.ExportTimeout}}
	for _, e := range millis {
		if v := getenv(e.key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return c, fmt.Errorf("%s %q: want a positive number of milliseconds", e.key, v)
			}
			*e.dst = time.Duration(n) * time.Millisecond
		}
	}
	if c.BatchSize > c.QueueSize {
		c.BatchSize = c.QueueSize
	}
	c.Enabled = true
	return c, nil
}

// Setup installs the W3C trace-context propagator and, when c is
// enabled, a tracer provider exporting over OTLP/HTTP whose resource names
// service (unless OTEL_SERVICE_NAME does). Dropped spans are counted in m.
// The returned function flushes what is queued and stops the exporter,
// within its context's deadline.
func Setup(ctx context.Context, c Config, service string, m *metrics.Metrics, log *slog.Logger) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	if !c.Enabled {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("starting the OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // last: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("reading the trace resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	q := newQueue(exp, c, m, log)
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(q))
	otel.SetTracerProvider(tp)
	log.Info("exporting traces over OTLP", "queue", c.QueueSize, "batch", c.BatchSize, "delay", c.Delay)
	return tp.Shutdown, nil
}
