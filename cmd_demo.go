package main

import (
	"fmt"
	"path/filepath"
	"text/tabwriter"

	"github.com/gossiptrain/gossiptrain/data"
)

func demoCmd() *command {
	c := newCommand("demo", "generate a small data set and train on it: the quickest look at gossiptrain", "[--dir DIR] [flags]")
	var dir string
	var rows int64
	var lf logFlags
	c.group("Demo", func(fs *flagSet) {
		fs.StringVar(&dir, "dir", "gossiptrain-demo", "working `DIR` for the data set, report and model (reused when it already holds the data)")
		fs.Int64Var(&rows, "rows", 200000, "training `rows` to generate")
	})
	c.group("Logging", lf.register)
	c.help = `
Generate a Criteo-like synthetic data set (gossiptrain gen), train a logistic
regression on it with AdaGrad (gossiptrain train), and print how close the
trained model comes to the planted model that generated the labels.`
	c.run = func(c *command, args []string) error {
		log, err := lf.logger()
		if err != nil {
			return err
		}
		metaPath := filepath.Join(dir, "meta.json")
		meta, err := data.ReadGenMeta(metaPath)
		if err != nil || meta.Rows != rows {
			cfg := data.DefaultGenConfig()
			cfg.Rows, cfg.TestRows, cfg.Features = rows, rows/10, 1<<20
			log.Info().Str("dir", dir).Int64("rows", rows).Msg("generating the demo data set")
			if meta, err = data.Generate(dir, cfg, nil); err != nil {
				return err
			}
		}
		args = []string{"--train", filepath.Join(dir, "train*.svm"), "--test", meta.TestFile,
			"--dim", fmt.Sprint(meta.Features), "--report", filepath.Join(dir, "run.jsonl"),
			"--save", filepath.Join(dir, "model.gt"), "--log-format", lf.format, "--log-level", lf.level}
		t, tf := newTrainCommand()
		if err := t.parse(args); err != nil {
			return err
		}
		job, err := prepareTraining(t, &tf.d, &tf.m, &tf.r, log)
		if err != nil {
			return err
		}
		ctx, cancel := signalContext()
		defer cancel()
		sum, err := job.runLocal(ctx)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(c.stdout(), 0, 0, 2, ' ', 0)
		fmt.Fprintf(w, "\nresult\tvalue\n")
		fmt.Fprintf(w, "training examples\t%d\n", sum.Examples)
		fmt.Fprintf(w, "seconds\t%.2f\n", sum.Seconds)
		fmt.Fprintf(w, "examples/s\t%s\n", humanCount(sum.ExamplesPerSec))
		fmt.Fprintf(w, "test log-loss\t%.4f\n", sum.Final.LogLoss)
		fmt.Fprintf(w, "planted model's test log-loss (the best possible)\t%.4f\n", meta.PlantedTestLogLoss)
		fmt.Fprintf(w, "test AUC\t%.4f\n", sum.Final.AUC)
		fmt.Fprintf(w, "test accuracy\t%.4f\n", sum.Final.Accuracy)
		fmt.Fprintf(w, "report\t%s\n", filepath.Join(dir, "run.jsonl"))
		fmt.Fprintf(w, "model\t%s\n", filepath.Join(dir, "model.gt"))
		w.Flush()
		return nil
	}
	return c
}
