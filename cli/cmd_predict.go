package cli

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/sgd"
)

func predictCmd() *command {
	c := newCommand("predict", "score rows with a saved model: one line of probabilities per row", "--model FILE --data FILES [--out FILE] [flags]")
	var modelPath, out, format string
	var files listFlag
	var zeroBased, raw, labels bool
	var batch int
	var lf logFlags
	c.group("Prediction", func(fs *flagSet) {
		fs.StringVar(&modelPath, "model", "", "model `FILE` written by 'gossiptrain train --save' (a file here; train's --model is a kind)")
		fs.Var(&files, "data", "rows to score: a `FILE` or a quoted glob, as train's --train reads them (libsvm, criteo, vw or\nidx; .gz/.zst allowed), or - for standard input (head -1000 test.svm | gossiptrain predict ...\n--data -); labelled or not: a libsvm line may start with its first index:value, a Criteo line\nmay lack the label column, a VW line its label, IDX images need no labels file")
		fs.StringVar(&out, "out", "", "write the predictions to `FILE` (default, or -: standard output); the file appears only\nwhen every row was scored")
		fs.BoolVar(&raw, "raw", false, "print margins instead of probabilities: the logit w·x+b (logreg), the logits (softmax, mlp)")
		fs.BoolVar(&labels, "labels", false, "add the predicted label as the last column, as the training data wrote its labels: the class\neval counts as the prediction (logreg: 1 when P(class 1) > 0.5, else 0, or -1 for a model\ntrained on -1/+1 labels; softmax, mlp: the most probable class + label base)")
		fs.StringVar(&format, "format", "auto", "input `format`: libsvm, criteo, vw, idx, or auto (from the file name and first line)")
		fs.BoolVar(&zeroBased, "zero-based", false, "libsvm feature indices start at 0 (default: as the model was trained; a model from an\nolder binary: 1)")
		fs.IntVar(&batch, "batch", 1000, "rows read at a time")
	})
	c.group("Logging", lf.register)
	c.help = `
Score every row of --data with a model saved by 'gossiptrain train --save' and
write one line per row, in input order (blank and # comment lines are not
rows): the probability of class 1 for a logreg model, or one probability per
class, space-separated, for softmax and mlp models (class c is label
c + label base; 'gossiptrain inspect' shows the base). --raw writes margins
instead; --labels adds the predicted label as a last column (the share of rows
whose predicted label is their true one is eval's accuracy). This is what VW's -p, liblinear's 'predict -b 1' and scikit-learn's
predict_proba give.

Rows are read as train reads them (same formats, globs, compression) and
streamed: nothing is loaded whole. Labels, when the rows have them, are
ignored; 'gossiptrain eval --predictions FILE' scores labelled rows and
reports the metrics too. The numbers are computed exactly as eval computes
them, so the AUC and log-loss of the written probabilities are eval's.

A model file records the input format, --zero-based and --interactions it
was trained with; predict applies those interactions, uses that --zero-based
unless told, and warns when told otherwise.`
	c.example = `  gossiptrain predict --model model.gt --data data/test.svm > test.pred
  gossiptrain predict --model model.gt --data data/test.svm --labels --out test.pred
  zcat test.vw.gz | gossiptrain predict --model vw.gt --data - --out -
  gossiptrain predict --model fashion.gt --out test.pred \
      --data /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz`
	c.run = func(c *command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected argument %q (flags start with --)", errUsage, args[0])
		}
		if modelPath == "" {
			return usageErr("model", "required: the model file to predict with")
		}
		if len(files) == 0 {
			return usageErr("data", "required: the rows to score")
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
		inputs, _, err := infer.ExpandData(files, "data")
		if err != nil {
			return err
		}
		if out != "" && out != "-" {
			if err := infer.CheckWritableFile(out); err != nil {
				return usageErr("out", "%v", err)
			}
		}
		in := append(infer.InputFiles(files, "data", "", ""), infer.FlagPath{Flag: "model", Path: modelPath})
		if err := infer.CheckApart([]infer.FlagPath{{Flag: "out", Path: out}}, in); err != nil {
			return err
		}
		m, err := model.LoadFile(modelPath)
		if err != nil {
			return fmt.Errorf("--model: %w", err)
		}
		zb := zeroBased
		if !c.set("zero-based") {
			zb = m.Input.ZeroBased
		}
		infer.WarnInput(log, m, modelPath, inputs[0], f, zb, c.set("zero-based"))
		warnPartial(log, m, modelPath)
		inter, err := infer.ModelInteractions(m)
		if err != nil {
			return fmt.Errorf("--model %s: %w", modelPath, err)
		}
		opt := data.Options{Format: f, ZeroBased: zb, Dim: m.Dim, NoLabels: true, Interactions: inter}
		src, err := data.Open(inputs, opt)
		if err != nil {
			return err
		}
		defer src.Close()
		w, commit, abort, err := infer.OutputFile(out, c.stdout())
		if err != nil {
			return usageErr("out", "%v", err)
		}
		n, err := writePredictions(m, src, batch, raw, labels, w)
		if err == nil && n == 0 {
			// Nothing scored is a mistake (a wrong file, an empty pipe):
			// say so rather than write an empty file and exit 0
			// (TestPredictEmptyInputFails).
			err = usageErr("data", "%s: no rows to score", strings.Join(files, ","))
		}
		if err != nil {
			abort()
			return err
		}
		if err := commit(); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		log.Info().Int64("rows", n).Str("model", modelPath).Msg("predicted")
		return nil
	}
	return c
}

