package fences

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestSentinelsCarryAClass: every exported sentinel error of the project
// (a package-level ErrX) is made with a containerd errdefs class
// (errdefs.ErrNotFound.WithMessage(…) and the like), or is another
// package's sentinel, so that the Engine API's status comes from one
// switch over classes (issue 43) and never from a list of every
// package's errors. A sentinel made with errors.New or fmt.Errorf fails.
func TestSentinelsCarryAClass(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	// errdefs' classed errors are comparable values: two sentinels of one
	// class and one message are == and errors.Is cannot tell them apart.
	made := map[string]string{} // class and message -> where
	err := filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != "../.." || d.Name() == "testdata" || d.Name() == "bench") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Err") || !name.IsExported() || i >= len(vs.Values) {
						continue
					}
					checked++
					call, ok := vs.Values[i].(*ast.CallExpr)
					if !ok {
						continue // another package's sentinel, or a value of its own type
					}
					fun, ok := call.Fun.(*ast.SelectorExpr)
					if !ok {
						continue
					}
					if class, ok := fun.X.(*ast.SelectorExpr); ok && fun.Sel.Name == "WithMessage" && len(call.Args) == 1 {
						if lit, ok := call.Args[0].(*ast.BasicLit); ok {
							key := class.Sel.Name + " " + lit.Value
							if at, dup := made[key]; dup {
								t.Errorf("%s: %s is %s with the words of %s: the two are one value to errors.Is; give it words of its own", fset.Position(name.Pos()), name.Name, class.Sel.Name, at)
							}
							made[key] = fset.Position(name.Pos()).String() + " " + name.Name
						}
					}
					if x, ok := fun.X.(*ast.Ident); ok && (x.Name == "errors" || x.Name == "fmt") {
						t.Errorf("%s: %s is made with %s.%s: give it a class (errdefs.ErrInvalidArgument.WithMessage(…), errdefs.ErrNotFound…)", fset.Position(name.Pos()), name.Name, x.Name, fun.Sel.Name)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 40 {
		t.Fatalf("checked only %d sentinels: run from test/fences", checked)
	}
}
