package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"sort"
	"strconv"
	"testing"
)

// TestRoutesMatchTheFunctions checks the stack's route table against the one
// the Lambda functions dispatch on (functions/internal/wire, which this module
// cannot import), by reading its source: a route the stack sends to a
// function that does not serve it would answer 404 in AWS only.
func TestRoutesMatchTheFunctions(t *testing.T) {
	const path = "../functions/internal/wire/routes.go"
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatalf("read the functions' route table: %v", err)
	}
	consts := map[string]string{}
	var routes *ast.CompositeLit
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.ValueSpec:
			for i, name := range x.Names {
				if i >= len(x.Values) {
					continue
				}
				if lit, ok := x.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					consts[name.Name], _ = strconv.Unquote(lit.Value)
				}
				if name.Name == "Routes" {
					routes, _ = x.Values[i].(*ast.CompositeLit)
				}
			}
		}
		return true
	})
	if routes == nil {
		t.Fatalf("%s has no Routes literal", path)
	}
	value := func(e ast.Expr) string {
		switch v := e.(type) {
		case *ast.BasicLit:
			s, _ := strconv.Unquote(v.Value)
			return s
		case *ast.Ident:
			return consts[v.Name]
		}
		return "?"
	}
	var theirs []string
	for _, el := range routes.Elts {
		cl, ok := el.(*ast.CompositeLit)
		if !ok || len(cl.Elts) != 3 {
			t.Fatalf("unexpected route element in %s", path)
		}
		theirs = append(theirs, value(cl.Elts[0])+" "+value(cl.Elts[1])+" -> "+value(cl.Elts[2]))
	}
	var ours []string
	for _, r := range Routes {
		ours = append(ours, r.Key()+" -> "+r.Function)
	}
	sort.Strings(theirs)
	sort.Strings(ours)
	if len(theirs) != len(ours) {
		t.Errorf("stack has %d routes, functions %d", len(ours), len(theirs))
	}
	for i := range min(len(theirs), len(ours)) {
		if theirs[i] != ours[i] {
			t.Errorf("route tables differ: stack %q, functions %q", ours[i], theirs[i])
			break
		}
	}
}
