package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/gossip/p2p"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/metrics"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node"
	"github.com/gossiptrain/gossiptrain/node/membership"
	"github.com/gossiptrain/gossiptrain/node/ring"
	"github.com/gossiptrain/gossiptrain/node/train"
	"github.com/gossiptrain/gossiptrain/node/trainer"
	"github.com/gossiptrain/gossiptrain/peerlog"
	"github.com/gossiptrain/gossiptrain/report"
	"github.com/gossiptrain/gossiptrain/sgd"
)

// distFlags say how a distributed run synchronises, what travels, and how
// it survives restarts.
type distFlags struct {
	mode            string
	staleness       int
	gather          string
	values          string
	reportRounds    int
	checkpointDir   string
	checkpointEvery time.Duration
	resume          bool
	resumeOrStart   bool // --resume=auto
	waitTimeout     time.Duration
	maxRowGrad      string
	combine         string
	localSteps      string
}

func (f *distFlags) register(fs *flag.FlagSet) {
	def := train.DefaultConfig()
	fs.StringVar(&f.mode, "mode", "sync", "how rounds synchronise: sync (a barrier per round: every peer's gradients are in before\nanyone moves on; bit-identical on every peer), ssp (a worker may run --staleness rounds ahead\nof the slowest), or async (workers never wait for each other; owners apply on arrival)")
	fs.IntVar(&f.staleness, "staleness", def.Staleness, "ssp: `rounds` a worker may run ahead of the slowest worker's applied contributions")
	fs.StringVar(&f.gather, "gather", def.Gather.String(), "where a worker gets the values it computes with: need (it asks the owners for exactly the\nrows its next batch touches, piggybacked on its gradient; traffic and work per example stay\nflat as peers are added, and a peer holds only its shards and a batch's rows) or full (every\npeer keeps a read copy of the whole model and owners send every changed row to everyone:\nfewer bytes with 2-3 peers and small models, more with many)")
	fs.StringVar(&f.values, "values", "f32", "how gradient rows travel: f32 (lossless, entropy-coded: fewest bytes), raw (lossless, byte-aligned:\n~26% more bytes, a fifth of the CPU to encode and half to decode; parameters and shard state go raw\ntoo), f16 or i8 (lossy: every value rounded, and the rounding error is not carried over;\nparameters stay f32)")
	fs.IntVar(&f.reportRounds, "report-rounds", 1, "write a round line to --report every `N` rounds")
	fs.StringVar(&f.checkpointDir, "checkpoint-dir", "", "where this peer writes its part of each checkpoint: `DIR`/<peer ID>/round-<R>.ckpt\n(the shards it holds, with optimizer state, and its data position; the newest 2 are kept)")
	fs.DurationVar(&f.checkpointEvery, "checkpoint-every", 0, "checkpoint the whole job this often (0: never): the raft leader schedules a round R and\nevery peer writes its shards as of the end of round R-1 (sync), or as of every worker's cut\n(ssp, async: the workers pause for a round trip while the cut is taken)")
	fs.Var(resumeFlag{&f.resume, &f.resumeOrStart}, "resume", "restart the job from its newest checkpoint that every peer of it has whole: start\nevery peer again with --resume (same --identity, data and flags); the run continues at\nround R (sync: exactly as if it had not stopped; ssp/async: every example trained once).\nEach file is read through first: a damaged or cut-short one is passed over (logged) for\nthe round before. With no checkpoint on any peer --resume fails; --resume=auto starts a\nnew run from round 0 then. A peer that finds the run under way joins it")
	registerWaitFlag(fs, &f.waitTimeout)
	fs.StringVar(&f.maxRowGrad, "max-row-grad", "auto", "owners drop a pushed gradient row whose L2 norm is over this `bound` times its push's examples\n(a worker's bug or an overflow must not wreck the shared model): auto is 10 for logreg and\nsoftmax (honest rows of unit-scaled features stay under 1) and 1000 for the mlp; off turns\nit off. Raise it for features of large raw values (distributed runs do not --scale): owners\nlog every row they drop. Every peer of the job uses the same value")
	fs.StringVar(&f.localSteps, "local-steps", "auto", "`H` batches a worker trains on its own copy of the rows they touch before it exchanges: a\nround is then a window of H batches, and each row's change travels once a window instead of a\ngradient every batch (fewer, larger messages: less CPU per example on the message path,\nstaler values). 1 exchanges every batch; auto is 4 in sync mode and 8 in ssp and async\n(measured: docs/scaling.md), and 1 with --gather full. Every peer of the job uses the same")
	fs.StringVar(&f.combine, "combine", "auto", "how owners combine a round's contributions: sum (gradients: the mean over every example, as\none worker would; windows: every worker's changes added, each window trained as if the others'\nsquared gradients counted), mean (windows: per row, the mean of the changes of the workers\nthat touched it), or trimmed (gradients, sync: per coordinate, the trimmed mean of the workers\nthat touched a row: one faulty worker in four cannot move it beyond the others' range; costs\nsome quality). auto is mean for windows in ssp and async and for the mlp, sum otherwise")
}

