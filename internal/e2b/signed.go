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

// checkSignature returns nil when r's signature is the one id's token
// makes for its path, user, operation and expiration.
func (h *Handler) checkSignature(r *http.Request, id string) error {
	q := r.URL.Query()
	for _, name := range []string{"path", "username", "signature", "signature_expiration"} {
		if len(q[name]) > 1 {
			return badRequest("a signed file URL names %s %d times; want it once", name, len(q[name]))
		}
	}
	if strings.Contains(q.Get("username"), ":") {
		return badRequest("username %q holds ':', which no user name has and which would make the signature stand for another path, operation or user", q.Get("username"))
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	raw := fmt.Sprintf("%s:%s:%s:%s", q.Get("path"), op, q.Get("username"), h.cfg.Control.EnvdToken(id))
	if exp := q.Get("signature_expiration"); exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return badRequest("signature_expiration: want a Unix time in seconds, got %q", exp)
		}
		if time.Now().Unix() > n {
			return &errdefs.Error{Kind: errdefs.ErrUnauthenticated, Msg: fmt.Sprintf("the file URL's signature expired at %s", time.Unix(n, 0).UTC().Format(time.RFC3339))}
		}
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	want := "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
	if !hmac.Equal([]byte(q.Get("signature")), []byte(want)) {
		return &errdefs.Error{Kind: errdefs.ErrUnauthenticated, Msg: fmt.Sprintf("the file URL's signature is not sandbox %s's for %s of this path and user", id, op)}
	}
	return nil
}

// UnroutedFileURL answers a signed file URL that reached the API's root:
// with E2B_SANDBOX_URL set, E2B's SDK joins /files to that URL's host and
// drops both its path and the sandbox, which it sends in a header the URL
// cannot carry.
func UnroutedFileURL(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusBadRequest, "this E2B signed file URL (upload_url/download_url) names no sandbox: with E2B_SANDBOX_URL set, "+
		"E2B's SDK makes it from that URL's host alone. Call /e2b/sandbox/files with the same query and the headers "+
		HeaderSandboxID+" and "+HeaderSandboxPort+": "+EnvdPort+", or serve E2B's host form (lizard serve --ports-domain D, E2B_DOMAIN=D, no E2B_SANDBOX_URL), "+
		"whose URLs https://49983-{id}.D/files work as they are (docs/e2b.md)")
}
