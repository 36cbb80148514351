package cli

import (
	"path/filepath"
	"testing"

	"github.com/gossiptrain/gossiptrain/report"
)

// --threads changes how fast train runs, never what it trains: the same
// run with 1, 2 and 3 threads reports one model hash, loss and accuracy.
func TestTrainThreadsSameModel(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := gt(t, "gen", "--out", dir, "--rows", "20000", "--test-rows", "2000", "--features", "65536", "--fields", "10", "--seed", "3"); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, stderr)
	}
	var first *report.Summary
	for _, threads := range []string{"1", "2", "3"} {
		rep := filepath.Join(dir, "run-"+threads+".jsonl")
		code, _, stderr := gt(t, "train", "--train", filepath.Join(dir, "train*.svm"), "--test", filepath.Join(dir, "test.svm"),
			"--dim", "65536", "--batch", "500", "--epochs", "2", "--l2", "1e-6", "--threads", threads, "--report", rep)
		if code != 0 {
			t.Fatalf("train --threads %s: exit %d: %s", threads, code, stderr)
		}
		r, err := report.ReadFile(rep)
		if err != nil || r.Summary == nil {
			t.Fatalf("train --threads %s: report %v, %v", threads, r, err)
		}
		s := r.Summary
		if first == nil {
			first = s
			continue
		}
		if s.ModelHash != first.ModelHash || s.TestLogLoss != first.TestLogLoss || s.Examples != first.Examples {
			t.Errorf("--threads %s: model %s, test log-loss %v after %d examples; --threads 1: %s, %v, %d",
				threads, s.ModelHash, s.TestLogLoss, s.Examples, first.ModelHash, first.TestLogLoss, first.Examples)
		}
	}
}