// distributed reports whether train runs as a peer of a cluster.
func (tf *trainFlags) distributed(c *command) bool {
	return c.set("job") || len(tf.p.peers) > 0 || tf.p.peersFile != "" || tf.p.mdns || tf.p.dht || tf.p.minPeers > 1
}

// ringFor returns the ring builder of the topology: consistent hashing
// over the workers, or every shard on the master (the smallest worker if
// the master is gone).
func ringFor(ncfg node.Config, master string, shards int) train.PlaceFunc {
	rcfg := ring.DefaultConfig()
	rcfg.VNodes, rcfg.Shards, rcfg.Replicas = ncfg.VNodes, shards, ncfg.Replicas
	rcfg.MaxLoadPercent = ncfg.MaxLoadPercent
	return func(members []string) (train.Placement, error) {
		if ncfg.Topology == node.TopologyMaster {
			m := master
			if !slices.Contains(members, m) {
				m = slices.Min(members)
			}
			return ring.Master(rcfg, m), nil
		}
		return ring.New(rcfg, members)
	}
}

// runDistributed trains as one peer of a cluster: it joins, waits for
// --min-peers and an agreed member set, finds out whether a run is under
// way (node/trainer's start probes), and runs the protocol core
// (node/train) through its driver (node/trainer) over the core link
// (gossip.CoreLink). The first SIGINT/SIGTERM leaves gracefully (shards
// handed over); a second one stops at once, as peerlog.StopSignal does from
// the start (cmd_stop.go).
func (j *trainJob) runDistributed(tf *trainFlags) error {
	log := j.log
	if tf.p.job == "" {
		return usageErr("job", "required for a distributed run: peers join only peers of the same job")
	}
	ds, err := checkDistFlags(tf)
	if err != nil {
		return err
	}
	// At most --threads CPUs at a time, as a lone train: under a cap of
	// 0.4 core Go's own default is 2, and a peer's goroutines then hop
	// between two threads that share 0.4 core.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(j.r.threads))
	ncfg, err := tf.p.config()
	if err != nil {
		return err
	}
	ncfg.Shards = j.model.Layout.Shards
	var testSet *trainer.TestSet
	if open := j.openTest(); open != nil {
		// Read while the cluster forms, not while the first rounds run.
		testSet = trainer.ReadTestSet(j.model, open)
	}
	ncfg.Spec = jobSpec(j.model, ds, tf.m.initSeed, j.r.batch) // a peer of the job that differs is refused at connect
	mt, closeMetrics, err := tf.mf.start(log)
	if err != nil {
		return err
	}
	defer closeMetrics()

	// Signals: the first leaves gracefully, the second cancels.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	defer stopOnSignal(cancel, log)()

	n, err := node.New(ncfg, log)
	if err != nil {
		return flagError(err)
	}
	defer closeNode(ctx, n)
	self := n.Self().String()
	log.Info().Str("peer_id", self).Strs("addrs", n.Addrs()).Msg(peerlog.Started)

	log.Info().Int("min_peers", ncfg.MinPeers).Msg(peerlog.Waiting)
	startCtx, stopStart := context.WithCancel(ctx)
	defer stopStart()
	go func() {
		select {
		case <-sigs:
			cancel(context.Canceled)
		case <-startCtx.Done():
		}
	}()
	// A peer told where the others are waits until it has met one of them,
	// so a late starter joins the run under way instead of starting alone.
	var boot []string
	for _, a := range ncfg.Peers {
		if ai, err := node.ParsePeerAddr(a); err == nil && ai.ID != n.Self() {
			boot = append(boot, ai.ID.String())
		}
	}
	st, err := waitForCluster(startCtx, n, ncfg.MinPeers, boot, tf.dist.waitTimeout, j.r.progressEvery, log)
	if err != nil {
		return err
	}
	inc := incarnationOf(st.View, self)
	memberID := train.MemberID(self, inc)

	tr, err := p2p.New(n.Host(), n.PubSub(), p2pConfig(n, j.model))
	if err != nil {
		return err
	}
	defer tr.Close()
	starter := trainer.NewStarter(tr, ncfg.Job, self, memberID, log)
	place := ringFor(ncfg, n.Master(), j.model.Layout.Shards)
	ckptDir := ""
	if tf.dist.checkpointDir != "" {
		ckptDir = filepath.Join(tf.dist.checkpointDir, self)
	}
	var scan trainer.ResumeScan
	if tf.dist.resume {
		if scan, err = trainer.ScanResume(ckptDir, ncfg.Job, j.model); err != nil {
			return usageErr("checkpoint-dir", "%v", err)
		}
		scan.LogSkipped(log)
		log.Info().Str("dir", ckptDir).Int("checkpoints", len(scan.Points)).Int("passed_over", len(scan.Skipped)).Msg("--resume: this peer's checkpoints")
		starter.SetResume(scan.Points, place, j.model.Layout.Shards, tf.dist.resumeOrStart)
	}
	entry, err := starter.Enter(startCtx, func() trainer.View {
		v := n.View()
		return trainer.View{Peers: v.Members, Incarnations: v.Incarnations}
	}, ncfg.MinPeers, 250*time.Millisecond)
	stopStart()
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return cause
		}
		if errors.Is(err, trainer.ErrNoCheckpoint) {
			return usageErr("checkpoint-dir", "--resume: %v; this peer's %s. Give --resume=auto to start a new run from round 0 when there is none", err, scan.Describe())
		}
		return err
	}
	log.Info().Uint64("epoch", st.View.Epoch).Int("members", len(st.View.Members)).Str("topology", string(ncfg.Topology)).
		Bool("joining", entry.Contact != "").Msg(peerlog.Training)
	if j.l2Rows > 0 && len(st.View.Members) > 1 {
		// --l2 auto is 1/N for the job's N rows; this peer counted its own
		// files only. Assume the others hold as many; a user with uneven
		// files gives --l2. (With --part the scan saw the whole input.)
		j.model.Opt.L2 = 1 / float64(j.l2Rows*int64(len(st.View.Members)))
		log.Info().Float64("l2", j.model.Opt.L2).Int64("rows_here", j.l2Rows).Int("peers", len(st.View.Members)).
			Msg("--l2 auto: 1/(rows here x peers), assuming every peer has as many rows (give --l2 if not)")
	}

	lim := wire.DefaultLimits()
	lim.Features = j.model.Layout.Features
	lim.MaxWidth = max(lim.MaxWidth, j.model.Layout.Width) // wide softmax or mlp rows
	tcfg := trainer.DefaultConfig()
	core := &tcfg.Core
	core.Self, core.ID, core.Mode, core.Gather, core.Model = self, memberID, ds.mode, ds.gather, j.model
	if ds.mode == train.SSP {
		core.Staleness = tf.dist.staleness
	}
	core.Place = place
	core.Initial, core.Contact, core.Contacts = entry.Initial, entry.Contact, entry.Contacts
	tcfg.Job, tcfg.CheckpointDir = ncfg.Job, ckptDir
	if tf.dist.checkpointEvery > 0 {
		core.CheckpointTicks = max(1, int(tf.dist.checkpointEvery/tcfg.Tick))
	}
	switch {
	case entry.Resume > 0:
		scan.LogResuming(log, entry.Resume)
		info, err := trainer.LoadCheckpoint(filepath.Join(ckptDir, fmt.Sprintf("round-%d.ckpt", entry.Resume)), j.model)
		if err != nil {
			return fmt.Errorf("--resume: %w", err)
		}
		core.Start, tcfg.Resume = entry.Resume, &info
		log.Info().Uint64("round", info.Round).Str("file", info.Path).Int("shards", len(info.Shards)).
			Int("epoch", info.Position.Epoch+1).Int64("rows", info.Position.Rows).Msg("resuming from the checkpoint")
	case tf.dist.resume && entry.Contact != "":
		log.Warn().Msg("--resume: a run is under way: joining it (this peer's checkpoints are not used)")
	}
	core.Seed = memberID
	core.Limits = lim
	core.MaxExamples, core.MaxRowGrad, core.Combine = j.r.batch*max(1, ds.localSteps), ds.rowGrad, ds.combineFor(j.model.Kind)
	core.LocalSteps = ds.localSteps
	if j.model.Kind == model.MLP {
		// A shard lost with every holder restarts from the MLP's initial
		// weights (a linear model's are zeros).
		pristine := j.model.Clone()
		var rows model.Sparse
		core.InitShard = func(m *model.Model, s int) {
			pristine.ExportRows(s, false, &rows)
			_ = m.ImportRows(s, false, &rows)
		}
	}
	tcfg.Batch, tcfg.Epochs, tcfg.EvalEvery, tcfg.Threads = j.r.batch, j.r.epochs, j.r.evalEvery, j.r.threads
	tcfg.FetchModel = j.r.save != ""
	tcfg.Log = log
	tcfg.NonFinite, _ = sgd.ParseNonFinite(j.r.nonFinite) // checked by prepareTraining
	tcfg.StallTimeout = stallTimeout(j.r.stallTimeout, ncfg.DeadAfter)

	rep, err := j.openReport(self)
	if err != nil {
		return err
	}
	defer rep.Close()
	mt.SetInfo(metrics.Info{PeerID: self, Job: ncfg.Job, Topology: string(ncfg.Topology), Mode: ds.mode.String(), Version: version})
	dash := n.Dashboard() // the status server's page: fed from the same hooks
	dash.SetInfo(metrics.Info{Mode: ds.mode.String(), Version: version})
	sampler := report.NewSampler()
	var hooks trainer.Hooks
	prog := j.progressHook()
	hooks.Progress = func(p sgd.Progress) {
		prog.fn(p)
		mt.Progress(p.Examples, p.Epoch)
	}
	hooks.Eval = func(e sgd.EvalPoint) {
		logMetrics(log.Info(), e.Metrics).Str("examples", humanCount(float64(e.Examples))).Msg("evaluation")
		rep.Write(report.Eval{Type: report.TypeEval, PeerID: self, Examples: e.Examples, Seconds: e.Seconds, Epoch: e.Epoch, Metrics: reportMetrics(e.Metrics)})
		ef := metrics.EvalFigures{LogLoss: e.LogLoss, Error: e.Error, AUC: e.AUC, Examples: e.Examples, Seconds: e.Seconds}
		mt.Eval(ef)
		dash.Eval(ef)
	}
	hooks.Round = func(p trainer.RoundPoint) {
		in, out := n.Bandwidth()
		rf := metrics.RoundFigures{Rounds: p.Round + 1, Examples: p.Examples, WaitSeconds: p.WaitSeconds, Staleness: p.Staleness, BytesSent: out, BytesRecv: in}
		mt.Round(rf)
		dash.Round(rf)
		if p.Round%int64(tf.dist.reportRounds) != 0 || rep == nil {
			return
		}
		rep.Write(report.Round{Type: report.TypeRound, PeerID: self, Clock: p.Round, Examples: p.Examples, Seconds: p.Seconds,
			BytesSent: out, BytesRecv: in, WaitSeconds: p.WaitSeconds, Live: p.Members,
			Epoch: p.Config, Owned: p.Owned, Staleness: p.Staleness, Resources: sampler.Frequent()})
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

	lnk := &lateLink{}
	trn, err := trainer.New(tcfg, hooks, lnk)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	lcfg := gossip.DefaultCoreLinkConfig()
	lcfg.Job, lcfg.Limits, lcfg.Values, lcfg.Log = ncfg.Job, lim, ds.values, log
	link, err := gossip.NewCoreLink(tr, lcfg, trn.Deliver)
	if err != nil {
		return err
	}
	defer link.Close()
	lnk.set(link)
	starter.Running()

	runDone := make(chan struct{})
	go followMembers(n, trn, runDone)
	go func() {
		select {
		case <-sigs:
			log.Info().Msg("leaving gracefully: handing shards over (interrupt again to stop at once)")
			trn.Leave()
			select {
			case <-sigs:
				cancel(context.Canceled)
			case <-runDone:
			}
		case <-runDone:
		}
	}()
	totals := func() metrics.Totals {
		return metrics.Totals{PubsubDropped: n.PubSubCounters().Dropped(), Rejected: link.Stats().Rejected.Map()}
	}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-runDone:
				return
			case <-t.C:
				tt := totals()
				mt.Totals(tt)
				dash.Totals(tt)
			}
		}
	}()
	open := func(epoch int) (data.Source, error) {
		s, err := j.openTrain(epoch)
		prog.track(s)
		return s, err
	}
	sum, err := trn.Run(ctx, open, testSet)
	close(runDone)
	if !stoppedAtOnce(ctx) {
		// The last messages (answers, acknowledgements, "finished") go
		// out before the link closes; a peer stopping at once skips this.
		fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Second)
		link.Flush(fctx)
		fcancel()
	}
	switch {
	case err == nil:
		starter.Ended()
	case errors.Is(err, trainer.ErrLeft):
		log.Info().Int64("examples", sum.Examples).Int64("rounds", sum.Rounds).Msg("left the job; the others train on")
	case errors.Is(err, train.ErrRemoved):
		return fmt.Errorf("%w (this peer was cut off, and the others went on without it; start it again to join the run as a new member)", err)
	case errors.Is(err, train.ErrNoQuorum):
		hint := "start the job again"
		if tf.dist.checkpointDir != "" {
			hint = "start the job again with --resume to go on from its newest checkpoint"
		}
		return fmt.Errorf("%w (the peers that agree the run's configurations crashed faster than the run could replace them, so it can neither remove them nor end; %s)", err, hint)
	}
	stopped, err := partialRun(ctx, err)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
		return err
	}

	ls := link.Stats()
	pc := n.PubSubCounters()
	bwIn, bwOut := n.Bandwidth()
	res := sampler.Sample()
	var bad int64
	if prog.cur != nil {
		bad = prog.cur.Stats().BadLines
	}
	rejected := int64(ls.Rejected.Total() + sum.Core.Rejected)
	s := report.Summary{
		Type: report.TypeSummary, PeerID: self, Examples: sum.Examples, Seconds: sum.Seconds,
		ExamplesPerSec: report.Num(sum.ExamplesPerSec), Epochs: j.r.epochs, Steps: sum.Steps,
		Metrics:   reportMetrics(sum.Final),
		ModelHash: fmt.Sprintf("%016x", sum.ModelHash),
		BadLines:  bad, BatchesSkippedNonFinite: sum.SkippedNonFinite, Resources: res,
		Peers: sum.Members, Topology: string(ncfg.Topology), Mode: ds.mode.String(), Gather: ds.gather.String(),
		Threads: j.r.threads, Batch: j.r.batch,
		Rounds: sum.Rounds, WaitSeconds: sum.WaitSeconds, MaxStaleness: sum.MaxStaleness,
		BytesSent: bwOut, BytesRecv: bwIn, PubsubDropped: int64(pc.Dropped()),
		Rejected: rejected, ContributionsLost: int64(sum.Core.Lost), RowsDropped: int64(sum.Core.RowsDropped),
		LocalSteps: ds.localSteps,
		Owned:      sum.Owned, Shards: j.model.Layout.Shards,
		Configs: sum.Configs, RoundsDegraded: int64(sum.Core.Degraded), Promoted: int(sum.Core.Promoted),
		Covered: sum.Covered, JoinSeconds: sum.JoinSeconds,
		ShardsReceived: int64(sum.Core.Received), ShardsSent: int64(sum.Core.HandedOff),
		Connections: n.ConnectionKinds(),
		Checkpoints: sum.Checkpoints, CheckpointsFailed: sum.CheckpointsFailed, ResumedAt: sum.ResumedAt,
	}
	if sum.ModelFetched {
		s.ModelNonzeros = j.model.NonZeros()
	}
	if stopped != "" {
		markPartial(&s, stopped, sum.Rounds)
	}
	if err := rep.Write(s); err != nil {
		return err
	}
	sf := metrics.SummaryFigures{Rounds: sum.Rounds, Examples: sum.Examples, BytesSent: bwOut, BytesRecv: bwIn,
		Totals:  totals(),
		Eval:    metrics.EvalFigures{LogLoss: sum.Final.LogLoss, Error: sum.Final.Error, AUC: sum.Final.AUC},
		HasEval: sum.Evaluated}
	mt.Summary(sf)
	dash.Finished(sf)
	done, final := peerlog.Done, sum.Final
	if stopped != "" {
		done, final = peerlog.Stopped, sgd.Metrics{} // no final evaluation: the model is partial
	}
	logMetrics(log.Info(), final).Str("examples", humanCount(float64(sum.Examples))).Int64("rounds", sum.Rounds).
		Float64("seconds", round4(sum.Seconds)).Str("examples_per_sec", humanCount(sum.ExamplesPerSec)).
		Float64("wait_seconds", round4(sum.WaitSeconds)).Str("model_hash", s.ModelHash).
		Str("sent", humanCount(float64(bwOut))+"B").Str("received", humanCount(float64(bwIn))+"B").
		Uint64("resent", sum.Core.Resent).Int64("rejected", s.Rejected).Uint64("contributions_lost", sum.Core.Lost).
		Int("shards_covered", sum.Covered).
		Str("resources", res.String()).Func(func(e *zerolog.Event) {
		if stopped != "" {
			e.Str("stopped", stopped).Bool("partial", true)
		}
	}).Msg(done)
	warnSkipped(log, sum.SkippedNonFinite)
	if rej := ls.Rejected; rej.Total() > 0 || sum.Core.Rejected > 0 {
		log.Warn().Interface("rejected", rej.Map()).Uint64("refused_by_role", sum.Core.Rejected).Msg("messages were rejected")
	}
	if j.r.save != "" {
		if sum.ModelFetched {
			j.model.Examples += sum.Examples // this peer's (inspect shows it)
			markModelPartial(j.model, stopped, sum.Rounds)
			if err := j.model.SaveFile(j.r.save, model.SaveOptions{}); err != nil {
				return fmt.Errorf("--save: %w", err)
			}
			logSaved(log, j.r.save, stopped, sum.Rounds)
		} else {
			log.Warn().Str("file", j.r.save).Str("stopped", stopped).Msg("--save not written: the run stopped before the model could be gathered from its holders")
		}
	}
	if stopped == stopInterrupted || stopped == stopJobStopped {
		return context.Cause(ctx) // exit status 130, after the report
	}
	return nil
}

