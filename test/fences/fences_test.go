// Package fences checks the import rules of the design card: which
// packages may import which (the way go-containerregistry's depcheck
// does), so that a runc upgrade touches one package and the internals of
// the backends stay internal.
package fences

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/slopbox/slopbox"

// imports maps each package directory (relative to the repository root)
// to the import paths of its files, tests included.
func imports(t *testing.T) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != "../.." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel("../..", filepath.Dir(p))
		if out[dir] == nil {
			out[dir] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			out[dir][path] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("found only %d packages: run from test/fences", len(out))
	}
	return out
}

func within(dir string, roots ...string) bool {
	for _, r := range roots {
		if dir == r || strings.HasPrefix(dir, r+"/") {
			return true
		}
	}
	return false
}

func TestImportFences(t *testing.T) {
	rules := []struct {
		what    string
		imports func(string) bool
		allowed []string // directories that may import it
	}{
		{"libcontainer (runc)", func(p string) bool { return strings.HasPrefix(p, "github.com/opencontainers/runc") },
			[]string{"sandbox"}},
		{"the backends' internals", func(p string) bool { return p == module+"/internal/backendkit" },
			[]string{"sandbox", "local", "internal/backendkit"}},
		{"the spawn server", func(p string) bool { return strings.HasPrefix(p, module+"/sandbox/internal/spawnd") },
			[]string{"sandbox"}},
	}
	all := imports(t)
	for dir, imps := range all {
		for imp := range imps {
			for _, r := range rules {
				if r.imports(imp) && !within(dir, r.allowed...) {
					t.Errorf("%s imports %s (%s): only %v may", dir, imp, r.what, r.allowed)
				}
			}
			// oci is a pure spec builder; backend depends on no implementation;
			// dockercompat on the backend interface, and on no implementation
			// (internal/atomicfile, which writes a file whole,
			// internal/regfile, which opens one to read, and
			// internal/tarentry, which writes one opened entry of a tree
			// to a tar, the snapshots' too, know none; its tests may use
			// the test fixtures).
			if dir == "dockercompat" && strings.HasPrefix(imp, module) && imp != module+"/backend" && imp != module+"/internal/atomicfile" && imp != module+"/internal/regfile" && imp != module+"/internal/tarentry" && !strings.HasPrefix(imp, module+"/test/") {
				t.Errorf("dockercompat imports %s: it depends on the backend interface only", imp)
			}
			// (internal/sparse, which writes a file's zeros as holes,
			// knows no store either, nor internal/tarentry, which writes
			// one opened entry of a tree to a tar, WriteLayer's too.)
			if dir == "image/archive" && strings.HasPrefix(imp, module) && !strings.HasPrefix(imp, module+"/test/") && imp != module+"/image/archive/archivetest" && imp != module+"/internal/sparse" && imp != module+"/internal/tarentry" {
				t.Errorf("image/archive imports %s: the layer applier knows nothing of the store", imp)
			}
			if dir == "oci" && strings.HasPrefix(imp, module) {
				t.Errorf("oci imports %s: it must stay a pure spec builder", imp)
			}
			if dir == "backend" && strings.HasPrefix(imp, module) {
				t.Errorf("backend imports %s: the interface depends on no implementation", imp)
			}
		}
	}
}

