package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The shape of the code a reviewer checks by hand, checked on every run.
const (
	// mainMaxLines bounds package main's non-test code: it sets the
	// version and calls cli.Main; the commands live in package cli and
	// the work in the packages cli calls.
	mainMaxLines = 1500
	// funcMaxLines bounds a function (or function literal), first line to
	// last, in every package of the repository (tests aside).
	funcMaxLines = 120
)

// layeredPackages are the directories whose files must stand in layers:
// no file uses a top-level name of a file that uses one of its own,
// directly or through others.
var layeredPackages = []string{".", "cli"}

// goFile is one parsed non-test file.
type goFile struct {
	path string // from the repository's top
	file *ast.File
	fset *token.FileSet
}

// sourceFiles parses the non-test Go files of the repository, by
// directory.
func sourceFiles(t *testing.T) map[string][]goFile {
	t.Helper()
	top, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	byDir := map[string][]goFile{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != top && (strings.HasPrefix(name, ".") || name == "testdata" || name == "gossiptrain-runs") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(top, path)
		dir := filepath.Dir(rel)
		byDir[dir] = append(byDir[dir], goFile{path: rel, file: f, fset: fset})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(byDir["."]) == 0 || len(byDir["cli"]) == 0 {
		t.Fatalf("no package main or cli under %s", top)
	}
	return byDir
}

// TestMainIsThin: package main is a few lines that call package cli.
func TestMainIsThin(t *testing.T) {
	lines := 0
	for _, f := range sourceFiles(t)["."] {
		b, err := os.ReadFile(filepath.Join("..", f.path))
		if err != nil {
			t.Fatal(err)
		}
		lines += strings.Count(string(b), "\n")
	}
	if lines > mainMaxLines {
		t.Errorf("package main has %d lines of non-test code, over %d: move the work into the packages it calls", lines, mainMaxLines)
	}
}

// TestNoLongFunctions: no function of the repository's non-test code is
// over funcMaxLines lines.
func TestNoLongFunctions(t *testing.T) {
	for _, files := range sourceFiles(t) {
		for _, f := range files {
			ast.Inspect(f.file, func(n ast.Node) bool {
				var name string
				var body *ast.BlockStmt
				switch x := n.(type) {
				case *ast.FuncDecl:
					name, body = x.Name.Name, x.Body
				case *ast.FuncLit:
					name, body = "a function literal", x.Body
				}
				if body == nil {
					return true
				}
				start := f.fset.Position(n.Pos()).Line
				if lines := f.fset.Position(body.Rbrace).Line - start + 1; lines > funcMaxLines {
					t.Errorf("%s:%d: %s is %d lines, over %d", f.path, start, name, lines, funcMaxLines)
				}
				return true
			})
		}
	}
}

// TestFilesStandInLayers: in layeredPackages, no two files use each
// other's top-level names, directly or through other files, so each file
// can be read knowing only those below it. A file uses a name when an
// identifier of it, not qualified by a package or a value, names a
// function, type, variable or constant that another file declares.
// (Methods are not followed: x.m names no file by itself.)
func TestFilesStandInLayers(t *testing.T) {
	all := sourceFiles(t)
	for _, dir := range layeredPackages {
		uses := fileUses(all[dir])
		if cycle := findCycle(uses); cycle != nil {
			var steps []string
			for i := 0; i+1 < len(cycle); i++ {
				steps = append(steps, cycle[i]+" uses "+strings.Join(uses[cycle[i]][cycle[i+1]], ", ")+" of "+cycle[i+1])
			}
			t.Errorf("files of %s use each other in a loop: %s", dir, strings.Join(steps, "; "))
		}
	}
}

// fileUses returns, for each file, the files whose top-level names it
// uses, and which names.
func fileUses(files []goFile) map[string]map[string][]string {
	declared := map[string]string{} // top-level name -> file
	for _, f := range files {
		for _, d := range f.file.Decls {
			switch x := d.(type) {
			case *ast.FuncDecl:
				if x.Recv == nil {
					declared[x.Name.Name] = f.path
				}
			case *ast.GenDecl:
				for _, s := range x.Specs {
					switch y := s.(type) {
					case *ast.TypeSpec:
						declared[y.Name.Name] = f.path
					case *ast.ValueSpec:
						for _, n := range y.Names {
							declared[n.Name] = f.path
						}
					}
				}
			}
		}
	}
	uses := map[string]map[string][]string{}
	for _, f := range files {
		uses[f.path] = map[string][]string{}
		ast.Inspect(f.file, func(n ast.Node) bool {
			if se, ok := n.(*ast.SelectorExpr); ok {
				ast.Inspect(se.X, func(m ast.Node) bool { return visitIdent(m, f.path, declared, uses) })
				return false // x.Sel: Sel names a field, a method or a package's name
			}
			return visitIdent(n, f.path, declared, uses)
		})
	}
	return uses
}

// visitIdent records a use of another file's top-level name.
func visitIdent(n ast.Node, path string, declared map[string]string, uses map[string]map[string][]string) bool {
	id, ok := n.(*ast.Ident)
	if !ok || id.Obj != nil { // resolved in the file itself: a local or the file's own
		return true
	}
	if other, ok := declared[id.Name]; ok && other != path && !slices.Contains(uses[path][other], id.Name) {
		uses[path][other] = append(uses[path][other], id.Name)
	}
	return true
}

// findCycle returns a loop of files (the first again at the end), or nil.
func findCycle(uses map[string]map[string][]string) []string {
	var paths []string
	for p := range uses {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(p string) []string
	visit = func(p string) []string {
		state[p] = open
		stack = append(stack, p)
		var next []string
		for q := range uses[p] {
			next = append(next, q)
		}
		sort.Strings(next)
		for _, q := range next {
			switch state[q] {
			case open:
				i := slices.Index(stack, q)
				return append(slices.Clone(stack[i:]), q)
			case unseen:
				if c := visit(q); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[p] = done
		return nil
	}
	for _, p := range paths {
		if state[p] == unseen {
			if c := visit(p); c != nil {
				return c
			}
		}
	}
	return nil
}
