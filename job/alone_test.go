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
// checks and the evaluations) does not throw the trained model away:
// --save is written whole when every epoch ran (the final evaluation
// failed), or marked partial, "evaluation failed", when an evaluation
// along the way did (at the end of epoch 1 of 2, all its rows trained); the report's summary says
// so, and the error says where the model is (issue 33).
func TestAloneSavesTheModelWhenEvaluationFails(t *testing.T) {
	for _, c := range []struct {
		epochs   int
		examples int64
		partial  string
	}{{1, 2000, ""}, {2, 2000, "true"}} {
		dir := t.TempDir()
		train, test := filepath.Join(dir, "a.svm"), filepath.Join(dir, "t.svm")
		var b strings.Builder
		for i := range 2000 {
			b.WriteString([]string{"1 1:1 3:0.5\n", "0 2:1 3:0.25\n"}[i%2])
		}
		os.WriteFile(train, []byte(b.String()), 0o644)
		os.WriteFile(test, []byte("1 1:1\n0 2:1\n"), 0o644)
		plan, err := infer.Prepare(infer.Spec{Train: []string{train}, Test: test, Epochs: c.epochs, Kind: model.Logreg, Dim: 4,
			Opt: model.DefaultOptConfig(model.AdaGrad), Scale: infer.ScaleOff, Shards: 4}, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(test, nil, 0o644) // broken after the checks
		save, rep := filepath.Join(dir, "m.gt"), filepath.Join(dir, "r.jsonl")
		sum, err := RunAlone(context.Background(), Config{Plan: plan, Batch: 10, Threads: 1, Save: save, Report: rep, Log: zerolog.Nop()})
		var ee *sgd.EvalError
		if !errors.As(err, &ee) || !strings.Contains(err.Error(), "the model trained is saved in "+save) {
			t.Fatalf("%d epochs: error %v; want the evaluation's, saying the model is saved in %s", c.epochs, err, save)
		}
		m, lerr := model.LoadFile(save)
		if lerr != nil {
			t.Fatalf("%d epochs: the model was not saved: %v", c.epochs, lerr)
		}
		if m.Meta["partial"] != c.partial || m.Examples != c.examples || sum.Examples != c.examples {
			t.Errorf("%d epochs: saved model: meta %v, %d examples; want %d examples, partial %q", c.epochs, m.Meta, m.Examples, c.examples, c.partial)
		}
		if c.partial != "" && (m.Meta["stopped"] != stopEvalFailed || m.Meta["stopped_at_epoch"] != "1" || m.Meta["stopped_at_epoch_rows"] != "2000") {
			t.Errorf("%d epochs: meta %v; want stopped %q after epoch 1's 2000 rows", c.epochs, m.Meta, stopEvalFailed)
		}
		run, rerr := report.ReadFile(rep)
		if rerr != nil || run.Summary == nil || run.Summary.EvalFailed == "" || run.Summary.Partial != (c.partial != "") {
			t.Errorf("%d epochs: report: %v %+v; want a summary saying the evaluation failed", c.epochs, rerr, run)
		}
	}
}
