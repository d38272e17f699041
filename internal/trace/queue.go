package trace

import (
	"context"
	"log/slog"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lizard-build/lizard/internal/metrics"
)

// queue is the span processor between the tracer and the exporter: ended
// spans wait in a bounded channel, and one goroutine exports them in
// batches. It stands in for the SDK's batch processor, which drops spans
// when full without telling anyone: a span that finds the queue full here
// is dropped and counted, never waited for, so a collector that is slow
// or down costs a call nothing and shows on /metrics.
type queue struct {
	exp     sdktrace.SpanExporter
	spans   chan sdktrace.ReadOnlySpan
	flushes chan chan struct{}
	stop    chan struct{}
	done    chan struct{}
	cfg     Config
	m       *metrics.Metrics
	log     *slog.Logger

	// lastWarn rate-limits the log of failed exports to one a minute:
	// a collector that is down would otherwise fill the log.
	lastWarn time.Time
	stopOnce sync.Once
}

func newQueue(exp sdktrace.SpanExporter, c Config, m *metrics.Metrics, log *slog.Logger) *queue {
	q := &queue{exp: exp, cfg: c, m: m, log: log,
		spans: make(chan sdktrace.ReadOnlySpan, c.QueueSize), flushes: make(chan chan struct{}),
		stop: make(chan struct{}), done: make(chan struct{})}
	go q.run()
	return q
}

func (q *queue) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (q *queue) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	select {
	case <-q.stop:
		return
	default:
	}
	select {
	case q.spans <- s:
	default:
		q.m.SpansDropped(metrics.DropQueueFull, 1)
	}
}

// run exports batches: one full, or what is queued every Delay, on a
// flush, and at the stop.
func (q *queue) run() {
	defer close(q.done)
	batch := make([]sdktrace.ReadOnlySpan, 0, q.cfg.BatchSize)
	send := func() {
		if len(batch) > 0 {
			q.export(batch)
			batch = batch[:0]
		}
	}
	drain := func() {
		for {
			select {
			case s := <-q.spans:
				if batch = append(batch, s); len(batch) == q.cfg.BatchSize {
					send()
				}
			default:
				send()
				return
			}
		}
	}
	tick := time.NewTicker(q.cfg.Delay)
	defer tick.Stop()
	for {
		select {
		case s := <-q.spans:
			if batch = append(batch, s); len(batch) == q.cfg.BatchSize {
				send()
			}
		case <-tick.C:
			send()
		case ack := <-q.flushes:
			drain()
			close(ack)
		case <-q.stop:
			drain()
			return
		}
	}
}

func (q *queue) export(batch []sdktrace.ReadOnlySpan) {
	ctx, cancel := context.WithTimeout(context.Background(), q.cfg.ExportTimeout)
	defer cancel()
	err := q.exp.ExportSpans(ctx, batch)
	if err == nil {
		return
	}
	q.m.SpansDropped(metrics.DropExportFailed, len(batch))
	if now := time.Now(); now.Sub(q.lastWarn) >= time.Minute {
		q.lastWarn = now
		q.log.Warn("exporting trace spans failed; they are dropped (lizard_trace_spans_dropped_total counts them)", "spans", len(batch), "err", err)
	}
}

// ForceFlush exports what is queued, waiting until it is or ctx ends.
func (q *queue) ForceFlush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case q.flushes <- ack:
	case <-q.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown exports what is queued and stops the exporter, within ctx.
func (q *queue) Shutdown(ctx context.Context) error {
	q.stopOnce.Do(func() { close(q.stop) })
	select {
	case <-q.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return q.exp.Shutdown(ctx)
}
