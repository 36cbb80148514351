package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/report"
	"github.com/gossiptrain/gossiptrain/sgd"
)

func evalCmd() *command {
	c := newCommand("eval", "evaluate a saved model on a test set; prints one JSON object", "--model FILE --test FILE [flags]")
	e := &evalFlags{}

	c.group("Evaluation", func(fs *flagSet) {
		fs.StringVar(&e.modelPath, "model", "", "model `FILE` written by 'gossiptrain train --save' (a file here; train's --model is the kind\nof model to train)")
		fs.StringVar(&e.test, "test", "", "test data `FILE` (libsvm, criteo, vw or idx; .gz/.zst allowed); - is standard input")
		fs.StringVar(&e.format, "format", "auto", "input `format`: libsvm, criteo, vw, idx, or auto (from the file name and first line)")
		fs.StringVar(&e.labels, "test-labels", "", "IDX labels `FILE` (default: found beside the images)")
		fs.BoolVar(&e.zeroBased, "zero-based", false, "libsvm feature indices start at 0 (default: as the model was trained; a model from an\nolder binary: 1)")
		fs.BoolVar(&e.skipBad, "skip-bad-lines", false, "count and skip malformed lines instead of stopping")
		fs.IntVar(&e.batch, "batch", 1000, "rows per evaluation batch")
		fs.StringVar(&e.preds, "predictions", "", "also write each test row's probabilities to `FILE`, one line per row, as 'gossiptrain\npredict' writes them (- for standard output, after the JSON line's place: use a file)")
	})
	c.group("Logging", e.lf.register)
	c.help = `
Load a model saved by 'gossiptrain train --save', evaluate it on --test and
print one JSON object on standard output (rows with importance weights count
by their weight in test_logloss and test_error, as VW's average loss; the
interactions the model was trained with are applied):

  {"model":"model.gt","test":"test.svm","test_examples":…,"test_logloss":…,
   "test_error":…,"test_auc":…,"test_accuracy":…,"model_nonzeros":…}

A corrupt or truncated model file, or one written for other data (a test
feature index beyond the model's dimension, a label outside its classes), is
refused with an error that says which.`
	c.example = `  gossiptrain eval --model model.gt --test data/test.svm`
	c.run = e.run
	return c
}

// evalFlags are the flags of eval; run runs it.
type evalFlags struct {
	modelPath string
	test      string
	format    string
	labels    string
	preds     string
	zeroBased bool
	skipBad   bool
	batch     int
	lf        logFlags
}

func (e *evalFlags) run(c *command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, args[0])
	}
	if e.modelPath == "" {
		return usageErr("model", "required: the model file to evaluate")
	}
	if e.test == "" {
		return usageErr("test", "required: the test data")
	}
	if e.batch < 1 {
		return usageErr("batch", "must be at least 1, got %d", e.batch)
	}
	log, err := e.lf.logger()
	if err != nil {
		return err
	}
	f, err := data.ParseFormat(e.format)
	if err != nil {
		return usageErr("format", "%v", err)
	}
	inputs, _, err := infer.ExpandData([]string{e.test}, "test")
	if err != nil {
		return err
	}
	if err := infer.CheckIDXLabels(inputs, e.labels, "test-labels"); err != nil {
		return err
	}
	if e.preds != "" && e.preds != "-" {
		if err := infer.CheckWritableFile(e.preds); err != nil {
			return usageErr("predictions", "%v", err)
		}
	}
	in := append(infer.InputFiles([]string{e.test}, "test", e.labels, "test-labels"), infer.FlagPath{Flag: "model", Path: e.modelPath})
	if err := infer.CheckApart([]infer.FlagPath{{Flag: "predictions", Path: e.preds}}, in); err != nil {
		return err
	}
	m, err := model.LoadFile(e.modelPath)
	if err != nil {
		return err
	}
	zb := e.zeroBased
	if !c.set("zero-based") {
		zb = m.Input.ZeroBased
	}
	infer.WarnInput(log, m, e.modelPath, inputs[0], f, zb, c.set("zero-based"))
	warnPartial(log, m, e.modelPath)
	inter, err := infer.ModelInteractions(m)
	if err != nil {
		return fmt.Errorf("--model %s: %w", e.modelPath, err)
	}
	opt := data.Options{Format: f, ZeroBased: zb, Dim: m.Dim, SkipBad: e.skipBad, Labels: e.labels, LabelBase: int(m.LabelBase), Interactions: inter}
	if m.Kind.Multiclass() {
		opt.Classes = m.Classes
	}
	src, err := data.Open(inputs, opt)
	if err != nil {
		return infer.LabelsFlag(err, "test-labels")
	}
	defer src.Close()
	var ev sgd.Evaluator
	var pw *predWriter
	commit, abort := func() error { return nil }, func() {}
	if e.preds != "" {
		var w io.Writer
		w, commit, abort, err = infer.OutputFile(e.preds, os.Stderr)
		if err != nil {
			return usageErr("predictions", "%v", err)
		}
		if e.preds == "-" {
			w = c.stdout()
		}
		pw = newPredWriter(w)
		ev.OnRow = pw.row
	}
	met, err := ev.Evaluate(m, src, e.batch)
	if err == nil && pw != nil {
		err = pw.flush()
	}
	if err != nil {
		abort()
		return err
	}
	if err := commit(); err != nil {
		return fmt.Errorf("--predictions: %w", err)
	}
	out := struct {
		Model string `json:"model"`
		Test  string `json:"test"`
		report.Metrics
		BadLines      int64 `json:"bad_lines"`
		ModelNonzeros int64 `json:"model_nonzeros"`
	}{e.modelPath, e.test, report.Metrics{TestExamples: met.Examples, TestLogLoss: report.Num(met.LogLoss), TestError: report.Num(met.Error),
		TestAUC: report.Num(met.AUC), TestAccuracy: report.Num(met.Accuracy)}, src.Stats().BadLines, m.NonZeros()}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stdout(), string(b))
	return nil
}
