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

// Standalone checkpoints do not hold --holdout's best model yet, so a run
// alone with --holdout (on with --epochs auto) and --checkpoint-dir fails
// at once, saying what to give instead.
func TestAloneCheckpointsRefuseHoldout(t *testing.T) {
	dir := t.TempDir()
	svm := filepath.Join(dir, "a.svm")
	os.WriteFile(svm, []byte("1 1:1\n0 2:1\n"), 0o644)
	ck := filepath.Join(dir, "ck")
	for _, args := range [][]string{{"--checkpoint-dir", ck}, {"--epochs", "3", "--holdout", "5", "--checkpoint-dir", ck}} {
		code, _, stderr := gt(t, append([]string{"train", "--train", svm}, args...)...)
		if code != 2 || !strings.Contains(stderr, "--checkpoint-dir: not implemented for a run alone with --holdout") {
			t.Errorf("%v: exit %d, %q; want exit 2 naming --checkpoint-dir and --holdout", args, code, stderr)
		}
	}
	if code, _, stderr := gt(t, "train", "--train", svm, "--epochs", "2", "--checkpoint-dir", ck); code != 0 {
		t.Errorf("--epochs 2 --checkpoint-dir: exit %d: %s", code, stderr)
	}
}
