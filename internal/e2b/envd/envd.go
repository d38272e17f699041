// Package envd serves E2B's in-sandbox daemon protocol ("envd", port
// 49983 of an E2B sandbox) over Lizard's agent, so that E2B's SDKs'
// sandbox.commands, sandbox.pty and sandbox.files work against Lizard
// unchanged: the Connect-RPC services process.Process and
// filesystem.Filesystem (proto/, as the SDKs speak them), and the HTTP
// /files download and upload and /health. The E2B router (internal/e2b)
// authenticates each call and names its sandbox; every call here is then
// one proxied call to that sandbox's agent (Control.Acquire), as on the
// native API, so pause, resume, quotas and the sandbox's end behave the
// same. docs/e2b.md says what maps to what and what is not supported.
package envd

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/e2b/envd/proto/filesystem/filesystemconnect"
	"github.com/lizard-build/lizard/internal/e2b/envd/proto/process/processconnect"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
)

// Version is the envd version Lizard's envd speaks as: the E2B router
// answers it as a sandbox's envdVersion, and the SDKs gate features on it
// (e2b/envd/versions.py, js-sdk src/envd/versions.ts, the same gates to
// 0.6.4): default user 0.4.0, octet-stream upload 0.5.7, file metadata
// 0.6.2 (X-Metadata-* on an upload, kept as the file's user.e2b.*
// attributes by the agent), watch events' entries 0.6.3 (include_entry),
// and allow_network_mounts 0.6.4, which lifts a refusal Lizard's watch
// never makes. Below a gate the SDKs refuse the feature themselves, so
// this is the highest gate Lizard serves, not a later one.
const Version = "0.6.4"

// Sandboxes starts calls to sandboxes' agents: control.Control.
type Sandboxes interface {
	Acquire(ctx context.Context, projectID, id string) (agentproxy.Call, error)
	Transport() http.RoundTripper
	// Get tells a followed stream whose output failed whether its sandbox
	// has ended: in a cluster, a kill through another lizard api does not
	// end this one's call.
	Get(ctx context.Context, projectID, id string) (api.Sandbox, error)
}

// Config says what envd serves with.
type Config struct {
	Sandboxes Sandboxes
	// Target names the project and sandbox of a request, as the E2B router
	// authenticated them (e2b.Target); ok false: the request was not
	// authenticated, and is refused.
	Target func(ctx context.Context) (projectID, sandboxID string, ok bool)
	// MaxFileBytes bounds an upload's body, as the native API's
	// --max-file-mb does; 0: no bound here (the agent keeps its own).
	MaxFileBytes int64
	Logger       *slog.Logger
}

// session is one call to a sandbox's agent: Ctx ends when the caller goes
// away or the sandbox stops (agentproxy.Call), release ends the call.
type session struct {
	sandbox string
	project string
	agent   Agent
	ctx     context.Context
	release func()
	// ended reports whether the sandbox has ended by the control plane's
	// record; nil: only ctx tells.
	ended func() bool
}

// opener starts a session for a request's sandbox.
type opener func(ctx context.Context) (*session, error)

// handler serves envd's routes.
type handler struct {
	open     opener
	log      *slog.Logger
	watchers *watchers
	maxFile  int64
	mux      *http.ServeMux
}

// New returns envd's handler; it expects paths as a sandbox's envd sees
// them (/process.Process/Start, /files...).
func New(cfg Config) http.Handler {
	open := func(ctx context.Context) (*session, error) {
		project, id, ok := cfg.Target(ctx)
		if !ok {
			return nil, &errdefs.Error{Kind: errdefs.ErrUnauthenticated, Msg: "envd calls need the sandbox's envdAccessToken in X-Access-Token"}
		}
		call, err := cfg.Sandboxes.Acquire(ctx, project, id)
		if err != nil {
			return nil, sandboxError(id, err)
		}
		tr := &agentproxy.Transport{Call: call, Base: cfg.Sandboxes.Transport(), MaxJSON: maxAnswerBytes}
		return &session{
			sandbox: id,
			project: project,
			agent:   newAgent(id, tr),
			ctx:     call.Ctx,
			release: call.Release,
			ended: func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				sb, err := cfg.Sandboxes.Get(ctx, project, id)
				if err != nil {
					return errors.Is(err, errdefs.ErrGone) || errors.Is(err, errdefs.ErrNotFound)
				}
				return errors.Is(control.Check(sb, node.WantLive), errdefs.ErrGone)
			},
		}, nil
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return newHandler(open, log, cfg.MaxFileBytes)
}

func newHandler(open opener, log *slog.Logger, maxFile int64) *handler {
	h := &handler{open: open, log: log, watchers: newWatchers(), maxFile: maxFile}
	mux := http.NewServeMux()
	// The SDKs speak Connect's protocol; gRPC and gRPC-Web come with it.
	mux.Handle(processconnect.NewProcessHandler(&processService{h}))
	mux.Handle(filesystemconnect.NewFilesystemHandler(&filesystemService{h}))
	mux.HandleFunc("GET /files", h.download)
	mux.HandleFunc("POST /files", h.upload)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("%s %s is not part of envd's API that Lizard serves (docs/e2b.md lists what is)", r.Method, r.URL.Path))
	})
	h.mux = mux
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), writerKey{}, w)))
}

