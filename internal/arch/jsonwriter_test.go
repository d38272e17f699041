package arch

import (
	"go/ast"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// TestOneJSONWriter: a JSON answer is written by api.WriteJSON alone
// (issue 35: there were six JSON error writers, five of them the same
// writeJSON in as many packages). Any other function that sets a
// response's Content-Type to application/json is a second writer.
// NDJSON streams and requests (req.Header.Set) are not matched.
func TestOneJSONWriter(t *testing.T) {
	s := parseSource(t)
	writers := 0
	s.funcs(func(file string, fd *ast.FuncDecl, name string) {
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || !setsJSONContentType(call) {
				return true
			}
			if file == "api/http.go" && name == "WriteJSON" {
				writers++
				return true
			}
			t.Errorf("%s: %s writes a JSON answer of its own: answer with api.WriteJSON", s.fset.Position(call.Pos()), name)
			return true
		})
	})
	if writers != 1 {
		t.Errorf("api.WriteJSON sets the content type %d times, want 1: did it move? (then move this test's exception with it)", writers)
	}
}

// setsJSONContentType reports whether call is X.Header().Set("Content-Type",
// "application/json..."): a response's header (a request's is a field,
// req.Header.Set).
func setsJSONContentType(call *ast.CallExpr) bool {
	set, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || set.Sel.Name != "Set" || len(call.Args) != 2 {
		return false
	}
	header, ok := set.X.(*ast.CallExpr)
	if !ok || len(header.Args) != 0 {
		return false
	}
	if sel, ok := header.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "Header" {
		return false
	}
	return stringLit(call.Args[0]) == "Content-Type" && strings.HasPrefix(stringLit(call.Args[1]), "application/json")
}

// stringLit is e's value if it is a string literal, else "".
func stringLit(e ast.Expr) string {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return ""
	}
	v, _ := strconv.Unquote(lit.Value)
	return v
}
