package e2b

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
)

var (
	errNoKey   = fmt.Errorf("no X-API-Key header: %w", auth.ErrUnauthenticated)
	errNoToken = fmt.Errorf("no X-Access-Token header: %w", auth.ErrUnauthenticated)
)

const msgBadKey = "missing or invalid API key: send X-API-Key with a Lizard project key (E2B_API_KEY), made by `lizard admin create-project` (or the same key as e2b_<id><secret>, for E2B's SDKs 2.25 to 2.45)"

// httpError is a refusal this package decides itself, with its status.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

func notImplemented(format string, args ...any) error {
	return &httpError{status: http.StatusNotImplemented, msg: fmt.Sprintf(format, args...)}
}

// fail answers r with err in E2B's shape, with the status E2B's SDKs turn
// into the matching exception (401 AuthenticationException, 404
// NotFoundException, 429 RateLimitException...).
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := h.classify(err)
	if status == http.StatusTooManyRequests {
		var e *errdefs.Error
		if errors.As(err, &e) {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(max(e.RetryAfter, time.Second).Seconds()))))
		}
	}
	if status >= 500 && status != http.StatusNotImplemented {
		h.log.Error("E2B request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	} else {
		h.log.Debug("E2B request refused", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	writeError(w, status, msg)
}

func (h *Handler) classify(err error) (int, string) {
	var he *httpError
	switch {
	case errors.As(err, &he):
		return he.status, he.msg
	case errors.Is(err, errNoToken):
		return http.StatusUnauthorized, "calls into a sandbox need its envdAccessToken in X-Access-Token (E2B's SDKs send it) or its project's key in X-API-Key"
	case errors.Is(err, auth.ErrUnauthenticated):
		return http.StatusUnauthorized, msgBadKey
	}
	k, msg := errdefs.Public(err)
	return k.Status, msg
}
