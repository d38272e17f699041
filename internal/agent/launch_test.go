package agent

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestOneLaunchPath keeps process starts in launch.go: a process made
// anywhere else in the agent would choose its own user, group and
// environment, which is how a start path that forgets to drop root, or to
// lead a group a kill reaches, comes about.
func TestOneLaunchPath(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "launch.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var what string
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "exec" && strings.HasPrefix(n.Sel.Name, "Command") {
					what = "exec." + n.Sel.Name
				}
				if n.Sel.Name == "SysProcAttr" {
					what = "SysProcAttr"
				}
			}
			if what != "" {
				t.Errorf("%s: %s outside launch.go: start processes with launcher.command", fset.Position(n.Pos()), what)
			}
			return true
		})
	}
}
