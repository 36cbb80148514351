package cli

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/model"
)

func exportCmd() *command {
	c := newCommand("export", "write a saved model's nonzero weights with their indices as json, npz or text", "--model FILE [--format json|npz|text] [--out FILE]")
	var modelPath, format, out string
	var lf logFlags
	c.group("Export", func(fs *flagSet) {
		fs.StringVar(&modelPath, "model", "", "model `FILE` written by 'gossiptrain train --save'")
		fs.StringVar(&format, "format", "auto", "`format`: json (one object), npz (numpy's zip of .npy arrays: numpy.load reads it), text\n(index<TAB>weight lines), or auto: from --out's extension (.json, .npz, .txt or .tsv), json\non standard output")
		fs.StringVar(&out, "out", "", "write to `FILE` (default, or -: standard output); the file appears only when whole")
	})
	c.group("Logging", lf.register)
	c.help = `
Write every nonzero weight of a model saved by 'gossiptrain train --save' with
its feature index, for numpy, pandas and anything that reads JSON; time and
memory follow the nonzero rows, not --dim. Indices are the model's features,
from 0: a libsvm file's index i is feature i-1 unless the model was trained
with --zero-based (zero_based in the export).

json: one object: format, version, kind, dim, classes, hidden, label_base,
labels (the label of each class), zero_based, input_format, then bias (logreg:
a number; softmax: one per class; mlp: b1, one per hidden unit), index
(ascending) and weight (logreg: one number per index; softmax and mlp: one
array per index), and for an mlp w2 (one array of hidden values per class)
and b2. npz: the same names as arrays (index uint32, parameters float32).
text: # lines of metadata, then index<TAB>value lines: the nonzero rows, then
the bias as the row with index dim. docs/usage.md ("Exporting a model") shows
numpy scoring rows with an export exactly as predict does.`
	c.example = `  gossiptrain export --model model.gt --out model.npz
  gossiptrain export --model model.gt --format json | jq .bias
  gossiptrain export --model model.gt --format text --out weights.tsv`
	c.run = func(c *command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected argument %q (flags start with --)", errUsage, args[0])
		}
		if modelPath == "" {
			return usageErr("model", "required: the model file to export")
		}
		log, err := lf.logger()
		if err != nil {
			return err
		}
		f, err := exportFormat(format, out)
		if err != nil {
			return err
		}
		if out != "" && out != "-" {
			if err := infer.CheckWritableFile(out); err != nil {
				return usageErr("out", "%v", err)
			}
		}
		if err := infer.CheckApart([]infer.FlagPath{{Flag: "out", Path: out}}, []infer.FlagPath{{Flag: "model", Path: modelPath}}); err != nil {
			return err
		}
		m, err := model.LoadFile(modelPath)
		if err != nil {
			return fmt.Errorf("--model: %w", err)
		}
		w, commit, abort, err := infer.OutputFile(out, c.stdout())
		if err != nil {
			return usageErr("out", "%v", err)
		}
		if err := m.Export(w, f); err != nil {
			abort()
			return fmt.Errorf("--model %s: %w", modelPath, err)
		}
		if err := commit(); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		log.Info().Str("model", modelPath).Str("format", f.String()).Int64("nonzeros", m.NonZeros()).Msg("exported")
		return nil
	}
	return c
}

// exportFormat is --format, auto resolved from --out's extension.
func exportFormat(format, out string) (model.ExportFormat, error) {
	if format == "auto" {
		switch ext := strings.ToLower(filepath.Ext(out)); ext {
		case ".json", ".npz", ".txt", ".tsv":
			format = ext[1:]
		case "":
			if out != "" && out != "-" {
				return 0, usageErr("format", "auto cannot tell the format of --out %s (no extension): give --format json, npz or text", out)
			}
			format = "json"
		default:
			return 0, usageErr("format", "auto cannot tell the format of --out %s (%s): give --format json, npz or text", out, ext)
		}
	}
	f, err := model.ParseExportFormat(format)
	if err != nil {
		return 0, usageErr("format", "%q: want json, npz, text or auto", format)
	}
	return f, nil
}
