// Package arch holds the tests that keep the code's shape what
// docs/architecture.md says it is (issue 35's "Shown by"): no type over 60
// methods, no function over 120 lines, no import back up the floors, a
// runCode's path through the node under 35 stops (stops_test.go, a real
// trace); and that docs/architecture.md's walks name functions that exist.
// It has no code of its own: it reads every package's source (and runs
// internal/node's TestAcquireRunningAndPaused under coverage), which no
// one package's tests should have to, and it is where the next such rule
// goes.
//
// The bounds are ratchets. Today's offenders are listed with their measure;
// the test fails when one grows, when a new one appears, or when one is
// fixed and still listed, so the lists only shrink.
package arch

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/testenv"
)

const module = "github.com/lizard-build/lizard/"

// Past these a type or a function is two concepts (STYLE.md): split it by
// the question it answers, not by size.
const (
	maxMethods = 60
	maxLines   = 120
)

// methodsAllowed are the types over maxMethods today, keyed by package
// path and type name, with their count of methods (pointer and value
// receivers). Lower an entry as its type sheds methods; remove it when the
// type is under the bound.
var methodsAllowed = map[string]int{}

// linesAllowed are the functions over maxLines today, keyed by file and
// function (Type.Method for a method), with their length in lines from
// func to closing brace.
var linesAllowed = map[string]int{}

// floors are the packages of the module from the top down: a package
// imports packages of its own floor or below, never above, so a reader can
// go down the floors and never come back up. Every package with non-test
// code is on one: a new package is placed here by whoever adds it. A path
// ending in "/..." holds the packages under it.
var floors = []struct {
	name string
	pkgs []string
}{
	{"programs: binaries and tools, and the daemon that wires the core", []string{
		"cmd/lizard", "cmd/lizard-agent", "cmd/lizard-client", "cmd/lizard-vminit",
		"internal/daemon", "internal/backup", "internal/check", "bench/cluster", "bench/fleet", "bench/egress", "bench/images", "web/console/test/cleanup",
	}},
	{"clients of the public API", []string{
		"internal/cli", "internal/mcp", "internal/dockerfile",
	}},
	{"surfaces: what answers callers", []string{
		"internal/server", "internal/e2b", "internal/e2b/envd", "internal/e2b/uploads", "internal/console", "internal/desktop",
	}},
	{"the control plane and the cluster", []string{
		"internal/control", "internal/cluster", "internal/cluster/remote",
	}},
	{"what the control plane keeps of a project beside its sandboxes: its lifecycle events and webhooks", []string{
		"internal/events", "internal/webhook",
	}},
	{"the node", []string{
		"internal/node", "internal/node/nodetest", "internal/warm",
	}},
	{"what the node drives: runtimes, templates, network, images", []string{
		"internal/recipe", "internal/template", "internal/oci", "internal/volume",
		"internal/sandbox", "internal/sandbox/gvisor", "internal/sandbox/qemu",
		"internal/sandbox/sandboxtest", "internal/sandbox/hostproc",
		"internal/egress", "internal/secrets/inject", "internal/netns",
		"internal/imagestore", "internal/imagestore/disk", "internal/imagestore/s3",
		"internal/agentclient", "internal/agentproxy", "internal/fdbudget",
	}},
	{"records: the store and what is kept in it", []string{
		"internal/store", "internal/store/pgtest", "internal/auth", "internal/secrets",
	}},
	{"inside a sandbox", []string{
		"internal/agent", "internal/agent/pid1", "internal/agent/sudo", "internal/pykernel", "internal/sandbox/qemu/vminit",
		"internal/sandbox/sandboxtest/testdata/server",
	}},
	{"foundations every floor may use", []string{
		// client, the Go client, imports only api: a surface that calls
		// an agent's API (envd, over the agent proxy's transport) is one
		// more client of it (issue 35).
		"client",
		"api", "internal/errdefs", "internal/netpolicy", "internal/metrics", "internal/trace",
		"internal/trace/otlptest", "internal/keylock", "internal/budget", "internal/deathsig",
		"internal/inflight", "internal/cluster/secret", "internal/testenv", "internal/version", "internal/chunkcopy", "internal/sparse", "bench/internal/loadgen",
		"internal/e2b/envd/proto/...",
	}},
}

// arrowsAllowed are today's imports back up the floors.
var arrowsAllowed = map[string]bool{}

// source is the module's non-test, hand-written Go, parsed.
type source struct {
	fset  *token.FileSet
	files map[string]*ast.File // by path from the repository's top, slash-separated
}

