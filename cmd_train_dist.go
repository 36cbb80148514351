package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
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
	"github.com/gossiptrain/gossiptrain/node/ring"
	"github.com/gossiptrain/gossiptrain/peerlog"
	"github.com/gossiptrain/gossiptrain/report"
	"github.com/gossiptrain/gossiptrain/sgd"
)

// distFlags say how a distributed run synchronises, what travels, and how
// it survives restarts.
type distFlags struct {
	mode            string
	staleness       int
	window          int
	flush           time.Duration
	stallAfter      time.Duration
	compress        string
	gradTransport   string
	paramsTransport string
	values          string
	reportRounds    int
	checkpointDir   string
	checkpointEvery time.Duration
	resume          bool
	handoffTimeout  time.Duration
	waitTimeout     time.Duration
}

func (f *distFlags) register(fs *flag.FlagSet) {
	def := sgd.DefaultDistConfig()
	fs.StringVar(&f.mode, "mode", "sync", "how rounds synchronise: sync (a barrier per round: every peer's gradients are in before\nanyone moves on; bit-identical on every peer), ssp (a worker may run --staleness rounds ahead\nof the slowest), or async (workers never wait for each other; owners apply on arrival)")
	fs.IntVar(&f.staleness, "staleness", def.Staleness, "ssp: `rounds` a worker may run ahead of the slowest worker's applied contributions")
	fs.IntVar(&f.window, "window", def.Window, "ssp and async flow control: at most this many `rounds` in flight that an owner has not yet\nacknowledged (gossipsub drops silently when its queues overflow)")
	fs.DurationVar(&f.flush, "flush", def.Flush, "ssp and async: how often an owner publishes the values it changed")
	fs.DurationVar(&f.stallAfter, "stall-after", def.StallAfter, "longest wait at a barrier before asking late peers to resend (sooner once typical waits are known)")
	fs.StringVar(&f.compress, "compress", "none", "compressor for gradient and parameter messages: none, zstd or s2 (the encoding already packs\nindices and values; a compressor is used only when it makes a message smaller)")
	fs.StringVar(&f.gradTransport, "grad-transport", "pubsub", "how gradients reach their owner: pubsub (gossipsub, routed straight to the owner) or\nstream (a direct libp2p stream per message; sequenced, authenticated and repaired the same\nway); --params-transport chooses for params")
	fs.StringVar(&f.paramsTransport, "params-transport", "pubsub", "how owners' new values reach every peer: pubsub (gossipsub, one message per receiver's topic)\nor stream (a direct libp2p stream per receiver and message)")
	fs.StringVar(&f.values, "values", "f32", "gradient value format: f32, f16 or i8 (lossy formats keep the rounding error on the sender\nand add it to the next gradient; parameters always travel as f32)")
	fs.IntVar(&f.reportRounds, "report-rounds", 1, "write a round line to --report every `N` rounds")
	fs.StringVar(&f.checkpointDir, "checkpoint-dir", "", "write checkpoints under `DIR`/<peer ID>/ (the full weights and this peer's shards' optimizer\nstate, written atomically; the previous checkpoint stays if a write fails)")
	fs.DurationVar(&f.checkpointEvery, "checkpoint-every", 0, "checkpoint this often (the coordinator picks a round every peer writes at; 0: never)")
	fs.BoolVar(&f.resume, "resume", false, "restart a whole job from the newest checkpoint every peer has in --checkpoint-dir (each peer\nreads its own files); training continues from that round and data position")
	fs.DurationVar(&f.handoffTimeout, "handoff-timeout", def.HandoffTimeout, "longest wait for a shard's previous owner to hand it over; after it the shard starts\nfrom the read copy with fresh optimizer state")
	registerWaitFlag(fs, &f.waitTimeout)
}

// distributed reports whether train runs as a peer of a cluster.
func (tf *trainFlags) distributed(c *command) bool {
	return c.set("job") || len(tf.p.peers) > 0 || tf.p.peersFile != "" || tf.p.mdns || tf.p.dht || tf.p.minPeers > 1
}

