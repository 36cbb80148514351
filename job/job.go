// Package job runs this process's part of a training job: the whole of a
// training run once its model is built (infer.Prepare).
//
// RunAlone trains on this process alone (plain "gossiptrain train"):
// sgd.Train with the report, the progress lines, the metrics and the model
// file around it. RunPeer runs one peer of a distributed job: it starts the
// libp2p node, waits for the cluster to form (saying why it has not, every
// few seconds), finds out with the start probes whether a run is under way
// (node/trainer), and runs the protocol core (node/train) through its
// driver (node/trainer) over the core link (gossip.CoreLink), with the same
// report, progress lines and metrics, and the dashboard. Both write the
// same JSON-lines report (package report) and end with the same summary
// line, so one peer alone compares with a cluster's peers.
//
// Stopping a peer: the first SIGINT or SIGTERM leaves gracefully (its
// shards are handed over, the others train on), a second one stops at
// once, and peerlog.StopSignal stops at once from the start (the whole job
// is stopping). A peer that stops before the end reports its run as
// partial (see stop.go).
package job

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/human"
	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/metrics"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/report"
	"github.com/gossiptrain/gossiptrain/sgd"
	"github.com/gossiptrain/gossiptrain/usage"
)

// Config is a training run: its plan (data and model) and how to train it.
type Config struct {
	// Plan is the data and the model (infer.Prepare).
	Plan *infer.Plan
	// Batch is the examples per step, EvalEvery the training examples
	// between evaluations on the test set (0: only at the end), Threads
	// the cores a batch's gradient is split over (and GOMAXPROCS while
	// training).
	Batch     int
	EvalEvery int64
	Threads   int
	// NonFinite is what a batch whose gradient is not finite does.
	NonFinite sgd.NonFinite
	// ProgressEvery is how often a progress line is logged (0: never).
	ProgressEvery time.Duration
	// Report is the JSON-lines report file ("": none), Save the model
	// file ("": none).
	Report, Save string
	// SaveState writes the optimizer state into Save too (train
	// --save-state), so train --init goes on at the rates reached.
	SaveState bool
	// Flags is every flag of the command and its value, for the report's
	// start line.
	Flags map[string]string
	// Version is the binary's version, for the report and the metrics.
	Version string
	// MetricsAddr serves Prometheus metrics and pprof ("": off).
	MetricsAddr string
	// CheckpointDir, CheckpointEvery, Resume and ResumeOrStart are a
	// standalone run's checkpoints (alone_ckpt.go): written to
	// CheckpointDir every CheckpointEvery (0: only when interrupted),
	// continued from with Resume (ResumeOrStart: or started afresh when
	// there is none). A peer of a job takes them from its Dist.
	CheckpointDir   string
	CheckpointEvery time.Duration
	Resume          bool
	ResumeOrStart   bool
	Log             zerolog.Logger
}

