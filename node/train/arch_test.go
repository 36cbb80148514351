package train_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPure checks what makes the core replayable: its code (tests aside)
// imports nothing that reads a clock, the network, the disk or a random
// source, and starts no goroutine. The simulator depends on it; so does
// every "same schedule, same result" claim in docs/protocol.md.
func TestPure(t *testing.T) {
	forbidden := map[string]string{
		"time": "a clock", "os": "the process and disk", "net": "the network", "net/http": "the network",
		"sync": "goroutines", "sync/atomic": "goroutines", "math/rand": "randomness", "math/rand/v2": "randomness",
		"crypto/rand": "randomness", "os/exec": "processes",
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		n++
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range file.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			if why, bad := forbidden[path]; bad {
				t.Errorf("%s imports %s (%s): the core must take it as an event", f, path, why)
			}
			if strings.Contains(path, "libp2p") || strings.HasPrefix(path, "github.com/gossiptrain/gossiptrain/node") && path != "github.com/gossiptrain/gossiptrain/node/train" {
				t.Errorf("%s imports %s: the core knows no transport nor driver", f, path)
			}
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				t.Errorf("%s: a goroutine at %s", f, fset.Position(g.Pos()))
			}
			return true
		})
	}
	if n == 0 {
		t.Fatal("no source files found")
	}
}
