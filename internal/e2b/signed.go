package e2b

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"
)

// E2B's signed file URLs (upload_url, download_url): GET or POST
// envd's /files with ?signature=v1_<base64 of sha256 of
// "path:operation:username:envdAccessToken[:expiration]">, so that a
// browser or curl with no header reaches one file. The SDK signs them with
// the sandbox's envdAccessToken; this checks them against it.
//
// The fields are joined by ':' unescaped, and a path may hold ':' (a file
// may be named so), so a user with ':' would let one signature stand for
// another: a read of "t:write:u" as user "user" is the same string as a
// write of "t" as user "u:read:user". With no ':' in the user (which no
// Linux user name has), the string splits one way only, from its end:
// expiration (digits) and token (hex) hold none, the user none, the
// operation is the field before the user, the path all that is left. A
// parameter given twice is refused too, so that the value signed is the
// value the call acts on.

// signedFileCall reports whether r is a call to envd's /files carrying
// E2B's signature in place of a token.
func signedFileCall(r *http.Request, port string) bool {
	return port == EnvdPort && strings.TrimPrefix(r.URL.Path, "/e2b/sandbox") == "/files" && r.URL.Query().Has("signature")
}

// signedFields is a signed file URL's query, checked: each field once,
// a user without ':', an expiry in the future. signature is what the URL
// carries; sign makes it from a sandbox's envdAccessToken.
type signedFields struct {
	signature string
	sign      func(token string) string
	op        string
}

func parseSigned(r *http.Request) (signedFields, error) {
	q := r.URL.Query()
	for _, name := range []string{"path", "username", "signature", "signature_expiration"} {
		if len(q[name]) > 1 {
			return signedFields{}, badRequest("a signed file URL names %s %d times; want it once", name, len(q[name]))
		}
	}
	if strings.Contains(q.Get("username"), ":") {
		return signedFields{}, badRequest("username %q holds ':', which no user name has and which would make the signature stand for another path, operation or user", q.Get("username"))
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	suffix := ""
	if exp := q.Get("signature_expiration"); exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return signedFields{}, badRequest("signature_expiration: want a Unix time in seconds, got %q", exp)
		}
		if time.Now().Unix() > n {
			// envd's words, which E2B's suite checks.
			return signedFields{}, &errdefs.Error{Kind: errdefs.ErrUnauthenticated, Msg: "signature is already expired"}
		}
		suffix = ":" + exp
	}
	prefix := fmt.Sprintf("%s:%s:%s:", q.Get("path"), op, q.Get("username"))
	return signedFields{signature: q.Get("signature"), op: op, sign: func(token string) string {
		sum := sha256.Sum256([]byte(prefix + token + suffix))
		return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
	}}, nil
}

// checkSignature returns nil when r's signature is the one id's token
// makes for its path, user, operation and expiration.
func (h *Handler) checkSignature(r *http.Request, id string) error {
	f, err := parseSigned(r)
	if err != nil {
		return err
	}
	if !hmac.Equal([]byte(f.signature), []byte(f.sign(h.cfg.Control.EnvdToken(id)))) {
		return &errdefs.Error{Kind: errdefs.ErrUnauthenticated, Msg: fmt.Sprintf("the file URL's signature is not sandbox %s's for %s of this path and user", id, f.op)}
	}
	return nil
}

// Unrouted signed file URLs are tried against every live sandbox's token
// (Control.SignedSandbox), work a caller with no credential asks for:
// the server's such calls are bounded by one rate, apart from every
// key's (each tries up to 10,000 sandboxes: 20 ms of hashing measured).
const (
	unroutedRate  = 20 // per second
	unroutedBurst = 40
)

// UnroutedFile serves a signed file URL that reached the API's root: with
// E2B_SANDBOX_URL set, E2B's SDK joins /files to that URL's host, dropping
// its path and the sandbox, which it sends in a header the URL cannot
// carry. The signature names the sandbox instead: the one live sandbox
// whose envdAccessToken makes it. The call then goes the way of one with
// E2b-Sandbox-Id (a paused sandbox 502, the project's rate and calls under
// way), with no credential but the signature.
func (h *Handler) UnroutedFile(w http.ResponseWriter, r *http.Request) {
	if !h.unrouted.Allow() {
		h.fail(w, r, &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: time.Second,
			Msg: fmt.Sprintf("this server answers at most %d signed file URLs a second that name no sandbox; retry, or call /e2b/sandbox/files with the same query and the header %s", unroutedRate, HeaderSandboxID)})
		return
	}
	f, err := parseSigned(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	id, _, err := h.cfg.Control.SignedSandbox(r.Context(), f.signature, f.sign)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// The signature alone opens it: no other credential is read.
	for _, name := range []string{headerAccessToken, HeaderTrafficToken, headerAPIKey} {
		r.Header.Del(name)
	}
	r.Header.Set(HeaderSandboxID, id)
	r.Header.Set(HeaderSandboxPort, EnvdPort)
	h.sandbox(w, r)
}
