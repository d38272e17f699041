package e2b_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/e2b"
)

// e2bSign is E2B's get_signature (python-sdk e2b/sandbox/signature.py).
func e2bSign(path, op, user, token, exp string) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if exp != "" {
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// TestUnroutedSignedFileURL: with E2B_SANDBOX_URL set, E2B's SDK makes a
// signed file URL of that URL's host + /files, naming no sandbox. The
// server's /files serves it in the sandbox whose envdAccessToken made the
// signature, whichever project's; and refuses, with envd never reached, a
// forged signature (random, or made with an API key, or another path's),
// an expired one, one of a sandbox that has ended; headers naming another
// sandbox or bearing another credential change nothing; a flood of them
// is bounded (429).
func TestUnroutedSignedFileURL(t *testing.T) {
	var served []string
	envd := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tgt, _ := e2b.Target(r.Context())
		served = append(served, tgt.SandboxID+" "+r.Method+" "+r.URL.Path+"?path="+r.URL.Query().Get("path"))
		w.WriteHeader(http.StatusAccepted)
	})
	e := newEnv(t, nil, envd)
	a, b, gone := e.createNative(t, e.key1), e.createNative(t, e.key2), e.createNative(t, e.key1)
	if err := e.c.Kill(context.Background(), "p1", gone.SandboxID); err != nil {
		t.Fatal(err)
	}
	exp := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
	past := strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)
	query := func(path, user, sig, exp string) string {
		q := url.Values{"path": {path}, "signature": {sig}}
		if user != "" {
			q.Set("username", user)
		}
		if exp != "" {
			q.Set("signature_expiration", exp)
		}
		return "/files?" + q.Encode()
	}
	tokA, tokB := e.c.EnvdToken(a.SandboxID), e.c.EnvdToken(b.SandboxID)
	for _, tc := range []struct {
		name, method, path string
		headers            []string
		want               int
		served             string // the call envd got, "" for none
		words              string
	}{
		{"sandbox a's read", "GET", query("/tmp/x", "user", e2bSign("/tmp/x", "read", "user", tokA, ""), ""), nil, http.StatusAccepted, a.SandboxID + " GET /files?path=/tmp/x", ""},
		{"sandbox b's write, expiring, another project", "POST", query("/tmp/y", "", e2bSign("/tmp/y", "write", "", tokB, exp), exp), nil, http.StatusAccepted, b.SandboxID + " POST /files?path=/tmp/y", ""},
		{"a's signature with headers naming b and b's project key", "GET", query("/tmp/x", "", e2bSign("/tmp/x", "read", "", tokA, ""), ""),
			[]string{"E2b-Sandbox-Id", b.SandboxID, "X-API-Key", e.key2, "X-Access-Token", tokB}, http.StatusAccepted, a.SandboxID + " GET /files?path=/tmp/x", ""},
		{"forged", "GET", query("/tmp/x", "", "v1_"+strings.Repeat("A", 43), ""), nil, http.StatusUnauthorized, "", "not that of any running sandbox"},
		{"signed with the project's API key", "GET", query("/tmp/x", "", e2bSign("/tmp/x", "read", "", e.key1, ""), ""), nil, http.StatusUnauthorized, "", "not that of any running sandbox"},
		{"another path's", "GET", query("/etc/shadow", "", e2bSign("/tmp/x", "read", "", tokA, ""), ""), nil, http.StatusUnauthorized, "", "not that of any"},
		{"a read's signature to write", "POST", query("/tmp/x", "", e2bSign("/tmp/x", "read", "", tokA, ""), ""), nil, http.StatusUnauthorized, "", "not that of any"},
		{"expired", "GET", query("/tmp/x", "", e2bSign("/tmp/x", "read", "", tokA, past), past), nil, http.StatusUnauthorized, "", "signature is already expired"},
		{"an ended sandbox's", "GET", query("/tmp/x", "", e2bSign("/tmp/x", "read", "", e.c.EnvdToken(gone.SandboxID), ""), ""), nil, http.StatusUnauthorized, "", "not that of any"},
		{"a user with ':'", "GET", query("t", "u:read:user", e2bSign("t:write:u", "read", "user", tokA, ""), ""), nil, http.StatusBadRequest, "", "holds ':'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			served = nil
			r := e.do(t, tc.method, tc.path, "", tc.headers...)
			if r.status != tc.want || !strings.Contains(r.body, tc.words) {
				t.Fatalf("%s %s: %d %s; want %d with %q", tc.method, tc.path, r.status, r.body, tc.want, tc.words)
			}
			if got := strings.Join(served, ", "); got != tc.served {
				t.Errorf("envd served %q, want %q", got, tc.served)
			}
		})
	}
	// The expired answer is envd's, word for word: E2B's suite checks it.
	if r := e.do(t, "GET", query("/tmp/x", "", e2bSign("/tmp/x", "read", "", tokA, past), past), ""); strings.TrimSpace(r.body) != `{"code":401,"message":"signature is already expired"}` {
		t.Errorf("expired: %s", r.body)
	}
	// Unauthenticated work is bounded server-wide: a flood meets 429.
	limited := 0
	for range 100 {
		if r := e.do(t, "GET", query("/tmp/x", "", "v1_forged", ""), ""); r.status == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited == 0 {
		t.Errorf("100 unrouted signed URLs at once were all tried; want the server's bound (429) to meet some")
	}
}
