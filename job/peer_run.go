package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/human"
	"github.com/gossiptrain/gossiptrain/metrics"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/train"
	"github.com/gossiptrain/gossiptrain/node/trainer"
	"github.com/gossiptrain/gossiptrain/peerlog"
	"github.com/gossiptrain/gossiptrain/report"
	"github.com/gossiptrain/gossiptrain/sgd"
	"github.com/gossiptrain/gossiptrain/usage"
)

// running is what a peer's run reports through while it trains.
type running struct {
	rep     *report.Writer
	dash    *metrics.Dashboard
	sampler *report.Sampler
	prog    *progress
	link    *gossip.CoreLink
}

// run trains: the trainer and the core link, the signals and the figures
// that follow the run, then the summary.
func (p *peer) run(tcfg trainer.Config, testSet *trainer.TestSet) error {
	log, ncfg := p.log, p.ncfg
	rep, err := p.cfg.openReport(p.self, jobEffective(p.d, p.cfg.Plan.Model))
	if err != nil {
		return err
	}
	defer rep.Close()
	mode := p.d.Mode.String()
	p.mt.SetInfo(metrics.Info{PeerID: p.self, Job: ncfg.Job, Topology: string(ncfg.Topology), Mode: mode, Version: p.cfg.Version})
	r := &running{rep: rep, dash: p.n.Dashboard(), sampler: report.NewSampler(), prog: p.cfg.progressHook(true)}
	r.dash.SetInfo(metrics.Info{Mode: mode, Version: p.cfg.Version}) // the status server's page: fed from the same hooks

	lnk := &lateLink{}
	trn, err := trainer.New(tcfg, p.hooks(r), lnk)
	if err != nil {
		return usage.Wrap(err)
	}
	lcfg := gossip.DefaultCoreLinkConfig()
	lcfg.Job, lcfg.Limits, lcfg.Values, lcfg.Log = ncfg.Job, p.lim, p.d.Values, log
	if r.link, err = gossip.NewCoreLink(p.tr, lcfg, trn.Deliver); err != nil {
		return err
	}
	defer r.link.Close()
	lnk.set(r.link)
	p.starter.Running()

	runDone := make(chan struct{})
	go followMembers(p.n, trn, runDone)
	go p.leaveOnSignal(trn, runDone)
	go p.reportTotals(r, runDone)
	sum, err := trn.Run(p.ctx, p.openTrain(r.prog), testSet)
	close(runDone)
	if !stoppedAtOnce(p.ctx) {
		// The last messages (answers, acknowledgements, "finished") go
		// out before the link closes; a peer stopping at once skips this.
		fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Second)
		r.link.Flush(fctx)
		fcancel()
	}
	switch {
	case err == nil:
		p.starter.Ended()
	case errors.Is(err, trainer.ErrLeft):
		log.Info().Int64("examples", sum.Examples).Int64("rounds", sum.Rounds).Msg("left the job; the others train on")
	case errors.Is(err, train.ErrRemoved):
		return fmt.Errorf("%w (this peer was cut off, and the others went on without it; start it again to join the run as a new member)", err)
	case errors.Is(err, train.ErrNoQuorum):
		hint := "start the job again"
		if p.d.CheckpointDir != "" {
			hint = "start the job again with --resume to go on from its newest checkpoint"
		}
		return fmt.Errorf("%w (the peers that agree the run's configurations crashed faster than the run could replace them, so it can neither remove them nor end; %s)", err, hint)
	}
	stopped, err := partialRun(p.ctx, err)
	if err != nil {
		if cause := context.Cause(p.ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
		return err
	}
	if err := p.finish(r, sum, stopped); err != nil {
		return err
	}
	if stopped == stopInterrupted || stopped == stopJobStopped {
		return context.Cause(p.ctx) // exit status 130, after the report
	}
	return nil
}

// leaveOnSignal leaves the run gracefully on the first SIGINT/SIGTERM and
// stops it at once on the second, until done.
func (p *peer) leaveOnSignal(trn *trainer.Trainer, done <-chan struct{}) {
	select {
	case <-p.sigs:
		p.log.Info().Msg("leaving gracefully: handing shards over (interrupt again to stop at once)")
		trn.Leave()
		select {
		case <-p.sigs:
			p.cancel(context.Canceled)
		case <-done:
		}
	case <-done:
	}
}

// totals are the run's counters of dropped and rejected messages.
func (p *peer) totals(r *running) metrics.Totals {
	return metrics.Totals{PubsubDropped: p.n.PubSubCounters().Dropped(), Rejected: r.link.Stats().Rejected.Map()}
}

// reportTotals gives the metrics and the dashboard the totals every
// second until done.
func (p *peer) reportTotals(r *running, done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			tt := p.totals(r)
			p.mt.Totals(tt)
			r.dash.Totals(tt)
		}
	}
}

