package errdefs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/lizard-build/lizard/api"
)

// TestTable: every kind has exactly one row, and no two rows share a
// status, an API code or a wire name, so that each maps back to one
// kind; an error of a kind (wrapped, or its Kind a sentinel that wraps
// the kind) classifies as that row and no other.
func TestTable(t *testing.T) {
	seen := map[any]string{}
	once := func(what string, v any, row string) {
		if prev, dup := seen[v]; dup {
			t.Errorf("%s %v is in rows %s and %s", what, v, prev, row)
		}
		seen[v] = row
	}
	for _, k := range Kinds() {
		if k.Err == nil || k.Status == 0 || k.Code == "" || k.Wire == "" {
			t.Errorf("row %+v is incomplete", k)
			continue
		}
		once("kind", k.Err, k.Wire)
		once("status", k.Status, k.Wire)
		once("code", "code "+k.Code, k.Wire)
		once("wire name", "wire "+k.Wire, k.Wire)
		if got, ok := ByWire(k.Wire); !ok || got != k {
			t.Errorf("ByWire(%q) = %+v, %v; want %+v", k.Wire, got, ok, k)
		}
		specific := fmt.Errorf("something specific: %w", k.Err)
		for _, err := range []error{
			&Error{Kind: k.Err, Msg: "told"},
			fmt.Errorf("doing it: %w", &Error{Kind: k.Err, Msg: "told", Cause: errors.New("cause")}),
			&Error{Kind: specific, Msg: "told"},
		} {
			got, msg := Classify(err)
			if got != k || msg != "told" {
				t.Errorf("Classify(%v) = %+v, %q; want %+v, %q", err, got, msg, k, "told")
			}
			if !errors.Is(err, k.Err) {
				t.Errorf("%v is not %v", err, k.Err)
			}
		}
	}
	if _, ok := ByWire("no such kind"); ok {
		t.Error("ByWire of an unknown name found a row")
	}
}

// TestMessage: the caller is told the message, the log gets the cause too.
func TestMessage(t *testing.T) {
	err := fmt.Errorf("wrapping: %w", &Error{Kind: ErrGone, Msg: "for the client", Cause: errors.New("internal")})
	if !errors.Is(err, ErrGone) || Message(err) != "for the client" || !strings.Contains(err.Error(), "internal") {
		t.Errorf("Error: Is=%v Message=%q Error=%q", errors.Is(err, ErrGone), Message(err), err.Error())
	}
	if err := Invalidf("bad %d", 1); !errors.Is(err, ErrInvalid) || Message(err) != "bad 1" {
		t.Errorf("Invalidf = %v; want ErrInvalid saying bad 1", err)
	}
	if Message(errors.New("internal")) != "" {
		t.Error("an error of no Error has a message for the caller")
	}
}

func TestInternal(t *testing.T) {
	tests := []struct {
		err    error
		status int
		code   string
		msg    string
	}{
		{errors.New("secret detail"), http.StatusInternalServerError, api.CodeInternal, ""},
		{&Error{Msg: "it broke", Cause: errors.New("secret detail")}, http.StatusInternalServerError, api.CodeInternal, "it broke"},
		{fmt.Errorf("reading: %w", context.Canceled), http.StatusServiceUnavailable, api.CodeUnavailable, "the request was cancelled before it finished"},
		{context.DeadlineExceeded, http.StatusServiceUnavailable, api.CodeUnavailable, "the request was cancelled before it finished"},
	}
	for _, tt := range tests {
		k, msg := Classify(tt.err)
		if k.Status != tt.status || k.Code != tt.code || msg != tt.msg {
			t.Errorf("Classify(%v) = %d %s %q; want %d %s %q", tt.err, k.Status, k.Code, msg, tt.status, tt.code, tt.msg)
		}
	}
}

// TestDiskFull: a full disk met on any path is ErrDiskFull with a message
// saying what to free, unless the request was refused for itself or the
// message already speaks of the disk.
func TestDiskFull(t *testing.T) {
	enospc := &fs.PathError{Op: "write", Path: "/data/images/x/pages.img", Err: syscall.ENOSPC}
	guard := &Error{Kind: ErrDiskFull, Msg: "cannot pause: 10 MB free"}
	tests := []struct {
		name string
		err  error
		kind error
		msg  string // "" for the advice
	}{
		{"ENOSPC", fmt.Errorf("pausing: %w", enospc), ErrDiskFull, ""},
		{"EDQUOT", syscall.EDQUOT, ErrDiskFull, ""},
		{"a store's kind", fmt.Errorf("setting timeout: %w", fmt.Errorf("database: %w", ErrDiskFull)), ErrDiskFull, ""},
		{"in words", errors.New("runsc: write pages.img: No space left on device"), ErrDiskFull, ""},
		{"wrapped in unavailable", &Error{Kind: ErrUnavailable, Msg: "could not start", Cause: enospc}, ErrDiskFull, ""},
		{"the node's guard", fmt.Errorf("pausing: %w", guard), ErrDiskFull, "cannot pause: 10 MB free"},
		{"invalid stays invalid", &Error{Kind: ErrInvalid, Msg: "step 2 failed", Cause: enospc}, ErrInvalid, "step 2 failed"},
		{"not found stays", &Error{Kind: ErrNotFound, Msg: "no such sandbox", Cause: enospc}, ErrNotFound, "no such sandbox"},
		{"plain failure", errors.New("something else"), nil, ""},
	}
	for _, tt := range tests {
		k, msg := Classify(tt.err)
		want := tt.msg
		if tt.kind == ErrDiskFull && want == "" {
			want = "the server's disk is full: " + DiskFullAdvice
		}
		if k.Err != tt.kind || msg != want {
			t.Errorf("%s: Classify = %v %q; want %v %q", tt.name, k.Err, msg, tt.kind, want)
		}
		if tt.kind == ErrDiskFull && !strings.Contains(tt.err.Error(), "10 MB") && DiskFull(tt.err) == tt.err {
			t.Errorf("%s: DiskFull left it as it was", tt.name)
		}
	}
	if DiskFull(nil) != nil {
		t.Error("DiskFull(nil) != nil")
	}
}

func TestPublic(t *testing.T) {
	tests := []struct {
		name string
		err  error
		msg  string
	}{
		{"its own message", &Error{Kind: ErrNotFound, Msg: "no such sandbox"}, "no such sandbox"},
		{"a kind without words", fmt.Errorf("finding: %w", ErrNotFound), http.StatusText(http.StatusNotFound)},
		{"the server's own failure", errors.New("database: disk I/O"), "internal error; the server log has the details"},
	}
	for _, tt := range tests {
		k, msg := Public(tt.err)
		if wk, _ := Classify(tt.err); k != wk || msg != tt.msg {
			t.Errorf("%s: Public = %+v %q; want %+v %q", tt.name, k, msg, wk, tt.msg)
		}
	}
}
