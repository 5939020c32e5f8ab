package client

import (
	"bytes"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestClientMethodsAreTheLedgerAPI keeps Client the library an application sees: ledgers
// (create, open, list, delete), its metadata store and Close. Requests addressed to one
// bookie (reading or copying an entry there, listing what it holds, choosing a
// replacement, recovering a ledger by its metadata) belong to repair tools and live in
// package internal/repair; a method added to Client fails here until it is added to the
// list on purpose.
func TestClientMethodsAreTheLedgerAPI(t *testing.T) {
	want := []string{"Close", "CreateLedger", "DeleteLedger", "ListLedgers", "OpenLedger", "Store"}
	typ := reflect.TypeFor[*Client]()
	var got []string
	for i := range typ.NumMethod() {
		got = append(got, typ.Method(i).Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("*Client's methods are %v, want %v (repair primitives go in package internal/repair)", got, want)
	}
}

// repairNames are the names of the repair primitives, which package internal/repair
// exports and package client must not.
var repairNames = []string{"Repairer", "Copier", "AddRecoveryTo", "ListEntriesFrom", "ReadEntryFrom", "PickReplacement", "NewCopier", "RecoverLedger", "ErrCopiesLost"}

// TestDocShowsOnlyTheLedgerAPI keeps `go doc -all ./client` the library an application
// needs: it renders what go doc shows of the package (the package doc, and every exported
// declaration with its doc comment, as go/doc filters them) and fails if any of it names a
// repair primitive, declared or merely mentioned, which would send a reader to an API they
// cannot use.
func TestDocShowsOnlyTheLedgerAPI(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	pkg, err := doc.NewFromFiles(fset, files, "github.com/bookie-go/bookie/client")
	if err != nil {
		t.Fatal(err)
	}
	var shown bytes.Buffer
	show := func(docText string, decl ast.Node) {
		shown.WriteString(docText)
		if decl != nil {
			if err := printer.Fprint(&shown, fset, decl); err != nil {
				t.Fatal(err)
			}
		}
		shown.WriteByte('\n')
	}
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			show(v.Doc, v.Decl)
		}
	}
	funcs := func(fs []*doc.Func) {
		for _, f := range fs {
			show(f.Doc, f.Decl)
		}
	}
	show(pkg.Doc, nil)
	values(pkg.Consts)
	values(pkg.Vars)
	funcs(pkg.Funcs)
	for _, typ := range pkg.Types {
		show(typ.Doc, typ.Decl)
		values(typ.Consts)
		values(typ.Vars)
		funcs(typ.Funcs)
		funcs(typ.Methods)
	}
	if shown.Len() < 1000 || !strings.Contains(shown.String(), "func (c *Client) OpenLedger(") {
		t.Fatalf("rendered %d bytes of go doc without Client.OpenLedger: the rendering is broken", shown.Len())
	}
	for i, line := range strings.Split(shown.String(), "\n") {
		for _, name := range repairNames {
			if strings.Contains(line, name) {
				t.Errorf("go doc ./client shows %q (line %d: %q); repair primitives belong in package internal/repair", name, i+1, strings.TrimSpace(line))
			}
		}
	}
}
