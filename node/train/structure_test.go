package train_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// sources parses the package's files, tests aside.
func sources(t *testing.T) (*token.FileSet, []*ast.File) {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatal("no source files found")
	}
	return fset, files
}

// structs returns the package's struct types by name.
func structs(files []*ast.File) map[string]*ast.StructType {
	out := map[string]*ast.StructType{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok {
					out[ts.Name.Name] = st
				}
			}
			return true
		})
	}
	return out
}

// typeName is the name of a type expression T or *T ("" otherwise).
func typeName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// TestRolesKeepToThemselves checks that no role of the core (a struct
// holding the Core as its field c: the agreement, the worker, the owner)
// reads or writes another role's fields: what one needs of another goes
// through a method (the small ones on the Core in core.go, "What one role
// knows of another"), so each role's state has one reader to reason about.
// A role's fields include the state types it holds (syncOwner, joining...):
// reaching them goes through the role's own field.
//
// It follows, in each method of a role, the expressions that denote the
// Core (the receiver's c, a variable set from it, a *Core parameter) and
// another role (the Core's field of that role, a variable set from it, a
// parameter of that role's type).
func TestRolesKeepToThemselves(t *testing.T) {
	fset, files := sources(t)
	types := structs(files)
	core := types["Core"]
	if core == nil {
		t.Fatal("no Core struct")
	}
	// The roles and their fields.
	fields := map[string]map[string]bool{}
	for name, st := range types {
		for _, fl := range st.Fields.List {
			if typeName(fl.Type) == "Core" && len(fl.Names) == 1 && fl.Names[0].Name == "c" {
				fields[name] = map[string]bool{}
			}
		}
	}
	for name := range fields {
		for _, fl := range types[name].Fields.List {
			for _, id := range fl.Names {
				fields[name][id.Name] = true
			}
		}
	}
	for _, want := range []string{"agreement", "owner", "worker"} {
		if fields[want] == nil {
			t.Fatalf("%s is not a role (a struct with a field c *Core) any more: update this test", want)
		}
	}
	// The Core's fields that hold a role: field name -> role.
	holds := map[string]string{}
	for _, fl := range core.Fields.List {
		if r := typeName(fl.Type); fields[r] != nil {
			for _, id := range fl.Names {
				holds[id.Name] = r
			}
		}
	}
	var bad []string
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List[0].Names) == 0 || fd.Body == nil {
				continue
			}
			self := typeName(fd.Recv.List[0].Type)
			if fields[self] == nil {
				continue
			}
			// denotes: variable name -> "Core" or a role.
			denotes := map[string]string{fd.Recv.List[0].Names[0].Name: self}
			for _, p := range fd.Type.Params.List {
				if n := typeName(p.Type); n == "Core" || fields[n] != nil {
					for _, id := range p.Names {
						denotes[id.Name] = n
					}
				}
			}
			var what func(e ast.Expr) string
			what = func(e ast.Expr) string {
				switch e := e.(type) {
				case *ast.Ident:
					return denotes[e.Name]
				case *ast.ParenExpr:
					return what(e.X)
				case *ast.UnaryExpr:
					if e.Op == token.AND {
						return what(e.X)
					}
				case *ast.SelectorExpr:
					switch x := what(e.X); {
					case x == "Core":
						return holds[e.Sel.Name]
					case x != "" && e.Sel.Name == "c":
						return "Core"
					}
				}
				return ""
			}
			// Variables set from the Core or a role, until nothing changes
			// (c := o.c; w := &c.w).
			for changed := true; changed; {
				changed = false
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					as, ok := n.(*ast.AssignStmt)
					if !ok || len(as.Lhs) != len(as.Rhs) {
						return true
					}
					for i, l := range as.Lhs {
						id, ok := l.(*ast.Ident)
						if !ok || id.Name == "_" || denotes[id.Name] != "" {
							continue
						}
						if w := what(as.Rhs[i]); w != "" {
							denotes[id.Name] = w
							changed = true
						}
					}
					return true
				})
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				se, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if other := what(se.X); other != "" && other != "Core" && other != self && fields[other][se.Sel.Name] {
					bad = append(bad, fmt.Sprintf("%s: %s.%s uses %s's field %s", fset.Position(se.Sel.Pos()), self, fd.Name.Name, other, se.Sel.Name))
				}
				return true
			})
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

// TestSmallParts checks the core's code stays in parts a reader can hold:
// no struct with more than 25 fields (a, b T counts two), so state of one
// kind (a mode's, a role's phase, scratch) gets a type of its own; and no
// function over 120 lines, so a long decision reads as named steps.
func TestSmallParts(t *testing.T) {
	const maxFields, maxLines = 25, 120
	fset, files := sources(t)
	types := structs(files)
	names := make([]string, 0, len(types))
	for name := range types {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		st := types[name]
		n := 0
		for _, fl := range st.Fields.List {
			n += max(1, len(fl.Names)) // (an embedded field has no name)
		}
		if n > maxFields {
			t.Errorf("%s: struct %s has %d fields, want at most %d", fset.Position(st.Pos()), name, n, maxFields)
		}
	}
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxLines {
				t.Errorf("%s: %s has %d lines, want at most %d: split it into named steps", fset.Position(fd.Pos()), fd.Name.Name, n, maxLines)
			}
		}
	}
}
