package errdefs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/testenv"
)

const module = "github.com/lizard-build/lizard/"

// errorName reports whether a package's exported name is part of an error
// vocabulary: a sentinel (Err...), an error type (Error) or one of the
// helpers that build or read them.
func errorName(name string) bool {
	return strings.HasPrefix(name, "Err") || vocabulary(name)
}

// vocabulary reports whether name is an error type or helper rather than
// a package's own sentinel.
func vocabulary(name string) bool {
	switch name {
	case "Error", "Message", "Invalidf", "DiskFull", "DiskFullAdvice":
		return true
	}
	return false
}

// TestNoImportOnlyForErrors: no file in internal/ imports another of
// Lizard's packages only to name its errors (the vocabulary is errdefs'),
// and the server names no error of node or store at all: it answers by
// errdefs' one table, so what decides need not be known to what answers.
// A file may recognise a package's own sentinels (store.ErrNotFound) when
// its package uses that package for more than errors: the error came
// from a call into it. Test files may: a test feeds a package the errors
// it will meet. api is the public schema; its Error is a body, not an
// error.
func TestNoImportOnlyForErrors(t *testing.T) {
	root := filepath.Join(testenv.RepoRoot(t), "internal")
	fset := token.NewFileSet()
	type file struct {
		rel  string
		used map[string][]string // import path → names used
	}
	var files []file
	beyondErrors := map[string]bool{} // package dir + " " + import path: used for more than errors
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		imported := map[string]string{} // local name → import path
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if !strings.HasPrefix(p, module) || p == module+"api" || p == module+"internal/errdefs" {
				continue
			}
			name := p[strings.LastIndex(p, "/")+1:]
			if im.Name != nil {
				name = im.Name.Name
			}
			imported[name] = p
		}
		fl := file{rel: rel, used: map[string][]string{}}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && imported[id.Name] != "" {
					p := imported[id.Name]
					fl.used[p] = append(fl.used[p], sel.Sel.Name)
					if !errorName(sel.Sel.Name) {
						beyondErrors[filepath.Dir(rel)+" "+p] = true
					}
				}
			}
			return true
		})
		files = append(files, fl)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		for p, names := range f.used {
			onlyErrors, helpers := true, false
			for _, n := range names {
				onlyErrors = onlyErrors && errorName(n)
				helpers = helpers || vocabulary(n)
			}
			if onlyErrors && (helpers || !beyondErrors[filepath.Dir(f.rel)+" "+p]) {
				t.Errorf("internal/%s imports %s only for its errors %v: use errdefs", f.rel, p, names)
			}
			if filepath.Dir(f.rel) == "server" && (p == module+"internal/node" || p == module+"internal/store") {
				for _, n := range names {
					if errorName(n) {
						t.Errorf("internal/%s names %s.%s: the server answers errors by errdefs' table", f.rel, p[strings.LastIndex(p, "/")+1:], n)
					}
				}
			}
		}
	}
}
