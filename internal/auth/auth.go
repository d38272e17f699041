// Package auth mints and checks API keys.
//
// A key reads lz_<keyid>_<secret>: keyid is 8 random hex characters that
// name the key in the store, secret is 32 random bytes in hex. The store
// keeps keyid and SHA-256(secret) only, so the key is shown once, and a
// stolen database does not yield usable keys. A high-entropy secret needs no
// slow password hash.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/store"
)

// Prefix starts every key, so that secret scanners and people recognise it.
const Prefix = "lz_"

const (
	idLen     = 8  // hex characters
	secretLen = 32 // bytes, hex-encoded to 64 characters
)

// ErrUnauthenticated is every reason a request's key is refused. Which
// reason it was is logged, never told to the caller.
var ErrUnauthenticated = errors.New("unauthenticated")

// Message is the one answer to every refused key.
const Message = "missing or invalid API key: send Authorization: Bearer <key> with a key from `lizard admin create-project`"

// Key is a freshly minted key.
type Key struct {
	ID     string // the keyid, stored in clear
	Secret string // hex, never stored
}

// String is the key as the caller sends it.
func (k Key) String() string { return Prefix + k.ID + "_" + k.Secret }

// Hash is what the store keeps of the key's secret.
func (k Key) Hash() []byte { return hashSecret(k.Secret) }

func hashSecret(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// Generate mints a random key.
func Generate() (Key, error) {
	id := make([]byte, idLen/2)
	secret := make([]byte, secretLen)
	if _, err := rand.Read(id); err != nil {
		return Key{}, fmt.Errorf("generating key: %w", err)
	}
	if _, err := rand.Read(secret); err != nil {
		return Key{}, fmt.Errorf("generating key: %w", err)
	}
	return Key{ID: hex.EncodeToString(id), Secret: hex.EncodeToString(secret)}, nil
}

// Parse splits a key into its ID and secret; ErrUnauthenticated if it is
// not shaped like a key.
func Parse(s string) (Key, error) {
	rest, ok := strings.CutPrefix(s, Prefix)
	if !ok {
		return Key{}, fmt.Errorf("key lacks the %q prefix: %w", Prefix, ErrUnauthenticated)
	}
	id, secret, ok := strings.Cut(rest, "_")
	if !ok || len(id) != idLen || len(secret) != 2*secretLen || !isHex(id) || !isHex(secret) {
		return Key{}, fmt.Errorf("malformed key: %w", ErrUnauthenticated)
	}
	return Key{ID: id, Secret: secret}, nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Create mints a key for project and stores it. sandboxID, when not empty,
// ties the key to that sandbox: it is revoked when the sandbox ends.
func Create(ctx context.Context, st *store.Store, projectID, sandboxID string) (Key, error) {
	return CreateUntil(ctx, st, projectID, sandboxID, time.Time{})
}

// CreateUntil is Create for a key that stops working at until (zero: only
// when revoked).
func CreateUntil(ctx context.Context, st *store.Store, projectID, sandboxID string, until time.Time) (Key, error) {
	var expires *time.Time
	if !until.IsZero() {
		expires = &until
	}
	// keyid is only 32 bits: on the rare collision, draw again.
	for range 5 {
		k, err := Generate()
		if err != nil {
			return Key{}, err
		}
		err = st.CreateAPIKey(ctx, store.APIKey{
			ID: k.ID, ProjectID: projectID, Hash: k.Hash(), CreatedAt: time.Now(), SandboxID: sandboxID, ExpiresAt: expires,
		})
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return Key{}, err
		}
		return k, nil
	}
	return Key{}, errors.New("creating key: key IDs kept colliding")
}

// Verifier checks keys against the store.
type Verifier struct {
	Store  *store.Store
	Logger *slog.Logger
}

// dummyHash is compared against when the key ID is unknown, so that an
// unknown ID costs about as long as a wrong secret.
var dummyHash = make([]byte, sha256.Size)

// Verify returns the project of a valid, unrevoked, unexpired key; otherwise an error
// wrapping ErrUnauthenticated (or a store failure).
func (v *Verifier) Verify(ctx context.Context, key string) (projectID string, err error) {
	k, err := v.verify(ctx, key)
	return k.ProjectID, err
}

func (v *Verifier) verify(ctx context.Context, key string) (store.APIKey, error) {
	k, err := Parse(key)
	if err != nil {
		return store.APIKey{}, err
	}
	stored, err := v.Store.GetAPIKey(ctx, k.ID)
	want := stored.Hash
	if errors.Is(err, store.ErrNotFound) {
		want = dummyHash
	} else if err != nil {
		return store.APIKey{}, fmt.Errorf("looking up key %s: %w", k.ID, err)
	}
	match := subtle.ConstantTimeCompare(hashSecret(k.Secret), want) == 1
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.APIKey{}, fmt.Errorf("unknown key %s: %w", k.ID, ErrUnauthenticated)
	case !match:
		return store.APIKey{}, fmt.Errorf("wrong secret for key %s: %w", k.ID, ErrUnauthenticated)
	case stored.RevokedAt != nil:
		return store.APIKey{}, fmt.Errorf("key %s was revoked: %w", k.ID, ErrUnauthenticated)
	case !stored.Live(time.Now()):
		return store.APIKey{}, fmt.Errorf("key %s expired at %s: %w", k.ID, stored.ExpiresAt.Format(time.RFC3339), ErrUnauthenticated)
	}
	return stored, nil
}

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", fmt.Errorf("no Authorization header: %w", ErrUnauthenticated)
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", fmt.Errorf("authorization scheme is not Bearer: %w", ErrUnauthenticated)
	}
	return strings.TrimSpace(token), nil
}

