package sim

import (
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/node/train"
)

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
