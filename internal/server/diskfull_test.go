package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/store"
)

// TestDiskFullIs507: a full disk met on any path — the kernel's ENOSPC or
// EDQUOT, the database's SQLITE_FULL or disk_full (store.ErrDiskFull), a
// tool that says so in words, the node's own guard — is a 507 saying the
// server's disk is full and what to do, not a 500; a refusal of the
// request itself keeps its status.
func TestDiskFullIs507(t *testing.T) {
	enospc := &fs.PathError{Op: "write", Path: "/data/images/x/checkpoint.img", Err: syscall.ENOSPC}
	tests := []struct {
		name   string
		err    error
		status int
	}{
		{"ENOSPC wrapped", fmt.Errorf("pausing sandbox x: %w", enospc), 507},
		{"EDQUOT", fmt.Errorf("making volume: %w", syscall.EDQUOT), 507},
		{"SQLITE_FULL", fmt.Errorf("setting timeout of sandbox x: %w", fmt.Errorf("%w: database or disk is full (13)", store.ErrDiskFull)), 507},
		{"runsc in words", &errdefs.Error{Msg: "checkpointing sandbox x failed (disk full? the server log says why); it keeps running",
			Cause: errors.New("runsc checkpoint: exit status 128: write /data/images/x/pages.img: No space left on device")}, 507},
		{"wrapped in unavailable", &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: "sandbox x could not start", Cause: enospc}, 507},
		{"the node's guard", &errdefs.Error{Kind: errdefs.ErrDiskFull, Msg: "cannot pause: the server's disk has 10 MB free; free space"}, 507},
		{"invalid stays invalid", &errdefs.Error{Kind: errdefs.ErrInvalid, Msg: "step 2 failed", Cause: enospc}, 400},
		{"plain failure", errors.New("something else"), 500},
	}
	for _, tt := range tests {
		status, code, msg := classify(tt.err)
		if status != tt.status {
			t.Errorf("%s: classify = %d %s %q; want %d", tt.name, status, code, msg, tt.status)
			continue
		}
		if status == http.StatusInsufficientStorage && (code != api.CodeDiskFull || !strings.Contains(msg, "disk") || !strings.Contains(msg, "free")) {
			t.Errorf("%s: classify = %d %s %q; want code disk_full and a message that the disk is full and what to free", tt.name, status, code, msg)
		}
	}
}