// ringFor returns the ring builder of the topology: consistent hashing
// over the workers, or every shard on the master (the smallest worker if
// the master is gone).
func ringFor(ncfg node.Config, master string, shards int) func([]string) (*ring.Ring, error) {
	rcfg := ring.DefaultConfig()
	rcfg.VNodes, rcfg.Shards, rcfg.Replicas = ncfg.VNodes, shards, ncfg.Replicas
	rcfg.MaxLoadPercent = ncfg.MaxLoadPercent
	return func(members []string) (*ring.Ring, error) {
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
// --min-peers and an agreed member set, and runs the distributed loop,
// which forms the first configuration with the others or joins the run
// under way. The first SIGINT/SIGTERM leaves gracefully (shards handed
// over); a second one stops at once, as peerlog.StopSignal does from the
// start (cmd_stop.go).
func (j *trainJob) runDistributed(tf *trainFlags) error {
	log := j.log
	if tf.p.job == "" {
		return usageErr("job", "required for a distributed run: peers join only peers of the same job")
	}
	mode, err := sgd.ParseMode(tf.dist.mode)
	if err != nil {
		return usageErr("mode", "%q: want sync, ssp or async", tf.dist.mode)
	}
	values, err := wire.ParseValues(tf.dist.values)
	if err != nil {
		return usageErr("values", "%v", err)
	}
	if tf.dist.gradTransport != "pubsub" && tf.dist.gradTransport != "stream" {
		return usageErr("grad-transport", "%q: want pubsub or stream", tf.dist.gradTransport)
	}
	if tf.dist.paramsTransport != "pubsub" && tf.dist.paramsTransport != "stream" {
		return usageErr("params-transport", "%q: want pubsub or stream", tf.dist.paramsTransport)
	}
	compress, err := wire.ParseCompress(tf.dist.compress)
	if err != nil {
		return usageErr("compress", "%v", err)
	}
	if tf.dist.reportRounds < 1 {
		return usageErr("report-rounds", "want at least 1")
	}
	if (tf.dist.checkpointEvery > 0 || tf.dist.resume) && tf.dist.checkpointDir == "" {
		return usageErr("checkpoint-dir", "required with --checkpoint-every and --resume")
	}
	if tf.dist.checkpointDir != "" {
		if err := os.MkdirAll(tf.dist.checkpointDir, 0o755); err != nil {
			return usageErr("checkpoint-dir", "%v", err)
		}
	}
	ncfg, err := tf.p.config()
	if err != nil {
		return err
	}
	ncfg.Shards = j.model.Layout.Shards
	ncfg.Spec = jobSpec(j.model, mode, tf.m.initSeed) // a peer of the job that differs is refused at connect
	if tf.dist.waitTimeout < 0 {
		return usageErr("wait-timeout", "%v: want 0 (wait for ever) or a positive duration", tf.dist.waitTimeout)
	}
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
	stopStart()
	if err != nil {
		return err
	}
	log.Info().Uint64("epoch", st.View.Epoch).Int("members", len(st.View.Members)).Str("topology", string(ncfg.Topology)).Msg(peerlog.Training)

	tr, err := p2p.New(n.Host(), n.PubSub(), p2pConfig(n, j.model))
	if err != nil {
		return err
	}
	defer tr.Close()

	dcfg := sgd.DefaultDistConfig()
	dcfg.Batch, dcfg.Epochs, dcfg.EvalEvery = j.r.batch, j.r.epochs, j.r.evalEvery
	dcfg.Mode, dcfg.Staleness, dcfg.Window, dcfg.Flush, dcfg.StallAfter = mode, tf.dist.staleness, tf.dist.window, tf.dist.flush, tf.dist.stallAfter
	dcfg.Self, dcfg.Peers = self, st.View.Members
	if j.l2Rows > 0 && len(st.View.Members) > 1 {
		// --l2 auto is 1/N for the job's N rows; this peer counted its own
		// files only. Assume the others hold as many; a user with uneven
		// files gives --l2. (With --part the scan saw the whole input.)
		j.model.Opt.L2 = 1 / float64(j.l2Rows*int64(len(st.View.Members)))
		log.Info().Float64("l2", j.model.Opt.L2).Int64("rows_here", j.l2Rows).Int("peers", len(st.View.Members)).
			Msg("--l2 auto: 1/(rows here x peers), assuming every peer has as many rows (give --l2 if not)")
	}
	dcfg.RingFor = ringFor(ncfg, n.Master(), j.model.Layout.Shards)
	dcfg.Checkpoint = sgd.CheckpointConfig{Dir: tf.dist.checkpointDir, Every: tf.dist.checkpointEvery, Resume: tf.dist.resume}
	dcfg.HandoffTimeout = tf.dist.handoffTimeout
	dcfg.LastHeard = n.LastHeard
	dcfg.Log = log
	if err := dcfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}

	rep, err := j.openReport(self)
	if err != nil {
		return err
	}
	defer rep.Close()
	mt.SetInfo(metrics.Info{PeerID: self, Job: ncfg.Job, Topology: string(ncfg.Topology), Mode: mode.String(), Version: version})
	dash := n.Dashboard() // the status server's page: fed from the same hooks
	dash.SetInfo(metrics.Info{Mode: mode.String(), Version: version})
	sampler := report.NewSampler()
	var x *gossip.Exchange
	var hooks sgd.DistHooks
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
	hooks.Round = func(p sgd.RoundPoint) {
		in, out := n.Bandwidth()
		rf := metrics.RoundFigures{Rounds: p.Clock + 1, Examples: p.Examples, WaitSeconds: p.WaitSeconds, Staleness: p.Staleness, BytesSent: out, BytesRecv: in}
		mt.Round(rf)
		dash.Round(rf)
		if p.Clock%int64(tf.dist.reportRounds) != 0 || rep == nil {
			return
		}
		rep.Write(report.Round{Type: report.TypeRound, PeerID: self, Clock: p.Clock, Examples: p.Examples, Seconds: p.Seconds,
			BytesSent: out, BytesRecv: in, WaitSeconds: p.WaitSeconds, Workers: p.Applied, Live: p.Live,
			Epoch: p.Config, Owned: p.Owned, Staleness: p.Staleness, Resources: sampler.Sample()})
	}
	hooks.Change = func(c sgd.ChangePoint) {
		log.Info().Uint64("config", c.Config).Uint64("start_round", c.Start).Int("workers", len(c.Members)).
			Strs("joined", shortIDs(c.Joined)).Strs("left", shortIDs(c.Left)).Strs("crashed", shortIDs(c.Crashed)).
			Int("owned_shards", c.Owned).Msg("training configuration")
		mt.Ring(c.Config, c.Owned)
		dash.Configuration(metrics.ConfigFigures{Config: c.Config, Start: c.Start, Members: c.Members,
			Joined: c.Joined, Left: c.Left, Crashed: c.Crashed, Owned: c.Owned})
		rep.Write(report.Change{Type: report.TypeChange, PeerID: self, Config: c.Config, Start: c.Start, Members: c.Members,
			Joined: c.Joined, Left: c.Left, Crashed: c.Crashed, Owned: c.Owned})
	}

	gcfg := gossip.DefaultConfig()
	gcfg.Job, gcfg.Width = ncfg.Job, j.model.Layout.Width
	gcfg.Wire.Values, gcfg.Wire.Compress = values, compress
	gcfg.Wire.Limits.Features = j.model.Layout.Features
	gcfg.Wire.Limits.MaxWidth = max(gcfg.Wire.Limits.MaxWidth, j.model.Layout.Width) // wide softmax or mlp rows
	gcfg.Wire.Limits.MaxMessage = min(gcfg.Wire.Limits.MaxMessage, n.MaxPayload())
	gcfg.GradStreams = tf.dist.gradTransport == "stream"
	gcfg.ParamsStreams = tf.dist.paramsTransport == "stream"
	gcfg.Log = log
	gcfg.Penalize = n.Penalize // rejected stream pushes count against the sender, as gossipsub's score does

	// Run, and join again if a partition's majority removed this peer.
	var sum sgd.DistSummary
	var stopped string // why the run stopped before its end ("": it did not)
	for attempt := 0; ; attempt++ {
		d, err := sgd.NewDist(j.model, dcfg, hooks)
		if err != nil {
			return err
		}
		if x, err = gossip.New(tr, gcfg, d.Handlers()); err != nil {
			return err
		}
		runDone := make(chan struct{})
		go followMembers(n, d, runDone)
		go func() {
			select {
			case <-sigs:
				log.Info().Msg("leaving gracefully: handing shards over (interrupt again to stop at once)")
				d.Leave()
				select {
				case <-sigs:
					cancel(context.Canceled)
				case <-runDone:
				}
			case <-runDone:
			}
		}()
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-runDone:
					return
				case <-t.C:
					xs := x.Stats()
					t := metrics.Totals{Repaired: xs.Repaired, PubsubDropped: n.PubSubCounters().Dropped(), Rejected: x.Rejected().Map()}
					mt.Totals(t)
					dash.Totals(t)
				}
			}
		}()
		open := func(epoch int) (data.Source, error) {
			s, err := j.openTrain(epoch)
			prog.track(s)
			return s, err
		}
		sum, err = d.Run(ctx, x, tr, open, j.openTest())
		close(runDone)
		if errors.Is(err, sgd.ErrRemoved) && attempt < 3 {
			x.Close()
			log.Warn().Msg("this peer was removed while partitioned away: joining the run again")
			continue
		}
		if errors.Is(err, sgd.ErrLeft) {
			log.Info().Int64("examples", sum.Examples).Int64("rounds", sum.Rounds).Msg("left the job; the others train on")
		}
		if stopped, err = partialRun(ctx, err); err != nil {
			x.Close()
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				return cause
			}
			return err
		}
		break
	}
	defer x.Close()

	xs := x.Stats()
	pc := n.PubSubCounters()
	bwIn, bwOut := n.Bandwidth()
	res := sampler.Sample()
	var bad int64
	if prog.cur != nil {
		bad = prog.cur.Stats().BadLines
	}
	s := report.Summary{
		Type: report.TypeSummary, PeerID: self, Examples: sum.Examples, Seconds: sum.Seconds,
		ExamplesPerSec: report.Num(sum.ExamplesPerSec), Epochs: j.r.epochs, Steps: sum.Steps,
		Metrics:       reportMetrics(sum.Final),
		ModelNonzeros: j.model.NonZeros(), ModelHash: fmt.Sprintf("%016x", j.model.Hash()),
		BadLines: bad, Resources: res,
		Peers: sum.Members, Topology: string(ncfg.Topology), Mode: mode.String(), Batch: j.r.batch,
		Rounds: sum.Rounds, WaitSeconds: sum.WaitSeconds, MaxStaleness: sum.MaxStaleness,
		BytesSent: bwOut, BytesRecv: bwIn, PubsubDropped: int64(pc.Dropped()),
		Repaired: int64(xs.Repaired), Rejected: int64(x.Rejected().Total()),
		Owned: sum.Owned, Shards: j.model.Layout.Shards,
		Configs: sum.Configs, RoundsDegraded: sum.RoundsDegraded, Covered: sum.Covered, Promoted: sum.Promoted,
		JoinSeconds: sum.JoinSeconds, JoinBytes: sum.JoinBytes, HandoffBytes: sum.HandoffBytes,
		Checkpoints: sum.Checkpoints, ResumedAt: sum.ResumedAt,
		Connections: n.ConnectionKinds(),
	}
	if stopped != "" {
		markPartial(&s, stopped, sum.Rounds)
	}
	if err := rep.Write(s); err != nil {
		return err
	}
	sf := metrics.SummaryFigures{Rounds: sum.Rounds, Examples: sum.Examples, BytesSent: bwOut, BytesRecv: bwIn,
		Totals:  metrics.Totals{Repaired: xs.Repaired, PubsubDropped: pc.Dropped(), Rejected: x.Rejected().Map()},
		Eval:    metrics.EvalFigures{LogLoss: sum.Final.LogLoss, Error: sum.Final.Error, AUC: sum.Final.AUC},
		HasEval: sum.Final.Examples > 0}
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
		Uint64("repaired", xs.Repaired).Int64("resend_requests", sum.Pokes).Int64("resend_requests_deferred", sum.PokesDeferred).
		Int64("rejected", s.Rejected).Int("shards_covered", sum.Covered).
		Str("resources", res.String()).Func(func(e *zerolog.Event) {
		if stopped != "" {
			e.Str("stopped", stopped).Bool("partial", true)
		}
	}).Msg(done)
	if rej := x.Rejected(); rej.Total() > 0 {
		log.Warn().Interface("rejected", rej.Map()).Msg("messages were rejected")
	}
	if j.r.save != "" {
		markModelPartial(j.model, stopped, sum.Rounds)
		if err := j.model.SaveFile(j.r.save, model.SaveOptions{}); err != nil {
			return fmt.Errorf("--save: %w", err)
		}
		logSaved(log, j.r.save, stopped, sum.Rounds)
	}
	if stopped == stopInterrupted || stopped == stopJobStopped {
		return context.Cause(ctx) // exit status 130, after the report and the model
	}
	return nil
}

// followMembers feeds the membership's live set to the run until done.
func followMembers(n *node.Node, d *sgd.Dist, done <-chan struct{}) {
	evs, cancel := n.Subscribe()
	defer cancel()
	for {
		select {
		case <-done:
			return
		case ev, ok := <-evs:
			if !ok {
				return
			}
			d.SetAlive(ev.View.Members)
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