// RunAlone trains on this process alone and writes the report and model.
// Config.MetricsAddr serves the same metrics and pprof profiles as a
// peer's (topology "single", mode "local"), so one peer alone can be
// profiled and compared with a cluster's peers.
func RunAlone(ctx context.Context, cfg Config) (sgd.Summary, error) {
	log, p := cfg.Log, cfg.Plan
	mt, closeMetrics, err := StartMetrics(cfg.MetricsAddr, log)
	if err != nil {
		return sgd.Summary{}, err
	}
	defer closeMetrics()
	mt.SetInfo(metrics.Info{Topology: "single", Mode: "local", Version: cfg.Version})
	rep, err := cfg.openReport("", nil)
	if err != nil {
		return sgd.Summary{}, err
	}
	defer rep.Close()
	sampler := report.NewSampler()
	p.Model.OwnAll()
	start, err := cfg.resumeAlone()
	if err != nil {
		return sgd.Summary{}, err
	}
	resumedAt := p.Model.Examples

	prog := cfg.progressHook(false)
	open := func(epoch int) (data.Source, error) {
		s, err := p.OpenTrain(epoch)
		if err != nil {
			return nil, err
		}
		s = data.Shared(s) // Train reads on a goroutine of its own; the progress hook asks for Stats
		prog.track(s)
		return s, nil
	}
	hooks := sgd.Hooks{
		Skipped: skippedLogger(log),
		Progress: func(sp sgd.Progress) {
			prog.fn(sp)
			mt.Progress(sp.Examples, sp.Epoch)
		},
		Eval: func(e sgd.EvalPoint) {
			logMetrics(log.Info(), e.Metrics).Str("examples", human.Count(float64(e.Examples))).Msg("evaluation")
			rep.Write(report.Eval{Type: report.TypeEval, Examples: e.Examples, Seconds: e.Seconds, Paused: e.Paused, Epoch: e.Epoch, Metrics: reportMetrics(e.Metrics)})
			mt.Eval(metrics.EvalFigures{LogLoss: e.LogLoss, Error: e.Error, AUC: e.AUC, Examples: e.Examples, Seconds: e.Seconds})
		},
	}
	scfg := sgd.DefaultConfig()
	scfg.Batch = cfg.Batch
	scfg.Epochs = p.Epochs
	if p.EpochsAuto {
		scfg.StopTol, scfg.MinEpochs = infer.AutoStopTol, infer.AutoMinEpochs
	}
	scfg.Holdout, scfg.Patience, scfg.HoldoutTol = p.Holdout, infer.AutoPatience, infer.AutoHoldoutTol
	scfg.EvalEvery = cfg.EvalEvery
	// --eval-every 0: an evaluation at the end of every epoch, so the
	// report's curves (and report's plots) have a point per epoch, not a
	// single dot (issue 33); the test set is read once per epoch.
	scfg.EvalEachEpoch = cfg.EvalEvery == 0
	scfg.Threads = cfg.Threads
	scfg.NonFinite = cfg.NonFinite
	scfg.Start = start
	// No checkpoints with --holdout (train refuses them): the early
	// stop's best model is not in them.
	ckpt := cfg.CheckpointDir != "" && p.Holdout == 0
	if ckpt && cfg.CheckpointEvery > 0 {
		scfg.CheckpointEvery, hooks.Checkpoint = cfg.CheckpointEvery, cfg.saveAloneCheckpoint
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(cfg.Threads)) // at most --threads CPUs at a time while training
	log.Info().Strs("train", p.TrainFiles).Int("batch", scfg.Batch).Int("epochs", scfg.Epochs).Int("threads", scfg.Threads).Msg("training")
	sum, err := sgd.Train(ctx, p.Model, scfg, open, p.OpenTest(), hooks)
	end := aloneEnd{resumedAt: resumedAt}
	var evalErr *sgd.EvalError
	switch {
	case err == nil:
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		// Interrupted (the first SIGINT): keep what was trained.
		end.why = stopInterrupted
		if ckpt {
			if cerr := cfg.saveAloneCheckpoint(sum.Stopped); cerr != nil {
				log.Error().Err(cerr).Msg("the checkpoint at the interrupt was not written")
			}
		}
	case errors.As(err, &evalErr):
		// The test set failed: the model trained is still worth keeping.
		end.evalErr = evalErr
		if !sum.Trained {
			end.why = stopEvalFailed
		}
	default:
		return sum, err
	}
	if ferr := cfg.finishAlone(sum, prog.badLines(), sampler, rep, mt, end); ferr != nil {
		return sum, ferr
	}
	switch {
	case end.evalErr != nil && cfg.Save != "":
		return sum, fmt.Errorf("%w (the model trained is saved in %s)", err, cfg.Save)
	case end.evalErr != nil:
		return sum, fmt.Errorf("%w (training finished, nothing was saved: --save was not given)", err)
	}
	return sum, err
}

// stopEvalFailed is why a standalone run stopped before the end of
// training when an evaluation along the way (--eval-every) failed.
const stopEvalFailed = "evaluation failed"

// aloneEnd is how a standalone run ended, for its summary and model file.
type aloneEnd struct {
	why       string         // partial: why it stopped early ("": it did not)
	evalErr   *sgd.EvalError // an evaluation that failed (nil: none)
	resumedAt int64          // the examples of the checkpoint it resumed from
}