func parseSource(t *testing.T) *source {
	t.Helper()
	root := testenv.RepoRoot(t)
	s := &source{fset: token.NewFileSet(), files: map[string]*ast.File{}}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// .cache holds gVisor's source, node_modules other people's.
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(s.fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		s.files[filepath.ToSlash(rel)] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// receiver names a method's type, without its pointer or type parameters.
func receiver(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	e := fd.Recv.List[0].Type
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	switch x := e.(type) {
	case *ast.IndexExpr:
		e = x.X
	case *ast.IndexListExpr:
		e = x.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// funcs calls fn with every function declaration with a body, its file and
// its name as the lists key it.
func (s *source) funcs(fn func(file string, fd *ast.FuncDecl, name string)) {
	for file, f := range s.files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			name := fd.Name.Name
			if r := receiver(fd); r != "" {
				name = r + "." + name
			}
			fn(file, fd, name)
		}
	}
}

// ratchet compares what was measured over the bound with the allowlist.
func ratchet(t reporter, what, list string, bound int, over, allowed map[string]int) {
	t.Helper()
	for k, n := range over {
		switch a, ok := allowed[k]; {
		case !ok:
			t.Errorf("%s has %d %s, over %d: split it by the question each part answers (STYLE.md); do not add it to %s", k, n, what, bound, list)
		case n > a:
			t.Errorf("%s has %d %s, %d more than %s allows (%d): it may only shrink", k, n, what, n-a, list, a)
		case n < a:
			t.Logf("%s has %d %s, down from %d: lower its entry in %s", k, n, what, a, list)
		}
	}
	for k, a := range allowed {
		if _, ok := over[k]; !ok {
			t.Errorf("%s is in %s (%d %s) but no longer over %d (or is gone): remove its entry, so that it cannot grow back", k, list, a, what, bound)
		}
	}
}

// TestMethodsPerType: no type has more than maxMethods methods but those
// listed, and those no more than they had.
func TestMethodsPerType(t *testing.T) {
	s := parseSource(t)
	count := map[string]int{}
	s.funcs(func(file string, fd *ast.FuncDecl, name string) {
		if r := receiver(fd); r != "" {
			count[pathDir(file)+"."+r]++
		}
	})
	over := map[string]int{}
	for k, n := range count {
		if n > maxMethods {
			over[k] = n
		}
	}
	ratchet(t, "methods", "methodsAllowed", maxMethods, over, methodsAllowed)
}

// TestFunctionLength: no function is longer than maxLines lines but those
// listed, and those no longer than they were.
func TestFunctionLength(t *testing.T) {
	s := parseSource(t)
	over := map[string]int{}
	s.funcs(func(file string, fd *ast.FuncDecl, name string) {
		n := s.fset.Position(fd.End()).Line - s.fset.Position(fd.Pos()).Line + 1
		if n > maxLines {
			over[file+" "+name] = n
		}
	})
	ratchet(t, "lines", "linesAllowed", maxLines, over, linesAllowed)
}

func pathDir(file string) string {
	d := filepath.ToSlash(filepath.Dir(file))
	if d == "." {
		return ""
	}
	return d
}

// floorOf returns the index of pkg's floor, or -1 if it is on none.
func floorOf(pkg string) int {
	for i, f := range floors {
		for _, p := range f.pkgs {
			if p == pkg || strings.HasSuffix(p, "/...") && (pkg == strings.TrimSuffix(p, "/...") || strings.HasPrefix(pkg, strings.TrimSuffix(p, "..."))) {
				return i
			}
		}
	}
	return -1
}

// TestFloors: every package is on a floor and imports nothing above it but
// the arrows listed. The store's own, stricter rule is TestLeafDependencies
// in internal/store (it also keeps the DNS library out).
func TestFloors(t *testing.T) {
	s := parseSource(t)
	imports := map[string]map[string]bool{}
	for file, f := range s.files {
		if strings.HasPrefix(file, "build/") {
			continue // joined to gVisor's copy at build time, not this module's
		}
		pkg := pathDir(file)
		if imports[pkg] == nil {
			imports[pkg] = map[string]bool{}
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if rest, ok := strings.CutPrefix(p, module); ok {
				imports[pkg][rest] = true
			}
		}
	}
	var pkgs []string
	for p := range imports {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	seen := map[string]bool{}
	for _, pkg := range pkgs {
		from := floorOf(pkg)
		if from < 0 {
			t.Errorf("package %s is on no floor: add it to floors in internal/arch/arch_test.go, on the highest floor it imports from", pkg)
			continue
		}
		for dep := range imports[pkg] {
			to := floorOf(dep)
			if to < 0 || to >= from {
				continue // a package on no floor is reported as such
			}
			arrow := pkg + " -> " + dep
			seen[arrow] = true
			if !arrowsAllowed[arrow] {
				t.Errorf("%s imports %s, back up the floors (%q above %q): pass what it needs in from above, as an interface or a value", pkg, dep, floors[to].name, floors[from].name)
			}
		}
	}
	for arrow := range arrowsAllowed {
		if !seen[arrow] {
			t.Errorf("arrowsAllowed lists %s, which is gone: remove it", arrow)
		}
	}
	// A floor naming a package that is no more would hide the next one of
	// that name.
	for _, f := range floors {
		for _, p := range f.pkgs {
			if strings.HasSuffix(p, "/...") {
				continue
			}
			if _, ok := imports[p]; !ok {
				t.Errorf("floors name %s, which has no Go code: remove it", p)
			}
		}
	}
}

// throughControl are the packages that hold a project's state, which the
// surfaces reach only through control (Control.Project(id) → Events,
// Webhooks, Secrets, ...): a surface that held them beside control would
// answer by rules control does not see (issue 35: "secrets, events and
// webhooks are called straight from server, beside control").
var throughControl = []string{"internal/store", "internal/events", "internal/webhook"}

// surfaces are the packages that answer callers over control.
var surfaces = []string{"internal/server", "internal/e2b", "internal/e2b/envd", "internal/desktop"}

// TestSurfacesThroughControl: no surface imports a package of
// throughControl. Floors alone allow it: those sit below the surfaces.
func TestSurfacesThroughControl(t *testing.T) {
	s := parseSource(t)
	for file, f := range s.files {
		if !slices.Contains(surfaces, pathDir(file)) {
			continue
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if rest, ok := strings.CutPrefix(p, module); ok && slices.Contains(throughControl, rest) {
				t.Errorf("%s imports %s: a surface reaches a project's state through control (Control.Project(id)), not beside it", file, rest)
			}
		}
	}
}

// TestRatchetCatches runs the ratchet on made-up measures: an offender that
// grew, a new one, one fixed and still listed, and one that shrank (allowed).
func TestRatchetCatches(t *testing.T) {
	tests := []struct {
		name    string
		over    map[string]int
		allowed map[string]int
		fails   bool
	}{
		{"same", map[string]int{"a.T": 70}, map[string]int{"a.T": 70}, false},
		{"shrank", map[string]int{"a.T": 65}, map[string]int{"a.T": 70}, false},
		{"grew", map[string]int{"a.T": 71}, map[string]int{"a.T": 70}, true},
		{"new", map[string]int{"a.T": 70, "b.U": 61}, map[string]int{"a.T": 70}, true},
		{"fixed but listed", map[string]int{}, map[string]int{"a.T": 70}, true},
	}
	for _, tt := range tests {
		r := &recorder{}
		ratchet(r, "methods", "the list", 60, tt.over, tt.allowed)
		if r.failed != tt.fails {
			t.Errorf("%s: failed %v, want %v (%s)", tt.name, r.failed, tt.fails, r.msgs)
		}
	}
}

// reporter is the part of testing.T the ratchet uses.
type reporter interface {
	Helper()
	Errorf(format string, a ...any)
	Logf(format string, a ...any)
}

// recorder is a reporter a test can see fail.
type recorder struct {
	failed bool
	msgs   []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, a ...any) {
	r.failed = true
	r.msgs = append(r.msgs, fmt.Sprintf(format, a...))
}
func (r *recorder) Logf(format string, a ...any) { r.msgs = append(r.msgs, fmt.Sprintf(format, a...)) }

// step is one step of docs/architecture.md's walks: "N. `file` `Func`".
var step = regexp.MustCompile("(?m)^\\d+\\. `([^`]+\\.go)` `([A-Za-z_][A-Za-z0-9_.]*)`")

// TestWalksNameRealCode: every step of docs/architecture.md's three walks
// (a create, a runCode, a create in a cluster) names a function that is in
// the file it names, so the walks cannot drift from the code a newcomer
// opens. A step's function is a function (Audit) or a method
// (Local.Create).
func TestWalksNameRealCode(t *testing.T) {
	s := parseSource(t)
	declared := map[string]bool{} // "file Name"
	s.funcs(func(file string, _ *ast.FuncDecl, name string) { declared[file+" "+name] = true })
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	walks := 0
	for _, title := range []string{"#### A create\n", "#### A runCode\n", "#### A create in a cluster\n"} {
		i := strings.Index(doc, title)
		if i < 0 {
			t.Errorf("docs/architecture.md has no walk %q", strings.TrimSpace(title))
			continue
		}
		walk := doc[i+len(title):]
		if j := strings.Index(walk, "\n#"); j >= 0 {
			walk = walk[:j]
		}
		steps := step.FindAllStringSubmatch(walk, -1)
		if len(steps) < 3 {
			t.Errorf("walk %q has %d steps; want each as \"N. `file.go` `Function` — what it does\"", strings.TrimSpace(title), len(steps))
		}
		for _, m := range steps {
			if !declared[m[1]+" "+m[2]] {
				t.Errorf("walk %q: %s declares no %s (renamed or moved? update docs/architecture.md)", strings.TrimSpace(title), m[1], m[2])
			}
		}
		walks++
	}
	if walks != 3 {
		t.Errorf("%d walks found, want 3", walks)
	}
}
