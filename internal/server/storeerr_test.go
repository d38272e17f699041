package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/store"
)

// A database that cannot be reached is a 503 that says to try again, not
// a 500: the Store reconnects by itself when it is back.
func TestStoreUnavailableIs503(t *testing.T) {
	err := fmt.Errorf("listing sandboxes: %w", fmt.Errorf("%w: %w", store.ErrUnavailable, io.ErrUnexpectedEOF))
	status, code, msg := classify(err)
	if status != http.StatusServiceUnavailable || code != api.CodeUnavailable || !strings.Contains(msg, "database is unreachable") {
		t.Fatalf("classify = %d %s %q; want 503 unavailable saying the database is unreachable", status, code, msg)
	}
}
