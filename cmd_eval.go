package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/report"
	"github.com/gossiptrain/gossiptrain/sgd"
)

func evalCmd() *command {
	c := newCommand("eval", "evaluate a saved model on a test set; prints one JSON object", "--model FILE --test FILE [flags]")
	var modelPath, test, format, labels, preds string
	var zeroBased, skipBad bool
	var batch int
	var lf logFlags
	c.group("Evaluation", func(fs *flagSet) {
		fs.StringVar(&modelPath, "model", "", "model `FILE` written by 'gossiptrain train --save' (a file here; train's --model is the kind\nof model to train)")
		fs.StringVar(&test, "test", "", "test data `FILE` (libsvm, criteo, vw or idx; .gz/.zst allowed); - is standard input")
		fs.StringVar(&format, "format", "auto", "input `format`: libsvm, criteo, vw, idx, or auto (from the file name and first line)")
		fs.StringVar(&labels, "test-labels", "", "IDX labels `FILE` (default: found beside the images)")
		fs.BoolVar(&zeroBased, "zero-based", false, "libsvm feature indices start at 0 (default: as the model was trained; a model from an\nolder binary: 1)")
		fs.BoolVar(&skipBad, "skip-bad-lines", false, "count and skip malformed lines instead of stopping")
		fs.IntVar(&batch, "batch", 1000, "rows per evaluation batch")
		fs.StringVar(&preds, "predictions", "", "also write each test row's probabilities to `FILE`, one line per row, as 'gossiptrain\npredict' writes them (- for standard output, after the JSON line's place: use a file)")
	})
	c.group("Logging", lf.register)
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
	c.run = func(c *command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected argument %q", errUsage, args[0])
		}
		if modelPath == "" {
			return usageErr("model", "required: the model file to evaluate")
		}
		if test == "" {
			return usageErr("test", "required: the test data")
		}
		if batch < 1 {
			return usageErr("batch", "must be at least 1, got %d", batch)
		}
		log, err := lf.logger()
		if err != nil {
			return err
		}
		f, err := data.ParseFormat(format)
		if err != nil {
			return usageErr("format", "%v", err)
		}
		inputs, _, err := expandDataInputs([]string{test}, "test")
		if err != nil {
			return err
		}
		if err := checkIDXLabels(inputs, labels, "test-labels"); err != nil {
			return err
		}
		if preds != "" && preds != "-" {
			if err := checkWritableFile(preds); err != nil {
				return usageErr("predictions", "%v", err)
			}
		}
		m, err := model.LoadFile(modelPath)
		if err != nil {
			return err
		}
		zb := zeroBased
		if !c.set("zero-based") {
			zb = m.Input.ZeroBased
		}
		warnInput(log, m, modelPath, inputs[0], f, zb, c.set("zero-based"))
		inter, err := modelInteractions(m)
		if err != nil {
			return fmt.Errorf("--model %s: %w", modelPath, err)
		}
		opt := data.Options{Format: f, ZeroBased: zb, Dim: m.Dim, SkipBad: skipBad, Labels: labels, LabelBase: int(m.LabelBase), Interactions: inter}
		if m.Kind.Multiclass() {
			opt.Classes = m.Classes
		}
		src, err := data.Open(inputs, opt)
		if err != nil {
			return labelsFlag(err, "test-labels")
		}
		defer src.Close()
		var ev sgd.Evaluator
		var pw *predWriter
		commit, abort := func() error { return nil }, func() {}
		if preds != "" {
			var w io.Writer
			w, commit, abort, err = outputFile(preds, os.Stderr)
			if err != nil {
				return usageErr("predictions", "%v", err)
			}
			if preds == "-" {
				w = c.stdout()
			}
			pw = newPredWriter(w)
			ev.OnRow = pw.row
		}
		met, err := ev.Evaluate(m, src, batch)
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
		}{modelPath, test, reportMetrics(met), src.Stats().BadLines, m.NonZeros()}
		b, err := json.Marshal(out)
		if err != nil {
			return err
		}
		fmt.Fprintln(c.stdout(), string(b))
		return nil
	}
	return c
}
