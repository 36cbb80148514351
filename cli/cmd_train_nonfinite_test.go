package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/report"
)

// overflowSVM writes 400 rows: good ones, with lines 201-300 the issue's
// "1 6:3e38 7:3e38" (finite values whose batch gradient overflows).
func overflowSVM(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	for i := range 400 {
		if i >= 200 && i < 300 {
			b.WriteString("1 6:3e38 7:3e38\n")
			continue
		}
		fmt.Fprintf(&b, "%d %d:1 5:0.5\n", i%2, 1+i%2)
	}
	p := filepath.Join(dir, "train.svm")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Issue 30 from the command line: rows whose values overflow a batch's
// gradient stop train with an error naming their lines (exit 1, no model
// saved), --nonfinite skip trains around them and reports the count, and
// --max-value refuses them as bad lines (counted with --skip-bad-lines).
func TestTrainNonFiniteFromTheCommandLine(t *testing.T) {
	dir := t.TempDir()
	svm := overflowSVM(t, dir)
	save, rep := filepath.Join(dir, "m.gt"), filepath.Join(dir, "r.jsonl")
	common := []string{"train", "--train", svm, "--dim", "8", "--l2", "0", "--scale", "off", "--batch", "50", "--epochs", "2", "--threads", "1"}

	code, _, stderr := gt(t, append(common, "--save", save)...)
	want := svm + ":201-250 (epoch 1, rows 201-250): the batch's gradient is not finite (-Inf at feature 5 (0-based), whose values in these rows reach 3e+38)"
	if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "or pass --nonfinite skip") {
		t.Errorf("default: exit %d, stderr %q; want exit 1 and %q", code, stderr, want)
	}
	if _, err := os.Stat(save); err == nil {
		t.Errorf("a model was saved by a run that failed")
	}

	code, _, stderr = gt(t, append(common, "--nonfinite", "skip", "--report", rep, "--save", save)...)
	if code != 0 {
		t.Fatalf("--nonfinite skip: exit %d: %s", code, stderr)
	}
	r, err := report.ReadFile(rep)
	if err != nil || r.Summary == nil {
		t.Fatalf("report: %v", err)
	}
	if s := r.Summary; s.BatchesSkippedNonFinite != 4 || s.Examples != 600 {
		t.Errorf("report: batches_skipped_nonfinite %d, examples %d; want 4 (2 batches, 2 epochs) and 600", s.BatchesSkippedNonFinite, s.Examples)
	}

	code, _, stderr = gt(t, append(common, "--max-value", "1e30")...)
	if code != 1 || !strings.Contains(stderr, svm+`:201: bad token "6:3e38": |value| is over the bound 1e+30 (--max-value)`) {
		t.Errorf("--max-value 1e30: exit %d, stderr %q; want the first such line named", code, stderr)
	}
	code, _, stderr = gt(t, append(common, "--max-value", "1e30", "--skip-bad-lines", "--report", rep)...)
	if code != 0 {
		t.Fatalf("--max-value with --skip-bad-lines: exit %d: %s", code, stderr)
	}
	if r, err := report.ReadFile(rep); err != nil || r.Summary == nil || r.Summary.BadLines != 100 || r.Summary.BatchesSkippedNonFinite != 0 {
		t.Errorf("--max-value with --skip-bad-lines: report %+v (%v); want 100 bad lines, no batch skipped", r.Summary, err)
	}
}
