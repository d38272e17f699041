package node

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/netpolicy"
	"github.com/lizard-build/lizard/internal/store"
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
// of the decision, or a name matched by hand, fails here. Above the node
// (deciders), nothing reads a sandbox's state, end or liveness to decide
// it either: they ask Check (a node.Sandbox's, or control.Check of the
// API's sandbox).
func TestOneDecision(t *testing.T) {
	root := testenv.RepoRoot(t)
	single := map[string]string{ // text → the one file that may spell it
		"not running; wait until it runs": "internal/node/sandbox.go",
		api.ErrorNameTimeout:              "api/types.go",
		api.ErrorNameKernelDied:           "api/types.go",
	}
	found := map[string][]string{}
	var decided []string
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
		rel = filepath.ToSlash(rel)
		if slices.Contains(deciders, filepath.Dir(rel)) {
			decided = append(decided, stateDecisions(fset, f, rel)...)
		}
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
	for read := range stateReads {
		if !stateReadsSeen[read] {
			t.Errorf("stateReads names %q, which is no longer in the code: remove it", read)
		}
	}
	for _, d := range decided {
		t.Errorf("%s decides from a sandbox's state whether it is live or running; ask Check (node.Sandbox.Check, control.Check)", d)
	}
}

// deciders are the packages above the node that ask whether a sandbox is
// live and running: the control plane, the cluster and the surfaces.
var deciders = []string{"internal/control", "internal/cluster", "internal/cluster/remote", "internal/server",
	"internal/e2b", "internal/e2b/envd", "internal/mcp", "internal/agentproxy"}

// stateReads are the reads of a state that decide nothing of the sort,
// by file and expression.
var stateReads = map[string]string{
	// A node.Event's state: whether a stop was a pause, not a sandbox's.
	"internal/control/control.go e.State != api.StatePaused": "an event",
}

var stateReadsSeen = map[string]bool{}

// stateDecisions are the places in f that decide from a sandbox's fields
// whether it is live or running: its State compared with one of api's
// states, its EndedAt with nil, or its Live().
func stateDecisions(fset *token.FileSet, f *ast.File, rel string) []string {
	var out []string
	field := func(e ast.Expr, name string) bool {
		s, ok := e.(*ast.SelectorExpr)
		return ok && s.Sel.Name == name
	}
	apiState := func(e ast.Expr) bool {
		s, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		pkg, ok := s.X.(*ast.Ident)
		return ok && pkg.Name == "api" && strings.HasPrefix(s.Sel.Name, "State")
	}
	isNil := func(e ast.Expr) bool { id, ok := e.(*ast.Ident); return ok && id.Name == "nil" }
	ast.Inspect(f, func(n ast.Node) bool {
		var found bool
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if n.Op != token.EQL && n.Op != token.NEQ {
				return true
			}
			found = field(n.X, "State") && apiState(n.Y) || apiState(n.X) && field(n.Y, "State") ||
				field(n.X, "EndedAt") && isNil(n.Y) || isNil(n.X) && field(n.Y, "EndedAt")
		case *ast.CallExpr:
			found = field(n.Fun, "Live") && len(n.Args) == 0
		}
		if found {
			var b strings.Builder
			printer.Fprint(&b, fset, n)
			if _, ok := stateReads[rel+" "+b.String()]; ok {
				stateReadsSeen[rel+" "+b.String()] = true
			} else {
				out = append(out, fmt.Sprintf("%s:%d %s", rel, fset.Position(n.Pos()).Line, b.String()))
			}
		}
		return true
	})
	return out
}

// TestSandboxOf: every field of a sandbox's row reaches the seam's
// Sandbox (and a shape comes back as recorded), so that a field the row
// gains is carried on purpose or fails here.
func TestSandboxOf(t *testing.T) {
	n := 0
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		n++
		switch v.Kind() {
		case reflect.String:
			v.SetString(fmt.Sprintf("s%d", n))
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int, reflect.Int64:
			v.SetInt(int64(n))
		case reflect.Float64:
			v.SetFloat(float64(n) + 0.5)
		case reflect.Pointer:
			p := reflect.New(v.Type().Elem())
			fill(p.Elem())
			v.Set(p)
		case reflect.Slice:
			s := reflect.MakeSlice(v.Type(), 1, 1)
			fill(s.Index(0))
			v.Set(s)
		case reflect.Map:
			m := reflect.MakeMap(v.Type())
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(k)
			fill(e)
			m.SetMapIndex(k, e)
			v.Set(m)
		case reflect.Struct:
			if v.Type() == reflect.TypeFor[time.Time]() {
				v.Set(reflect.ValueOf(time.Unix(1_800_000_000+int64(n), 0).UTC()))
				return
			}
			if v.Type() == reflect.TypeFor[netpolicy.Policy]() {
				v.Set(reflect.ValueOf(netpolicy.Policy{Default: netpolicy.Deny, Allow: []string{fmt.Sprintf("a%d.example.com", n)}}))
				return
			}
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					fill(v.Field(i))
				}
			}
		default:
			t.Fatalf("fill: no value for a %s", v.Type())
		}
	}
	var row store.Sandbox
	fill(reflect.ValueOf(&row).Elem())
	sb := SandboxOf(row)
	rv, sv := reflect.ValueOf(row), reflect.ValueOf(sb)
	for i := range rv.NumField() {
		name := rv.Type().Field(i).Name
		if name == "Shape" {
			continue
		}
		got := sv.FieldByName(name)
		if !got.IsValid() || !reflect.DeepEqual(got.Interface(), rv.Field(i).Interface()) {
			t.Errorf("SandboxOf: the row's %s does not reach node.Sandbox", name)
		}
	}
	if got := sb.Shape.Record(); !reflect.DeepEqual(got, row.Shape) {
		t.Errorf("SandboxOf(row).Shape.Record() = %+v; want the row's %+v", got, row.Shape)
	}
}