// writePredictions writes one line of outputs per row of src to w, with
// the predicted label last when labels is set, and returns the rows
// scored (TestPredictLabels).
func writePredictions(m *model.Model, src data.Source, batch int, raw, labels bool, w io.Writer) (int64, error) {
	sc := sgd.NewScorer(m)
	pw := newPredWriter(w)
	var b data.Batch
	var n int64
	for {
		rows, err := src.Next(&b, batch)
		for r := range rows {
			idx, val := b.Row(r)
			v := sc.Row(idx, val, raw)
			if labels {
				pw.line(v, m.Label(sc.Class()), true)
			} else {
				pw.row(v)
			}
		}
		n += int64(rows)
		if pw.err != nil {
			return n, pw.err
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, err
		}
	}
	return n, pw.flush()
}

// predWriter formats output rows: numbers in Go's shortest form that reads
// back as the same float64, so the file carries the exact values eval
// computes.
type predWriter struct {
	w   *bufio.Writer
	buf []byte
	err error
}

func newPredWriter(w io.Writer) *predWriter {
	return &predWriter{w: bufio.NewWriterSize(w, 1<<20), buf: make([]byte, 0, 256)}
}

func (p *predWriter) row(v []float64) { p.line(v, 0, false) }

// line writes the values of one row, and its label when withLabel.
func (p *predWriter) line(v []float64, label int64, withLabel bool) {
	b := p.buf[:0]
	for i, x := range v {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendFloat(b, x, 'g', -1, 64)
	}
	if withLabel {
		b = append(b, ' ')
		b = strconv.AppendInt(b, label, 10)
	}
	b = append(b, '\n')
	p.buf = b
	if _, err := p.w.Write(b); err != nil && p.err == nil {
		p.err = err
	}
}

func (p *predWriter) flush() error {
	if p.err != nil {
		return p.err
	}
	return p.w.Flush()
}

// warnPartial warns once when a model file is from a run stopped before
// the end of its training (meta partial; inspect shows where it stopped):
// it predicts, but not as the finished run's model would.
func warnPartial(log zerolog.Logger, m *model.Model, path string) {
	if m.Meta["partial"] != "true" {
		return
	}
	ev := log.Warn().Str("model", path).Str("stopped", m.Meta["stopped"]).Int64("examples", m.Examples)
	if e := m.Meta["stopped_at_epoch"]; e != "" {
		ev = ev.Str("stopped_at_epoch", e)
	}
	if r := m.Meta["stopped_at_round"]; r != "" {
		ev = ev.Str("stopped_at_round", r)
	}
	ev.Msg("the model is partial: its run stopped before the end of training")
}
