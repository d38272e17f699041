package server

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/fdbudget"
	"github.com/lizard-build/lizard/internal/inflight"
)

// KeyLimits bound the requests of one API key: Rate per second with bursts
// of Burst. Zero Rate means no bound.
type KeyLimits struct {
	Rate  float64
	Burst int
}

// maxInFlight bounds the requests of one project under way at once, all
// its keys together (each lizardToken is a key of its own). Each holds
// file descriptors of the server (the caller's connection, and the
// agent's for a call into a sandbox), which every project shares, and a
// stream (a process's output followed, a watch) may last hours: within
// its rate, one key could open them until the server accepted nothing.
const maxInFlight = 1024

// keyLimiter holds one token bucket per API key ID, and each project's
// requests under way.
type keyLimiter struct {
	lim      KeyLimits
	mu       sync.Mutex
	m        map[string]*rate.Limiter
	inFlight *inflight.Limit // by project
	fds      *fdbudget.Budget
}

// keyID is the public ID of the request's key; Require has already
// verified it. The caller's is taken first: E2B's surface carries the key
// in X-API-Key.
func keyID(r *http.Request) string {
	if c, ok := auth.CallerOf(r.Context()); ok && c.KeyID != "" {
		return c.KeyID
	}
	_, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	k, err := auth.Parse(strings.TrimSpace(token))
	if err != nil {
		return ""
	}
	return k.ID
}

// refuseNative answers a request over its key's bounds (err, an
// errdefs.ErrRateLimited error with its RetryAfter) in the native API's
// shape, with Retry-After. The limiter takes the refusal of its surface:
// E2B's answers in E2B's shape, which its SDKs read.
func refuseNative(w http.ResponseWriter, _ *http.Request, err error) { rateLimited(w, err) }

// limit serves next only while the request's key is within its rate and
// its project has fewer than maxInFlight requests under way; over either,
// refuse answers (429 with Retry-After). It runs after authentication,
// so a stranger cannot use up a real key's budget.
func (l *keyLimiter) limit(next http.Handler, refuse func(http.ResponseWriter, *http.Request, error)) http.Handler {
	if l == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := keyID(r)
		project, _ := auth.ProjectID(r.Context())
		leave, ok := l.inFlight.Enter(project)
		if !ok {
			refuse(w, r, &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: time.Second,
				Msg: fmt.Sprintf("project %s has %d requests under way, its most: end some (streams it follows) first", project, maxInFlight)})
			return
		}
		defer leave()
		release, err := l.fds.Take(project, fdbudget.Request)
		if err != nil {
			refuse(w, r, err)
			return
		}
		defer release()
		if d := l.reserve(id); d > 0 {
			refuse(w, r, l.tooFast("API key "+id, d))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// limitRate serves next only while the request's key is within its rate,
// the bucket its /v1 calls use; past it, refuse answers. It leaves
// the calls under way to next: E2B's sandbox URL counts its own. A call
// made with a sandbox's access token has no key: it is counted in its
// project's bucket, at a key's rate, all its sandboxes' tokens together,
// so that more sandboxes do not make a faster rate.
func (l *keyLimiter) limitRate(next http.Handler, refuse func(http.ResponseWriter, *http.Request, error)) http.Handler {
	if l == nil || l.lim.Rate <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The caller's, not keyID's: a token call's Authorization header
		// is nobody's checked key, and would spend another key's bucket.
		c, _ := auth.CallerOf(r.Context())
		id, who := c.KeyID, "API key "+c.KeyID
		if id == "" {
			id, who = "project "+c.ProjectID, "the sandbox access tokens of project "+c.ProjectID
		}
		if d := l.reserve(id); d > 0 {
			refuse(w, r, l.tooFast(who, d))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// reserve takes a request from id's bucket, or returns how long until it
// could (and takes nothing).
func (l *keyLimiter) reserve(id string) time.Duration {
	if l.lim.Rate <= 0 {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.m[id]
	if b == nil {
		b = rate.NewLimiter(rate.Limit(l.lim.Rate), max(l.lim.Burst, 1))
		l.m[id] = b
	}
	res := b.Reserve()
	d := res.Delay()
	if d > 0 {
		res.Cancel()
	}
	return d
}

// tooFast is the error of who's request d too early for its rate.
func (l *keyLimiter) tooFast(who string, d time.Duration) error {
	return &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: d,
		Msg: fmt.Sprintf("%s sends requests too fast: at most %g per second (bursts of %d); retry in %s",
			who, l.lim.Rate, max(l.lim.Burst, 1), d.Round(time.Millisecond))}
}

func writeRateLimited(w http.ResponseWriter, after time.Duration, msg string) {
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(after.Seconds()))))
	writeError(w, http.StatusTooManyRequests, api.CodeRateLimited, msg)
}

// rateLimited answers an errdefs.ErrRateLimited error, with its
// Retry-After; false if err is not one.
func rateLimited(w http.ResponseWriter, err error) bool {
	var e *errdefs.Error
	if !errors.Is(err, errdefs.ErrRateLimited) || !errors.As(err, &e) {
		return false
	}
	writeRateLimited(w, max(e.RetryAfter, time.Second), e.Msg)
	return true
}

// audit records an event with the key ID that caused it, never the key.
func (s *Server) audit(r *http.Request, msg string, attrs ...any) {
	if s.auditLog == nil {
		return
	}
	project, _ := auth.ProjectID(r.Context())
	attrs = append(attrs, "key_id", keyID(r), "project_id", project, "remote", r.RemoteAddr)
	s.auditLog.Log(r.Context(), slog.LevelInfo, msg, attrs...)
}
