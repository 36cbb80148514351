package cli

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/job"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/train"
	"github.com/gossiptrain/gossiptrain/sgd"
)

// Checks train makes before it reads any data, so a typo fails in a second
// instead of after an hour of training (issue 12, "fail fast"): spec
// parses and checks the data, model and run flags into an infer.Spec,
// checkDistFlags the distributed ones into a job.Dist, checkOutputs the
// files train will write.

// spec checks the data, model and run flags one by one, in the order a
// user reads them, and returns what they say for infer.Prepare.
func (tf *trainFlags) spec(c *command) (infer.Spec, error) {
	d, m, r := &tf.d, &tf.m, &tf.r
	s := infer.Spec{Train: d.train, Test: d.test, TrainLabels: d.trainLabels, TestLabels: d.testLabels,
		ZeroBased: d.zeroBased, SkipBad: d.skipBad, MaxValue: d.maxValue, Cache: d.cache, LabelBaseAuto: d.labelBase == "auto",
		Classes: m.classes, Dim: m.dim, Hidden: m.hidden, HiddenGiven: c.set("hidden"), InitSeed: m.initSeed, Shards: m.shards, ShardsGiven: c.set("shards"),
		Init:  m.init,
		Scale: infer.Scale(r.scale), Distributed: r.distributed, Given: givenFlags(c)}
	if len(d.train) == 0 {
		return s, usageErr("train", "no training data given (e.g. --train 'data/train*.svm')")
	}
	var err error
	if m.kind != "auto" {
		if s.Kind, err = model.ParseKind(m.kind); err != nil {
			return s, usageErr("model", "%v (or auto)", err)
		}
	}
	if s.Format, err = data.ParseFormat(d.format); err != nil {
		return s, usageErr("format", "%v", err)
	}
	if s.Part, s.Parts, err = parsePart(d.part); err != nil {
		return s, err
	}
	if s.Interactions, err = data.ParseInteractions(d.inter); err != nil {
		return s, usageErr("interactions", "%v", err)
	}
	if r.batch < 1 {
		return s, usageErr("batch", "must be at least 1, got %d", r.batch)
	}
	if !r.epochsAuto {
		s.Epochs = r.epochs
		if r.epochs < 1 {
			return s, usageErr("epochs", "must be at least 1, got %d", r.epochs)
		}
	}
	s.Holdout, s.HoldoutGiven = r.holdout.n, c.set("holdout")
	if s.Holdout > 0 && (r.epochsAuto || s.HoldoutGiven) && !r.distributed && tf.dist.checkpointDir != "" {
		return s, usageErr("checkpoint-dir", "not implemented for a run alone with --holdout (on by default with --epochs auto): the early stop's best model is not checkpointed, so a resumed run would not be the uninterrupted one; give --epochs N, or --holdout off")
	}
	switch s.Scale {
	case infer.ScaleAuto, infer.ScaleOn, infer.ScaleOff:
	default:
		return s, usageErr("scale", "%q: want auto, on or off", r.scale)
	}
	if r.evalEvery < 0 {
		return s, usageErr("eval-every", "must not be negative")
	}
	if _, err := sgd.ParseNonFinite(r.nonFinite); err != nil {
		return s, usageErr("nonfinite", "%q: want fail or skip", r.nonFinite)
	}
	if d.maxValue < 0 || math.IsNaN(d.maxValue) || math.IsInf(d.maxValue, 0) {
		return s, usageErr("max-value", "%v: want 0 (no bound) or a finite bound > 0", d.maxValue)
	}
	if s.Opt, err = m.optConfig(c); err != nil {
		return s, err
	}
	if err := m.check(c, s.Kind); err != nil {
		return s, err
	}
	if r.distributed && m.init != "" {
		return s, usageErr("init", "not implemented for a peer of a job: warm-start a train alone (no --job)")
	}
	if r.saveState && r.distributed {
		return s, usageErr("save-state", "not implemented for a peer of a job: a peer holds the state of its own shards only")
	}
	if r.saveState && r.save == "" {
		return s, usageErr("save-state", "needs --save: the state is written into the model file")
	}
	if !s.LabelBaseAuto {
		if s.LabelBase, err = strconv.Atoi(d.labelBase); err != nil {
			return s, usageErr("label-base", "%q is not auto or an integer", d.labelBase)
		}
	}
	if s.L2Auto = m.l2 == "auto"; !s.L2Auto {
		v, err := strconv.ParseFloat(m.l2, 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return s, usageErr("l2", "%q is not auto or a number >= 0", m.l2)
		}
		s.Opt.L2 = v
	}
	return s, nil
}

