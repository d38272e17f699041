package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// TestErrorsFollowTheServerTable: every kind in the server's one table
// (errdefs.Kinds), answered as the server answers it, comes back as the
// client sentinel of its status with the table's code — and a body that
// is not ours (a proxy's page) is given the same code. A kind added to the
// table without a sentinel here fails.
func TestErrorsFollowTheServerTable(t *testing.T) {
	sentinels := map[string]error{
		api.CodeDiskFull:        ErrDiskFull,
		api.CodeInvalidArgument: ErrInvalidArgument,
		api.CodeUnauthenticated: ErrUnauthenticated,
		api.CodeForbidden:       ErrForbidden,
		api.CodeNotFound:        ErrNotFound,
		api.CodeConflict:        ErrConflict,
		api.CodeGone:            ErrGone,
		api.CodeTooLarge:        ErrTooLarge,
		api.CodeRateLimited:     ErrRateLimited,
		api.CodeBadGateway:      ErrServer,
		api.CodeUnavailable:     ErrServer,
		api.CodeInternal:        ErrServer,
	}
	kinds := append(errdefs.Kinds(), func() errdefs.Kind { k, _ := errdefs.Classify(errors.New("internal")); return k }())
	for _, k := range kinds {
		t.Run(k.Code, func(t *testing.T) {
			want, ok := sentinels[k.Code]
			if !ok {
				t.Fatalf("the table has code %q (status %d) and the client no sentinel for it", k.Code, k.Status)
			}
			if got := codeFor(k.Status); got != k.Code {
				t.Errorf("codeFor(%d) = %q; the table says %q", k.Status, got, k.Code)
			}
			err := &errdefs.Error{Kind: k.Err, Msg: "told " + k.Code}
			kk, msg := errdefs.Classify(err)
			body, _ := json.Marshal(api.Error{Code: kk.Code, Message: msg})
			c := newFake(t, &fake{status: kk.Status, body: string(body)})
			_, got := c.GetSandbox(context.Background(), "sb_1")
			var e *Error
			if !errors.As(got, &e) || e.Status != k.Status || e.Code != k.Code || !strings.HasPrefix(e.Message, "told "+k.Code) {
				t.Fatalf("%v through the client = %#v; want status %d, code %q, its message", err, got, k.Status, k.Code)
			}
			if !errors.Is(got, want) {
				t.Errorf("%v through the client does not match %v", got, want)
			}
			for _, other := range sentinels {
				if other != want && errors.Is(got, other) && !(other == ErrServer && k.Status >= http.StatusInternalServerError) {
					t.Errorf("%v through the client also matches %v", got, other)
				}
			}
		})
	}
}
