package main

import (
	"encoding/json"
	"fmt"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/report"
	"github.com/gossiptrain/gossiptrain/sgd"
)

func evalCmd() *command {
	c := newCommand("eval", "evaluate a saved model on a test set; prints one JSON object", "--model FILE --test FILE [flags]")
	var modelPath, test, format, labels string
	var zeroBased, skipBad bool
	var batch int
	var lf logFlags
	c.group("Evaluation", func(fs *flagSet) {
		fs.StringVar(&modelPath, "model", "", "model `FILE` written by 'gossiptrain train --save' (a file here; train's --model is the kind\nof model to train)")
		fs.StringVar(&test, "test", "", "test data `FILE` (libsvm, criteo or idx; .gz/.zst allowed)")
		fs.StringVar(&format, "format", "auto", "input `format`: libsvm, criteo, idx, or auto (from the file name)")
		fs.StringVar(&labels, "test-labels", "", "IDX labels `FILE` (default: found beside the images)")
		fs.BoolVar(&zeroBased, "zero-based", false, "libsvm feature indices start at 0")
		fs.BoolVar(&skipBad, "skip-bad-lines", false, "count and skip malformed lines instead of stopping")
		fs.IntVar(&batch, "batch", 1000, "rows per evaluation batch")
	})
	c.group("Logging", lf.register)
	c.help = `
Load a model saved by 'gossiptrain train --save', evaluate it on --test and
print one JSON object on standard output:

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
		if _, err := lf.logger(); err != nil {
			return err
		}
		f, err := data.ParseFormat(format)
		if err != nil {
			return usageErr("format", "%v", err)
		}
		m, err := model.LoadFile(modelPath)
		if err != nil {
			return err
		}
		opt := data.Options{Format: f, ZeroBased: zeroBased, Dim: m.Dim, SkipBad: skipBad, Labels: labels, LabelBase: int(m.LabelBase)}
		if m.Kind.Multiclass() {
			opt.Classes = m.Classes
		}
		src, err := data.Open([]string{test}, opt)
		if err != nil {
			return err
		}
		defer src.Close()
		met, err := sgd.Evaluate(m, src, batch)
		if err != nil {
			return err
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