type ctxKey struct{}

// Caller is who made a request: the key's project, and the sandbox the key
// belongs to when it is a sandbox's lizardToken ("" for a project key).
type Caller struct {
	ProjectID string
	KeyID     string
	SandboxID string
	// Remote is the client's address, for the audit trail.
	Remote string
}

// CallerOf returns the request's caller, as set by Require.
func CallerOf(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(ctxKey{}).(Caller)
	return c, ok
}

// ProjectID returns the project the request's key belongs to, as set by
// Require.
func ProjectID(ctx context.Context) (string, bool) {
	c, ok := CallerOf(ctx)
	return c.ProjectID, ok
}

// WithCaller returns ctx carrying c as Require sets it.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// WithProjectID returns ctx carrying a project key of projectID's as
// Require sets it; for tests of handlers behind Require.
func WithProjectID(ctx context.Context, projectID string) context.Context {
	return WithCaller(ctx, Caller{ProjectID: projectID})
}

// Require serves next only to requests with a valid key, with the key's
// project in the request context (ProjectID). Every refusal gets the same
// 401 body, so a caller cannot tell an unknown key from a revoked one.
func (v *Verifier) Require(next http.Handler) http.Handler {
	return v.RequireWith(bearer, writeRefusal, next)
}

// RequireWith is Require for a surface whose key travels in its own place
// (key returns it, or an error wrapping ErrUnauthenticated) and whose
// refusals have their own shape: refuse writes status 401, or 503 when the
// store could not be asked, with msg.
func (v *Verifier) RequireWith(key func(*http.Request) (string, error), refuse func(w http.ResponseWriter, status int, msg string), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, err := key(r)
		var k store.APIKey
		if err == nil {
			k, err = v.verify(r.Context(), token)
		}
		if err != nil && !errors.Is(err, ErrUnauthenticated) {
			// The store failed: not the caller's fault, so not a 401.
			v.logger().Error("verifying API key", "err", err)
			msg := "could not check the API key right now; try again"
			if errors.Is(err, store.ErrUnavailable) {
				msg = "the database is unreachable, so the API key cannot be checked; try again shortly"
			}
			refuse(w, http.StatusServiceUnavailable, msg)
			return
		}
		if err != nil {
			v.logger().LogAttrs(r.Context(), slog.LevelInfo, "refused request",
				slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("reason", err.Error()))
			refuse(w, http.StatusUnauthorized, Message)
			return
		}
		next.ServeHTTP(w, r.WithContext(WithCaller(r.Context(), Caller{ProjectID: k.ProjectID, KeyID: k.ID, SandboxID: k.SandboxID, Remote: r.RemoteAddr})))
	})
}

func writeRefusal(w http.ResponseWriter, status int, msg string) {
	if status == http.StatusUnauthorized {
		Unauthorized(w)
		return
	}
	api.WriteJSON(w, status, api.Error{Code: api.CodeUnavailable, Message: msg})
}

func (v *Verifier) logger() *slog.Logger {
	if v.Logger == nil {
		return slog.Default()
	}
	return v.Logger
}

// Unauthorized writes the one 401 response.
func Unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="lizard"`)
	api.WriteJSON(w, http.StatusUnauthorized, api.Error{Code: api.CodeUnauthenticated, Message: Message})
}
