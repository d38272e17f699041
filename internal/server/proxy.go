package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/lizard-build/lizard/internal/agentproxy"
	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// proxy passes /v1/sandboxes/{id}/<agent path> to the sandbox's agent as
// <agent path>, for the public agent paths only (api.AgentPublicPaths): the
// agent's internal endpoints are never reachable through the API. The
// public concerns are done here, once per call: the caller's project must
// own the sandbox (the control plane's Acquire), an upload is bound by
// --max-file-mb, and a WebSocket offered the key as a subprotocol is
// answered with SocketProtocol. The call itself — streaming, abort events,
// a WebSocket's closing frame, the sandbox's end — is agentproxy.Proxy's,
// which in a cluster forwards it to the node's internal API, whose own
// agentproxy.Proxy reaches the agent without checking the caller again.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request) {
	project, _ := auth.ProjectID(r.Context())
	p := &agentproxy.Proxy{
		Acquire: func(ctx context.Context, id string) (agentproxy.Call, error) {
			return s.c.Acquire(ctx, project, id)
		},
		Transport: s.c.Transport(),
		MaxUpload: s.maxFile,
		TooLarge:  fileTooLarge(s.maxFile),
		Answered: func(r *http.Request, resp *http.Response) {
			if resp.StatusCode == http.StatusSwitchingProtocols && offersSocketProtocol(r.Header) {
				resp.Header.Set("Sec-WebSocket-Protocol", SocketProtocol)
			}
		},
		Fail: s.fail,
		Unanswered: func(ctx context.Context, id string) error {
			return s.agentFailed(ctx, project, id)
		},
		Observe: s.observe,
		Log:     s.log.With("project_id", project),
	}
	p.ServeHTTP(w, r)
}

func fileTooLarge(limit int64) error {
	return &errdefs.Error{Kind: errdefs.ErrTooLarge,
		Msg: fmt.Sprintf("the file is larger than this server's bound of %d MiB (--max-file-mb)", limit>>20)}
}
