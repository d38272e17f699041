package store

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/testenv"
)

func TestCheck(t *testing.T) {
	ended := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sb := func(state, reason string, end bool) Sandbox {
		s := Sandbox{ID: "sb1", State: state, EndReason: reason}
		if end {
			s.EndedAt = &ended
		}
		return s
	}
	tests := []struct {
		name   string
		sb     Sandbox
		want   Want
		status int // 0: nil
		paused bool
		msg    string
	}{
		{"running, running wanted", sb(api.StateRunning, "", false), WantRunning, 0, false, ""},
		{"running, live wanted", sb(api.StateRunning, "", false), WantLive, 0, false, ""},
		{"paused, live wanted", sb(api.StatePaused, "", false), WantLive, 0, false, ""},
		{"starting, live wanted", sb(api.StateStarting, "", false), WantLive, 0, false, ""},
		{"paused, running wanted", sb(api.StatePaused, "", false), WantRunning, http.StatusConflict, true,
			"sandbox sb1 is paused, not running; wait until it runs"},
		{"starting, running wanted", sb(api.StateStarting, "", false), WantRunning, http.StatusConflict, false,
			"sandbox sb1 is starting, not running; wait until it runs"},
		{"killed", sb(api.StateKilled, "killed through the API", true), WantRunning, http.StatusGone, false,
			"sandbox sb1 was killed at 2026-01-02T03:04:05Z; create a new sandbox"},
		{"expired", sb(api.StateExpired, "", true), WantLive, http.StatusGone, false,
			"sandbox sb1 expired at 2026-01-02T03:04:05Z (its timeout passed; extend it with setTimeout next time); create a new sandbox"},
		{"failed", sb(api.StateFailed, "its runtime stopped", true), WantLive, http.StatusGone, false,
			"sandbox sb1 failed at 2026-01-02T03:04:05Z: its runtime stopped; create a new sandbox"},
		// Ended while paused: gone, not paused.
		{"ended paused", sb(api.StatePaused, "", true), WantRunning, http.StatusGone, false,
			"sandbox sb1 failed at 2026-01-02T03:04:05Z; create a new sandbox"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.sb.Check(tt.want)
			if tt.status == 0 {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			k, msg := errdefs.Classify(err)
			if k.Status != tt.status || msg != tt.msg {
				t.Errorf("Check = %d %q, want %d %q", k.Status, msg, tt.status, tt.msg)
			}
			if errors.Is(err, ErrPaused) != tt.paused {
				t.Errorf("errors.Is(ErrPaused) = %v, want %v", !tt.paused, tt.paused)
			}
		})
	}
	k, msg := errdefs.Classify(NotFound("sb1"))
	if k.Status != http.StatusNotFound || msg != "sandbox sb1 not found" {
		t.Errorf("NotFound = %d %q", k.Status, msg)
	}
}

// TestOneDecision: whether a sandbox runs is decided in one place (Check),
// and the names of call outcomes are spelled in one (package api): no
// other non-test Go file holds a string with their text, so a second copy
// of the decision, or a name matched by hand, fails here.
func TestOneDecision(t *testing.T) {
	root := testenv.RepoRoot(t)
	single := map[string]string{ // text → the one file that may spell it
		"not running; wait until it runs": "internal/store/check.go",
		api.ErrorNameTimeout:              "api/types.go",
		api.ErrorNameKernelDied:           "api/types.go",
	}
	found := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			for text := range single {
				if strings.Contains(s, text) {
					found[text] = append(found[text], filepath.ToSlash(rel)+":"+strconv.Itoa(fset.Position(lit.Pos()).Line))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for text, file := range single {
		if len(found[text]) != 1 || !strings.HasPrefix(found[text][0], file+":") {
			t.Errorf("%q is spelled at %v; want once, in %s (use it from there)", text, found[text], file)
		}
	}
}
