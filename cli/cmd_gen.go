package cli

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/human"
)

func genCmd() *command {
	c := newCommand("gen", "generate a Criteo-like synthetic data set with a planted model", "--out DIR [flags]")
	def := data.DefaultGenConfig()
	var out, format, compress string
	cfg := def
	var lf logFlags
	c.group("Data set", func(fs *flagSet) {
		fs.StringVar(&out, "out", "", "output `DIR` (created if missing): train files, test file and meta.json")
		fs.Int64Var(&cfg.Rows, "rows", def.Rows, "training `rows`")
		fs.Int64Var(&cfg.TestRows, "test-rows", def.TestRows, "test `rows`")
		fs.Uint64Var(&cfg.Features, "features", def.Features, "feature space `size` (libsvm indices are 1..features)")
		fs.IntVar(&cfg.Fields, "fields", def.Fields, "categorical `fields` per row: every row has exactly one feature per field")
		fs.Uint64Var(&cfg.Seed, "seed", def.Seed, "random `seed`: the same seed gives byte-identical files")
		fs.IntVar(&cfg.Parts, "parts", def.Parts, "split the training rows into `P` files (train-00001-of-0000P.svm, …), one per peer")
		fs.StringVar(&format, "format", "libsvm", "output `format`: libsvm or criteo (TSV: label, 13 integer, 26 hex categorical columns; needs --fields 39)")
		fs.StringVar(&compress, "compress", "", "compress the files: gz or zst (default: plain text)")
		fs.Float64Var(&cfg.Positives, "positives", def.Positives, "target `share` of positive labels")
	})
	c.group("Logging", lf.register)
	c.help = `
Generate a synthetic click-through data set that looks like Criteo's: every row
has one value per field, each field's values follow a Zipf-like distribution
over a vocabulary of its own size, and labels are drawn from a planted sparse
logistic model (about 25% positives). Because the true model is known, the
data set says how good a learner can get: meta.json holds the planted model's
own test log-loss (planted_test_logloss), the best any learner can reach.`
	c.example = `  gossiptrain gen --out data --rows 1000000 --test-rows 100000 --features 16777216 --fields 39
  gossiptrain gen --out data4 --rows 400000 --parts 4 --compress zst`
	c.run = func(c *command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected argument %q", errUsage, args[0])
		}
		log, err := lf.logger()
		if err != nil {
			return err
		}
		if out == "" {
			return usageErr("out", "required: the directory to write the data set into")
		}
		f, err := data.ParseFormat(format)
		if err != nil || (f != data.FormatLibSVM && f != data.FormatCriteo) {
			return usageErr("format", "%q: want libsvm or criteo", format)
		}
		cfg.Format = f
		switch compress {
		case "", "gz", "zst":
			cfg.Compress = compress
		default:
			return usageErr("compress", "%q: want gz or zst (or nothing for plain text)", compress)
		}
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		start := time.Now()
		last := start
		meta, err := data.Generate(out, cfg, func(done, total int64) {
			if time.Since(last) < 2*time.Second {
				return
			}
			last = time.Now()
			el := time.Since(start)
			eta := time.Duration(float64(el) * float64(total-done) / float64(max(done, 1)))
			log.Info().Str("rows", human.Count(float64(done))).Str("of", human.Count(float64(total))).
				Str("eta", human.Duration(eta).String()).Msg("generating")
		})
		if err != nil {
			return err
		}
		log.Info().Str("dir", out).Int64("rows", meta.Rows).Int64("test_rows", meta.TestRows).
			Float64("planted_test_logloss", human.Round4(meta.PlantedTestLogLoss)).
			Dur("took", human.Duration(time.Since(start))).Msg("data set written")
		b, _ := json.Marshal(meta)
		fmt.Fprintln(c.stdout(), string(b))
		return nil
	}
	return c
}