// writerKey carries a request's ResponseWriter, which Connect's handlers
// do not see, to drop (reset) its connection.
type writerKey struct{}

// dropConnection ends the request of ctx by resetting its connection, as
// a proxy that loses the sandbox behind it does (E2B's: an HTTP/2 stream
// reset). The SDKs before 2.63 take only a failed read for a dropped
// connection, not a body cut short (its own error: a protocol violation);
// a TCP reset is a failed read to them. Where the connection cannot be
// taken over (HTTP/2, a writer that hides it) the handler is aborted,
// which cuts the body short.
func dropConnection(ctx context.Context) {
	if w, ok := ctx.Value(writerKey{}).(http.ResponseWriter); ok {
		rc := http.NewResponseController(w)
		rc.Flush()
		if conn, _, err := rc.Hijack(); err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetLinger(0) // close sends RST
			}
			conn.Close()
		}
	}
	panic(http.ErrAbortHandler)
}

// sandboxError is the error of a sandbox that could not be reached: one
// that does not exist (any more) is "not found" in the words E2B's proxy
// uses, which the SDKs turn into SandboxNotRunningException.
func sandboxError(id string, err error) error {
	if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrGone) {
		return &errdefs.Error{Kind: errGoneSandbox, Msg: fmt.Sprintf("sandbox %s was not found: %s", id, errdefs.Message(err))}
	}
	return err
}

// errGoneSandbox marks the sandbox itself being gone, as opposed to a
// process or file not found in it.
var errGoneSandbox = fmt.Errorf("sandbox gone: %w", errdefs.ErrGone)

// fail is err, from ctx's session, as the error the SDKs map: a sandbox
// that stopped during the call wins over whatever the agent call failed
// with.
func (s *session) fail(err error) error {
	if stop := s.stopped(); stop != nil {
		err = stop
	}
	return rpcError(err)
}

// stopped is the error of the session's sandbox having stopped, or nil.
// A pause ends the streams that follow a process or watch (following) with
// CANCELED, which the SDKs raise as TimeoutException naming a pause.
func (s *session) stopped() error {
	if s == nil || s.ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(s.ctx)
	switch {
	case errors.Is(cause, errdefs.ErrGone):
		return sandboxError(s.sandbox, cause)
	case errors.Is(cause, errdefs.ErrConflict):
		return connect.NewError(connect.CodeCanceled, errors.New(errdefs.Message(cause)))
	}
	return nil
}

// following marks ctx as that of a call that follows a process or
// watches a directory and may stay open for hours: a pause ends it rather
// than waiting for it (agentproxy.Following), as on the native API.
func following(ctx context.Context) context.Context { return agentproxy.Following(ctx) }

// rpcError maps an error onto the Connect code E2B's SDKs map to their
// exceptions (e2b/envd/rpc.py).
func rpcError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, errUnsupported):
		return connect.NewError(connect.CodeUnimplemented, err)
	}
	kind, msg := errdefs.Classify(err)
	if msg == "" {
		msg = "internal error"
	}
	code := connect.CodeInternal
	switch kind.Err {
	case errdefs.ErrInvalid:
		code = connect.CodeInvalidArgument
	case errdefs.ErrUnauthenticated:
		code = connect.CodeUnauthenticated
	case errdefs.ErrNotFound:
		code = connect.CodeNotFound
	case errdefs.ErrConflict:
		code = connect.CodeFailedPrecondition
	case errdefs.ErrGone, errdefs.ErrBadGateway, errdefs.ErrUnavailable:
		code = connect.CodeUnavailable
	case errdefs.ErrTooLarge, errdefs.ErrDiskFull, errdefs.ErrRateLimited:
		code = connect.CodeResourceExhausted
	}
	return connect.NewError(code, errors.New(msg))
}

// user is the Lizard user of the E2B user a request names in its basic
// auth ("user:" base64): E2B's default user "user" is the sandbox user.
func user(h http.Header) string {
	name := basicUser(h.Get("Authorization"))
	if name == "user" {
		return ""
	}
	return name
}

// fileUser is the Lizard user of an HTTP /files call: its ?username=
// (E2B's SDKs send it, and a signed URL signs it), else its basic auth's.
func fileUser(r *http.Request) string {
	if name := r.URL.Query().Get("username"); name != "" {
		if name == "user" {
			return ""
		}
		return name
	}
	return user(r.Header)
}

func basicUser(v string) string {
	enc, ok := strings.CutPrefix(v, "Basic ")
	if !ok {
		return ""
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return ""
	}
	name, _, _ := strings.Cut(string(raw), ":")
	return name
}