// hooks are the trainer's hooks: progress lines, evaluations, rounds and
// configurations go to the log, the report, the metrics and the dashboard.
func (p *peer) hooks(r *running) trainer.Hooks {
	log, self, mt, dash, rep := p.log, p.self, p.mt, r.dash, r.rep
	var hooks trainer.Hooks
	hooks.Progress = func(sp sgd.Progress) {
		r.prog.fn(sp)
		mt.Progress(sp.Examples, sp.Epoch)
	}
	hooks.Eval = func(e sgd.EvalPoint) {
		logMetrics(log.Info(), e.Metrics).Str("examples", human.Count(float64(e.Examples))).Msg("evaluation")
		rep.Write(report.Eval{Type: report.TypeEval, PeerID: self, Examples: e.Examples, Seconds: e.Seconds, Paused: e.Paused, Epoch: e.Epoch, Metrics: reportMetrics(e.Metrics)})
		ef := metrics.EvalFigures{LogLoss: e.LogLoss, Error: e.Error, AUC: e.AUC, Examples: e.Examples, Seconds: e.Seconds}
		mt.Eval(ef)
		dash.Eval(ef)
	}
	hooks.Round = func(rp trainer.RoundPoint) {
		in, out := p.n.Bandwidth()
		rf := metrics.RoundFigures{Rounds: rp.Round + 1, Examples: rp.Examples, WaitSeconds: rp.WaitSeconds, Staleness: rp.Staleness, BytesSent: out, BytesRecv: in}
		mt.Round(rf)
		dash.Round(rf)
		if rp.Round%int64(p.d.ReportRounds) != 0 || rep == nil {
			return
		}
		rep.Write(report.Round{Type: report.TypeRound, PeerID: self, Clock: rp.Round, Examples: rp.Examples, Seconds: rp.Seconds,
			BytesSent: out, BytesRecv: in, WaitSeconds: rp.WaitSeconds, Live: rp.Members,
			Epoch: rp.Config, Owned: rp.Owned, Staleness: rp.Staleness, Resources: r.sampler.Frequent()})
	}
	hooks.Change = func(c trainer.ChangePoint) {
		log.Info().Uint64("config", c.Config).Uint64("start_round", c.Start).Int("workers", len(c.Members)).
			Strs("joined", shortIDs(c.Joined)).Strs("left", shortIDs(c.Left)).Strs("crashed", shortIDs(c.Crashed)).
			Int("owned_shards", c.Owned).Bool("final", c.Final).Msg("training configuration")
		mt.Ring(c.Config, c.Owned)
		dash.Configuration(metrics.ConfigFigures{Config: c.Config, Start: c.Start, Members: c.Members,
			Joined: c.Joined, Left: c.Left, Crashed: c.Crashed, Owned: c.Owned})
		rep.Write(report.Change{Type: report.TypeChange, PeerID: self, Config: c.Config, Start: c.Start, Members: c.Members,
			Joined: c.Joined, Left: c.Left, Crashed: c.Crashed, Owned: c.Owned})
	}
	hooks.Event = func(e train.Event) { logCoreEvent(log, e) }
	return hooks
}

// logCoreEvent logs what the core reports besides configurations.
func logCoreEvent(log zerolog.Logger, e train.Event) {
	switch e.Kind {
	case train.EvPromoted:
		log.Warn().Int("shards", e.Shards).Str("detail", e.Text).Msg("shards lost with every holder restarted from their initial values")
	case train.EvLost:
		log.Warn().Str("peer", e.Peer).Str("detail", e.Text).Msg("contributions lost with a crashed peer")
	case train.EvHandedOff:
		log.Debug().Int("shards", e.Shards).Str("to", e.Peer).Msg("shards handed over")
	case train.EvReceived:
		log.Debug().Int("shards", e.Shards).Str("from", e.Peer).Msg("shards received")
	case train.EvLeader:
		log.Debug().Msg("this peer leads the agreement on configurations")
	case train.EvDropped:
		log.Warn().Str("peer", e.Peer).Int("rows", e.Rows).Str("detail", e.Text).
			Msg("dropped gradient rows over --max-row-grad (a worker's bug or overflow; or features of large raw values: then raise --max-row-grad)")
	}
}

