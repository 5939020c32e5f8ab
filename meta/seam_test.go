package meta

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoStoreTypeAssertion keeps the metadata seam honest: Open returns the concrete
// *EtcdStore, so a caller that needs more than the Store interface holds the store it
// opened, and nothing in the module type-asserts a store back to its implementation (an
// unchecked one panics the day another implementation appears). It parses every Go
// file of the module and fails on a type assertion to *meta.EtcdStore (or *EtcdStore
// here), and on any type assertion of a Store() call's result.
func TestNoStoreTypeAssertion(t *testing.T) {
	root := filepath.Join("..")
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			ta, ok := n.(*ast.TypeAssertExpr)
			if !ok {
				return true
			}
			if ta.Type != nil && isEtcdStore(ta.Type) || isStoreCall(ta.X) {
				t.Errorf("%s: type assertion of a metadata store: hold the *meta.EtcdStore meta.Open returned instead", fset.Position(ta.Pos()))
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("parsed %d Go files under %s; expected the whole module", files, root)
	}
}

// isEtcdStore reports whether e is *meta.EtcdStore or *EtcdStore.
func isEtcdStore(e ast.Expr) bool {
	star, ok := e.(*ast.StarExpr)
	if !ok {
		return false
	}
	switch x := star.X.(type) {
	case *ast.Ident:
		return x.Name == "EtcdStore"
	case *ast.SelectorExpr:
		pkg, ok := x.X.(*ast.Ident)
		return ok && pkg.Name == "meta" && x.Sel.Name == "EtcdStore"
	}
	return false
}

// isStoreCall reports whether e is a call of a method named Store.
func isStoreCall(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Store"
}