// check checks the model flags that depend on the kind of model.
func (m *modelFlags) check(c *command, kind model.Kind) error {
	if c.set("classes") && m.classes < 2 {
		return usageErr("classes", "want at least 2 classes, got %d", m.classes)
	}
	if kind != model.MLP && (c.set("hidden") || c.set("init-seed")) {
		return usageErr("hidden", "--hidden and --init-seed are for --model mlp")
	}
	if kind == model.MLP && (m.hidden < 1 || m.hidden > model.MaxHidden) {
		return usageErr("hidden", "want 1..%d hidden units, got %d", model.MaxHidden, m.hidden)
	}
	if kind == model.Logreg && c.set("classes") && m.classes != 2 {
		return usageErr("classes", "logreg is binary (2 classes); use --model softmax for %d classes", m.classes)
	}
	return nil
}

// givenFlags is the flags given on c's command line, as --name=value
// separated by spaces (saved with the model: inspect shows them).
func givenFlags(c *command) string {
	var given []string
	c.flags.Visit(func(f *flag.Flag) { given = append(given, "--"+f.Name+"="+f.Value.String()) })
	return strings.Join(given, " ")
}

// parsePart parses "I/N" (1-based) into data options' Part and Parts.
func parsePart(s string) (int, int, error) {
	if s == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 1 || i > n {
		return 0, 0, usageErr("part", "%q is not I/N with 1 <= I <= N (e.g. 2/4 for the second of four parts)", s)
	}
	return i, n, nil
}

// optConfig builds the optimizer configuration from the flags, keeping the
// optimizer's defaults for flags not given.
func (m *modelFlags) optConfig(c *command) (model.OptConfig, error) {
	kind, err := model.ParseOptKind(m.optimizer)
	if err != nil {
		return model.OptConfig{}, usageErr("optimizer", "%v", err)
	}
	oc := model.DefaultOptConfig(kind)
	if c.set("lr") {
		oc.LR = m.lr
	}
	if c.set("lr-decay") {
		oc.Decay = m.lrDecay
	}
	if c.set("lr-power") {
		oc.Power = m.lrPower
	}
	if c.set("l1") {
		if kind != model.FTRL && m.l1 != 0 {
			return oc, usageErr("l1", "L1 needs --optimizer ftrl (sgd and adagrad support only --l2)")
		}
		oc.L1 = m.l1
	}
	if c.set("ftrl-beta") {
		oc.Beta = m.beta
	}
	if err := oc.Validate(); err != nil {
		return oc, fmt.Errorf("%w: %v", errUsage, err)
	}
	return oc, nil
}