// finish writes the peer's summary (report, metrics, dashboard, log) and
// its model file; stopped says why the run stopped early ("": it did not).
func (p *peer) finish(r *running, sum trainer.Summary, stopped string) error {
	log, m := p.log, p.cfg.Plan.Model
	ls := r.link.Stats()
	bwIn, bwOut := p.n.Bandwidth()
	res := r.sampler.Sample()
	s := p.summary(sum, r.prog.badLines(), ls.Rejected.Total(), bwIn, bwOut, res)
	if sum.ModelFetched {
		s.ModelNonzeros = m.NonZeros()
	}
	if stopped != "" {
		markPartial(&s, stopped, sum.Rounds)
	}
	if err := r.rep.Write(s); err != nil {
		return err
	}
	sf := metrics.SummaryFigures{Rounds: sum.Rounds, Examples: sum.Examples, BytesSent: bwOut, BytesRecv: bwIn,
		Totals:  p.totals(r),
		Eval:    metrics.EvalFigures{LogLoss: sum.Final.LogLoss, Error: sum.Final.Error, AUC: sum.Final.AUC},
		HasEval: sum.Evaluated}
	p.mt.Summary(sf)
	r.dash.Finished(sf)
	done, final := peerlog.Done, sum.Final
	if stopped != "" {
		done, final = peerlog.Stopped, sgd.Metrics{} // no final evaluation: the model is partial
	}
	logMetrics(log.Info(), final).Str("examples", human.Count(float64(sum.Examples))).Int64("rounds", sum.Rounds).
		Float64("seconds", human.Round4(sum.Seconds)).Str("examples_per_sec", human.Count(sum.ExamplesPerSec)).
		Float64("wait_seconds", human.Round4(sum.WaitSeconds)).Str("model_hash", s.ModelHash).
		Str("sent", human.Count(float64(bwOut))+"B").Str("received", human.Count(float64(bwIn))+"B").
		Uint64("resent", sum.Core.Resent).Int64("rejected", s.Rejected).Uint64("contributions_lost", sum.Core.Lost).
		Int("shards_covered", sum.Covered).
		Str("resources", res.String()).Func(func(e *zerolog.Event) {
		if stopped != "" {
			e.Str("stopped", stopped).Bool("partial", true)
		}
	}).Msg(done)
	if l := sum.HoldoutLoss; len(l) > 0 {
		ev := log.Info().Int("epochs", sum.Epochs).Int64("holdout_rows", sum.HoldoutRows).
			Float64("holdout_logloss_best", human.Round4(slices.Min(l))).Float64("holdout_logloss_last", human.Round4(l[len(l)-1]))
		if sum.Converged {
			ev.Msgf("--holdout: this peer stopped after epoch %d, its held-out loss no longer improving; the model is the run's last", sum.Epochs)
		} else {
			ev.Msgf("--holdout: this peer ran the most epochs (%d) with its held-out loss still improving (give --epochs for more); the model is the run's last", sum.Epochs)
		}
	}
	warnSkipped(log, sum.SkippedNonFinite)
	if rej := ls.Rejected; rej.Total() > 0 || sum.Core.Rejected > 0 {
		log.Warn().Interface("rejected", rej.Map()).Uint64("refused_by_role", sum.Core.Rejected).Msg("messages were rejected")
	}
	if p.cfg.Save == "" {
		return nil
	}
	if !sum.ModelFetched {
		log.Warn().Str("file", p.cfg.Save).Str("stopped", stopped).Msg("--save not written: the run stopped before the model could be gathered from its holders")
		return nil
	}
	m.Examples += sum.Examples // this peer's (inspect shows it)
	markModelPartial(m, stopped, sum.Rounds)
	if err := m.SaveFile(p.cfg.Save, model.SaveOptions{}); err != nil {
		return fmt.Errorf("--save: %w", err)
	}
	logSaved(log, p.cfg.Save, stopped, sum.Rounds)
	return nil
}

// summary is the report's summary line of a peer's run.
func (p *peer) summary(sum trainer.Summary, bad int64, linkRejected uint64, bwIn, bwOut int64, res report.Resources) report.Summary {
	cfg, d, ncfg := p.cfg, p.d, p.ncfg
	return report.Summary{
		Type: report.TypeSummary, PeerID: p.self, Examples: sum.Examples, Seconds: sum.Seconds,
		PausedSeconds: sum.PausedSeconds, TrainingSeconds: sum.TrainingSeconds,
		ExamplesPerSec: report.Num(sum.ExamplesPerSec), Epochs: sum.Epochs, Steps: sum.Steps,
		HoldoutLogLoss: sum.HoldoutLoss, // KeptEpoch 0: the model is the last epoch's
		Metrics:        reportMetrics(sum.Final),
		ModelHash:      fmt.Sprintf("%016x", sum.ModelHash),
		BadLines:       bad, BatchesSkippedNonFinite: sum.SkippedNonFinite, Resources: res,
		Peers: sum.Members, Topology: string(ncfg.Topology), Mode: d.Mode.String(), Gather: d.Gather.String(),
		Threads: cfg.Threads, Batch: cfg.Batch,
		Rounds: sum.Rounds, WaitSeconds: sum.WaitSeconds, MaxStaleness: sum.MaxStaleness,
		BytesSent: bwOut, BytesRecv: bwIn, PubsubDropped: int64(p.n.PubSubCounters().Dropped()),
		Rejected: int64(linkRejected + sum.Core.Rejected), ContributionsLost: int64(sum.Core.Lost), RowsDropped: int64(sum.Core.RowsDropped),
		LocalSteps: d.LocalSteps,
		Owned:      sum.Owned, Shards: cfg.Plan.Model.Layout.Shards,
		Configs: sum.Configs, RoundsDegraded: int64(sum.Core.Degraded), Promoted: int(sum.Core.Promoted),
		Covered: sum.Covered, JoinSeconds: sum.JoinSeconds,
		ShardsReceived: int64(sum.Core.Received), ShardsSent: int64(sum.Core.HandedOff),
		Connections: p.n.ConnectionKinds(),
		Checkpoints: sum.Checkpoints, CheckpointsFailed: sum.CheckpointsFailed, ResumedAt: sum.ResumedAt,
	}
}