// lateLink is the trainer's link, set once the core link exists (the core
// link delivers to the trainer, so one of them is made first).
type lateLink struct {
	mu sync.Mutex
	l  *gossip.CoreLink
}

func (k *lateLink) set(l *gossip.CoreLink) {
	k.mu.Lock()
	k.l = l
	k.mu.Unlock()
}

func (k *lateLink) Send(to string, msg *wire.Core) {
	k.mu.Lock()
	l := k.l
	k.mu.Unlock()
	if l != nil {
		l.Send(to, msg)
	}
}

// incarnationOf is peer's incarnation in view (0 if it is not there).
func incarnationOf(v membership.View, peer string) uint64 {
	for i, m := range v.Members {
		if m == peer && i < len(v.Incarnations) {
			return v.Incarnations[i]
		}
	}
	return 0
}

// memberIDs are the member IDs of a view's members (train.MemberID).
func memberIDs(v membership.View) []uint64 {
	ids := make([]uint64, 0, len(v.Members))
	for i, m := range v.Members {
		if i < len(v.Incarnations) {
			ids = append(ids, train.MemberID(m, v.Incarnations[i]))
		}
	}
	return ids
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

// followMembers feeds the membership's live set to the run until done.
func followMembers(n *node.Node, t *trainer.Trainer, done <-chan struct{}) {
	evs, cancel := n.Subscribe()
	defer cancel()
	t.SetAlive(memberIDs(n.View()))
	for {
		select {
		case <-done:
			return
		case ev, ok := <-evs:
			if !ok {
				return
			}
			t.SetAlive(memberIDs(ev.View))
		}
	}
}

// memberStates is what waitAgreed reads of a node (an interface, so a test
// can script the states).
type memberStates interface {
	Subscribe() (<-chan node.Event, func())
	State() node.State
}

// waitAgreed waits until the membership view is agreed by every member,
// has at least min members, and includes one of the bootstrap peers (when
// any is given). A peer that met them and was then left alone (they all
// left or died first: the run ended) fails rather than train a model of
// its own.
func waitAgreed(ctx context.Context, n memberStates, min int, boot []string) (node.State, error) {
	evs, cancel := n.Subscribe()
	defer cancel()
	met := len(boot) == 0
	for {
		st := n.State()
		for _, b := range boot {
			met = met || slices.Contains(st.View.Members, b)
		}
		if st.Agreed && len(st.View.Members) >= min && st.Ring != nil && met {
			if len(boot) > 0 && len(st.View.Members) == 1 {
				// Met the run, then everyone left or died before this
				// peer joined: training alone would make a model of its
				// own under the job's name.
				return st, errors.New("every peer of the job this peer met (through --peer) left before it could join: the run has ended or stopped; start the job again, or train alone without --peer")
			}
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("waiting for the members to agree: %w", ctx.Err())
		case <-evs:
		}
	}
}

// p2pConfig is the libp2p transport's configuration for node n: direct
// streams large enough to carry a copy of m to a joining peer.
func p2pConfig(n *node.Node, m *model.Model) p2p.Config {
	cfg := p2p.DefaultConfig()
	cfg.MaxPayload = n.MaxPayload()
	cfg.Join = n.Join
	cfg.Drops = func() uint64 { return n.PubSubCounters().Dropped() }
	// Only peers that passed this job's hello (and so hold its key) reach
	// the core link, the start probes or any other training protocol.
	cfg.Admit = n.Admitted
	// A snapshot is the weights; a handoff adds optimizer state (up to two
	// floats a weight with FTRL); frames and headers add little.
	cfg.MaxResponse = max(cfg.MaxResponse, int64(len(m.W))*4*3+(16<<20))
	cfg.StreamTimeout = max(cfg.StreamTimeout, 5*time.Minute)
	// A pushed gradient (--grad-transport stream) is one message a request.
	cfg.MaxRequest = max(cfg.MaxRequest, n.MaxPayload()+4<<10)
	return cfg
}

func shortIDs(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		if len(id) > 12 {
			id = "…" + id[len(id)-8:]
		}
		out[i] = id
	}
	return out
}

// resumeFlag is --resume: a bool flag (--resume, --resume=false) that
// also takes auto (--resume=auto: start from round 0 when no peer has a
// checkpoint, TestTrainResumeWithoutCheckpoints).
type resumeFlag struct{ on, orStart *bool }

func (r resumeFlag) IsBoolFlag() bool { return true }

func (r resumeFlag) String() string {
	switch {
	case r.on == nil || !*r.on:
		return "false"
	case *r.orStart:
		return "auto"
	}
	return "true"
}

func (r resumeFlag) Set(s string) error {
	if s == "auto" {
		*r.on, *r.orStart = true, true
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want --resume, --resume=auto or --resume=false")
	}
	*r.on, *r.orStart = b, false
	return nil
}
