package daemon

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/cli"
)

// TestTracingRefusesBadEnvironment: an OTEL_* setting Lizard cannot honour
// stops the process at start with a usage error naming the variable, rather
// than running without the traces the operator asked for.
func TestTracingRefusesBadEnvironment(t *testing.T) {
	tests := []struct{ key, value string }{
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
		{"OTEL_TRACES_EXPORTER", "jaeger"},
		{"OTEL_BSP_MAX_QUEUE_SIZE", "-1"},
		{"OTEL_SDK_DISABLED", "sometimes"},
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
			t.Setenv(tt.key, tt.value)
			_, err := tracing(context.Background(), "lizard", nil, logger)
			if err == nil || !strings.Contains(err.Error(), tt.key) || cli.ExitCode(err) != 2 {
				t.Fatalf("tracing with %s=%s: %v (exit %d); want a usage error naming %s", tt.key, tt.value, err, cli.ExitCode(err), tt.key)
			}
		})
	}
	// Off (no endpoint) starts and stops cleanly.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	stop, err := tracing(context.Background(), "lizard", nil, logger)
	if err != nil {
		t.Fatal(err)
	}
	stop()
}