// finishAlone writes a lone run's summary (report, metrics, log) and its
// model file: marked partial when the run stopped early (end.why), and
// saved also when the evaluation after training failed.
func (cfg Config) finishAlone(sum sgd.Summary, bad int64, sampler *report.Sampler, rep *report.Writer, mt *metrics.Metrics, end aloneEnd) error {
	log, p := cfg.Log, cfg.Plan
	p.Model.Examples += sum.Examples
	if p.Scale != nil {
		// Back to the raw features' units, so the saved model (and
		// model_hash) needs no scaling to predict.
		p.Model.Unscale(p.Scale.Scale, p.Scale.Shift)
	}
	if sum.BestEpoch > 0 {
		p.Model.Examples += sum.BestExamples - sum.Examples // the kept model's
		l := sum.HoldoutLoss
		ev := log.Info().Int("epochs", sum.Epochs).Int("kept_epoch", sum.BestEpoch).Int64("holdout_rows", sum.HoldoutRows).
			Float64("holdout_logloss", human.Round4(l[sum.BestEpoch-1])).Float64("holdout_logloss_last", human.Round4(l[len(l)-1]))
		if sum.Converged {
			ev.Msgf("--holdout: the held-out loss stopped improving; kept the model of epoch %d, its lowest", sum.BestEpoch)
		} else {
			ev.Msgf("--holdout: ran the most epochs (%d) with the held-out loss still improving; kept the model of epoch %d, its lowest (give --epochs for more)", p.Epochs, sum.BestEpoch)
		}
	} else if p.Holdout > 0 && sum.Epochs > 0 {
		log.Warn().Int("holdout", p.Holdout).Msg("--holdout: fewer training rows than --holdout, so none was held out (--epochs auto stops on the training loss then)")
	}
	if p.EpochsAuto && sum.BestEpoch == 0 && end.why == "" {
		ev := log.Info().Int("epochs", sum.Epochs)
		if len(sum.EpochLoss) > 0 {
			ev = ev.Float64("train_logloss", human.Round4(sum.EpochLoss[len(sum.EpochLoss)-1]))
		}
		if sum.Converged {
			ev.Msg("--epochs auto: the training loss stopped improving")
		} else {
			ev.Msg("--epochs auto: stopped at the most epochs auto runs; the loss was still improving (give --epochs)")
		}
	}
	// The model's figures before the resources: reading every weight
	// faults in the pages training never touched (a 2^29-row model: its
	// whole 2 GiB), and the peak RSS reported is the process's, as a
	// peer's is after it hashed its shards.
	nonzeros, hash := p.Model.NonZeros(), p.Model.Hash()
	res := sampler.Sample()
	if bad > 0 {
		log.Warn().Int64("bad_lines", bad).Msg("malformed lines were skipped (--skip-bad-lines)")
	}
	warnSkipped(log, sum.SkippedNonFinite)
	s := report.Summary{
		Type: report.TypeSummary, Examples: sum.Examples, Seconds: sum.Seconds, PausedSeconds: sum.EvalSeconds,
		ExamplesPerSec: report.Num(sum.ExamplesPerSec), Epochs: sum.Epochs, Steps: sum.Steps,
		KeptEpoch: sum.BestEpoch, HoldoutLogLoss: sum.HoldoutLoss,
		Metrics:       reportMetrics(sum.Final),
		ModelNonzeros: nonzeros, ModelHash: fmt.Sprintf("%016x", hash),
		BadLines: bad, BatchesSkippedNonFinite: sum.SkippedNonFinite, Resources: res,
		Peers: 1, Topology: "single", Mode: "local", Batch: cfg.Batch, Threads: cfg.Threads, Shards: p.Model.Layout.Shards, Owned: p.Model.Layout.Shards,
	}
	s.ResumedAtExamples = end.resumedAt
	final, done := sum.Final, "done"
	if end.why != "" {
		markPartial(&s, end.why, 0)
		s.StoppedAtEpoch, s.StoppedAtRow = sum.Stopped.Epoch+1, sum.Stopped.Rows
		final, done = sgd.Metrics{}, "stopped before the end of training"
		markAlonePartial(p.Model, end.why, sum.Stopped)
	}
	if end.evalErr != nil {
		nan := report.Num(math.NaN())
		s.Metrics = report.Metrics{TestLogLoss: nan, TestError: nan, TestAUC: nan, TestAccuracy: nan}
		s.EvalFailed, final = end.evalErr.Error(), sgd.Metrics{}
	}
	if err := rep.Write(s); err != nil {
		return err
	}
	mt.Summary(metrics.SummaryFigures{Examples: sum.Examples,
		Eval:    metrics.EvalFigures{LogLoss: final.LogLoss, Error: final.Error, AUC: final.AUC},
		HasEval: sum.Evaluated && end.why == "" && end.evalErr == nil})
	ev := log.Info()
	if end.why != "" {
		ev = log.Warn().Str("stopped", end.why).Int("epoch", sum.Stopped.Epoch+1).Int64("epoch_rows", sum.Stopped.Rows)
	}
	logMetrics(ev, final).Str("examples", human.Count(float64(sum.Examples))).
		Float64("seconds", human.Round4(sum.Seconds)).Str("examples_per_sec", human.Count(sum.ExamplesPerSec)).
		Int64("model_nonzeros", s.ModelNonzeros).Str("resources", res.String()).Msg(done)
	if cfg.Save != "" {
		if err := p.Model.SaveFile(cfg.Save, model.SaveOptions{State: cfg.SaveState}); err != nil {
			return fmt.Errorf("--save: %w", err)
		}
		if end.why != "" {
			log.Warn().Str("file", cfg.Save).Bool("partial", true).Int("stopped_at_epoch", sum.Stopped.Epoch+1).
				Int64("stopped_at_epoch_rows", sum.Stopped.Rows).Str("stopped", end.why).
				Msg("model saved: partial, training stopped before its end")
		} else {
			log.Info().Str("file", cfg.Save).Msg("model saved")
		}
	}
	return nil
}

