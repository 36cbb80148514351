package sim

import (
	"fmt"
	"go/parser"
	"go/token"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/node/train"
)

// TestChecksListed: the package doc lists every check the checker makes,
// as "name (invariant): what it asserts", word for word as the checks
// table says it, and no two checks share a name.
func TestChecksListed(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	if f.Doc == nil {
		t.Fatal("doc.go has no package doc")
	}
	doc := strings.Join(strings.Fields(f.Doc.Text()), " ")
	seen := map[string]bool{}
	for k, c := range checks {
		if c.name == "" || c.inv == "" || c.doc == "" {
			t.Errorf("check %d has no name, invariant or doc: %+v", k, c)
			continue
		}
		if seen[c.name] {
			t.Errorf("two checks are named %q", c.name)
		}
		seen[c.name] = true
		line := fmt.Sprintf("%s (%s): %s", c.name, c.inv, c.doc)
		if !strings.Contains(doc, line) {
			t.Errorf("the package doc (doc.go) does not list check %q as\n  - %s", c.name, line)
		}
	}
}

// TestViolationNamesItsCheck: a run that cannot finish in time reports a
// liveness violation per process that still runs, each naming its check
// and invariant (the package doc's "liveness (I10)") after its tick.
func TestViolationNamesItsCheck(t *testing.T) {
	o := base(1, train.Sync, 1)
	o.MaxTicks = 5
	res := Run(o)
	if len(res.Violations) != o.Peers {
		t.Fatalf("%d violations, want %d (one per peer):\n  %s", len(res.Violations), o.Peers, strings.Join(res.Violations, "\n  "))
	}
	for _, v := range res.Violations {
		if !strings.HasPrefix(v, "tick 6: liveness (I10): peer") || !strings.Contains(v, " did not finish: ") {
			t.Errorf("violation %q does not name its tick and check", v)
		}
	}
}
