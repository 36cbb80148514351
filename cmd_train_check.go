package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/train"
)

// Checks train makes before it reads any data, so a typo fails in a second
// instead of after an hour of training (issue 12, "fail fast").

// distSettings are the distributed flags, parsed.
type distSettings struct {
	mode      train.Mode
	staleness int
	gather    train.Gather
	values    wire.Values
	rowGrad   float64 // --max-row-grad: 0 auto, < 0 off (train.Config.MaxRowGrad)
	combine   train.Combine
	// localSteps is --local-steps: batches in a window (1: none).
	localSteps int
	// autoCombine: --combine auto; the model's kind decides too
	// (combineFor).
	autoCombine bool
}

// combineFor is the combine of a model of kind k: --combine auto is Mean
// for an MLP's windows (measured: summed changes of its dense rows
// overshoot), the settings' otherwise.
func (s distSettings) combineFor(k model.Kind) train.Combine {
	if s.autoCombine && s.localSteps > 1 && k == model.MLP {
		return train.Mean
	}
	return s.combine
}

// maxRowGrad is the bound on a pushed gradient row's norm per example for
// a model of kind k (--max-row-grad, G2 in node/train/guard.go), 0 when
// off.
func (s distSettings) maxRowGrad(k model.Kind) float64 {
	switch {
	case s.rowGrad == 0:
		return train.DefaultMaxRowGrad(k)
	case s.rowGrad < 0:
		return 0
	}
	return s.rowGrad
}

// checkDistFlags validates the distributed-training flags exactly as a
// distributed run needs them, whether or not this run is distributed: a
// standalone train rejects --mode foo as train --job does (the flags would
// otherwise be silently ignored, and the same command line with --job
// added would fail only then). It checks the values, the peer flags
// (node.Config.Validate, with a stand-in job name when --job is not given)
// and --progress-every. It creates nothing; checkOutputs checks
// --checkpoint-dir.
func checkDistFlags(tf *trainFlags) (distSettings, error) {
	var s distSettings
	var err error
	d := &tf.dist
	if s.mode, err = train.ParseMode(d.mode); err != nil {
		return s, usageErr("mode", "%q: want sync, ssp or async", d.mode)
	}
	if s.mode == train.SSP && d.staleness < 1 {
		return s, usageErr("staleness", "ssp needs at least 1 round (0 is --mode sync), got %d", d.staleness)
	}
	s.staleness = d.staleness
	if s.gather, err = train.ParseGather(d.gather); err != nil {
		return s, usageErr("gather", "%q: want need or full", d.gather)
	}
	if s.values, err = wire.ParseValues(d.values); err != nil {
		return s, usageErr("values", "%v", err)
	}
	switch d.maxRowGrad {
	case "auto":
	case "off":
		s.rowGrad = -1
	default:
		v, err := strconv.ParseFloat(d.maxRowGrad, 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return s, usageErr("max-row-grad", "%q: want auto, off or a bound > 0", d.maxRowGrad)
		}
		s.rowGrad = v
	}
	switch d.localSteps {
	case "auto":
		s.localSteps = 4 // (docs/scaling.md, "Windows of local steps")
		if s.mode != train.Sync {
			s.localSteps = 8
		}
		if s.gather != train.Need {
			s.localSteps = 1
		}
	default:
		h, err := strconv.Atoi(d.localSteps)
		if err != nil || h < 1 || h > 1<<16 {
			return s, usageErr("local-steps", "%q: want auto, or 1 (exchange every batch) up to 65536", d.localSteps)
		}
		s.localSteps = h
	}
	switch d.combine {
	case "auto":
		s.combine, s.autoCombine = train.Sum, true // (mean where windows need it: combineFor)
	default:
		if s.combine, err = train.ParseCombine(d.combine); err != nil {
			return s, usageErr("combine", "%q: want auto, sum, mean or trimmed", d.combine)
		}
	}
	if s.autoCombine && s.localSteps > 1 && s.mode != train.Sync {
		s.combine = train.Mean
	}
	if s.localSteps > 1 && s.gather != train.Need {
		return s, usageErr("local-steps", "windows of local steps need --gather need: a full read copy keeps no optimizer state to train on")
	}
	if s.localSteps > 1 && s.combine == train.Trimmed {
		return s, usageErr("combine", "trimmed combines one batch's gradients; with --local-steps %d workers push a window's changes: use --combine sum or mean", s.localSteps)
	}
	if s.localSteps <= 1 && s.combine == train.Mean {
		return s, usageErr("combine", "mean averages windows' changes: it needs --local-steps above 1")
	}
	if s.combine == train.Trimmed && s.mode != train.Sync {
		return s, usageErr("combine", "trimmed needs --mode sync: ssp and async owners apply each push as it comes, with nothing to trim against")
	}
	if d.reportRounds < 1 {
		return s, usageErr("report-rounds", "want at least 1, got %d", d.reportRounds)
	}
	if (d.checkpointEvery > 0 || d.resume) && d.checkpointDir == "" {
		return s, usageErr("checkpoint-dir", "required with --checkpoint-every and --resume")
	}
	if d.checkpointEvery < 0 {
		return s, usageErr("checkpoint-every", "must not be negative, got %v", d.checkpointEvery)
	}
	if tf.r.progressEvery < 0 {
		return s, usageErr("progress-every", "must not be negative (0 turns progress lines off), got %v", tf.r.progressEvery)
	}
	if tf.r.stallTimeout < 0 {
		return s, usageErr("stall-timeout", "%v: want 0 (wait for ever) or a positive duration", tf.r.stallTimeout)
	}
	if d.waitTimeout < 0 {
		return s, usageErr("wait-timeout", "%v: want 0 (wait for ever) or a positive duration", d.waitTimeout)
	}
	p := tf.p
	if p.job == "" {
		p.job = "standalone-check" // --job is required only to run distributed
		p.standalone = true        // and so is --swarm-key: a lone train listens nowhere
	}
	if _, err := p.config(); err != nil {
		return s, err
	}
	return s, nil
}