// TestSurfacesThroughService: the Engine API and the CLI's Docker verbs
// reach the sandboxes through dockercompat/service only (issue 43, as
// moby's router holds a Backend interface, never the daemon). The
// engine's non-test files import no sandbox, oci or internal package (its
// tests may, to set up); every CLI file imports neither sandbox nor oci
// and opens no backend of its own (openBackend), but those cliExempt
// names, each for its reason.
func TestSurfacesThroughService(t *testing.T) {
	engine, err := filepath.Glob("../../dockercompat/engine/*.go")
	if err != nil || len(engine) == 0 {
		t.Fatalf("dockercompat/engine: no Go files (%v)", err)
	}
	cli, err := filepath.Glob("../../cmd/slopbox/*.go")
	if err != nil || len(cli) == 0 {
		t.Fatalf("cmd/slopbox: no Go files (%v)", err)
	}
	for f := range cliExempt {
		if _, err := os.Stat("../../cmd/slopbox/" + f); err != nil {
			t.Errorf("cliExempt names %s: %v", f, err)
		}
	}
	banned := func(path string, engine bool) bool {
		return path == module+"/sandbox" || strings.HasPrefix(path, module+"/sandbox/") || path == module+"/oci" ||
			engine && strings.HasPrefix(path, module+"/internal/")
	}
	for _, p := range append(engine, cli...) {
		isEngine := strings.Contains(p, "/dockercompat/engine/")
		if strings.HasSuffix(p, "_test.go") || !isEngine && cliExempt[filepath.Base(p)] != "" {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if banned(path, isEngine) {
				t.Errorf("%s imports %s: the surfaces reach the sandboxes through dockercompat/service only", p, path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok {
				if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "openBackend" {
					t.Errorf("%s calls openBackend: a Docker verb opens the service (openService)", p)
				}
			}
			return true
		})
	}
}

// cliExempt are the CLI's files that reach the sandbox backend itself,
// and why.
var cliExempt = map[string]string{
	"sandboxflags.go": "defines openBackend and openService",
	"run.go":          "run's spawn (SpawnForeground, SpawnCommand, the pool's claim): not yet a service verb (issue 43's note)",
	"pool.go":         "the CLI's warm pool is the sandbox backend's keeper (issue 45)",
	"tty.go":          "a terminal's type (sandbox.Terminal)",
	"env.go":          "env run: environment specs and rlm_code configs through any backend, not a Docker verb",
	"oci.go":          "slopbox oci: the runc-compatible CLI over oci/",
	"doctor.go":       "the host's checks, of the backend itself",
	"serve.go":        "serve opens the backend the engine's service wraps",
}

// TestTypedResponses: the Engine API and Docker's views answer with typed
// structs (moby's API types or the packages' own), never a map[string]any
// or map[string]interface{} whose keys a typo changes unseen (issue 43).
func TestTypedResponses(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	for _, dir := range []string{"../../dockercompat/engine", "../../dockercompat/service"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range files {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			ast.Inspect(f, func(n ast.Node) bool {
				m, ok := n.(*ast.MapType)
				if !ok {
					return true
				}
				if k, ok := m.Key.(*ast.Ident); !ok || k.Name != "string" {
					return true
				}
				switch v := m.Value.(type) {
				case *ast.Ident:
					if v.Name != "any" {
						return true
					}
				case *ast.InterfaceType:
					if len(v.Methods.List) > 0 {
						return true
					}
				default:
					return true
				}
				t.Errorf("%s: a map[string]any: give the response a type", fset.Position(m.Pos()))
				return true
			})
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d files: run from test/fences", checked)
	}
}

// TestArchitectureTable: docs/architecture.md's import table names every
// package of the project (but tests, benches, examples and test helpers)
// with exactly the project packages its non-test files import, so that
// the drawing of the rooms and arrows cannot drift from the code.
func TestArchitectureTable(t *testing.T) {
	b, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := map[string]map[string]bool{}
	_, table, ok := strings.Cut(string(b), "\n### Imports\n")
	if !ok {
		t.Fatal("docs/architecture.md has no \"### Imports\" section")
	}
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, "#") {
			break
		}
		cells := strings.Split(line, "|")
		if len(cells) != 5 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") || strings.TrimSpace(cells[1]) == "Package" {
			continue
		}
		pkg := strings.TrimSpace(cells[1])
		doc[pkg] = map[string]bool{}
		for _, imp := range strings.Split(cells[3], ",") {
			if imp = strings.TrimSpace(imp); imp != "" {
				doc[pkg][imp] = true
			}
		}
	}
	if len(doc) < 20 {
		t.Fatalf("read only %d rows of the import table", len(doc))
	}
	code := map[string]map[string]bool{}
	fset := token.NewFileSet()
	err = filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../..", p)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" ||
				rel == "test" || rel == "bench" || rel == "examples" || strings.HasSuffix(rel, "test") && rel != "test" && strings.Contains(rel, "/") {
				return filepath.SkipDir // tests, benches, examples, test helpers (image/archive/archivetest)
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := filepath.Dir(rel)
		if code[dir] == nil {
			code[dir] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if rest, ok := strings.CutPrefix(path, module+"/"); ok {
				code[dir][rest] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, imps := range code {
		want, ok := doc[dir]
		if !ok {
			t.Errorf("package %s is not in docs/architecture.md's import table", dir)
			continue
		}
		for imp := range imps {
			if !want[imp] {
				t.Errorf("%s imports %s: docs/architecture.md's table does not say so", dir, imp)
			}
		}
		for imp := range want {
			if !imps[imp] {
				t.Errorf("docs/architecture.md says %s imports %s: it does not", dir, imp)
			}
		}
	}
	for dir := range doc {
		if code[dir] == nil {
			t.Errorf("docs/architecture.md's import table names %s: no such package", dir)
		}
	}
}

// Function size (issue 43): no non-test function over maxLines lines or
// a cyclomatic complexity of maxComplexity (branches, cases and && or ||
// counted as gocyclo does). The functions over it today are listed with
// their size: each may shrink, none may grow, and a function not listed
// may not pass the bounds. Split one, and take it off the list.
const maxLines, maxComplexity = 100, 30

var oversized = map[string][2]int{ // file:function -> lines, complexity
}

// complexity is fn's cyclomatic complexity, as gocyclo counts it.
func complexity(fn ast.Node) int {
	c := 1
	ast.Inspect(fn, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if x.List != nil {
				c++
			}
		case *ast.CommClause:
			if x.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if x.Op == token.LAND || x.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}

func TestFunctionSize(t *testing.T) {
	fset := token.NewFileSet()
	seen := map[string]bool{}
	funcs := 0
	err := filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../..", p)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" ||
				rel == "test" || rel == "bench" || rel == "examples" || strings.HasSuffix(rel, "test") && strings.Contains(rel, "/") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			funcs++
			lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			cc := complexity(fd)
			key := rel + ":" + fd.Name.Name
			limit, listed := oversized[key]
			if !listed {
				limit = [2]int{maxLines, maxComplexity}
			}
			seen[key] = seen[key] || listed
			if lines > limit[0] || cc > limit[1] {
				t.Errorf("%s (%s): %d lines, complexity %d; the most is %d and %d: split it", key, fset.Position(fd.Pos()), lines, cc, limit[0], limit[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if funcs < 500 {
		t.Fatalf("read only %d functions", funcs)
	}
	for key := range oversized {
		if !seen[key] {
			t.Errorf("%s is listed as oversized but is gone: take it off the list", key)
		}
	}
}

// TestValidateOnce (issue 43 point 5): what a SpawnSpec may be is checked
// in one place, backend.SpawnSpec.Validate, which each backend calls
// first thing in its spawn: no other non-test code calls CheckPolicy (the
// policy half of it), and both backends call Validate.
func TestValidateOnce(t *testing.T) {
	fset := token.NewFileSet()
	calls := map[string]int{} // "dir:Name" -> calls of .Name()
	err := filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../..", p)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" || rel == "test" || rel == "bench" || rel == "examples" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			c, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := c.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch sel.Sel.Name {
			case "CheckPolicy":
				if filepath.Dir(rel) != "backend" {
					t.Errorf("%s: CheckPolicy outside package backend: call SpawnSpec.Validate, in the backend, once", fset.Position(c.Pos()))
				}
			case "Validate":
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "spec" {
					calls[filepath.Dir(rel)]++
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"sandbox", "local"} {
		if calls[dir] != 1 {
			t.Errorf("package %s calls spec.Validate() %d times, want once (its spawn, before any work)", dir, calls[dir])
		}
	}
}
