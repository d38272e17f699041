package remote

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/lizard-build/lizard/internal/errdefs"
)

// TestDiskFullAcrossTheWire: a full disk on a node reaches the API as
// ErrDiskFull with its message (and a forwarded port call as the public
// 507), whether the node's guard refused or the kernel said ENOSPC.
func TestDiskFullAcrossTheWire(t *testing.T) {
	for _, err := range []error{
		&errdefs.Error{Kind: errdefs.ErrDiskFull, Msg: "cannot pause: the disk is full"},
		&errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: "could not start", Cause: fmt.Errorf("writing: %w", syscall.ENOSPC)},
	} {
		status, w := encodeError(err)
		got := w.err("n1")
		if status != http.StatusInsufficientStorage || w.Kind != "disk_full" || !errors.Is(got, errdefs.ErrDiskFull) || errdefs.Message(got) != errdefs.Message(errdefs.DiskFull(err)) {
			t.Errorf("%v over the wire = %d %+v → %v; want 507 disk_full, ErrDiskFull with its message", err, status, w, got)
		}
		rec := httptest.NewRecorder()
		writePublic(rec, err)
		if rec.Code != http.StatusInsufficientStorage || !strings.Contains(rec.Body.String(), `"disk_full"`) {
			t.Errorf("%v on a port call = %d %s; want 507 disk_full", err, rec.Code, rec.Body)
		}
	}
}