// checkOutputs checks, before any data is read, that train will be able to
// write what it was asked to: --save and --report name files in existing,
// writable directories (and not directories), --test names data that
// exists, and --checkpoint-dir can be created and written. Nothing is left
// behind but --checkpoint-dir itself.
func checkOutputs(tf *trainFlags) error {
	for _, o := range []struct{ flag, path string }{{"save", tf.r.save}, {"report", tf.r.report}} {
		if o.path == "" {
			continue
		}
		if err := checkWritableFile(o.path); err != nil {
			return usageErr(o.flag, "%v", err)
		}
	}
	if tf.d.test != "" {
		files, _, err := expandInputs([]string{tf.d.test}, "test")
		if err != nil {
			return err
		}
		if err := checkIDXLabels(files, tf.d.testLabels, "test-labels"); err != nil {
			return err
		}
	}
	if files, _, err := expandInputs(tf.d.train, "train"); err == nil {
		if err := checkIDXLabels(files, tf.d.trainLabels, "train-labels"); err != nil {
			return err
		}
	}
	if dir := tf.dist.checkpointDir; dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return usageErr("checkpoint-dir", "%v", plainPathError(err))
		}
		if err := checkWritableDir(dir); err != nil {
			return usageErr("checkpoint-dir", "%v", err)
		}
	}
	return nil
}

// checkWritableFile reports why path cannot be written as a file: a
// directory, a missing directory, no permission.
func checkWritableFile(path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a directory; give a file name", path)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s: directory %s does not exist", path, dir)
	case err != nil:
		return plainPathError(err)
	case !st.IsDir():
		return fmt.Errorf("%s: %s is not a directory", path, dir)
	}
	if err := checkWritableDir(dir); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// checkWritableDir creates and removes a file in dir.
func checkWritableDir(dir string) error {
	f, err := os.CreateTemp(dir, ".gossiptrain-check-*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("cannot create files in %s: %v", dir, pe.Err)
		}
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// plainPathError drops the operation from an *os.PathError ("stat x: no
// such file" reads "x: no such file").
func plainPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %v", pe.Path, pe.Err)
	}
	return err
}

// checkIDXLabels checks that IDX images files among files (names, not
// patterns) have labels: the file the labels flag names, or one beside
// them by the standard name.
func checkIDXLabels(files []string, labels, flagName string) error {
	for _, f := range files {
		if !data.IsIDXImages(f) {
			continue
		}
		if labels != "" {
			if _, err := os.Stat(labels); err != nil {
				return usageErr(flagName, "%v", plainPathError(err))
			}
			continue
		}
		if _, err := data.IDXLabelsPath(f); err != nil {
			return labelsFlag(err, flagName)
		}
	}
	return nil
}

// labelsFlag names the labels flag in an error about a missing IDX labels
// file; other errors pass unchanged.
func labelsFlag(err error, flagName string) error {
	var le *data.LabelsError
	if errors.As(err, &le) {
		return usageErr(flagName, "%s has no labels file beside it (%s does not exist): give --%s FILE", le.Images, le.Tried, flagName)
	}
	return err
}