// StartMetrics serves Prometheus metrics and pprof on addr (--metrics-addr).
// With addr "" it returns nil Metrics (whose methods do nothing) and a
// close function that does nothing, so callers need no checks. A bad
// address is a usage error naming --metrics-addr.
func StartMetrics(addr string, log zerolog.Logger) (*metrics.Metrics, func() error, error) {
	if addr == "" {
		return nil, func() error { return nil }, nil
	}
	cfg := metrics.DefaultConfig()
	cfg.Addr = addr
	if err := cfg.Validate(); err != nil {
		return nil, nil, usage.Flag("metrics-addr", "%v", err)
	}
	mt, _, closeFn, err := metrics.Start(addr, log)
	if err != nil {
		return nil, nil, usage.Flag("metrics-addr", "%v", err)
	}
	return mt, closeFn, nil
}

// progress logs progress lines with an ETA from the bytes read so far.
type progress struct {
	cfg       Config
	cur       data.Source // the epoch being read
	doneBytes int64       // bytes of finished epochs
	last      time.Time
	lastEx    int64 // examples at the previous line
	fn        func(sgd.Progress)
}

// progressHook returns the progress logger of this run (distributed: a
// peer's, whose --epochs auto has an end). A line after which no example
// was trained says what the peer waits for, and since when, instead of an
// ETA that would only grow (TestProgressLineWaiting).
func (cfg Config) progressHook(distributed bool) *progress {
	p := &progress{cfg: cfg, last: time.Now()}
	log, every, plan := cfg.Log, cfg.ProgressEvery, cfg.Plan
	p.fn = func(sp sgd.Progress) {
		if every <= 0 || time.Since(p.last) < every {
			return
		}
		p.last = time.Now()
		idle := sp.Examples == p.lastEx && sp.Waiting != ""
		p.lastEx = sp.Examples
		if idle {
			log.Info().Int("epoch", sp.Epoch).Str("examples", human.Count(float64(sp.Examples))).
				Str("waited", human.Duration(time.Duration(sp.Idle*float64(time.Second))).String()).Str("for", sp.Waiting).Msg("waiting")
			return
		}
		ev := log.Info().Int("epoch", sp.Epoch).Str("examples", human.Count(float64(sp.Examples))).
			Str("examples_per_sec", human.Count(sp.ExamplesPerSec)).Float64("train_logloss", human.Round4(sp.TrainLoss))
		// --epochs auto alone has no known end: no ETA.
		if p.cur != nil && plan.TrainBytes > 0 && !(plan.EpochsAuto && !distributed) {
			total := float64(plan.TrainBytes) * float64(plan.Epochs)
			done := float64(p.doneBytes + p.cur.Stats().Bytes)
			if done > 0 && done < total {
				eta := time.Duration(sp.Seconds * (total - done) / done * float64(time.Second))
				ev = ev.Str("eta", human.Duration(eta).String()).Str("done", fmt.Sprintf("%.0f%%", 100*done/total))
			}
		}
		ev.Msg("training")
	}
	return p
}

// track notes the source of a new epoch.
func (p *progress) track(s data.Source) {
	if p.cur != nil {
		p.doneBytes += p.cur.Stats().Bytes
	}
	if s != nil {
		p.cur = s
	}
}

// badLines is the bad lines skipped in the epoch being read.
func (p *progress) badLines() int64 {
	if p.cur == nil {
		return 0
	}
	return p.cur.Stats().BadLines
}

// skippedLogger logs the first batches skipped as not finite one by one
// (--nonfinite skip), then says the rest are only counted.
func skippedLogger(log zerolog.Logger) func(*sgd.NonFiniteError) {
	n := 0
	return func(e *sgd.NonFiniteError) {
		n++
		switch {
		case n <= 10:
			log.Warn().Str("rows", e.Where()).Str("why", e.What()).Int("skipped", n).
				Msg("skipped a batch whose gradient is not finite (--nonfinite skip): nothing of it reached the model")
		case n == 11:
			log.Warn().Msg("more batches whose gradient is not finite: they are skipped and counted, no longer logged one by one")
		}
	}
}