// checkDistFlags validates the distributed-training flags exactly as a
// distributed run needs them, whether or not this run is distributed: a
// standalone train rejects --mode foo as train --job does (the flags would
// otherwise be silently ignored, and the same command line with --job
// added would fail only then). It checks the values, the peer flags
// (node.Config.Validate, with a stand-in job name when --job is not given)
// and --progress-every. It creates nothing; checkOutputs checks
// --checkpoint-dir.
func checkDistFlags(tf *trainFlags) (job.Dist, error) {
	var s job.Dist
	var err error
	d := &tf.dist
	if s.Mode, err = train.ParseMode(d.mode); err != nil {
		return s, usageErr("mode", "%q: want sync, ssp or async", d.mode)
	}
	if s.Mode == train.SSP && d.staleness < 1 {
		return s, usageErr("staleness", "ssp needs at least 1 round (0 is --mode sync), got %d", d.staleness)
	}
	s.Staleness = d.staleness
	if s.Gather, err = train.ParseGather(d.gather); err != nil {
		return s, usageErr("gather", "%q: want need or full", d.gather)
	}
	if s.Values, err = wire.ParseValues(d.values); err != nil {
		return s, usageErr("values", "%v", err)
	}
	switch d.maxRowGrad {
	case "auto":
	case "off":
		s.MaxRowGrad = -1
	default:
		v, err := strconv.ParseFloat(d.maxRowGrad, 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return s, usageErr("max-row-grad", "%q: want auto, off or a bound > 0", d.maxRowGrad)
		}
		s.MaxRowGrad = v
	}
	switch d.localSteps {
	case "auto":
		s.LocalSteps = train.AutoLocalSteps(s.Mode, 0) // (docs/scaling.md, "Windows of local steps")
		if s.Gather != train.Need || d.combine == "trimmed" {
			s.LocalSteps = 1 // both combine one batch's gradients
		}
	default:
		h, err := strconv.Atoi(d.localSteps)
		if err != nil || h < 1 || h > 1<<16 {
			return s, usageErr("local-steps", "%q: want auto, or 1 (exchange every batch) up to 65536", d.localSteps)
		}
		s.LocalSteps = h
	}
	switch d.combine {
	case "auto":
		s.Combine, s.AutoCombine = train.Sum, true // (capped or mean where windows need it: here and job.Dist's combineFor)
	default:
		if s.Combine, err = train.ParseCombine(d.combine); err != nil {
			return s, usageErr("combine", "%q: want auto, sum, capped, mean or trimmed", d.combine)
		}
	}
	if s.AutoCombine && s.LocalSteps > 1 && s.Mode != train.Sync {
		s.Combine = train.Mean
	}
	if s.LocalSteps > 1 && s.Gather != train.Need {
		return s, usageErr("local-steps", "windows of local steps need --gather need: a full read copy keeps no optimizer state to train on")
	}
	if s.LocalSteps > 1 && s.Combine == train.Trimmed {
		return s, usageErr("combine", "trimmed combines one batch's gradients; with --local-steps %d workers push a window's changes: use --combine sum or mean", s.LocalSteps)
	}
	if s.LocalSteps <= 1 && s.Combine == train.Mean {
		return s, usageErr("combine", "mean averages windows' changes: it needs --local-steps above 1")
	}
	if s.LocalSteps <= 1 && s.Combine == train.Capped {
		return s, usageErr("combine", "capped combines windows' changes: it needs --local-steps above 1")
	}
	if s.Combine == train.Trimmed && s.Mode != train.Sync {
		return s, usageErr("combine", "trimmed needs --mode sync: ssp and async owners apply each push as it comes, with nothing to trim against")
	}
	switch d.optimizerState {
	case "auto", "owners", "workers":
		s.OptimizerState = d.optimizerState
	default:
		return s, usageErr("optimizer-state", "%q: want auto, owners or workers", d.optimizerState)
	}
	if d.optimizerState == "workers" && strings.EqualFold(tf.m.optimizer, "ftrl") {
		return s, usageErr("optimizer-state", "workers: ftrl's weights follow from its state (z and n), which the owners must hold; use --optimizer adagrad or --optimizer-state owners")
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
	s.InitSeed, s.ReportRounds, s.CheckpointDir, s.CheckpointEvery = tf.m.initSeed, d.reportRounds, d.checkpointDir, d.checkpointEvery
	s.Resume, s.ResumeOrStart, s.WaitTimeout, s.StallTimeout = d.resume, d.resumeOrStart, d.waitTimeout, tf.r.stallTimeout
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
// writable directories (and not directories), no file train writes is one
// it reads (infer.CheckApart), --test names data that exists, and
// --checkpoint-dir can be created and written. Nothing is left behind but
// --checkpoint-dir itself.
func checkOutputs(tf *trainFlags) error {
	if err := infer.CheckApart(tf.outputs(), tf.inputs()); err != nil {
		return err
	}
	for _, o := range []struct{ flag, path string }{{"save", tf.r.save}, {"report", tf.r.report}} {
		if o.path == "" {
			continue
		}
		if err := infer.CheckWritableFile(o.path); err != nil {
			return usageErr(o.flag, "%v", err)
		}
	}
	if tf.d.test != "" {
		files, _, err := infer.ExpandData([]string{tf.d.test}, "test")
		if err != nil {
			return err
		}
		if err := infer.CheckIDXLabels(files, tf.d.testLabels, "test-labels"); err != nil {
			return err
		}
	}
	if files, _, err := infer.ExpandData(tf.d.train, "train"); err == nil {
		if err := infer.CheckIDXLabels(files, tf.d.trainLabels, "train-labels"); err != nil {
			return err
		}
	}
	if dir := tf.dist.checkpointDir; dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return usageErr("checkpoint-dir", "%v", infer.PlainPathError(err))
		}
		if err := infer.CheckWritableDir(dir); err != nil {
			return usageErr("checkpoint-dir", "%v", err)
		}
	}
	return nil
}

