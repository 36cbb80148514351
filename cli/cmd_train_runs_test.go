package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/report"
)

// With the default --eval-every 0, a run alone evaluates at the end of
// every epoch, so its report's curve has a point per epoch (issue 33: a
// single dot in the report's plots); the last is the final evaluation,
// not repeated.
func TestTrainEvaluatesEveryEpochByDefault(t *testing.T) {
	dir := t.TempDir()
	svm := filepath.Join(dir, "a.svm")
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, "%d %d:1 %d:0.5\n", i%2, 1+i%2, 3+i%5)
	}
	os.WriteFile(svm, []byte(b.String()), 0o644)
	rep := filepath.Join(dir, "r.jsonl")
	if code, _, stderr := gt(t, "train", "--train", svm, "--test", svm, "--epochs", "3", "--report", rep); code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	r, err := report.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range r.Evals {
		got = append(got, fmt.Sprintf("epoch %d at %d", e.Epoch, e.Examples))
	}
	if want := "[epoch 1 at 300 epoch 2 at 600 epoch 3 at 900]"; fmt.Sprint(got) != want {
		t.Errorf("evaluations %v; want %s", got, want)
	}
}