// warnSkipped logs how many batches were skipped as not finite, if any.
func warnSkipped(log zerolog.Logger, n int64) {
	if n > 0 {
		log.Warn().Int64("batches_skipped_nonfinite", n).
			Msg("batches whose gradient was not finite were skipped (--nonfinite skip): their rows hold values that overflow; --max-value refuses them as bad lines")
	}
}

// openReport creates the report file (if asked for) and writes its start
// line, with the settings in effect (effectiveSettings) and, for a peer of
// a job, the job's (jobEffective).
func (cfg Config) openReport(peerID string, job map[string]string) (*report.Writer, error) {
	if cfg.Report == "" {
		return nil, nil
	}
	w, err := report.Create(cfg.Report)
	if err != nil {
		return nil, fmt.Errorf("--report: %w", err)
	}
	eff := effectiveSettings(cfg.Plan.Model)
	for k, v := range job {
		if eff == nil {
			eff = map[string]string{}
		}
		eff[k] = v
	}
	w.Write(report.Start{Type: report.TypeStart, Time: time.Now().UTC().Format(time.RFC3339), PeerID: peerID, Version: cfg.Version, Config: cfg.Flags, Effective: eff})
	return w, nil
}

func reportMetrics(m sgd.Metrics) report.Metrics {
	return report.Metrics{
		TestExamples: m.Examples, TestLogLoss: report.Num(m.LogLoss), TestError: report.Num(m.Error),
		TestAUC: report.Num(m.AUC), TestAccuracy: report.Num(m.Accuracy),
	}
}

func logMetrics(e *zerolog.Event, m sgd.Metrics) *zerolog.Event {
	if m.Examples == 0 {
		return e
	}
	e = e.Float64("test_logloss", human.Round4(m.LogLoss)).Float64("test_accuracy", human.Round4(m.Accuracy))
	if !math.IsNaN(m.AUC) {
		e = e.Float64("test_auc", human.Round4(m.AUC))
	}
	return e
}

// trainGCPercent is the garbage collector's GOGC while training a model of
// up to 64 MiB of weights, unless the environment sets GOGC. Go lets
// garbage grow to GOGC% of the live heap before it collects, and the live
// heap of a training process is mostly the model's weights and optimizer
// state (a 2^24-row model: 64 MiB of weights alone), so at Go's default of
// 100 a peer let 60-90 MiB of per-round messages pile up before the
// collector reused any of it. Each of those pages is new memory the first
// time it is written, and new memory is expensive on VMs (13-15 µs per 4
// KiB page on the 2-vCPU VMs this project is measured on, where the host
// backs guest memory on first touch): `gossiptrain bench --cpus 0.4
// --peers 1,4 --topologies ring --modes sync,async` ran 4 capped peers at
// 0.67x and 0.81x of one peer with GOGC=100, 0.95x and 1.02x with 25, 0.98x
// and 1.05x with 10 (one run each, side by side), and a peer's peak RSS
// went from 182 to 106 MiB at 25. The model's arrays hold no pointers, so
// the extra collections cost little. A lone `train` allocates almost
// nothing per step and is not affected either way.
const trainGCPercent = 25

// trainGarbageBytes is the garbage a training process lets pile up before
// it collects, whatever its model's size: 25% of 64 MiB. A percentage of
// the heap alone does not do for large models: the weights are allocated
// whole, and a peer touches only its shards' pages of them (and a lone
// process only the rows its data uses), so with --dim 2^29 (2 GiB of
// weights) GOGC 25 let a peer's garbage reach half a gigabyte, and each of
// 4 peers peaked at 58-82% of the RSS of one process training alone.
const trainGarbageBytes = 16 << 20

// trainGCPercentFor is the GOGC for a model of weightBytes of weights:
// trainGCPercent, lower for models so large that it would allow more than
// trainGarbageBytes of garbage, and at least 1.
func trainGCPercentFor(weightBytes int64) int {
	if weightBytes <= 0 {
		return trainGCPercent
	}
	return int(max(1, min(trainGCPercent, 100*trainGarbageBytes/weightBytes)))
}

// GCForTraining sets the collector for a training process whose model has
// weightBytes of weights (0: not known yet; see trainGCPercentFor); an
// explicit GOGC in the environment wins (TestTrainingGCPercent).
func GCForTraining(weightBytes int64) {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(trainGCPercentFor(weightBytes))
	}
}
