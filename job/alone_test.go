package job

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/report"
	"github.com/gossiptrain/gossiptrain/sgd"
)

// A test set that fails after training (here emptied between train's
// checks and the final evaluation) does not throw the trained model away:
// --save is written whole (not partial: every epoch ran), the report's
// summary says the evaluation failed, and the error says where the model
// is (issue 33).
func TestAloneSavesTheModelWhenEvaluationFails(t *testing.T) {
	dir := t.TempDir()
	train, test := filepath.Join(dir, "a.svm"), filepath.Join(dir, "t.svm")
	var b strings.Builder
	for i := range 2000 {
		b.WriteString([]string{"1 1:1 3:0.5\n", "0 2:1 3:0.25\n"}[i%2])
	}
	os.WriteFile(train, []byte(b.String()), 0o644)
	os.WriteFile(test, []byte("1 1:1\n0 2:1\n"), 0o644)
	plan, err := infer.Prepare(infer.Spec{Train: []string{train}, Test: test, Epochs: 2, Kind: model.Logreg, Dim: 4,
		Opt: model.DefaultOptConfig(model.AdaGrad), Scale: infer.ScaleOff, Shards: 4}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(test, nil, 0o644) // broken after the checks
	save, rep := filepath.Join(dir, "m.gt"), filepath.Join(dir, "r.jsonl")
	sum, err := RunAlone(context.Background(), Config{Plan: plan, Batch: 10, Threads: 1, Save: save, Report: rep, Log: zerolog.Nop()})
	var ee *sgd.EvalError
	if !errors.As(err, &ee) || !strings.Contains(err.Error(), "the model trained is saved in "+save) {
		t.Fatalf("error %v; want the evaluation's, saying the model is saved in %s", err, save)
	}
	m, lerr := model.LoadFile(save)
	if lerr != nil {
		t.Fatalf("the model was not saved: %v", lerr)
	}
	if m.Meta["partial"] != "" || m.Examples != 4000 || sum.Examples != 4000 {
		t.Errorf("saved model: meta %v, %d examples; want all 4000 examples, not partial", m.Meta, m.Examples)
	}
	run, rerr := report.ReadFile(rep)
	if rerr != nil || run.Summary == nil || run.Summary.EvalFailed == "" || run.Summary.Partial {
		t.Errorf("report: %v %+v; want a summary saying the evaluation failed", rerr, run)
	}
}