// outputs are the files train writes, with their flags: the model, the
// report, the cache and a standalone run's checkpoint.
func (tf *trainFlags) outputs() []infer.FlagPath {
	out := []infer.FlagPath{{Flag: "save", Path: tf.r.save}, {Flag: "report", Path: tf.r.report}, {Flag: "cache", Path: tf.d.cache}}
	if dir := tf.dist.checkpointDir; dir != "" && !tf.r.distributed {
		out = append(out, infer.FlagPath{Flag: "checkpoint-dir", Path: job.AloneCheckpointPath(dir)})
	}
	return out
}

// inputs are the files train reads, with their flags: the training and
// test data (globs expanded) and their IDX labels, the peer's key files.
func (tf *trainFlags) inputs() []infer.FlagPath {
	in := infer.InputFiles(tf.d.train, "train", tf.d.trainLabels, "train-labels")
	if tf.d.test != "" {
		in = append(in, infer.InputFiles([]string{tf.d.test}, "test", tf.d.testLabels, "test-labels")...)
	}
	return append(in, infer.FlagPath{Flag: "swarm-key", Path: tf.p.swarmKey}, infer.FlagPath{Flag: "identity", Path: tf.p.identity},
		infer.FlagPath{Flag: "peers-file", Path: tf.p.peersFile})
}

// testCheckWhole is the size up to which checkTestData reads the whole
// test set before training (a larger one: its first rows).
const testCheckWhole = 32 << 20

// checkTestData reads the test set as evaluations will, before any epoch:
// an empty or broken --test fails now with exit 2 instead of after the
// training it would evaluate (TestTrainChecksTestBeforeTraining). A test
// set up to testCheckWhole bytes is read whole, a larger one up to its
// first batch of rows; an error later on in a large one still leaves the
// trained model saved (job.RunAlone).
func checkTestData(plan *infer.Plan) error {
	open := plan.OpenTest()
	if open == nil {
		return nil
	}
	whole := false
	if st, err := os.Stat(plan.Test); err == nil && st.Size() <= testCheckWhole {
		whole = true
	}
	src, err := open()
	if err != nil {
		return usageErr("test", "%v", infer.LabelsFlag(err, "test-labels"))
	}
	defer src.Close()
	var b data.Batch
	var rows int64
	for {
		n, err := src.Next(&b, 1000)
		rows += int64(n)
		if err == io.EOF || (err == nil && !whole && rows > 0) {
			break
		}
		if err != nil {
			return usageErr("test", "%v", err)
		}
	}
	if rows == 0 {
		return usageErr("test", "%s has no examples: there is nothing to evaluate on (give a test set with rows, or leave --test out)", plan.Test)
	}
	return nil
}
