package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/node/ring"
	"github.com/gossiptrain/gossiptrain/sgd"
)

// Checks train makes before it reads any data, so a typo fails in a second
// instead of after an hour of training (issue 12, "fail fast").

// distSettings are the distributed flags, parsed.
type distSettings struct {
	mode     sgd.Mode
	values   wire.Values
	compress wire.Compress
}

// checkDistFlags validates the distributed-training flags exactly as a
// distributed run needs them, whether or not this run is distributed: a
// standalone train rejects --mode foo as train --job does (the flags would
// otherwise be silently ignored, and the same command line with --job
// added would fail only then). It checks the values, the distributed loop's
// settings (sgd.DistConfig.Validate), the peer flags (node.Config.Validate,
// with a stand-in job name when --job is not given) and --progress-every.
// It creates nothing; checkOutputs checks --checkpoint-dir.
func checkDistFlags(tf *trainFlags) (distSettings, error) {
	var s distSettings
	var err error
	d := &tf.dist
	if s.mode, err = sgd.ParseMode(d.mode); err != nil {
		return s, usageErr("mode", "%q: want sync, ssp or async", d.mode)
	}
	if s.values, err = wire.ParseValues(d.values); err != nil {
		return s, usageErr("values", "%v", err)
	}
	if s.compress, err = wire.ParseCompress(d.compress); err != nil {
		return s, usageErr("compress", "%v", err)
	}
	for _, t := range []struct{ name, v string }{{"grad-transport", d.gradTransport}, {"params-transport", d.paramsTransport}} {
		if t.v != "pubsub" && t.v != "stream" {
			return s, usageErr(t.name, "%q: want pubsub or stream", t.v)
		}
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
	// The distributed loop's own limits, with a stand-in peer set.
	dc := sgd.DefaultDistConfig()
	dc.Batch, dc.Epochs = max(tf.r.batch, 1), max(tf.r.epochs, 1)
	dc.Mode, dc.Staleness, dc.Window, dc.Flush, dc.StallAfter = s.mode, d.staleness, d.window, d.flush, d.stallAfter
	dc.HandoffTimeout = d.handoffTimeout
	dc.Self, dc.Peers = "check", []string{"check"}
	dc.RingFor = func([]string) (*ring.Ring, error) { return nil, nil }
	if err := dc.Validate(); err != nil {
		return s, distConfigFlag(s.mode, d, err)
	}
	p := tf.p
	if p.job == "" {
		p.job = "standalone-check" // --job is required only to run distributed
	}
	if _, err := p.config(); err != nil {
		return s, err
	}
	return s, nil
}

// distConfigFlag names the flag behind a DistConfig error.
func distConfigFlag(mode sgd.Mode, d *distFlags, err error) error {
	switch {
	case mode == sgd.SSP && d.staleness < 1:
		return usageErr("staleness", "ssp needs at least 1 round (0 is --mode sync), got %d", d.staleness)
	case mode != sgd.Sync && d.window < 1:
		return usageErr("window", "want at least 1 round, got %d", d.window)
	case mode != sgd.Sync && d.flush <= 0:
		return usageErr("flush", "want a positive interval, got %v", d.flush)
	case d.stallAfter <= 0:
		return usageErr("stall-after", "want a positive interval, got %v", d.stallAfter)
	case d.handoffTimeout <= 0:
		return usageErr("handoff-timeout", "want a positive interval, got %v", d.handoffTimeout)
	}
	return fmt.Errorf("%w: %v", errUsage, err)
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
